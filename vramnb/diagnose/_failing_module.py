"""The notebook module whose forward or backward failed, for the capacity fixes' code
(autocast, checkpointing, ``vramnb.compare``): not the largest module the cell names (an idle
deep copy kept beside the one being trained), but

1. the outermost module with parameters whose ``forward`` is on the failing stack (a frame
   whose ``self`` is a module the notebook names; a loss module without parameters is not it);
2. in a failing backward, the module owning most of the leaves that the graph of the tensor
   backward was called on reaches (``AccumulateGrad.variable``);
3. else the largest module named by the failing frames' own code (the failing statement), not
   by the rest of its cell.

Reads frames' locals, namespaces by ``dict.get``, modules' ``_parameters``/``_modules`` dicts
and ``grad_fn.next_functions``: no user code runs."""

from __future__ import annotations

import os
from typing import Any

import torch

from .._graph import frame_locals

__all__ = ["failing_module"]

_BUDGET = 100_000
_BACKWARD_FILES = (os.path.join("torch", "autograd", "__init__.py"), os.path.join("torch", "_tensor.py"))


def raw_parameters(module: Any, budget: int = _BUDGET) -> list[Any]:
    """The values of ``module``'s and its submodules' ``_parameters`` dicts (``None`` included; a
    parameter two submodules share, once per submodule), read through ``object.__getattribute__``
    and plain ``dict`` methods, so no code of the user's module runs; each module once, at most
    ``budget`` modules."""
    out: list[Any] = []
    todo, seen = [module], set[int]()
    while todo and len(seen) < budget:
        m = todo.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        d = object.__getattribute__(m, "__dict__")
        ps, ms = dict.get(d, "_parameters"), dict.get(d, "_modules")
        if type(ps) is dict:
            out += dict.values(ps)
        if type(ms) is dict:
            todo += [c for c in dict.values(ms) if issubclass(type(c), torch.nn.Module)]
    return out


def _params(module: Any) -> set[int]:
    return {id(p) for p in raw_parameters(module) if p is not None}


def _leaves(tensors: list[Any]) -> set[int]:
    """ids of the leaf tensors (``AccumulateGrad.variable``) the tensors' graphs reach."""
    out: set[int] = set()
    todo = [t.grad_fn for t in tensors if getattr(t, "grad_fn", None) is not None]
    seen: set[int] = set()
    while todo and len(seen) < _BUDGET:
        fn = todo.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        var = getattr(fn, "variable", None)
        if isinstance(var, torch.Tensor):
            out.add(id(var))
        todo += [nxt for nxt, _ in getattr(fn, "next_functions", ())]
    return out


def failing_module(frames: list[Any], namespace: Any, named: set[str], backward: bool) -> str | None:
    """The notebook name (in ``namespace``) of the module whose forward or backward failed.

    Args:
        frames: the frames of the failure, innermost first (a module's ``forward`` may be torch's).
        namespace: the notebook's namespace (a dict), else nothing is found.
        named: names the failing frames' own code refers to (``co_names``).
        backward: the failure came inside autograd's backward.

    Returns:
        a name of ``namespace`` bound to an ``nn.Module``, or ``None`` where none is found."""
    if type(namespace) is not dict:
        return None
    modules = {n: o for n, o in list(dict.items(namespace))[:_BUDGET]
               if isinstance(n, str) and not n.startswith("_") and issubclass(type(o), torch.nn.Module)}
    if not modules:
        return None
    by_id = {id(o): n for n, o in modules.items()}
    outer = None
    for frame in frames:  # innermost first: the last hit is the outermost module running
        try:
            me = dict(frame_locals(frame)).get("self")
        except Exception:  # noqa: BLE001
            continue
        if me is not None and id(me) in by_id and _params(me):  # a loss module (no parameters) is not the model
            outer = by_id[id(me)]
    if outer is not None:
        return outer
    if backward:  # the tensors backward was called on: `self` of Tensor.backward, `tensors` of autograd.backward
        tensors: list[Any] = []
        for frame in frames:
            code = frame.f_code
            if code.co_name != "backward" or not code.co_filename.endswith(_BACKWARD_FILES):
                continue
            try:
                loc = dict(frame_locals(frame))
            except Exception:  # noqa: BLE001
                continue
            for v in (loc.get("self"), loc.get("tensors")):
                tensors += [v] if isinstance(v, torch.Tensor) else \
                    [t for t in v if isinstance(t, torch.Tensor)] if isinstance(v, (tuple, list)) else []
        leaves = _leaves(tensors)
        if leaves:
            hits = {n: len(_params(o) & leaves) for n, o in modules.items()}
            best = max(hits, key=lambda n: hits[n])
            if hits[best] > 0:
                return best
    mine = [n for n in named if n in modules]
    if mine:
        return max(mine, key=lambda n: len(_params(modules[n])))
    return None
