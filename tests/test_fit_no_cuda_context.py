"""Adversary 21: ``fit`` on a machine with a GPU, with a CPU model and CUDA never touched, calibrated
its step times on the GPU (matmuls, ``empty_cache``) and so created a CUDA context in the user's
process. Planning must touch CUDA only where the process has already initialised it.

No GPU here: ``torch.cuda`` is replaced by a recorder that says a GPU is present and fails on any
call that would initialise CUDA or run on it.
"""

from __future__ import annotations

import pytest
import torch

import vramnb
from vramnb.predict import _calibrate
from vramnb.predict._throughput import ACHIEVED, HOST

#: calls that initialise CUDA or run on the GPU (the calibration's)
TOUCHING = ("init", "_lazy_init", "current_device", "get_device_name", "get_device_properties",
            "synchronize", "empty_cache", "Event", "set_device", "mem_get_info", "use_mem_pool", "MemPool")


@pytest.fixture
def gpu_present(monkeypatch):
    calls: list[str] = []
    initialised = {"value": False}

    def recorder(name):
        def call(*a, **k):
            calls.append(name)
            raise RuntimeError(f"torch.cuda.{name} called")
        return call

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialised["value"])
    for name in TOUCHING:
        monkeypatch.setattr(torch.cuda, name, recorder(name), raising=False)
    monkeypatch.setattr(_calibrate, "_CACHE", {})
    return calls, initialised


def test_fit_on_a_cpu_model_touches_no_cuda(gpu_present) -> None:
    calls, initialised = gpu_present
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    plan = vramnb.fit(model, torch.randn(8, 64), lambda m, b: m(b).sum(), opt, target="RTX 4090",
                      progress=False, allow=["precision"])
    assert calls == [] and initialised["value"] is False
    assert plan.best is not None
    assert _calibrate.calibration("RTX 4090") == (HOST, ACHIEVED)


def test_calibration_measures_only_where_cuda_was_initialised(gpu_present) -> None:
    calls, initialised = gpu_present
    assert _calibrate.calibration("H200") == (HOST, ACHIEVED) and calls == []
    initialised["value"] = True  # the user's process uses CUDA: measured on the GPU present
    with pytest.raises(RuntimeError, match="torch.cuda.current_device called"):
        _calibrate.calibration("H200")
    assert calls == ["current_device"]


def test_the_gpu_present_is_read_without_a_cuda_context(gpu_present, monkeypatch) -> None:
    """target=None ("the GPU present") read torch.cuda.get_device_properties, which initialises CUDA."""
    from vramnb.predict import _gpus

    calls, initialised = gpu_present
    monkeypatch.setattr(_gpus, "_nvml", lambda: ("NVIDIA H200", 150754820096, (9, 0)), raising=False)  # as NVML said on the H200
    tgt = _gpus.resolve_target(None)
    assert (tgt.name, tgt.memory, tgt.capability, tgt.multiprocessors, tgt.assumed) == (
        "this GPU (NVIDIA H200)", _gpus.GPUS["H200 (141 GB)"], (9, 0), (132, 2048), ())
    model = torch.nn.Linear(64, 1)
    plan = vramnb.fit(model, torch.randn(8, 64), lambda m, b: m(b).sum(), progress=False, allow=[])
    assert plan.target == "this GPU (NVIDIA H200)"
    monkeypatch.setattr(_gpus, "_nvml", lambda: None)  # no NVML: the documented default, still no context
    assert _gpus.resolve_target(None).name == "H100 (80 GB)"
    assert calls == [] and initialised["value"] is False
