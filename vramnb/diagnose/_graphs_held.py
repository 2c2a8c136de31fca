"""Whether the failing code holds any autograd graph.

"Gradients are on: each forward keeps its activations for a backward" is true of a failure only
where something the failing code holds has a graph behind it. A loop under ``torch.no_grad()``
that collects outputs and joins them after the ``with`` block fails with gradients on, yet
nothing it holds was saved for a backward: turning gradients off frees nothing there.

The failing frames' locals (up to IPython's own, leaving vramnb's out) and the containers they
hold, two levels down, are read for a tensor with a ``grad_fn``; only exact built-in containers
are entered (``list``/``tuple``/``dict``/``set``), so no user code runs. A budget bounds the
walk: where it runs out before one is found, nothing is claimed."""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["holds_graph"]

_OURS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "")
_BUDGET = 20_000  # objects read at most


def holds_graph(frames: list[Any]) -> bool | None:
    """``True`` where a tensor the frames' locals hold, directly or in built-in containers two
    levels down, has a ``grad_fn``; ``False`` where none has and the walk read everything; ``None``
    where the budget ran out first (not known).

    Args:
        frames: the failing frames, innermost first; the walk stops at IPython's.
    """
    from .._graph import frame_locals

    todo: list[tuple[Any, int]] = []
    for f in frames:
        name = f.f_code.co_filename
        if "/IPython/" in name:
            break
        if name.startswith(_OURS):
            continue
        try:  # never frame.f_locals: on Python < 3.13 that stores a snapshot dict on the frame, keeping its values
            if f.f_code.co_name == "<module>":  # a cell's code: its locals are the notebook's namespace
                g = f.f_globals
                todo.extend((v, 0) for v in (dict.values(g) if type(g) is dict else ()))
            else:
                todo.extend((v, 0) for _, v in frame_locals(f))
        except Exception:  # noqa: BLE001 - a frame whose locals cannot be read: not known
            return None
    seen: set[int] = set()
    budget = _BUDGET
    while todo:
        obj, depth = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        budget -= 1
        if budget < 0:
            return None
        t = type(obj)  # not isinstance: that reads obj.__class__, which a proxy's property computes (user code)
        if issubclass(t, torch.Tensor):
            with torch._C.DisableTorchFunctionSubclass():  # a subclass's __torch_function__ is the user's code
                if obj.grad_fn is not None:
                    return True
            continue
        if depth >= 2:
            continue
        if t is list or t is tuple or t is set:
            todo.extend((v, depth + 1) for v in obj)
        elif t is dict:
            todo.extend((v, depth + 1) for v in dict.values(obj))
    return False
