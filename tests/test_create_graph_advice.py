"""Gradients taken with create_graph=True (validation-9: MAML's adaptation steps were told to detach the adapted
weights, which cuts the meta-gradient): the failing ``autograd.grad(..., create_graph=True)`` gets the first-order
form as code, and a name whose graph was made by a differentiable backward is said to keep it for a second-order
gradient, not told to detach it or to run under no_grad."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import vramnb
from tests.conftest import run
from vramnb.diagnose._holding import holding_note


def test_a_failing_grad_with_create_graph_gets_create_graph_false_as_code(ip):
    run(ip, "class CAutograd:  # where torch.autograd.grad runs out of memory\n    @staticmethod\n"
            "    def grad(*args, **kwargs):\n        raise MemoryError()\ncw = torch.ones(3, requires_grad=True)\n"
            "closs = (cw * 2).sum()")
    res, _ = run(ip, "%%vram -d cpu\ncg = CAutograd.grad(closs, cw, create_graph=True)")
    assert isinstance(res.error_in_exec, MemoryError)
    note = next(n for n in vramnb.history()[-1].notes if n.startswith("MemoryError:"))
    assert "runs a backward that itself records an autograd graph (create_graph=True)" in note, note
    assert note.endswith("as code: `cg = CAutograd.grad(closs, cw, create_graph=False)`"), note


def test_adapted_weights_of_a_second_order_step_are_not_told_to_detach():
    torch.manual_seed(0)
    w = torch.randn(16, 4, requires_grad=True)
    x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
    loss = F.cross_entropy(x @ w, y)
    g, = torch.autograd.grad(loss, w, create_graph=True)
    fast = [w - 0.1 * g]
    note = holding_note("fast", fast, torch.device("cpu"), {"fast": fast, "w": w})
    assert note is not None and "made by a backward with create_graph=True (its nodes are backward formulas' own: " \
        "NllLossBackwardBackward0)" in note, note
    assert "detach" not in note and "no_grad" not in note
    # a first-order step's graph is an ordinary one: the usual sentence
    g1, = torch.autograd.grad(F.cross_entropy(x @ w, y), w)
    plain = [w - 0.1 * g1]
    note1 = holding_note("plain", plain, torch.device("cpu"), {"plain": plain, "w": w})
    assert note1 is None or "create_graph" not in note1
