"""The widget panel, tested as Python objects (no browser): set values, click, check."""

import pytest
import torch
from torch import nn

import vramnb
from tests.conftest import run
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
    calls = {"n": 0}

    def flaky(m, b):
        calls["n"] += 1
        if calls["n"] == 1:
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
