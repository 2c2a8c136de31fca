"""State updated with gradients on, in objects the cell does not name: a module's buffer
(``self.running_mean = (1 - m) * self.running_mean + m * mean`` in ``forward``) or a global
tensor a function reassigns (``global alpha; alpha = alpha / alpha.sum()``). Each update
chains onto the previous one's autograd graph, so the graph (its nodes, and whatever they
save) grows with every call. Found from the notebook's names: modules' ``_buffers`` dicts
and functions' bytecode (``STORE_GLOBAL``), read without running user code; the place of
the update from the class's source (:mod:`inspect`) or the instruction's line."""

from __future__ import annotations

import dis
import inspect
import re
import types
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["state_graph_notes"]

_MODULES = 10_000  # submodules walked at most per name


def _buffers(name: str, module: torch.nn.Module) -> list[tuple[str, str, torch.nn.Module, torch.Tensor]]:
    """``(expression, buffer name, owner, tensor)`` of the buffers with a ``grad_fn``."""
    out: list[tuple[str, str, torch.nn.Module, torch.Tensor]] = []
    todo: list[tuple[str, Any]] = [(name, module)]
    seen: set[int] = set()
    while todo and len(seen) < _MODULES:
        path, m = todo.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        d = object.__getattribute__(m, "__dict__")
        bs, ms = dict.get(d, "_buffers"), dict.get(d, "_modules")
        if type(bs) is dict:
            for b, t in dict.items(bs):
                if issubclass(type(t), torch.Tensor) and t.grad_fn is not None:
                    out.append((f"{path}.{b}", b, m, t))
        if type(ms) is dict:
            for k, c in dict.items(ms):
                if issubclass(type(c), torch.nn.Module):
                    todo.append((f"{path}[{k}]" if k.isdigit() else f"{path}.{k}", c))
    return out


def _assigned_in(cls: type, attr: str) -> str | None:
    """``Class.method (file:line)`` of the first ``self.attr = …`` whose right side reads
    ``self.attr`` in a method of ``cls`` (its source read by :mod:`inspect`), else ``None``."""
    pat = re.compile(rf"^\s*self\.{re.escape(attr)}\s*=(?!=)(.*)$")
    for c in cls.__mro__:
        if c.__module__.startswith("torch"):
            break
        for meth, fn in vars(c).items():
            if not issubclass(type(fn), types.FunctionType):
                continue
            try:
                lines, start = inspect.getsourcelines(fn)
                file = inspect.getsourcefile(fn) or fn.__code__.co_filename
            except (OSError, TypeError):
                continue
            for i, ln in enumerate(lines):
                m = pat.match(ln)
                if m and f"self.{attr}" in m.group(1):
                    return f"{c.__name__}.{meth} ({file}:{start + i})"
    return None


def _global_store(names: Mapping[str, Any], var: str) -> str | None:
    """``function (file:line)`` of a notebook function that rebinds the global ``var``."""
    for fname, fn in list(names.items()):
        if not issubclass(type(fn), types.FunctionType):
            continue
        for ins in dis.get_instructions(fn.__code__):
            if ins.opname == "STORE_GLOBAL" and ins.argval == var:
                line = ins.positions.lineno if ins.positions is not None else None
                return f"{fname} ({fn.__code__.co_filename}:{line})"
    return None


def state_graph_notes(names: Mapping[str, Any]) -> list[str]:
    """One line per buffer or function-updated global tensor that carries an autograd graph,
    with the place of the update and the fix."""
    out = []
    for name, obj in list(names.items()):
        if name.startswith("_"):
            continue
        if issubclass(type(obj), torch.nn.Module):
            for expr, b, owner, t in _buffers(name, obj):
                where = _assigned_in(type(owner), b)
                head = f"{expr} is a buffer that carries an autograd graph (grad_fn {type(t.grad_fn).__name__})"
                if where:  # `self.b = f(self.b, …)`: each call chains onto the last graph
                    out.append(f"{head}, updated in {where}: an update computed with gradients on from the "
                               "buffer's last value chains each step's graph onto the last; update it under "
                               "`with torch.no_grad():` (or from detached values: `.detach()`)")
                else:  # no update that reads its last value was found: only that it keeps a graph
                    out.append(f"{head}: it keeps that graph alive; compute it under `with torch.no_grad():` "
                               "(or store `.detach()`)")
        elif type(obj) is torch.Tensor and obj.grad_fn is not None:
            where = _global_store(names, name)
            if where:
                out.append(f"{name} carries an autograd graph (grad_fn {type(obj.grad_fn).__name__}) and is "
                           f"reassigned by {where} with gradients on: each call chains onto the graph of the last; "
                           f"do that update under `with torch.no_grad():` (or from `.item()` / `.detach()` values)")
    return out
