"""Activations are observed without saved-tensor hooks: the user's autograd
behaves exactly as without vramnb (in-place checks, torch.func, gradients)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vramnb
from tests.conftest import run
from vramnb._step import profile_step

F32 = 4

BUGGY = """
w = torch.ones(3, requires_grad=True)
def step():
    w.grad = None
    a = w * 2
    b = a.sin()      # sin saves a
    a.mul_(100)      # in place on a saved tensor
    b.sum().backward()
    return w.grad
"""


def _engine_entry():
    return getattr(torch.autograd, "_engine_run_backward", torch.autograd.backward)


def test_inplace_error_of_plain_pytorch_is_kept_under_breakdown(ip):
    run(ip, BUGGY)
    plain = ip.run_cell("step()").error_in_exec
    under = ip.run_cell("%%vram -q -d cpu --breakdown\nstep()").error_in_exec
    assert isinstance(plain, RuntimeError) and "modified by an inplace operation" in str(plain)
    assert type(under) is RuntimeError and str(under) == str(plain)
    assert ip.user_ns["w"].grad is None  # no wrong gradient was accumulated


def _frames():
    import sys

    tb, out = sys.last_traceback, []
    while tb is not None:
        out.append((tb.tb_frame.f_code.co_name, tb.tb_frame.f_globals.get("__name__")))
        tb = tb.tb_next
    return out


def test_a_backward_error_under_breakdown_has_the_plain_traceback(ip):
    run(ip, BUGGY)
    ip.run_cell("step()")
    plain = _frames()
    ip.run_cell("%%vram -q -d cpu --breakdown\nstep()")
    assert _frames()[1:] == plain[1:]  # the first entry is IPython's run_code either way


class _Buggy(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x):
        h = self.l(x)
        y = h.sin()
        h.mul_(2)
        return y.sum()


def test_inplace_error_of_plain_pytorch_is_kept_under_profile_step():
    torch.manual_seed(0)
    m, x = _Buggy(), torch.randn(2, 4)
    with pytest.raises(RuntimeError) as plain:
        m(x).backward()
    m.zero_grad(set_to_none=True)
    with pytest.raises(RuntimeError) as under:
        profile_step(m, x, lambda mod, b: mod(b), None)
    assert str(under.value) == str(plain.value)


def _pinn():
    from torch.func import jacrev, vmap

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 1))
    pts = torch.randn(64, 2)

    def loss_fn(m, x):
        u = lambda p: m(p.unsqueeze(0)).squeeze()  # noqa: E731
        du = vmap(jacrev(u))(x)
        return (du[:, 1] - du[:, 0]).pow(2).mean()

    return net, pts, loss_fn


def test_torch_func_runs_under_profile_step_and_breakdown(ip):
    net, pts, loss_fn = _pinn()
    rep = profile_step(net, pts, loss_fn, torch.optim.SGD(net.parameters(), lr=0.1))
    assert rep.steady.peak.allocated > 0
    ip.user_ns.update(net=net, pts=pts, loss_fn=loss_fn)
    res = ip.run_cell("%%vram -q -d cpu --breakdown\nl = loss_fn(net, pts)\nl.backward()")
    assert res.error_in_exec is None


def test_gradients_bit_identical_to_a_plain_run(ip):
    run(ip, "torch.manual_seed(0)\n"
            "model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))\n"
            "x = torch.randn(8, 16)")
    run(ip, "model(x).exp().sum().backward()\ng_plain = [p.grad.clone() for p in model.parameters()]\n"
            "model.zero_grad(set_to_none=True)")
    run(ip, "%%vram -q -d cpu --breakdown\nmodel(x).exp().sum().backward()")
    ns = ip.user_ns
    for p, g in zip(ns["model"].parameters(), ns["g_plain"]):
        assert torch.equal(p.grad, g)


def test_activations_of_a_forward_and_backward_in_one_cell_are_exact(ip):
    """The graph is freed by the cell's own backward: its saved tensors are seen
    when the backward starts. The peak is in ReLU's backward, where its saved
    output is still alive."""
    run(ip, "torch.manual_seed(0)\n"
            "model = torch.nn.Sequential(torch.nn.Linear(8, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1))\n"
            "x = torch.randn(256, 8)")
    run(ip, "%%vram -q -d cpu --breakdown\nloss = model(x).square().mean()\nloss.backward()\ndel loss")
    rep = vramnb.history()[-1]
    r = {n: (a, b, p) for n, a, b, p in rep.sources}
    start, end, peak = r["activations"]  # graphs other tests left alive are there from the start
    assert end == start
    assert peak - start == 256 * 4096 * F32  # ReLU's output, saved by ReLU and the second Linear


def test_engine_entry_is_put_back_and_nothing_is_registered(ip):
    before = _engine_entry()
    run(ip, "%%vram -q -d cpu --breakdown\ny = (torch.ones(3, requires_grad=True) * 2).sum()\ny.backward()")
    assert _engine_entry() is before
