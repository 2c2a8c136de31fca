"""The step's own ``torch.autocast("cuda", ...)`` is modelled as CUDA autocast by an estimate.

Users write mixed precision in their loop (``with torch.autocast("cuda", dtype=torch.bfloat16):``),
not as a vramnb recipe. On fake CPU tensors CUDA autocast never casts, and without CUDA it
disables itself with a warning: the estimate predicted an fp32 step. Now such a region is a region
of CUDA's autocast policy, the same as the estimate's own ``precision`` recipe.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import vramnb


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 10))


BATCH = (torch.randn(4096, 256), torch.randint(0, 10, (4096,)))


def _loss(device_type: str, dtype: torch.dtype | None):
    def loss_fn(m, b):
        x, y = b
        kw = {} if dtype is None else {"dtype": dtype}
        with torch.autocast(device_type, **kw):
            return nn.functional.cross_entropy(m(x), y)
    return loss_fn


def _est(loss_fn, **kw):
    return vramnb.estimate(_model(), BATCH, loss_fn, lambda p: torch.optim.SGD(p, lr=0.1), target="H100", **kw)


def test_user_cuda_autocast_is_cuda_autocast():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "CUDA is not available. Disabling" must not happen
        user = _est(_loss("cuda", torch.bfloat16))
    ours = _est(_loss("cpu", torch.bfloat16))  # a CPU region on fake CPU tensors: the policy's own region
    fp32 = _est(lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1]))
    assert user.peak_allocated == ours.peak_allocated
    assert [s.peak.allocated for s in user.steps] == [s.peak.allocated for s in ours.steps]
    # the forward's hidden activations (4096 x 1024) are saved in bf16 for the matmuls, not fp32
    assert user.peak_allocated < fp32.peak_allocated
    assert any("autocast" in n for n in user.notes)


def test_user_cuda_autocast_defaults_to_fp16():
    default = _est(_loss("cuda", None))
    fp16 = _est(_loss("cpu", torch.float16))
    assert [s.peak.allocated for s in default.steps] == [s.peak.allocated for s in fp16.steps]


def test_autocast_and_the_rnn_entry_points_are_put_back():
    from torch import _VF

    cls = torch.amp.autocast_mode.autocast
    init, exit_ = cls.__init__, cls.__exit__
    rnns = {m: getattr(_VF, m) for m in ("lstm", "gru", "rnn_tanh", "rnn_relu")}
    _est(_loss("cuda", torch.bfloat16))
    assert (cls.__init__, cls.__exit__) == (init, exit_)
    assert {m: getattr(_VF, m) for m in rnns} == rnns and not set(rnns) & set(vars(_VF))
    with pytest.raises(RuntimeError, match="boom"):
        _est(lambda m, b: (_ for _ in ()).throw(RuntimeError("boom")))
    assert (cls.__init__, cls.__exit__) == (init, exit_)
    assert {m: getattr(_VF, m) for m in rnns} == rnns and not set(rnns) & set(vars(_VF))
