"""The widget panel, tested as Python objects (no browser): set values, click, check."""

import pytest
import torch
from torch import nn

import vramnb
from tests.conftest import Tally, interrupt_during_restore, run
from vramnb.techniques import REGISTRY

pytest.importorskip("ipywidgets")


def sq(m, b):
    return m(b).square().mean()


@pytest.fixture
def setup():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    return model, torch.randn(16, 32), torch.optim.Adam(model.parameters())


def test_controls_come_from_the_registry(setup):
    model, batch, opt = setup
    p = vramnb.panel(model, batch, sq, opt, display=False)
    assert set(p.controls) == {n for n, t in REGISTRY.items() if len(t.choices) > 1}
    for name, ctl in p.controls.items():
        assert [v for _, v in ctl.options] == list(REGISTRY[name].choices)


def test_runs_table_restore_and_export(setup, tmp_path):
    model, batch, opt = setup
    before = {k: v.clone() for k, v in model.state_dict().items()}
    p = vramnb.panel(model, batch, sq, opt, display=False, target="24GiB")
    p.button.click()
    p.controls["optimizer"].value = "SGD"
    p.button.click()
    assert len(p.runs) == 2
    newest = p.results[0]
    assert newest["recipe"] == "optimizer SGD"
    base = p.runs[0]["report"].steady
    n_tensors = len(list(model.parameters()))
    p_bytes = sum(q.numel() for q in model.parameters()) * 4
    assert base.mark("start")["optimizer state"] == 2 * p_bytes + 4 * n_tensors
    assert newest["delta_vs_first"] == p.runs[1]["peak"] - p.runs[0]["peak"] < 0
    assert newest["fits"] == "fits" and newest["margin"] > 0
    p.target.value = "512MiB"  # less than the CUDA context alone
    assert p.results[0]["fits"] == "does not fit" and "does not fit" in p.table.value
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
    assert len(opt.state) == 0
    path = tmp_path / "runs.csv"
    text = p.to_csv(str(path))
    assert path.read_text() == text and text.splitlines()[1].startswith("optimizer SGD")
    pd = pytest.importorskip("pandas")
    assert isinstance(p.to_dataframe(), pd.DataFrame)


def test_failure_is_shown_and_panel_stays_usable(setup):
    model, batch, opt = setup
    calls = Tally()  # a dict the loss changes would be put back as found after each run (vramnb._code_state)

    def flaky(m, b):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")
        return sq(m, b)

    before = {k: v.clone() for k, v in model.state_dict().items()}
    p = vramnb.panel(model, batch, flaky, opt, display=False)
    p.button.click()
    assert "shapes cannot be multiplied" in p.status.value and "#c62828" in p.status.value
    assert p.runs[-1]["error"].startswith("RuntimeError") and p.runs[-1]["report"] is not None
    assert not p.button.disabled
    p.controls["precision"].value = "fp16"
    p.button.click()  # not available on CPU: said plainly
    assert "needs a CUDA GPU" in p.status.value
    p.controls["precision"].value = "fp32"
    p.button.click()
    assert p.runs[-1]["error"] is None and p.runs[-1]["peak"] > 0
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])


def test_second_press_while_running_is_ignored(setup):
    model, batch, opt = setup
    p = vramnb.panel(model, batch, sq, opt, display=False)
    p._busy = True
    assert p.run() is None and p.runs == []


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(batch="text"), "a batch must be a tensor"),
        (dict(batch=torch.randn(4, 32, device="meta")), "is on meta but the model is on cpu"),
        (dict(optimizer=torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=1)), "not the model's"),
        (dict(target="B200 (999 GB)"), "unknown GPU"),
    ],
)
def test_bad_input_builds_no_panel(setup, kwargs, fragment):
    model, batch, opt = setup
    args = dict(model=model, batch=batch, loss_fn=sq, optimizer=opt, display=False)
    args.update(kwargs)
    with pytest.raises(ValueError, match=fragment):
        vramnb.panel(**args)


