"""A plain ``pip install vramnb`` (no extras): every feature that needs an extra says which,
at its first call, as a ``vramnb.MissingDependencyError`` (a ``ModuleNotFoundError``), never
a bare import error; the core features need none.

Missing packages are simulated with ``sys.modules[name] = None`` (how Python marks a module
that must not import), so these tests run in the full test venv too; ``.ci/package-checks.sh``
runs this file again in a venv that has only torch, vramnb and pytest, where the last test
meets the real thing.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings

import pytest
import torch

import vramnb
from tests.conftest import mlp, run, sq_loss
from vramnb import _extras


@pytest.fixture
def without(monkeypatch):  # type: ignore[no-untyped-def]
    """``without("matplotlib")``: the module and its submodules cannot be imported."""

    def hide(*names: str) -> None:
        for name in names:
            for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                monkeypatch.delitem(sys.modules, mod)
            monkeypatch.setitem(sys.modules, name, None)

    return hide


@pytest.fixture(scope="module")
def step_report():  # type: ignore[no-untyped-def]
    model = mlp()
    return vramnb.profile_step(model, torch.randn(8, 64), sq_loss, torch.optim.SGD(model.parameters(), lr=0.1))


def _says(err: pytest.ExceptionInfo, feature: str, module: str, extra: str) -> None:
    assert isinstance(err.value, vramnb.MissingDependencyError) and isinstance(err.value, ModuleNotFoundError)
    assert err.value.name == module
    msg = str(err.value)
    assert feature in msg and f'pip install "vramnb[{extra}]"' in msg and f"pip install {module}" in msg, msg


@pytest.mark.parametrize("kind", ["breakdown", "timeline", "sources"])
def test_plot_without_matplotlib_names_the_plot_extra(without, step_report, kind) -> None:  # type: ignore[no-untyped-def]
    without("matplotlib")
    with pytest.raises(ModuleNotFoundError) as err:
        step_report.plot(kind)
    _says(err, ".plot()", "matplotlib", "plot")


def test_plot_functions_without_matplotlib(without, step_report) -> None:  # type: ignore[no-untyped-def]
    without("matplotlib")
    with pytest.raises(ModuleNotFoundError) as err:
        vramnb.plot_compare([step_report])
    _says(err, "vramnb.plot_*", "matplotlib", "plot")


def test_panel_without_ipywidgets_or_matplotlib_names_the_widgets_extra(without) -> None:  # type: ignore[no-untyped-def]
    model = mlp()
    batch, opt = torch.randn(8, 64), torch.optim.SGD(model.parameters(), lr=0.1)
    without("ipywidgets")
    with pytest.raises(ModuleNotFoundError) as err:
        vramnb.panel(model, batch, sq_loss, opt, display=False)
    _says(err, "vramnb.panel", "ipywidgets", "widgets")
    assert "profile_step" in str(err.value)  # and what works without it


def test_panel_without_matplotlib_fails_at_once_not_at_the_first_run(without) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("ipywidgets")
    model = mlp()
    without("matplotlib")
    with pytest.raises(ModuleNotFoundError) as err:
        vramnb.panel(model, torch.randn(8, 64), sq_loss, torch.optim.SGD(model.parameters(), lr=0.1), display=False)
    _says(err, "vramnb.panel", "matplotlib", "widgets")


def test_panel_magic_without_ipywidgets_is_a_usage_error(ip, without) -> None:  # type: ignore[no-untyped-def]
    run(ip, "model = torch.nn.Linear(4, 2)\nbatch = torch.randn(3, 4)")
    without("ipywidgets")
    res, cap = run(ip, "%vram panel model batch")
    err = res.error_in_exec
    assert type(err).__name__ == "UsageError", err
    assert 'pip install "vramnb[widgets]"' in str(err)


def test_dataframes_without_pandas_name_the_pandas_extra(ip, without) -> None:  # type: ignore[no-untyped-def]
    run(ip, "%%vram -d cpu -q\nx = torch.ones(10)")
    without("pandas")
    with pytest.raises(ModuleNotFoundError) as err:
        vramnb.history().to_dataframe()
    _says(err, "History.to_dataframe", "pandas", "pandas")
    assert vramnb.history().to_records()  # the records need no pandas


def test_a_broken_install_keeps_its_own_error() -> None:
    """matplotlib installed but one of its own dependencies gone: that module's error, not ours."""
    with pytest.raises(ModuleNotFoundError) as err:
        with _extras.optional("matplotlib", "a figure"):
            raise ModuleNotFoundError("No module named 'kiwisolver'", name="kiwisolver")
    assert not isinstance(err.value, vramnb.MissingDependencyError) and err.value.name == "kiwisolver"


def test_progress_bar_without_ipywidgets_is_text_and_warns_nothing(without) -> None:  # type: ignore[no-untyped-def]
    """tqdm.auto in a kernel without ipywidgets warns "IProgress not found"; vramnb's bars do not."""
    from tqdm.std import tqdm as text_bar

    without("ipywidgets")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bar = _extras.progress_bar(total=1, disable=True)
    assert type(bar) is text_bar
    bar.close()


def test_the_core_needs_no_extra(ip, without) -> None:  # type: ignore[no-untyped-def]
    """%%vram, %vram, profile_step, compare and estimate with none of the extras importable."""
    without("matplotlib", "ipywidgets", "pandas")
    res, cap = run(ip, "%%vram -d cpu -o rep\nx = torch.ones(2**26)")
    assert res.success and ip.user_ns["rep"].delta_allocated == 2**28
    assert "+256.0 MiB" in cap.outputs[0].data["text/plain"]
    res, _ = run(ip, "%vram -d cpu")
    assert res.success and res.result.holders[0].name == "x" and res.result.holders[0].nbytes == 2**28
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = torch.randn(8, 64)
    assert vramnb.profile_step(model, batch, sq_loss, opt).peak_allocated > 0
    cmp = vramnb.compare(model, batch, sq_loss, opt, toggles={"optimizer": ["yours", "SGD momentum"]}, progress=False)
    assert len(cmp.variants) == 2
    assert vramnb.estimate(model, batch, sq_loss, opt, target="T4").peak_allocated > 0
    for name in ("matplotlib", "ipywidgets", "pandas"):
        assert sys.modules[name] is None  # none was imported behind the test's back


@pytest.mark.skipif(all(importlib.util.find_spec(m) for m in _extras.EXTRAS),
                    reason="the extras are installed here; .ci/package-checks.sh runs this in a venv without them")
def test_without_the_extras_installed(step_report) -> None:  # type: ignore[no-untyped-def]
    """The real thing, not a simulation: in a venv with no extra, the first call of each says what to install."""
    if importlib.util.find_spec("matplotlib") is None:
        with pytest.raises(vramnb.MissingDependencyError, match=r'pip install "vramnb\[plot\]"'):
            step_report.plot()
    if importlib.util.find_spec("ipywidgets") is None:
        model = mlp()
        with pytest.raises(vramnb.MissingDependencyError, match=r'pip install "vramnb\[widgets\]"'):
            vramnb.panel(model, torch.randn(8, 64), sq_loss, torch.optim.SGD(model.parameters(), lr=0.1), display=False)
    if importlib.util.find_spec("pandas") is None:
        with pytest.raises(vramnb.MissingDependencyError, match=r'pip install "vramnb\[pandas\]"'):
            vramnb.history().to_dataframe()
