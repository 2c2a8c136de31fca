"""Record Python containers at any depth and put their contents back exactly.

:class:`Containers` walks a value: each ``dict``/``list``/``set``/``deque`` (and
subclasses, e.g. ``OrderedDict``, ``defaultdict``, diffusers' ``FrozenDict``) is
recorded as a shallow copy and walked into; tuples and frozensets are walked into;
a plain object's ``__dict__`` is recorded and walked into; tensors go to the
caller's ``add_tensor`` (their bytes are restored there); NumPy arrays keep a copy
of their bytes; random generators (``torch.Generator``, NumPy's ``Generator`` and
``RandomState``, ``random.Random``: a noisy optimizer's own) keep their state.
Values that cannot change (numbers, strings, ``None``, dtypes,
devices, functions, classes, modules of Python) are left as they are.
Anything else (an object without ``__dict__`` that is not one of the above) is
refused with :class:`vramnb._checks.InputError` when it is recorded, that is,
before the step runs.

:func:`put_back` changes a container only where its contents differ from the
record (by identity), so an unchanged container whose class refuses updates
(``FrozenDict.update`` raises) is never touched; where one does differ and its
own methods refuse, the built-in base class's methods put the record back, so a
container is never left half-restored.
"""

from __future__ import annotations

import enum
import types
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

import torch

from ._generator_state import generator_kind, get_state, set_state

__all__ = ["Containers", "put_back", "same", "shallow_copy"]

_ATOMS = (type(None), bool, int, float, complex, str, bytes, range, enum.Enum, type, torch.dtype, torch.device,
          torch.layout, torch.memory_format, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
          types.ModuleType, types.MethodWrapperType, types.WrapperDescriptorType, types.CodeType)
_MUTABLE = (dict, list, set, deque)


def shallow_copy(v: Any) -> Any:
    """A plain copy of a dict, list, set or deque's entries (a dict keeps its order)."""
    if isinstance(v, dict):
        return list(dict.items(v))
    return list(v)


def _key_same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(type(a) is type(b) and a == b)
    except Exception:  # noqa: BLE001 - keys that do not compare (tensors): identity only
        return False


def same(live: Any, saved: list[Any]) -> bool:
    """Whether ``live`` holds exactly the recorded entries (values by identity)."""
    if isinstance(live, dict):
        items = list(dict.items(live))
        return len(items) == len(saved) and all(
            _key_same(k, sk) and v is sv for (k, v), (sk, sv) in zip(items, saved))
    if isinstance(live, set):
        ids = {id(x) for x in live}
        return len(live) == len(saved) and all(id(x) in ids for x in saved)
    items = list(live)
    return len(items) == len(saved) and all(a is b for a, b in zip(items, saved))


def _raw_fill(live: Any, saved: list[Any]) -> None:
    """Put the entries back through the built-in base class (bypassing a subclass
    that refuses changes)."""
    if isinstance(live, OrderedDict):
        OrderedDict.clear(live)
        for k, v in saved:
            OrderedDict.__setitem__(live, k, v)
    elif isinstance(live, dict):
        dict.clear(live)
        dict.update(live, saved)
    elif isinstance(live, list):
        list.__setitem__(live, slice(None), saved)
    elif isinstance(live, set):
        set.clear(live)
        set.update(live, saved)
    else:
        deque.clear(live)
        deque.extend(live, saved)


def put_back(live: Any, saved: list[Any]) -> None:
    """Give a container its recorded entries back (see the module's docstring);
    a no-op where nothing changed."""
    if same(live, saved):
        return
    try:
        if isinstance(live, dict):
            live.clear()
            live.update(saved)
        elif isinstance(live, list):
            live[:] = saved
        else:
            live.clear()
            live.update(saved) if isinstance(live, set) else live.extend(saved)
        if same(live, saved):
            return
    except Exception:  # noqa: BLE001 - its class refuses changes: the base class's methods below
        pass
    _raw_fill(live, saved)


def _name(key: Any) -> str:
    if isinstance(key, torch.Tensor):
        return f"<{type(key).__name__} of shape {tuple(key.shape)}>"
    return repr(key)[:60]


class Containers:
    """Containers (and the plain objects) found in values, at any depth, each once.

    ``add_tensor``: called with each tensor found (not walked into)."""

    def __init__(self, add_tensor: Callable[[torch.Tensor], None]) -> None:
        self.add_tensor = add_tensor
        self.records: list[tuple[Any, list[Any]]] = []
        self.arrays: list[tuple[Any, Any]] = []
        self.generators: list[tuple[Any, str, Any]] = []
        self.dicts: list[tuple[Any, dict[str, Any]]] = []  # (an object, its __dict__ as recorded)
        self.seen: set[int] = set()

    def add(self, value: Any, where: str) -> None:
        """Record ``value`` and what it holds (``where``: its name, for the error).

        Raises:
            InputError: something inside cannot be restored (named with its path)."""
        stack = [(value, where)]
        while stack:
            v, path = stack.pop()
            if isinstance(v, torch.Tensor):
                self.add_tensor(v)
                continue
            # callables (hooks, a scheduler's wrapped step) are kept as the objects they are, not walked into
            if isinstance(v, _ATOMS) or callable(v) or id(v) in self.seen:
                continue
            self.seen.add(id(v))
            if isinstance(v, torch.nn.Module):  # modules are recorded as modules (vramnb._restore)
                continue
            kind = generator_kind(v)
            if kind is not None:  # its state, put back with the generator's own setter
                self.generators.append((v, kind, get_state(v, kind)))
                continue
            if isinstance(v, _MUTABLE):
                entries = shallow_copy(v)
                self.records.append((v, entries))
                if isinstance(v, dict):
                    stack += [(x, f"{path}[{_name(k)}]") for k, x in entries]
                else:
                    stack += [(x, f"{path}[{i}]") for i, x in enumerate(entries)]
            elif isinstance(v, (tuple, frozenset)):
                stack += [(x, f"{path}[{i}]") for i, x in enumerate(v)]
            elif type(v).__module__ == "numpy" and hasattr(v, "copy") and hasattr(v, "shape"):
                if hasattr(v, "flags") and v.flags.writeable:
                    self.arrays.append((v, v.copy()))
            elif isinstance(getattr(v, "__dict__", None), dict):
                d = v.__dict__
                entries = shallow_copy(d)
                self.records.append((d, entries))
                self.dicts.append((v, d))  # the dict itself may be replaced (pydantic's validated assignment)
                stack += [(x, f"{path}.{k}") for k, x in entries]
            else:
                from ._checks import InputError

                raise InputError(
                    f"{path} is a {type(v).__module__}.{type(v).__qualname__}, which vramnb cannot snapshot "
                    "(no __dict__, not a dict, list, set, tuple, tensor or NumPy array), so it could not be "
                    "restored after the step; hold that state in one of those types, or profile without it "
                    "(e.g. a fresh optimizer)")

    def restore(self) -> None:
        """Put every recorded container and object's attributes back (innermost first)."""
        for obj, d in self.dicts:
            if object.__getattribute__(obj, "__dict__") is not d:
                object.__setattr__(obj, "__dict__", d)
        for live, saved in reversed(self.records):
            put_back(live, saved)
        for gen, kind, state in self.generators:
            set_state(gen, kind, state)
        if not self.arrays:  # numpy only where arrays were recorded (it is no dependency of vramnb)
            return
        import numpy as np

        for arr, copy in self.arrays:
            if arr.shape == copy.shape and arr.dtype == copy.dtype:
                np.copyto(arr, copy)
