"""Memory that no name holds and ``gc.collect()`` cannot free: leaves whose ``.grad`` carries an
autograd graph that reaches back to the leaf (``x.backward(create_graph=True)``, or
``y.backward(create_graph=True)`` on a tensor made from ``x``): ``x -> x.grad -> grad_fn -> ...
-> AccumulateGrad(x) -> x``. The cycle runs through autograd's C++ objects, which Python's
collector does not traverse, so the leaf, its gradient and the graph stay alive until the
gradient is dropped (PyTorch warns of it in ``torch/csrc/autograd/engine.cpp``). Found among
the objects :mod:`gc` tracks, bytes from the holders' walk (:func:`vramnb._holders.find_holders`)
against every notebook name."""

from __future__ import annotations

import gc
from collections.abc import Mapping
from typing import Any

import torch

from .._units import format_bytes

__all__ = ["leaf_cycle_note"]


def _cycled_leaves() -> list[torch.Tensor]:
    """The leaf tensors (``requires_grad``) whose ``.grad`` has an autograd graph, among every
    object :mod:`gc` tracks (attributes read without running user code: ``.grad`` and ``grad_fn``
    of a plain ``torch.Tensor``; subclasses are skipped, their attributes may be the user's code)."""
    out = []
    for o in gc.get_objects():
        if type(o) is not torch.Tensor and type(o) is not torch.nn.Parameter:
            continue
        try:
            if o.is_leaf and o.requires_grad and o.grad is not None and o.grad.grad_fn is not None:
                out.append(o)
        except Exception:  # noqa: BLE001 - a tensor that cannot be read is no finding
            continue
    return out


def leaf_cycle_note(names: Mapping[str, Any], device: torch.device, hidden: Mapping[str, tuple[str, Any]]) -> str | None:
    """One line for the leaves of :func:`_cycled_leaves` that no notebook name (``names``) nor
    out-of-sight holder (``hidden``) reaches: how many, the bytes on ``device`` only they keep
    (the leaves, their gradients and the gradients' graphs), and the fix; ``None`` where there
    are none, or they keep nothing on ``device``."""
    from .._holders import find_holders

    leaves = [t for t in _cycled_leaves() if t.device == device or t.device.type == device.type]
    if not leaves:
        return None
    key = "(leaf .grad cycles)"
    rows = find_holders(names, device, hidden={**hidden, key[1:-1]: ("autograd cycles", leaves)}, entries=False)
    only = next((h.unique for h in rows if h.hidden and h.name == key), 0)
    leaves.clear()
    if not only:
        return None
    return (f"{format_bytes(only)} of the memory no name holds is kept by leaf tensors whose .grad carries an autograd graph "
            "(left by backward(create_graph=True), or a tensor with a graph assigned to .grad) that reaches back to "
            "the leaf: x -> x.grad -> graph -> x, a cycle through "
            "autograd's C++ objects that gc.collect() cannot free (`%vram free` releases none of it); set `x.grad = "
            "None` before dropping such a tensor, or use `torch.autograd.grad(..., create_graph=True)`, which returns "
            "the gradients instead of storing them")
