"""The fake copy of a model: its module structure copied, its tensors fake, no data.

:func:`fake_model` walks the model the way ``copy.deepcopy`` would, with three
differences:

* every tensor it reaches (parameters, gradients, buffers, tensors in plain
  attributes, lists, dicts and plain objects at any depth) becomes a fake
  tensor of the same shape, dtype and strides: no data is copied;
* modules, containers (dicts, lists, tuples, sets) and plain Python objects
  are copied, so the fake step appending to a list or updating a dict of the
  copy leaves the user's alone;
* what cannot or should not be copied is *shared* with the user's model and
  named in the estimate's notes: objects that cannot be copied (a lock, an
  open file, a logger, a process), and array data outside PyTorch (a NumPy
  array, ``bytearray``, anything with the buffer protocol), not copied here: a
  step that writes into one writes into the user's, and :func:`vramnb.estimate`
  records the bytes of the arrays the model's attributes hold and puts them back
  after the step (:mod:`vramnb._code_state`). Objects with
  a copy protocol of their own (``__deepcopy__``, ``__reduce__``, or none that
  this walk reads: a ``deque``, a slots class) are deep-copied through it, with
  the same memo, and shared where that fails; the tensors and arrays they reach
  are faked and shared first (``_Copier._ahead``), so that no data is copied.

Hooks on the copy: see :mod:`vramnb.predict._user_hooks`.

A module of the copy converts its own tensors (``self.router = self.router.to(self.dtype)``
in a forward, as Switch Transformers' router does) as a real module does by default:
PyTorch's ``Module._apply`` swaps a fake parameter for its converted one
(``torch.utils.swap_tensors``), which the fake mode's weak references to every fake
refuse (``_apply(): Couldn't swap Linear.weight``; pytorch/pytorch#170781, open), so the
copy's modules convert a parameter in place instead (:func:`_apply_to_fakes`).
"""

from __future__ import annotations

import contextlib
import copy
import enum
import functools
import io
import logging
import threading
import types
import warnings
import weakref
from typing import Any, NamedTuple

import torch
from torch._subclasses.fake_tensor import FakeTensor

from .._units import format_bytes

__all__ = ["FakeModel", "fake_model"]

_ATOMIC = (type(None), bool, int, float, complex, str, bytes, type, range, slice, types.FunctionType,
           types.BuiltinFunctionType, types.ModuleType, weakref.ref, enum.Enum, torch.dtype, torch.device,
           torch.layout, torch.memory_format, torch.Size, property, type(Ellipsis), type(NotImplemented))
_NOT_COPIED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType,
               types.FrameType, type(None), bool, int, float, complex, str, bytes)  # copy.deepcopy keeps these
_AHEAD = 100_000  # objects walked ahead of a deep copy (see _Copier._ahead)
_SERVICES = (io.IOBase, logging.Logger, threading.Thread, type(threading.Lock()), type(threading.RLock()),
             threading.Condition, threading.Event, threading.Semaphore, types.GeneratorType, types.CoroutineType)


class FakeModel(NamedTuple):
    """What :func:`fake_model` returns.

    Attributes:
        module: the fake copy.
        fakes: ``id(original tensor) -> fake tensor`` for every tensor reached.
        shared: what was shared with the user's model rather than copied, one line each
            (``"extra: threading.lock"``, ``"table: numpy.ndarray, 400.0 MiB"``).
    """

    module: torch.nn.Module
    fakes: dict[int, torch.Tensor]
    shared: list[str]


def fake_model(model: torch.nn.Module, mode: Any) -> FakeModel:
    """The fake copy of ``model`` (see the module docstring).

    Raises:
        ValueError: the model has parameters not made yet (a lazy module).
    """
    from torch.nn.parameter import is_lazy

    lazy = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if is_lazy(t)]
    if lazy:
        raise ValueError(f"{type(model).__name__} has parameters not made yet ({', '.join(lazy[:4])}: a lazy module, "
                         "which sizes them at its first forward); run one forward on a real batch first "
                         "(model(batch)), or pass a function that builds the model with its sizes given")
    c = _Copier(mode)
    out = c.copy(model, "")
    return FakeModel(out, c.fakes, c.shared)


def _plain(v: Any) -> bool:
    """An object without a copy protocol of its own: copied attribute by attribute."""
    t = type(v)
    return (hasattr(v, "__dict__") and not hasattr(v, "__deepcopy__") and t.__reduce_ex__ is object.__reduce_ex__
            and t.__reduce__ is object.__reduce__ and getattr(t, "__getstate__", None) is getattr(object, "__getstate__", None)
            and not hasattr(t, "__slots__"))


class _Cycle(Exception):
    """An attribute reached back to the object whose attributes are being copied first."""


