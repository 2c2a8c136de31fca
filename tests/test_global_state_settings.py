"""Adversary round 2026-12-04e: process-wide settings the user's loss sets in the step, beyond those
round d found (``tests/test_global_state.py``), were left as the step set them by every entry point:
NumPy's error handling and print options, torch's warn-always, the per-backend fp32 precisions
(``torch.backends.*.fp32_precision``, PyTorch >= 2.9), the multi-head-attention fast path, the
preferred linear-algebra library, autograd's multithreading, flush-denormal, autocast's dtype and
cache switch, a dynamo config value, the recursion limit and the working directory. And a user who
had set a per-backend fp32 precision could not call any entry point: vramnb read the legacy
``torch.get_float32_matmul_precision()``, which raises once both APIs were used.

The states are read here with PyTorch's, NumPy's and Python's own getters, not vramnb's.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch

import vramnb

_FP32 = (("generic", "all"), ("cuda", "all"), ("mkldnn", "all"), ("cuda", "matmul"), ("cuda", "conv"),
         ("cuda", "rnn"), ("mkldnn", "matmul"), ("mkldnn", "conv"), ("mkldnn", "rnn"))
needs_fp32_api = pytest.mark.skipif(not hasattr(torch._C, "_get_fp32_precision_getter"),
                                    reason="the per-backend fp32 precision API is PyTorch >= 2.9")


def _flushes() -> bool:
    x = float("1e-310")
    return x * 1.0 == 0.0


def _state() -> dict:
    import torch._dynamo.config as dynamo

    out = {
        "numpy errors": np.geterr(), "numpy print": np.get_printoptions(),
        "warn always": torch.is_warn_always_enabled(),
        "mha fast path": torch.backends.mha.get_fastpath_enabled(),
        "linalg library": torch.backends.cuda.preferred_linalg_library(),
        "autograd multithreading": torch.autograd.is_multithreading_enabled(),
        "flush denormal": _flushes(),
        "autocast cpu dtype": torch.get_autocast_dtype("cpu"), "autocast cache": torch.is_autocast_cache_enabled(),
        "recompile limit": dynamo.recompile_limit,
        "recursion limit": sys.getrecursionlimit(), "cwd": os.getcwd(),
    }
    if hasattr(torch._C, "_get_fp32_precision_getter"):
        out.update({f"fp32 {b} {op}": torch._C._get_fp32_precision_getter(b, op) for b, op in _FP32})
    return out


def _loss_setting_everything(tmp: str):
    def loss(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
        import torch._dynamo.config as dynamo

        np.seterr(all="raise")
        np.set_printoptions(precision=2)
        torch.set_warn_always(True)
        if hasattr(torch._C, "_set_fp32_precision_setter"):
            torch.backends.mkldnn.matmul.fp32_precision = "bf16"
            torch.backends.cuda.matmul.fp32_precision = "tf32"
        torch.backends.mha.set_fastpath_enabled(False)
        try:  # a CPU build sets it, then raises that it has no MAGMA
            torch.backends.cuda.preferred_linalg_library("magma")
        except RuntimeError:
            pass
        torch.autograd.set_multithreading_enabled(False)
        torch.set_flush_denormal(True)
        torch.set_autocast_dtype("cpu", torch.float16)
        torch.set_autocast_cache_enabled(False)
        dynamo.recompile_limit = 64
        sys.setrecursionlimit(sys.getrecursionlimit() + 1000)
        os.chdir(tmp)
        return model(batch).square().mean()
    return loss


ENTRY = {
    "profile_step": lambda m, b, loss: vramnb.profile_step(m, b, loss),
    "compare": lambda m, b, loss: vramnb.compare(m, b, loss, toggles={"precision": ["fp32", "bf16"]}, progress=False),
    "estimate": lambda m, b, loss: vramnb.estimate(m, b, loss, target="8GiB"),
    "max_batch_size": lambda m, b, loss: vramnb.max_batch_size(m, b, loss, target="1GiB", limit=16, progress=False),
    "fit": lambda m, b, loss: vramnb.fit(m, b, loss, target="8GiB", progress=False),
}


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))


@pytest.mark.parametrize("entry", list(ENTRY))
def test_settings_the_loss_changes_are_put_back(entry: str, tmp_path) -> None:
    import torch._dynamo.config  # noqa: F401 - the loss sets a dynamo config value: imported before, as a user's

    before = _state()
    try:
        ENTRY[entry](_model(), torch.ones(4, 8), _loss_setting_everything(str(tmp_path)))
    finally:
        after = _state()
        os.chdir(before["cwd"])  # so that a failure here does not leave the next test in tmp_path
    assert {k: (before[k], after[k]) for k in before if before[k] != after[k]} == {}


@needs_fp32_api
@pytest.mark.parametrize("entry", ["profile_step", "estimate", "fit"])
def test_an_entry_point_runs_where_the_user_set_a_per_backend_fp32_precision(entry: str) -> None:
    """``torch.get_float32_matmul_precision()`` raises once ``torch.backends.*.fp32_precision`` was set
    beside the legacy setting (PyTorch's own message: "you have used mix of the legacy and new APIs")."""
    found = torch._C._get_fp32_precision_getter("mkldnn", "matmul")
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    try:
        with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
            torch.get_float32_matmul_precision()
        before = _state()
        ENTRY[entry](_model(), torch.ones(4, 8), lambda m, b: m(b).square().mean())
        assert _state() == before
    finally:
        torch.backends.mkldnn.matmul.fp32_precision = found