def test_line_magic_opens_a_panel(ip):
    run(ip, "import torch\nm = torch.nn.Linear(8, 2)\nx = torch.randn(4, 8)\nfn = lambda m, b: m(b).square().mean()")
    res, cap = run(ip, "%vram panel m x fn -o pnl")
    assert res.success and ip.user_ns["pnl"].device.type == "cpu"
    res, _ = run(ip, "%vram panel m")
    assert "usage: %vram panel MODEL BATCH" in str(res.error_in_exec)
    res, _ = run(ip, "%vram panel m nope")
    assert "no variable named 'nope'" in str(res.error_in_exec)
    res, _ = run(ip, "%vram free extra")
    assert "unexpected 'extra'" in str(res.error_in_exec)


def test_prediction_beside_the_measurement(setup):
    model, batch, opt = setup
    p = vramnb.panel(model, batch, sq, opt, display=False, target="A100 (40 GB)", predict=True)
    rec = p.run()
    assert rec["error"] is None and rec["estimate"].target.name == "A100 (40 GB)"
    row = p.results[0]
    # the prediction for the card is the same step's breakdown, modelled for CUDA: whole 512-byte blocks
    assert row["predicted_peak_allocated"] >= row["peak_allocated"] * 0.5 and row["predicted_fits"] is True
    assert row["predicted_device_memory"] > row["predicted_peak_allocated"]
    assert "predicted: peak · device memory" in p.table.value and "on A100 (40 GB) · fits" in p.table.value
    p.predict.value = False
    p.run()
    assert p.results[0]["predicted_peak_allocated"] is None


# -- issue 11 item 10: the panel does not keep the user's objects alive --------------
def test_deleted_model_optimizer_and_batch_are_freed_while_the_widget_lives():
    import gc
    import weakref

    import ipywidgets

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    batch, opt = torch.randn(16, 32), None
    opt = torch.optim.Adam(model.parameters())
    p = vramnb.panel(model, batch, sq, opt, display=False)
    rec = p.run()
    assert rec["error"] is None and rec["peak"] > 0
    refs = [weakref.ref(o) for o in (model, opt, batch)]
    del model, opt, batch, rec
    gc.collect()
    assert [r() is None for r in refs] == [True, True, True]
    # the widget is still registered with ipywidgets (its comm, its callbacks): only the panel's references went
    instances = getattr(ipywidgets.widgets.widget, "_instances", None)  # ipywidgets 8
    if instances is None:
        instances = ipywidgets.Widget.widgets  # ipywidgets 7
    assert p.widget in instances.values()
    assert p.model is None and p.batch is None and p.optimizer is None
    p.button.click()
    assert "the model is gone" in p.status.value and "#c62828" in p.status.value
    assert p.runs[-1]["error"].startswith("the model is gone") and "the model is gone" in p.table.value
    assert "the model is gone" in repr(p)


def test_batch_and_optimizer_made_in_the_call_live_as_long_as_the_model():
    import gc
    import weakref

    model = nn.Linear(8, 2)
    p = vramnb.panel(model, torch.randn(4, 8), sq, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                     display=False)
    gc.collect()
    rec = p.run()  # the batch and the optimizer, which nothing else holds, are still there
    n = sum(q.numel() for q in model.parameters()) * 4
    assert rec["error"] is None and rec["report"].steady.mark("start")["optimizer state"] == n
    batch = weakref.ref(p.batch)
    p.close()  # close() lets go even while the model lives
    gc.collect()
    assert batch() is None and p.model is None and p.widget.comm is None


# -- item 22: the README's one-liner shows the panel once; vramnb.Panel is public ----
_WIDGET = "application/vnd.jupyter.widget-view+json"


