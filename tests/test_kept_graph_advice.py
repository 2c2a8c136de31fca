"""The kept-graph note's fixes name what the cell has (field category: state carried across
iterations without detach): a carried state gets ``.detach()`` on the carried name, a list of
tuples gets each element with a graph detached (a tuple has no ``.detach()``). Exact bytes
from the shapes (CPU)."""

from __future__ import annotations

import torch

from vramnb._units import format_bytes

from vramnb.diagnose._kept_graphs import carried_states, kept_graph_note


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _run(src: str, ns: dict) -> dict:
    exec(src, ns)  # noqa: S102 - the test's own cell
    return {k: v for k, v in ns.items() if k != "__builtins__"}


def test_carried_state_gets_detach_on_the_carried_name_with_the_bytes_its_graph_keeps():
    W = torch.ones(16, 16, requires_grad=True)
    src = "h = torch.zeros(4, 16)\nfor t in range(5):\n    h = torch.tanh(h @ W)\n"
    names = _run(src, {"torch": torch, "W": W})
    assert carried_states(src) == {"h": "h = torch.tanh(h @ W)"}
    note = kept_graph_note(names, src, _key, backward_runs=0)
    # saved: the first h (zeros) and the four earlier tanh outputs, (4, 16) float32 each; h's own storage is h's
    kept = format_bytes(5 * 4 * 16 * 4)
    assert note == (f"autograd graphs kept after the cell by h ({kept}): no backward ran in this cell: if none will "
                    "run on these results, wrap the cell in `with torch.no_grad():` (or `torch.inference_mode()`) so "
                    f"that it builds no graph (these keep {kept}); `h = torch.tanh(h @ W)` carries h from one step to "
                    "the next, so each step's graph is chained onto the last: detach it where a step starts "
                    "(`h = h.detach()`; truncated backpropagation through time)")


def test_a_list_of_tuples_gets_each_element_with_a_graph_detached_never_tuple_detach():
    W = torch.ones(8, 8, requires_grad=True)
    src = ("h = torch.zeros(2, 8)\nfor t in range(3):\n    obs = torch.ones(2, 8)\n    h = torch.tanh(obs + h @ W)\n"
           "    buffer.append((obs, h))\n")
    names = _run(src, {"torch": torch, "W": W, "buffer": []})
    note = kept_graph_note(names, src, _key, backward_runs=0)
    assert "append `(obs, h.detach())`" in note, note
    assert "(obs, h)).detach()" not in note and ").item()" not in note
    assert "`h, = " not in note and "`h = h.detach()`" in note


def test_a_state_carried_inside_a_function_the_cell_defines_is_no_notebook_name():
    assert carried_states("def f(h):\n    for i in range(3):\n        h = g(h)\n    return h\nh = f(h0)\n") == {}


def test_a_training_cell_that_failed_before_its_backward_gets_no_item_and_no_no_grad():
    """A cell that sums its loss parts and then calls backward, stopped (an error) before the
    backward: the total is the loss to differentiate; ``.item()`` or ``no_grad`` would break it."""
    W = torch.ones(8, 8, requires_grad=True)
    src = "loss = 0\nfor p in parts:\n    loss = loss + (p @ W).sum()\nloss.backward()\n"
    ns = {"torch": torch, "W": W, "parts": [torch.ones(2, 8) for _ in range(3)]}
    exec(src.replace("loss.backward()\n", ""), ns)  # noqa: S102 - as if it failed before the backward
    names = {k: v for k, v in ns.items() if k != "__builtins__"}
    assert kept_graph_note(names, src, _key, backward_runs=0) is None
