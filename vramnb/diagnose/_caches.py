"""Tensors kept by function caches that the holders' walk does not enter.

A ``functools.lru_cache`` on a function, a method or ``__getitem__`` keeps every argument tuple
(``self`` included: an old object with all its tensors) and every result in a dict the C
wrapper holds; :func:`gc.get_referents` of the wrapper returns that dict. Found from the
notebook's names: functions, classes and the classes of instances (their ``__dict__`` read
with ``object.__getattribute__``/``vars``; no user code runs), then the cache's keys and
values walked through containers and objects' ``__dict__`` a few levels deep.
"""

from __future__ import annotations

import gc
import types
from collections.abc import Mapping
from typing import Any

import torch

from .._units import format_bytes

__all__ = ["cached_tensors", "cache_note"]

_DEPTH = 12  # cache dict, key, self, its __dict__, a module, _modules, a child, _parameters, ...
_BUDGET = 200_000  # objects visited at most per cache


def _is_cache(obj: Any) -> bool:
    return type(obj).__name__ == "_lru_cache_wrapper" and hasattr(type(obj), "cache_clear")


def _caches(names: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(expression for the wrapper, wrapper)`` reached from ``names``."""
    out, seen = [], set()
    for name, obj in list(names.items()):
        if name.startswith("_"):
            continue
        found: list[tuple[str, Any]] = []
        if _is_cache(obj):
            found.append((name, obj))
        cls: type | None = obj if issubclass(type(obj), type) else type(obj)
        prefix = name if issubclass(type(obj), type) else f"type({name})"
        assert cls is not None
        if cls.__module__ in ("builtins", "torch") or cls.__module__.startswith(("torch.", "numpy")):
            cls = None
        for c in (cls.__mro__ if cls is not None else ()):
            if c is object:
                continue
            for attr, v in list(vars(c).items()):
                v = getattr(v, "__func__", v)  # staticmethod / classmethod
                if _is_cache(v):
                    found.append((f"{prefix}.{attr}", v))
        for expr, w in found:
            if id(w) not in seen:
                seen.add(id(w))
                out.append((expr, w))
    return out


def _tensors(root: Any, device: torch.device) -> list[torch.Tensor]:
    """Tensors on ``device`` the cache ``root`` keeps: its dict's keys and values, through
    lists, tuples, dicts and objects' ``__dict__``."""
    out: list[torch.Tensor] = []
    seen: set[int] = set()
    todo: list[tuple[Any, int]] = [(r, 0) for r in gc.get_referents(root) if issubclass(type(r), dict)]
    while todo and len(seen) < _BUDGET:
        o, depth = todo.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if issubclass(type(o), torch.Tensor):
            if o.device == device or (device.type == "cpu" and o.device.type == "cpu"):
                out.append(o)
            continue
        if depth >= _DEPTH:
            continue
        if issubclass(type(o), dict):
            todo += [(x, depth + 1) for kv in dict.items(o) for x in kv]
        elif issubclass(type(o), (list, tuple, set, frozenset)):
            todo += [(x, depth + 1) for x in o]
        elif not issubclass(type(o), (type, str, bytes, int, float, types.FunctionType, types.BuiltinFunctionType,
                                types.MethodType, types.ModuleType)):  # objects, modules (nn.Module) included
            try:
                d = object.__getattribute__(o, "__dict__")
            except AttributeError:
                continue
            if type(d) is dict:
                todo += [(x, depth + 1) for x in dict.values(d)]
    return out


def cached_tensors(names: Mapping[str, Any], device: torch.device) -> list[tuple[str, int, int]]:
    """``(expression of the cached function, entries, bytes of the storages its cache keeps on
    device)`` for each ``functools`` cache reached from ``names`` that keeps tensors; each
    storage counted once across all caches."""
    from .._attribution import key_fn

    key = key_fn(device)
    counted: set[int] = set()
    out = []
    for expr, w in _caches(names):
        held = 0
        for t in _tensors(w, device):
            k = key(t)
            if k is None or k in counted:
                continue
            counted.add(k)
            st = t.untyped_storage()
            held += st.nbytes()
        if held:
            out.append((expr, int(w.cache_info().currsize), held))
    return out


def cache_note(names: Mapping[str, Any], device: torch.device) -> str | None:
    """One line naming the function caches that keep tensors on ``device`` and how to empty
    them (``None`` where none does)."""
    found = cached_tensors(names, device)
    if not found:
        return None
    parts = ", ".join(f"{e} ({n} entr{'y' if n == 1 else 'ies'}) keeps {format_bytes(b)}" for e, n, b in found)
    clear = "; ".join(f"{e}.cache_clear()" for e, _, _ in found)
    return (f"functools caches keep tensors: {parts} (its arguments, `self` included, and its results; "
            f"what only the cache keeps is held by no name listed): {clear}")
