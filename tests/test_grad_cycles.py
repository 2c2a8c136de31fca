"""backward(create_graph=True) on a leaf no name holds any more (field case
create_graph_leaf_cycle, pytorch#7343): x -> x.grad -> graph -> x is a cycle through autograd's
C++ objects that gc cannot free. ``%vram`` says so with the bytes only those leaves keep; the
test checks that ``%vram free`` (gc) frees none of it and that ``x.grad = None`` frees exactly
that. CPU, bytes from shapes."""

from __future__ import annotations

import gc

import pytest
import torch

import vramnb
from tests.conftest import run
from vramnb._units import format_bytes

N = 1 << 16  # float32 elements per tensor: 256 KiB


def _allocated() -> int:
    from vramnb._probe import probe_for

    probe = probe_for(torch.device("cpu"))
    probe.tracker.scan()
    return probe.sample().allocated


@pytest.fixture(autouse=True)
def _no_cycles_around(ip):
    """Each test starts with nothing unreachable left by earlier tests in this process (they share
    the shell: garbage an earlier file left would be freed by this test's ``%vram free``), and
    breaks the cycles it made, which gc cannot free, when it ends."""
    _break_cycles()
    run(ip, "%vram free")
    gc.collect()
    yield
    _break_cycles()


def _break_cycles() -> None:
    """Set to None every leaf's ``.grad`` that carries a graph (earlier files' tests leave such
    cycles too, uncollectable: their bytes would be counted in this file's lines)."""
    for t in [o for o in gc.get_objects() if issubclass(type(o), torch.Tensor) and o.is_leaf and o.grad is not None
              and o.grad.grad_fn is not None]:
        t.grad = None
    gc.collect()


def test_a_leaf_whose_grad_graph_reaches_back_to_it_is_named_and_vram_free_frees_none_of_it(ip):
    run(ip, "%%vram -d cpu -q\nfor i in range(3):\n    x = torch.randn(%d, requires_grad=True)\n    y = x.tanh()\n"
            "    y.backward(torch.ones_like(y), create_graph=True)\n    del x, y" % N)
    res, cap = run(ip, "%vram -d cpu")
    text = cap.stdout + "".join(str(o.data.get("text/plain", "")) for o in cap.outputs)
    # per pass: x, x.grad, and what x.grad's graph saves (tanh's result y, the ones given to backward): 4 tensors
    kept = 3 * 4 * N * 4
    line = (f"{format_bytes(kept)} of the memory no name holds is kept by leaf tensors whose .grad carries an autograd graph "
            "(left by backward(create_graph=True), or a tensor with a graph assigned to .grad) that reaches back to "
            "the leaf: x -> x.grad -> graph -> x, a cycle through "
            "autograd's C++ objects that gc.collect() cannot free (`%vram free` releases none of it); set `x.grad = "
            "None` before dropping such a tensor, or use `torch.autograd.grad(..., create_graph=True)`, which returns "
            "the gradients instead of storing them")
    assert line in text, text
    before = _allocated()
    run(ip, "%vram free")
    gc.collect()
    assert _allocated() == before  # gc frees none of it
    leaves = [o for o in gc.get_objects() if type(o) is torch.Tensor and o.is_leaf and o.requires_grad
              and o.grad is not None and o.grad.grad_fn is not None]
    assert len(leaves) == 3
    for t in leaves:
        t.grad = None
    del leaves, t
    gc.collect()
    assert before - _allocated() == kept  # x.grad = None frees exactly what the line says


def test_a_named_leaf_or_autograd_grad_gets_no_cycle_line(ip):
    """Adversarial: a leaf a name holds is the named line's (grad_graph_note), and
    ``torch.autograd.grad`` stores nothing: neither is an unreachable cycle."""
    run(ip, "w = torch.randn(%d, requires_grad=True)\nw.tanh().sum().backward(create_graph=True)\n"
            "for i in range(2):\n    z = torch.randn(%d, requires_grad=True)\n"
            "    g, = torch.autograd.grad(z.tanh().sum(), z, create_graph=True)\n    del z, g" % (N, N))
    res, cap = run(ip, "%vram -d cpu")
    text = cap.stdout + "".join(str(o.data.get("text/plain", "")) for o in cap.outputs)
    assert "kept by leaf tensors whose .grad" not in text, text
    assert "w.grad keeps an autograd graph" in text, text
    run(ip, "w.grad = None")
    assert vramnb is not None


def test_a_deleted_modules_parameters_left_in_the_cycle_are_counted(ip):
    """Another shape (pytorch#4661's, with the model deleted afterwards): the leaves are a module's
    parameters; deleting the module leaves them in the cycle, which the line counts."""
    run(ip, "gone = torch.nn.Linear(256, 256)\nout = gone(torch.ones(8, 256)).pow(2).sum()\n"
            "out.backward(create_graph=True)\ndel gone, out")
    res, cap = run(ip, "%vram -d cpu")
    text = cap.stdout + "".join(str(o.data.get("text/plain", "")) for o in cap.outputs)
    assert "kept by leaf tensors whose .grad carries an autograd graph" in text, text
    said = text.split(" of the memory no name holds is kept by leaf tensors")[0].rsplit("⚠ ", 1)[-1].strip()
    before = _allocated()
    leaves = [o for o in gc.get_objects() if type(o) is torch.nn.Parameter and o.grad is not None
              and o.grad.grad_fn is not None]
    assert len(leaves) == 2  # weight and bias
    for t in leaves:
        t.grad = None
    del leaves, t
    gc.collect()
    assert said == format_bytes(before - _allocated()), (said, before - _allocated())
