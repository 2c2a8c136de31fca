"""Losses computed by separate forwards and summed before one backward keep every forward's graph
alive until that backward: the cell report says so, with the activations at the peak, and offers a
backward per part (moving the zero_grad before them). Not said where no backward ran, where a part
reads an earlier one, or where a part is no autograd output (CPU)."""

from __future__ import annotations

import vramnb
from tests.conftest import run
from vramnb.diagnose._cell_code import summed_parts, summed_parts_note

SETUP = ("torch.manual_seed(0)\nsnet = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), "
         "torch.nn.Linear(256, 1))\nsopt = torch.optim.SGD(snet.parameters(), lr=0.01)\n"
         "xa = torch.randn(2048, 256)\nxb = torch.randn(2048, 256)")
CELL = ("la = snet(xa).pow(2).mean()\nlb = snet(xb).pow(2).mean()\nl = la + lb\nsopt.zero_grad()\nl.backward()\n"
        "sopt.step()")


def test_two_losses_summed_before_one_backward_get_a_backward_each(ip):
    run(ip, SETUP)
    run(ip, "%%vram -d cpu --breakdown\n" + CELL)
    notes = vramnb.history()[-1].notes
    line = [n for n in notes if n.startswith("`l = la + lb` keeps the autograd graphs of la and lb")]
    assert line, notes
    assert ("call backward on each part instead, `la.backward()` right after la is computed; `lb.backward()` right "
            "after lb is computed (move `sopt.zero_grad()` before the first of them") in line[0]
    acts = [r for r in vramnb.history()[-1].sources if r[0] == "activations"][0][3]
    from vramnb._units import format_bytes

    assert acts >= 1 << 20 and f"(activations at the peak: {format_bytes(acts)})" in line[0]


def test_the_shape_is_read_strictly():
    assert summed_parts(CELL) == ("l", "l = la + lb", ["la", "lb"], "sopt.zero_grad()")
    # a part that reads an earlier one: their graphs are one, a backward per part would need retain_graph
    assert summed_parts("la = f(x)\nlb = g(la)\nl = la + lb\nl.backward()") is None
    # a scaled total, a loop, a part bound twice: not this shape
    assert summed_parts("la = f(x)\nlb = g(y)\nl = (la + lb) / 2\nl.backward()") is None
    assert summed_parts("for i in range(2):\n    la = f(x)\n    lb = g(y)\n    l = la + lb\n    l.backward()") is None
    assert summed_parts("la = f(x)\nla = h(la)\nlb = g(y)\nl = la + lb\nl.backward()") is None
    assert summed_parts("la = f(x)\nlb = g(y)\nl = la + lb\nl.backward()") == ("l", "l = la + lb", ["la", "lb"], None)


def test_no_line_without_a_backward_or_without_autograd_outputs():
    import torch

    names = {"la": torch.ones(()), "lb": torch.ones(())}  # no grad_fn: no graph to keep
    assert summed_parts_note(names, CELL, 8 << 20, 1) is None
    w = torch.ones(2, requires_grad=True)
    names = {"la": (w * 2).sum(), "lb": (w * 3).sum()}
    assert summed_parts_note(names, CELL, 8 << 20, 0) is None  # no backward ran
    assert summed_parts_note(names, CELL, 1000, 1) is None  # nothing at the peak worth a line
    assert summed_parts_note(names, CELL, 8 << 20, 1) is not None
