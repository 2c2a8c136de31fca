"""An estimate under PyTorch's anomaly detection (``torch.autograd.set_detect_anomaly(True)``, a common notebook
debugging setting, or the ``detect_anomaly()`` context) gives the same bytes as without, and the setting stays as
the user set it. Anomaly mode's NaN check reads gradients' values, which fake tensors do not have: the estimate
refused every step, blaming a `.item()` of the user's code (adversary round f)."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import vramnb


def _setup():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    return m, torch.randn(4, 8), torch.optim.Adam(m.parameters(), lr=1e-3)


def _loss(m: nn.Module, b: torch.Tensor) -> torch.Tensor:
    return m(b).pow(2).mean()


@pytest.mark.parametrize("how", ["set_detect_anomaly", "detect_anomaly"])
def test_the_estimate_runs_under_anomaly_detection(how):
    m, b, opt = _setup()
    plain = vramnb.estimate(m, b, _loss, opt, target="8GiB")
    try:
        if how == "set_detect_anomaly":
            torch.autograd.set_detect_anomaly(True)
            est = vramnb.estimate(m, b, _loss, opt, target="8GiB")
            assert torch.is_anomaly_enabled() and torch.is_anomaly_check_nan_enabled()
        else:
            with torch.autograd.detect_anomaly():
                est = vramnb.estimate(m, b, _loss, opt, target="8GiB")
                assert torch.is_anomaly_enabled() and torch.is_anomaly_check_nan_enabled()
    finally:
        torch.autograd.set_detect_anomaly(False)
    assert est.peak.allocated == plain.peak.allocated
    assert est.peak.sources == plain.peak.sources


class _TurnsItOn(nn.Module):
    """A forward that turns anomaly detection on as it runs (a debugging line left in a model)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.autograd.set_detect_anomaly(True)
        return self.b(torch.relu(self.a(x)))


@pytest.mark.parametrize("entry", ["estimate", "max_batch_size", "fit"])
def test_a_forward_that_turns_anomaly_detection_on_is_estimated(entry):
    """The NaN check the forward turns on runs in the fake backward (after the estimate turned it off): it was
    refused ("the step needs tensor values"), not a read of the user's; now the same bytes as a model whose
    forward does not turn it on, a note saying the check was not made, and the setting put back."""
    torch.manual_seed(0)
    m = _TurnsItOn()
    plain = nn.Sequential(m.a, nn.ReLU(), m.b)
    b = torch.randn(4, 8)
    assert not torch.is_anomaly_enabled()
    try:
        if entry == "estimate":
            est = vramnb.estimate(m, b, _loss, torch.optim.Adam(m.parameters()), target="8GiB")
            want = vramnb.estimate(plain, b, _loss, torch.optim.Adam(plain.parameters()), target="8GiB")
            assert est.peak.allocated == want.peak.allocated
            assert any("anomaly detection's NaN check (turned on by your code" in n for n in est.notes), est.notes
        elif entry == "max_batch_size":
            r = vramnb.max_batch_size(m, b, _loss, torch.optim.Adam(m.parameters()), target="8GiB", progress=False,
                                      limit=32)
            assert r.batch_size == 32
        else:
            vramnb.fit(m, b, _loss, torch.optim.Adam(m.parameters()), target="8GiB", progress=False)
        assert not torch.is_anomaly_enabled()
    finally:
        torch.autograd.set_detect_anomaly(False)


def test_a_users_ambient_pack_hook_gets_no_fake_tensors():
    m, b, opt = _setup()
    kept: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        kept.append(t)
        return t

    plain = vramnb.estimate(m, b, _loss, opt, target="8GiB")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        est = vramnb.estimate(m, b, _loss, opt, target="8GiB")
        top = torch._C._autograd._top_saved_tensors_default_hooks(True)
        assert top is not None and top[0] is pack  # the user's pair is back on the stack for the user's code
    assert kept == []
    assert est.peak.allocated == plain.peak.allocated
    assert any("test_a_users_ambient_pack_hook_gets_no_fake_tensors.<locals>.pack) was not run" in n
               for n in est.notes), est.notes
    assert torch._C._autograd._top_saved_tensors_default_hooks(True) is None


def test_an_ambient_save_on_cpu_is_modelled_as_the_offload_technique():
    """The user's save_on_cpu around the call: the fake step runs under the estimate's model of offload (the
    bytes of the activation_offload technique), not the user's hook on fake tensors (which left saved
    activations counted on the device)."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2))
    b = torch.randn(32, 64)
    want = vramnb.estimate(m, b, _loss, None, target="8GiB", recipe={"activation_offload": "CPU"})
    plain = vramnb.estimate(m, b, _loss, None, target="8GiB")
    assert want.peak.allocated != plain.peak.allocated  # the technique changes the bytes: the check below tells
    ctx = torch.autograd.graph.save_on_cpu()
    with ctx:
        est = vramnb.estimate(m, b, _loss, None, target="8GiB")
        assert torch._C._autograd._top_saved_tensors_default_hooks(True)[0] is ctx.pack_hook
    assert est.peak.allocated == want.peak.allocated
    assert torch._C._autograd._top_saved_tensors_default_hooks(True) is None


class _Counting(torch.overrides.TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.fake = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.fake += any(isinstance(a, torch._subclasses.FakeTensor) for a in args)
        return func(*args, **(kwargs or {}))


class _Logging(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.outputs: list[object] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        self.outputs.append(out)
        return out


@pytest.mark.parametrize("kind", ["function", "dispatch"])
def test_a_users_ambient_mode_sees_no_fake_tensors(kind):
    """A user's TorchFunctionMode / TorchDispatchMode around the call saw the fake step's calls and kept its
    FakeTensor outputs; now it is set aside for the estimate (named in the notes) and active again after."""
    m, b, opt = _setup()
    plain = vramnb.estimate(m, b, _loss, opt, target="8GiB")
    mode = _Counting() if kind == "function" else _Logging()
    with torch.device("cpu"), mode:
        est = vramnb.estimate(m, b, _loss, opt, target="8GiB")
        torch.ones(2) + 1  # the mode is active again for the user's code
    if kind == "function":
        assert mode.fake == 0
    else:
        assert not any(isinstance(o, torch._subclasses.FakeTensor) for o in mode.outputs) and mode.outputs
    assert est.peak.allocated == plain.peak.allocated
    assert any(f"{type(mode).__qualname__} active around the call did not see" in n for n in est.notes), est.notes