def test_the_one_liner_as_a_cells_last_line_shows_the_panel_once(ip):
    run(ip, "import vramnb\nm = torch.nn.Linear(8, 2)\nx = torch.randn(4, 8)\nfn = lambda m, b: m(b).square().mean()")
    res, cap = run(ip, "vramnb.panel(m, x, fn)")
    assert res.success
    assert sum(_WIDGET in o.data for o in cap.outputs) == 1
    assert "vramnb panel" not in cap.stdout and "VBox" not in cap.stdout  # the cell's result shows nothing more
    assert ip.display_formatter.format(res.result) == ({}, {})  # what a kernel would publish for Out[n]: nothing
    assert isinstance(res.result, vramnb.Panel)
    res, cap = run(ip, "p = vramnb.panel(m, x, fn)")
    assert sum(_WIDGET in o.data for o in cap.outputs) == 1
    res, cap = run(ip, "p")  # asked for again in a later cell: shown again (another view of the same panel)
    assert sum(_WIDGET in o.data for o in cap.outputs) == 1
    assert cap.outputs[0].data["text/plain"].startswith("vramnb panel · Linear on cpu")
    res, cap = run(ip, "%vram panel m x fn")
    assert sum(_WIDGET in o.data for o in cap.outputs) == 1


def test_panel_is_exported():
    from vramnb._panel import Panel

    assert "Panel" in vramnb.__all__ and vramnb.Panel is Panel


# -- an interrupt and the user's optimizer state, through the panel (profile_step's restore and set-aside) --
def test_interrupt_during_the_restore_of_a_panel_run_restores_everything(setup, monkeypatch):
    """The panel's run goes through profile_step's restore and its interrupt guard."""
    model, batch, opt = setup
    sq(model, batch).backward()
    opt.step()
    before = ({k: v.clone() for k, v in model.state_dict().items()},
              {id(q): {k: v.clone() for k, v in st.items()} for q, st in opt.state.items()},
              [q.grad.clone() for q in model.parameters()])
    calls = interrupt_during_restore(monkeypatch)
    p = vramnb.panel(model, batch, sq, opt, display=False)
    with pytest.raises(KeyboardInterrupt):
        p.run()
    assert calls["n"] > 2
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[0][k])
    for q, st in opt.state.items():
        for k, v in st.items():
            assert torch.equal(v, before[1][id(q)][k])
    assert all(torch.equal(q.grad, g) for q, g in zip(model.parameters(), before[2]))
    # the panel says so and stays usable
    assert "interrupted" in p.status.value and p.runs[-1]["error"].startswith("interrupted")
    assert not p.button.disabled and not p._busy
    monkeypatch.undo()
    assert p.run()["error"] is None


def test_existing_optimizer_state_is_not_counted_as_other(setup):
    """After one Adam step, "SGD momentum" keeps one copy of the parameters where
    Adam keeps two: the user's Adam state must not appear as "other" in its run
    (profile_step sets it aside)."""
    model, batch, opt = setup
    sq(model, batch).backward()
    opt.step()
    opt.zero_grad()
    n_tensors = len(list(model.parameters()))
    p_bytes = sum(q.numel() for q in model.parameters()) * 4
    p = vramnb.panel(model, batch, sq, opt, display=False)
    p.run()
    p.controls["optimizer"].value = "SGD momentum"
    p.run()
    base, sgd = (r["report"].steady.mark("start") for r in p.runs)
    assert base["optimizer state"] == 2 * p_bytes + 4 * n_tensors and sgd["optimizer state"] == p_bytes
    assert sgd["other"] == base["other"]  # not + the user's Adam state
    assert p.results[0]["delta_vs_first"] < 0


def test_batch_loss_fn_and_optimizer_can_be_replaced_and_are_checked():
    model = torch.nn.Linear(8, 2)
    x = torch.randn(4, 8)
    p = vramnb.panel(model, x, lambda m, b: m(b).sum(), display=False)

    def other(m, b):
        return m(b).pow(2).mean()

    p.loss_fn = other
    assert p.loss_fn is other
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    p.optimizer = opt
    assert p.optimizer is opt
    y = torch.randn(2, 8)
    p.batch = y
    assert p.batch is y
    with pytest.raises(ValueError, match="loss_fn must be a function"):
        p.loss_fn = 3
    assert p.loss_fn is other  # nothing replaced on error
    with pytest.raises(ValueError):
        p.optimizer = "adam"
    assert p.optimizer is opt