class _Copier:
    def __init__(self, mode: Any) -> None:
        self.mode = mode
        self.memo: dict[int, Any] = {}
        self.fakes: dict[int, torch.Tensor] = {}
        self.shared: list[str] = []
        self.busy: set[int] = set()  # objects whose attributes are being copied before the object itself

    def _share(self, v: Any, path: str, why: str = "") -> Any:
        self.memo[id(v)] = v
        self.shared.append(f"{path or 'the model'}: {type(v).__module__}.{type(v).__qualname__}{why}")
        return v

    def copy(self, v: Any, path: str) -> Any:  # noqa: C901 (one case per kind of object)
        if id(v) in self.memo:
            return self.memo[id(v)]
        if isinstance(v, _ATOMIC):
            return v
        if isinstance(v, torch.Tensor):
            return self._tensor(v)
        if isinstance(v, torch.UntypedStorage):  # a bare storage: a fake one of its size, no data
            return self._storage(v)
        if isinstance(v, _SERVICES):
            return self._share(v, path)
        try:
            view = memoryview(v)  # array data outside PyTorch (numpy, bytearray, array.array): shared (put back by _code_state)
        except TypeError:
            pass
        else:
            return self._share(v, path, f", {format_bytes(view.nbytes)}")
        if isinstance(v, types.MethodType):
            if id(v.__self__) in self.busy:  # its object's own attributes, being read before the object is copied
                raise _Cycle
            out: Any = types.MethodType(v.__func__, self.copy(v.__self__, path))
            self.memo[id(v)] = out
            return out
        if isinstance(v, functools.partial):
            out = functools.partial(self.copy(v.func, path), *self.copy(v.args, path), **self.copy(v.keywords, path))
            self.memo[id(v)] = out
            return out
        if (isinstance(v, torch.nn.Module) and not _reduces(v)) or (
                isinstance(v, (dict, list, set)) and _plain_container(v)) or _plain(v):
            return self._structure(v, path)
        if type(v) is tuple or (isinstance(v, tuple) and hasattr(v, "_fields")):
            items = [self.copy(x, f"{path}[{i}]") for i, x in enumerate(v)]
            out = type(v)(items) if type(v) is tuple else type(v)(*items)
            self.memo[id(v)] = out
            return out
        if type(v) is frozenset:
            return frozenset(self.copy(x, path) for x in v)
        if hasattr(v, "__dict__"):  # what it holds first, so that its protocol finds the fakes and copies in the memo
            self.busy.add(id(v))
            try:  # a module's _parameters, _buffers and _modules come first (Module.__init__ sets them), so their
                # fakes are in the memo before an attribute that reaches back to the module is met
                for k, x in list(vars(v).items()):
                    before = set(self.memo)
                    try:
                        self.copy(x, f"{path}.{k}" if path else k)
                    except _Cycle:  # a method bound to v (a hook of v's own): left to v's protocol, which
                        # copies v first; nothing half-made stays in the memo (tensors' fakes are whole)
                        for key in set(self.memo) - before:
                            if key not in self.fakes:
                                del self.memo[key]
            finally:
                self.busy.discard(id(v))
        self._ahead(v, path)
        try:  # a copy protocol of its own (torch.compile's module): through it, with this memo
            with warnings.catch_warnings():  # torch's deprecation of its pytree LeafSpec, met copying an
                # exported module's input spec: about torch's code, not the user's
                warnings.filterwarnings("ignore", message=r".*LeafSpec.*is deprecated", category=FutureWarning)
                return copy.deepcopy(v, self.memo)
        except Exception as e:  # cannot be copied: shared, and said
            return self._share(v, path, f" (cannot be copied: {str(e).splitlines()[0][:80]})")

    def _ahead(self, v: Any, path: str) -> None:
        """Before ``copy.deepcopy`` copies ``v`` through its own protocol: a fake in the memo for every
        tensor it reaches, and every array outside PyTorch shared, so that the deep copy copies no data
        (a ``deque``, a ``@dataclass(slots=True)`` or a dict subclass with ``__deepcopy__`` holding a
        200 MB table copied it whole). The walk follows the interpreter's own references
        (``gc.get_referents``: no code of the object runs), through what a deep copy copies (not into
        classes, functions, modules or code), up to ``_AHEAD`` objects."""
        import gc

        todo, seen = [v], {id(v)}
        while todo and len(seen) < _AHEAD:
            for x in gc.get_referents(todo.pop()):
                if id(x) in seen or id(x) in self.memo or isinstance(x, _NOT_COPIED):
                    continue
                seen.add(id(x))
                if isinstance(x, torch.Tensor):
                    self._tensor(x)
                    continue
                if isinstance(x, torch.UntypedStorage):
                    self._storage(x)
                    continue
                try:
                    view = memoryview(x)
                except TypeError:
                    todo.append(x)
                else:
                    self._share(x, path, f", {format_bytes(view.nbytes)}")

    def _storage(self, st: torch.UntypedStorage) -> torch.UntypedStorage:
        from ._fake import fake_like

        out = fake_like(torch.empty(0, dtype=torch.uint8), self.mode, (st.nbytes(),)).untyped_storage()
        self.memo[id(st)] = out
        return out

    def _tensor(self, t: torch.Tensor) -> torch.Tensor:
        from ._fake import fake_like

        if isinstance(t, torch.nn.Parameter):
            out: torch.Tensor = torch.nn.Parameter(fake_like(t, self.mode), requires_grad=t.requires_grad)
            if t.grad is not None:
                out.grad = fake_like(t.grad, self.mode)
        else:
            out = fake_like(t, self.mode)
        self.memo[id(t)] = self.fakes[id(t)] = out
        return out

    def _structure(self, v: Any, path: str) -> Any:
        """A module, a container or a plain object: a new one of its type, its contents copied."""
        if isinstance(v, torch.nn.Module) or not isinstance(v, (dict, list, set)):
            cls: Any = type(v)  # any class: mypy reads type[...].__new__ as the metaclass's
            out = cls.__new__(cls)
            self.memo[id(v)] = out
            for k, x in vars(v).items():
                if k == "_compiled_call_impl" and isinstance(v, torch.nn.Module):
                    # ``m.compile()``: torch.compile of the *user's* bound ``_call_impl``, which would run the
                    # user's module; left out as ``Module.__getstate__`` leaves it out of every copy
                    continue
                sub = k if not path else f"{path}.{k}"
                if k in ("_parameters", "_buffers", "_modules") and isinstance(x, dict):
                    sub = path  # state-dict names: "0.weight", not "_modules.0._parameters.weight"
                out.__dict__[k] = self.copy(x, sub)
            if isinstance(out, torch.nn.Module) and type(out)._apply is torch.nn.Module._apply:
                out.__dict__["_apply"] = types.MethodType(_apply_to_fakes, out)  # see the module docstring
            return out
        # the same container type (OrderedDict, defaultdict, a subclass), then its items; Any: the branches
        # below narrow v, which mypy does not carry over to its copy
        new: Any = copy.copy(v)
        self.memo[id(v)] = new
        if isinstance(v, dict):
            for k, x in v.items():
                dict.__setitem__(new, k, self.copy(x, f"{path}.{k}" if path else str(k)))
        elif isinstance(v, list):
            new[:] = [self.copy(x, f"{path}[{i}]") for i, x in enumerate(v)]
        else:
            new.clear()
            new.update(self.copy(x, path) for x in v)
        if hasattr(new, "__dict__"):
            for k, x in vars(v).items():
                new.__dict__[k] = self.copy(x, f"{path}.{k}")
        return new


