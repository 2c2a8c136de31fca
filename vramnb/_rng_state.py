"""Random number generators a profiled step can advance, saved and put back.

Restored: PyTorch's default CPU generator and every initialised CUDA device's,
Python's global ``random`` and NumPy's global (legacy) state; and generator
*objects* the step can reach by name: ``torch.Generator``,
``numpy.random.Generator`` / ``RandomState`` and ``random.Random`` instances
that are attributes of the model's modules (or inside their lists, tuples and
dicts), or that the loss function or a module class's ``forward`` (and the
plain functions they call by a global name, two levels deep) reads from its
closure or its module's globals. Generators the user's code reaches
by name deeper than that (a helper object's, a config's) are recorded by :mod:`vramnb._code_state`;
one reached only some other way (a data loader's worker) is not restored.
"""

from __future__ import annotations

import functools
import random
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ._code_state import _code_names
from ._generator_state import generator_kind, get_state, set_state, state_bytes, state_tensor

__all__ = ["RngStates"]


_MAX_ITEMS = 256  # a generator is not looked for inside long lists (a dataset held in a list)


def _values(obj: Any, depth: int = 2) -> Iterable[Any]:
    yield obj
    if depth and isinstance(obj, (list, tuple, set, dict)) and len(obj) <= _MAX_ITEMS:
        for v in list(obj.values() if isinstance(obj, dict) else obj):
            yield from _values(v, depth - 1)


def _attributes(obj: Any, out: list[Any]) -> None:
    d = getattr(obj, "__dict__", None)
    if isinstance(d, dict) and not isinstance(obj, torch.nn.Module):
        for v in list(d.values()):
            out.extend(_values(v))


def _from_function(fn: Any, depth: int, out: list[Any], seen: set[int]) -> None:
    if id(fn) in seen or depth < 0:
        return
    seen.add(id(fn))
    if isinstance(fn, functools.partial):
        for v in (*fn.args, *fn.keywords.values()):
            out.extend(_values(v))
        _from_function(fn.func, depth, out, seen)
        return
    if isinstance(fn, types.MethodType):
        _attributes(fn.__self__, out)
        _from_function(fn.__func__, depth, out, seen)
        return
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        call = getattr(type(fn), "__call__", None)
        if call is not None and not isinstance(fn, type) and isinstance(getattr(call, "__code__", None), types.CodeType):
            _attributes(fn, out)  # a callable object (a loss class instance): its attributes and __call__
            _from_function(call, depth, out, seen)
        return
    for cell in fn.__closure__ or ():
        try:
            v = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        out.extend(_values(v))
        if isinstance(v, types.FunctionType):
            _from_function(v, depth - 1, out, seen)
    glb = getattr(fn, "__globals__", {})
    for name in _code_names(code):
        if name in glb:
            v = glb[name]
            out.extend(_values(v))
            if isinstance(v, types.FunctionType):
                _from_function(v, depth - 1, out, seen)


def _reachable(model: torch.nn.Module, functions: Iterable[Callable[..., Any]]) -> list[Any]:
    found: list[Any] = []
    seen: set[int] = set()
    classes = []
    for m in model.modules():
        for k, v in m.__dict__.items():
            if k not in ("_parameters", "_buffers", "_modules"):
                found.extend(_values(v))
        if type(m) not in classes:
            classes.append(type(m))
    for fn in list(functions) + [getattr(c, "forward", None) for c in classes]:
        if fn is not None:
            _from_function(fn, 2, found, seen)
    return found


class RngStates:
    """The states of the process-wide generators and of the generator objects
    reachable from ``model`` and ``functions`` (see the module docstring)."""

    def __init__(self, model: torch.nn.Module | None = None, functions: Iterable[Callable[..., Any]] = ()) -> None:
        self.cpu = state_bytes(torch.random.get_rng_state())
        self.python = random.getstate()
        np = sys.modules.get("numpy")
        self.numpy = np.random.get_state() if np is not None else None
        self.cuda = ([state_bytes(t) for t in torch.cuda.get_rng_state_all()]
                     if torch.cuda.is_available() and torch.cuda.is_initialized() else None)
        self.objects: list[tuple[Any, str, Any]] = []
        if model is not None:
            ids: set[int] = set()
            for obj in _reachable(model, functions):
                kind = generator_kind(obj)
                if kind is not None and id(obj) not in ids:
                    ids.add(id(obj))
                    self.objects.append((obj, kind, get_state(obj, kind)))

    def restore(self) -> None:
        torch.random.set_rng_state(state_tensor(self.cpu))
        random.setstate(self.python)
        if self.numpy is not None:
            sys.modules["numpy"].random.set_state(self.numpy)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all([state_tensor(b) for b in self.cuda])
        for obj, kind, state in self.objects:
            set_state(obj, kind, state)
