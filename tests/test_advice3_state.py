"""Advice that agrees with the failing cell's own state (CPU): the grad mode the failing line ran
in (read from the cell's text after the ``with`` has exited), the parameters the optimizer trains,
the names a cell keeps after its loop, the gradient a named leaf holds."""

from __future__ import annotations

import torch

from tests.conftest import run
from vramnb.diagnose import OOMState, verdict
from vramnb.diagnose._postmortem import failing_code

MiB = 2**20


def _caught(ip, cell):  # type: ignore[no-untyped-def]
    """Run ``cell`` (which raises); the post-mortem's context read from its traceback after
    unwinding, as :func:`vramnb._measure.oom_info` reads it where the failure was not observed."""
    from vramnb._measure import _tb_frames

    res, _ = run(ip, cell)
    assert isinstance(res.error_in_exec, RuntimeError)
    return failing_code(_tb_frames(res.error_in_exec))


def _fixes(ctx):  # type: ignore[no-untyped-def]
    s = OOMState("cuda:0", True, 600 * MiB, 500 * MiB, reserved=500 * MiB, total=2**30,
                 free_device=0, non_pytorch=0, context=ctx)
    return [(f.what, f.code) for f in verdict(s).fixes]


def test_a_failure_under_no_grad_read_after_unwinding_is_not_said_to_have_gradients_on(ip):
    run(ip, "net = torch.nn.Linear(8, 8)")
    assert torch.is_grad_enabled()
    ctx = _caught(ip, "with torch.no_grad():\n    out = net(torch.ones(2, 8))\n    raise RuntimeError('x')")
    assert ctx.grad is False and torch.is_grad_enabled()
    text = " ".join(w + " " + c for w, c in _fixes(ctx))
    assert "gradients are on" not in text and "recompute activations" not in text
    # a decorated function, inference_mode, and set_grad_enabled(False)
    run(ip, "@torch.inference_mode()\ndef infer(x):\n    y = net(x)\n    raise RuntimeError('x')")
    assert _caught(ip, "infer(torch.ones(2, 8))").grad is False
    assert _caught(ip, "with torch.set_grad_enabled(False):\n    net(torch.ones(2, 8)); raise RuntimeError('x')").grad is False
    # gradients on: enable_grad inside no_grad, or no construct at all
    ctx = _caught(ip, "with torch.no_grad():\n    with torch.enable_grad():\n        net(torch.ones(2, 8))\n"
                      "        raise RuntimeError('x')")
    assert ctx.grad is True
    ctx = _caught(ip, "with torch.no_grad():\n    pass\nout = net(torch.ones(2, 8))\nraise RuntimeError('x')")
    assert ctx.grad is True
    assert "no backward runs in the failing code, yet gradients are on" in " ".join(w for w, _ in _fixes(ctx))