def test_make_it_fit_lists_the_plans_and_apply_sets_the_controls():
    from tests.test_fit import _Net  # four residual MLP blocks; its forward returns the loss

    torch.manual_seed(0)
    model = _Net(256, 4)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(2048, 256)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    kw = dict(steps=1, warm_optimizer=True, target=2**36)
    plain = vramnb.estimate(model, x, None, opt, **kw)
    every = vramnb.estimate(model, x, None, opt, recipe={"checkpointing": "every block"}, **kw)
    card = (plain.device_memory + every.device_memory) // 2  # the plain step does not fit
    p = vramnb.panel(model, x, None, opt, display=False, target=str(card))
    p.fit_button.click()
    r = p.fit_result
    assert r is not None and r.best is not None and not r.current.fits
    shown = [row for row in p.fit_box.children[1:]]
    fits = [q for q in r.plans if q.fits]
    assert len(shown) == min(4, len(fits))  # the fastest that fit, each with its Apply button
    assert r.best.recipe.describe() in shown[0].children[1].value
    shown[0].children[0].click()  # Apply the fastest
    assert p.recipe() == r.best.recipe
    assert "press Run step" in p.status.value and not p.button.disabled and not p.fit_button.disabled
    p.button.click()  # and Run step measures it
    assert p.runs[-1]["description"] == r.best.recipe.describe() and p.runs[-1]["error"] is None
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    # a card nothing fits: said, with by how much (a search of one technique, shown as the button shows it)
    none = vramnb.fit(model, x, None, opt, target="700MiB", allow={"precision": ["bf16"]}, progress=False)
    p._show_fit(none)
    assert none.best is None and none.misses > 0
    assert "nothing fits 700MiB: the closest plan misses by" in p.fit_box.children[1].value
    assert "nothing fits" in p.status.value


# -- issue 15 item 4: ipywidgets 7.7 (Colab's) and 8; a front-end without a widget manager gets text ----
def test_ipywidgets_is_the_version_the_test_command_asks_for():
    """The README's test command runs this file again with ipywidgets 7.7 first on PYTHONPATH."""
    import os

    import ipywidgets

    want = os.environ.get("VRAMNB_EXPECT_IPYWIDGETS")
    if not want:
        pytest.skip("VRAMNB_EXPECT_IPYWIDGETS not set: whatever ipywidgets is installed")
    assert ipywidgets.__version__.startswith(want + "."), (ipywidgets.__version__, ipywidgets.__file__)


def test_panel_builds_without_a_warning_and_keeps_its_tooltips(setup):
    """No control gets a keyword its ipywidgets version lacks (traitlets would warn and drop it):
    the technique's description is the menu's tooltip on ipywidgets 8, its description_tooltip on 7."""
    import warnings

    import ipywidgets

    model, batch, opt = setup
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = vramnb.panel(model, batch, sq, opt, display=False)
    name = "checkpointing"
    shown = p.controls[name].tooltip if int(ipywidgets.__version__.split(".")[0]) >= 8 else p.controls[name].description_tooltip
    assert shown == REGISTRY[name].description
    assert "fake tensors" in (getattr(p.predict, "tooltip", None) or p.predict.description_tooltip)


def test_the_panels_bundle_has_the_view_and_a_text_fallback(setup):
    model, batch, opt = setup
    p = vramnb.panel(model, batch, sq, opt, display=False)
    p.run()
    data = p._repr_mimebundle_()
    assert data[_WIDGET]["model_id"] == p.widget.model_id and data[_WIDGET]["version_major"] == 2
    text = data["text/plain"]
    assert text.startswith(repr(p)) and "baseline" in text  # the runs, as text
    assert "JupyterLab, Notebook 7" in text and ".run() runs a step" in text  # what is missing, and what works here
    assert p._repr_mimebundle_(include={"text/plain"}) == {"text/plain": text}
    assert _WIDGET not in p._repr_mimebundle_(exclude={_WIDGET})