def _apply_to_fakes(self: torch.nn.Module, fn: Any, recurse: bool = True) -> torch.nn.Module:
    """``Module._apply`` for a module of the fake copy, as PyTorch converts a real module by
    default (``torch.__future__.get_overwrite_module_params_on_conversion()`` off): a parameter
    or gradient the conversion returns unchanged (``.to`` its own dtype) is kept; another keeps
    its identity and takes the result as its ``.data``; buffers are replaced by the result."""
    if recurse:
        for child in self.children():
            child._apply(fn)
    for param in self._parameters.values():
        if param is None:
            continue
        with torch.no_grad():
            applied = fn(param)
        if applied is not param:
            param.data = applied
        grad = param.grad
        if grad is not None:
            with torch.no_grad():
                grad_applied = fn(grad)
            if grad_applied is not grad:
                grad.data = grad_applied
    for key, buf in self._buffers.items():
        if buf is not None:
            self._buffers[key] = fn(buf)
    return self


_FAKE_APPLY = threading.local()


@contextlib.contextmanager
def fakes_convert_in_place() -> Any:
    """While the fake step runs, a module made during it (a LoRA adapter that peft builds and moves
    ``.to`` its base layer's device) converts its fake parameters as the copy's modules do
    (:func:`_apply_to_fakes`): ``Module._apply`` would swap them, which the fake mode refuses.
    Only a module holding a fake parameter or gradient of this thread changes path; PyTorch's own
    ``_apply`` is back in place after."""
    original = torch.nn.Module._apply
    if getattr(_FAKE_APPLY, "on", False) or getattr(original, "_vramnb_fakes", False):
        yield
        return

    def _apply(self: torch.nn.Module, fn: Any, recurse: bool = True) -> torch.nn.Module:
        if getattr(_FAKE_APPLY, "on", False) and any(
                isinstance(p, FakeTensor) or isinstance(getattr(p, "grad", None), FakeTensor)
                for p in self._parameters.values() if p is not None):
            return _apply_to_fakes(self, fn, recurse)
        return original(self, fn, recurse)

    _apply._vramnb_fakes = True  # type: ignore[attr-defined]
    torch.nn.Module._apply = _apply  # type: ignore[method-assign]
    _FAKE_APPLY.on = True
    try:
        yield
    finally:
        _FAKE_APPLY.on = False
        torch.nn.Module._apply = original  # type: ignore[method-assign]


def _reduces(m: torch.nn.Module) -> bool:
    """A module class with a copy protocol of its own (``torch.compile``'s ``OptimizedModule``
    rebuilds itself around its copied ``_orig_mod``)."""
    t = type(m)
    return t.__reduce__ is not object.__reduce__ or t.__reduce_ex__ is not object.__reduce_ex__


def _plain_container(v: Any) -> bool:
    t = type(v)
    return t in (dict, list, set) or (not hasattr(v, "__deepcopy__")
                                      and t.__reduce_ex__ in (dict.__reduce_ex__, object.__reduce_ex__))
