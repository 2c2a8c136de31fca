"""What the user's code that vramnb runs can change by name, recorded and put back.

Every entry point that runs a training step runs the user's code in it: each
module's ``forward`` (and the other methods of the model's classes), module and
tensor hooks, PyTorch's global module hooks, the loss function and an optimizer
class of the user's. That code can write outside the model: a forward storing
``ACTS[name] = y`` in a notebook dict, a hook appending to a log list, a
``global CALLS; CALLS += 1``, a counter on a class, a NumPy array updated in
place. The real steps (:func:`vramnb.profile_step`, ``compare``, the panel) would
leave the profiled step's tensors and graphs there, the fake steps
(``estimate``, ``max_batch_size``, ``fit``, the post-mortem's re-runs) fake
tensors that raise when used.

:meth:`CodeState.take` records, before any of it runs, what that code reaches
by name, then :meth:`CodeState.restore` puts it back (whatever the step raised):

* the functions: each function vramnb will run, and the functions of the
  user's own code those name (globals, closure cells, defaults, a user module's
  attributes), :data:`DEPTH` levels deep; a ``functools.partial``'s function and
  arguments, a bound method's object, a callable object's ``__call__``; code of
  the Python standard library, of installed packages and of vramnb is not the
  user's and is not walked; a module the function imports as it runs (``import m``,
  ``from m import x`` inside it) is reached as a global module name is;
* for each global name and closure cell they name: the binding itself (a value
  rebound, a name added or deleted is put back);
* the values so reached, at any depth (up to :data:`BUDGET` objects): the entries of dicts,
  lists, sets and deques (``OrderedDict``, ``defaultdict`` and other subclasses
  too: :mod:`vramnb._deep_state`), the attributes of objects of the user's
  classes (``__dict__`` and ``__slots__``) and of the classes themselves (a
  class-level counter), what a weak reference (``weakref.ref``, ``WeakValueDictionary``,
  ``WeakKeyDictionary``, ``WeakSet``) refers to, the object of a built-in bound method
  (``record = losses.append``), the bytes of NumPy arrays,
  a module named by the code other than through the model (a metric, a tracker whose method
  updates it: its attributes, and for the real step its parameters' and buffers' bytes),
  ``bytearray`` s and ``array.array`` s, and tensors named or one container
  or attribute down (handed to the caller: the real step's snapshot records
  their bytes, ``.grad`` and hooks; a fake step cannot write into a real
  tensor, :mod:`vramnb.predict._fake_guard`);
* a ``functools.lru_cache`` / ``cache`` of the user's that the step adds an entry to is emptied
  after it (its entries cannot be taken out one by one; a fake step's would hold fake tensors);
* the values among the model's module attributes (NumPy arrays, plain objects,
  containers), which the fake copy shares or copies and the real step changes.

Objects of library classes (the standard library's, an installed package's) are the
library's: one whose attributes are all plain data (a model's config, which a library may
change as it builds a model from it) is recorded and put back like the user's objects; one
that keeps its state through ``state_dict()`` / ``load_state_dict()`` with plain data (PyTorch's
LR schedulers, ``GradScaler``) is put back through them, its attributes' bindings too, and a
scheduler's optimizer's settings; an optimizer the code names has its param groups' settings
(``lr`` and the rest) put back, its state being the step's; any
other is not recorded (partly putting back an object that has already acted outside the
process, a ``GradScaler``, a ``wandb`` run, would leave it inconsistent) and is named in
:attr:`CodeState.unchecked` where the user's code names it; they are left out where
they are the model's attributes (the fake copy copies them, the snapshot keeps their
bindings), and loggers and handlers are left alone (what they do is output).
Not recorded either, and named in :attr:`CodeState.unchecked`: objects without
``__dict__`` that are none of the above and can change (C extension objects
such as ``itertools.count``; objects hashable by value and locks are taken as
unchanging) and NumPy arrays larger than :data:`MAX_ARRAY_BYTES`. Deeper
tensors are kept by their bindings only. A stream the code reaches (an open file, a ``BytesIO``,
an ``mmap``: a file-backed dataset's) has its position put back where it can seek (a read moved it); one
that cannot seek (a pipe) is named in :attr:`CodeState.unchecked`. Not put back, because it is not state:
what the code printed or logged, files it wrote (a writable stream is named). Modules and optimizers reached
by name are left to the step's own mechanisms (:mod:`vramnb._reach` records the
modules that run and the optimizers that step; the fake step refuses to reach
real ones). Random generators (``torch.Generator``, NumPy's ``Generator`` and ``RandomState``,
``random.Random``) the code reaches at any depth (a helper object's, a config's, a hook's closure
object's) have their states recorded and put back (:mod:`vramnb._generator_state`; the process-wide
ones and the model's: :mod:`vramnb._rng_state`).
"""

from __future__ import annotations

import argparse
import array
import builtins
import copy
import enum
import logging
import functools
import io
import mmap
import os
import sys
import sysconfig
import types
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ._deep_state import put_back, same, shallow_copy
from ._generator_state import generator_kind, get_state, same_state, set_state

__all__ = ["CodeState", "DEPTH", "MAX_ARRAY_BYTES", "MAX_DEEP_TENSOR_BYTES", "user_functions", "users_class"]

DEPTH = 8
"""How many levels of functions named by functions are walked; a function of the user's deeper than that is
named in :attr:`CodeState.unchecked`."""

BUDGET = 50_000
"""At most this many objects are walked into per call (values at any depth below a name); past it, what is
left is named in :attr:`CodeState.unchecked` (a dataset of objects a loss function names)."""

MAX_ARRAY_BYTES = 256 * 2**20
"""NumPy arrays reached up to this size have their bytes copied (and put back); larger ones are named as
not checked."""

MAX_DEEP_TENSOR_BYTES = 256 * 2**20
"""Tensors the code reaches more than one container or attribute below a name (an EMA's dict of shadow
tensors behind a hook) have their bytes recorded up to this many bytes in all; past it they are named as
not checked."""


def _nbytes(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError, TypeError):  # no storage of its own (a wrapper subclass)
        return int(t.numel() * t.element_size())


_ATOMS = (type(None), bool, int, float, complex, str, bytes, range, slice, type(Ellipsis), type(NotImplemented),
          torch.dtype, torch.device, torch.layout, torch.memory_format, torch.Size, types.CodeType,
          types.BuiltinFunctionType, types.MethodWrapperType, types.WrapperDescriptorType, property, staticmethod,
          classmethod, enum.Enum)
_DATA_CLASSES = (types.SimpleNamespace, argparse.Namespace)  # library classes that only hold the user's data
_OUTPUT_CLASSES = (logging.Logger, logging.LoggerAdapter, logging.Handler, logging.Manager)  # what they do is output
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
               # run when the step's code calls state_dict() / load_state_dict() (a checkpoint saved in the loss)
               "_state_dict_pre_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks",
               "_load_state_dict_post_hooks")
_OWN = ("_parameters", "_buffers", "_modules")


@functools.lru_cache(maxsize=1)
def _not_users() -> tuple[str, ...]:
    """Folders whose code is not the user's: the standard library, installed packages, vramnb."""
    paths = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths |= {p for p in sys.path if p.endswith(("site-packages", "dist-packages"))}
    paths.add(os.path.dirname(os.path.abspath(__file__)))
    return tuple(os.path.abspath(p) + os.sep for p in paths if p)


def _users_code(code: types.CodeType) -> bool:
    """Whether ``code`` is the user's (a notebook cell, a script, the user's own modules)."""
    f = code.co_filename
    if f.startswith("<"):  # a notebook cell (<ipython-input-…>), exec'd code
        return True
    return not os.path.abspath(f).startswith(_not_users())


def users_class(cls: type) -> bool:
    """Whether ``cls`` is the user's (defined in a notebook, a script or the user's own modules)."""
    return _users_class(cls)


def _users_class(cls: type) -> bool:
    mod = sys.modules.get(getattr(cls, "__module__", "") or "")
    f = getattr(mod, "__file__", None)
    if mod is None or f is None:
        return getattr(cls, "__module__", "") in ("__main__", "__mp_main__")
    return not os.path.abspath(f).startswith(_not_users())


def _users_module(mod: types.ModuleType) -> bool:
    f = getattr(mod, "__file__", None)
    return f is not None and mod.__name__ not in sys.builtin_module_names and not os.path.abspath(f).startswith(
        _not_users())


@functools.lru_cache(maxsize=1)
def _module_internals() -> frozenset[str]:
    """The attributes every ``nn.Module`` has (parameters, hooks dicts, flags): the snapshot's and the fake
    copy's, not values of the user's."""
    return frozenset(torch.nn.Module().__dict__)


def _code_names(code: types.CodeType) -> set[str]:
    """Every name ``code`` and the code nested in it (lambdas, comprehensions, inner functions) use."""
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _code_names(c)
    return names


def _stored_globals(code: types.CodeType) -> set[str]:
    """Global names ``code`` (and the code nested in it) assigns or deletes (``global N; N = 1``)."""
    import dis

    out = {i.argval for i in dis.get_instructions(code) if i.opname in ("STORE_GLOBAL", "DELETE_GLOBAL")}
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _stored_globals(c)
    return out


def _imported(code: types.CodeType, package: str | None) -> set[str]:
    """The modules ``code`` (and the code nested in it) imports as it runs (``import m``, ``from m import x``
    inside a function), by full name: each dotted prefix (``import a.b`` binds ``a``), relative imports resolved
    against ``package``."""
    import dis
    import importlib.util

    out: set[str] = set()
    consts: list[Any] = []
    for i in dis.get_instructions(code):
        if i.opname == "IMPORT_NAME":
            level = consts[-2] if len(consts) >= 2 and isinstance(consts[-2], int) else 0
            name = str(i.argval)
            if level:
                try:
                    name = importlib.util.resolve_name("." * level + name, package).rstrip(".")
                except (ImportError, ValueError):
                    continue
            parts = name.split(".")
            out |= {".".join(parts[:n]) for n in range(1, len(parts) + 1) if parts[0]}
        consts = [*consts[-1:], i.argval] if i.opname == "LOAD_CONST" else []
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _imported(c, package)
    return out


def _instance_functions(obj: Any) -> list[Any]:
    """The functions an object holds as its own attributes (``opt.zero_grad = my_zero_grad``, ``m.forward = f``,
    ``self.act = my_fn``): Python functions, ``functools.partial`` s and bound methods (of the object itself:
    their function)."""
    d = getattr(obj, "__dict__", None)
    if not isinstance(d, dict):
        return []
    out = []
    for f in list(d.values()):
        if isinstance(f, types.MethodType) and f.__self__ is obj:  # types.MethodType(fn, obj): its function
            out.append(f.__func__)
        elif isinstance(f, (types.FunctionType, functools.partial, types.MethodType)):
            out.append(f)
    return out


def user_functions(model: torch.nn.Module | None, functions: Iterable[Any] = (), optimizer: Any = None) -> list[Any]:
    """The functions of the user's that a step runs: ``functions`` (the loss function, factories), the methods
    of the model's module classes, of its parameters' and buffers' tensor subclasses and the optimizer's class
    (the user's classes only), functions set on a module or the optimizer instance (a ``forward``, a wrapped
    ``zero_grad``), every module hook and parameter/buffer hook of the model, and PyTorch's global module hooks."""
    import torch.nn.modules.module as mm

    out = [f for f in functions if f is not None]
    classes: list[type] = []
    modules = list(model.modules()) if model is not None else []
    for m in modules:
        for c in type(m).__mro__:
            if c not in classes and _users_class(c):
                classes.append(c)
        out += _instance_functions(m)  # a forward set on an instance, a helper function held as an attribute
        for name in _HOOK_DICTS:
            d = m.__dict__.get(name)
            if isinstance(d, dict):
                out += list(d.values())
        for t in [*m._parameters.values(), *m._buffers.values()]:
            d = getattr(t, "_backward_hooks", None) if t is not None else None
            if isinstance(d, dict):
                out += list(d.values())
            for c in type(t).__mro__ if t is not None else ():  # a tensor subclass of the user's: its
                if c not in classes and _users_class(c):  # __torch_function__ runs in the step (a call counter)
                    classes.append(c)
    if optimizer is not None and isinstance(optimizer, torch.optim.Optimizer):
        classes += [c for c in type(optimizer).__mro__ if c not in classes and _users_class(c)]
        out += _instance_functions(optimizer)  # a zero_grad or step wrapped on the instance (a call log)
        for name, d in list(vars(optimizer).items()):  # its step and state-dict hooks (a loss saving a checkpoint)
            if name.startswith("_optimizer_") and name.endswith("_hooks") and isinstance(d, dict):
                out += list(d.values())
    for c in classes:
        out.append(c)
    for name in dir(mm):
        d = getattr(mm, name)
        if name.startswith("_global_") and name.endswith("hooks") and isinstance(d, dict):
            out += [h for h in d.values() if getattr(h, "__self__", h) not in _OURS]
    return out


_OURS: weakref.WeakSet[Any] = weakref.WeakSet()


def ours(obj: Any) -> None:
    """Mark ``obj`` (an object of a library that vramnb itself put into a process-wide registry for a step,
    such as its ``ModTracker``) as vramnb's: the walk of the step's code does not record it, nor name it as a
    library's object the user's code reaches."""
    _OURS.add(obj)


class CodeState:
    """What the user's code reaches by name, recorded to be put back (see the module docstring).

    Args:
        add_tensor: called with each tensor reached (the real step's snapshot records its bytes);
            ``None``: tensors are only kept by their binding."""

    def __init__(self, add_tensor: Callable[[torch.Tensor], None] | None = None) -> None:
        self.add_tensor = add_tensor
        self.bindings: list[tuple[dict[str, Any], str, bool, Any, str]] = []  # globals / module attributes
        self.cells: list[tuple[Any, bool, Any, str]] = []
        self.classes: list[tuple[type, dict[str, Any], str]] = []
        self.containers: list[tuple[Any, list[Any], Any]] = []  # (live, entries, path: see _path)
        self.arrays: list[tuple[Any, Any, Any]] = []
        self.slotted: list[tuple[Any, dict[str, Any], Any]] = []
        self.stateful: list[tuple[Any, Any, Any, Any]] = []  # (object, state_dict copy, its plain form, path)
        self.groups: list[tuple[dict[str, Any], dict[str, Any], Any]] = []  # an optimizer's param_groups
        self.caches: list[tuple[Any, Any, str]] = []  # (a functools cache wrapper, its cache_info(), name)
        self.generators: list[tuple[Any, str, Any, Any]] = []  # (a random generator, its kind, its state, path)
        self.dicts: list[tuple[Any, dict[str, Any], Any]] = []  # (an object, its __dict__ as recorded, path)
        self.streams: list[tuple[Any, Any, Any]] = []  # (a seekable file, BytesIO or mmap, its position, path)
        self.unchecked: list[str] = []
        self._seen_fn: set[int] = set()
        self._seen_val: set[int] = set()
        self._bound: set[tuple[int, str]] = set()
        self._keep: list[Any] = []  # what the ids above stand for stays alive
        self._walked = 0
        self._deep_bytes = 0  # bytes of tensors deeper than one level handed to add_tensor
        self._tensors: set[int] = set()  # the tensors handed to add_tensor

    @classmethod
    def take(cls, model: torch.nn.Module | None, functions: Iterable[Any] = (), optimizer: Any = None,
             add_tensor: Callable[[torch.Tensor], None] | None = None) -> CodeState:
        """Record what the step's code (:func:`user_functions`) and the model's attributes reach."""
        s = cls(add_tensor)
        s.add_model(model, functions, optimizer)
        return s

    def add_model(self, model: torch.nn.Module | None, functions: Iterable[Any] = (), optimizer: Any = None) -> None:
        """Record a model's code and attributes (also one that a step reaches as it runs)."""
        for fn in user_functions(model, functions, optimizer):
            self.add_function(fn, DEPTH)
        internals = _module_internals()
        for name, m in (model.named_modules() if model is not None else ()):
            for k, v in list(m.__dict__.items()):
                if k not in internals:
                    self._value(v, f"{name or type(model).__name__}.{k}", in_model=True)

    # --- functions -------------------------------------------------------------------------
    def add_function(self, fn: Any, depth: int) -> None:
        """Record what ``fn`` reaches by name (``depth``: levels of functions it names still walked)."""
        if id(fn) in self._seen_fn or isinstance(fn, _ATOMS):
            return
        if depth < 0:
            if isinstance(fn, types.FunctionType) and _users_code(fn.__code__):
                self.unchecked.append(f"{_qualname(fn)} (a function {DEPTH + 1} calls deep: not walked)")
            return
        self._seen_fn.add(id(fn))
        self._keep.append(fn)
        if isinstance(fn, functools.partial):
            for i, v in enumerate((*fn.args, *fn.keywords.values())):
                self._value(v, f"{_qualname(fn.func)} (partial's argument {i})")
            self.add_function(fn.func, depth)
        elif isinstance(fn, types.MethodType):
            f = fn.__func__
            if isinstance(f, types.FunctionType) and _users_code(f.__code__):
                self._value(fn.__self__, f"{_qualname(f)}'s object")
                self.add_function(f, depth)
            elif not isinstance(fn.__self__, type):  # a library's method (Counter.update): its object as a value
                self._value(fn.__self__, f"{_qualname(f)}'s object")
        elif isinstance(fn, type):
            if _users_class(fn):
                self._class(fn, depth)
        elif isinstance(fn, types.FunctionType):
            self._function(fn, depth)
        elif isinstance(fn, torch.nn.Module):  # a module used as a hook: its own code and attributes
            self.add_model(fn)
        elif hasattr(fn, "__wrapped__"):  # functools.wraps / lru_cache around a function
            if callable(getattr(fn, "cache_info", None)) and callable(getattr(fn, "cache_clear", None)):
                self.caches.append((fn, fn.cache_info(), _qualname(fn)))  # what the step adds to it: see restore
            self.add_function(fn.__wrapped__, depth)
        elif callable(fn) and _users_class(type(fn)):  # a callable object of the user's class
            self._value(fn, f"{type(fn).__qualname__} object")
            self._class(type(fn), depth)

    def _function(self, fn: types.FunctionType, depth: int) -> None:
        code = fn.__code__
        if not _users_code(code):
            wrapped = getattr(fn, "__wrapped__", None)
            if wrapped is not None:
                self.add_function(wrapped, depth)
            return
        where = _qualname(fn)
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                v = cell.cell_contents
                present = True
            except ValueError:  # an empty cell (a name assigned later in the enclosing function)
                v, present = None, False
            if id(cell) not in self._seen_val:
                self._seen_val.add(id(cell))
                self._keep.append(cell)
                self.cells.append((cell, present, v, f"{name} (in {where}'s closure)"))
            if present:
                self._reached(v, name, depth)
        glb = fn.__globals__
        names = _code_names(code)
        for name in sorted((names & glb.keys()) | _stored_globals(code)):
            self._binding(glb, name, name)  # also a global the code creates (absent now: deleted after)
            if name in glb:
                self._reached(glb[name], name, depth, attrs=names)
        for name in sorted(_imported(code, glb.get("__package__"))):  # `import m` inside the function
            mod = sys.modules.get(name)
            if isinstance(mod, types.ModuleType):
                self._reached(mod, name, depth, attrs=names)
        for i, v in enumerate(fn.__defaults__ or ()):
            self._value(v, f"{where}'s default {i}")
        for k, v in (fn.__kwdefaults__ or {}).items():
            self._value(v, f"{where}'s default {k}")

    def _binding(self, d: dict[str, Any], name: str, where: str) -> None:
        key = (id(d), name)
        if key in self._bound:
            return
        self._bound.add(key)
        self.bindings.append((d, name, name in d, d.get(name), where))

    def _reached(self, v: Any, name: str, depth: int, attrs: set[str] | None = None) -> None:
        """A value a function names: a function is walked, a module of the user's gives the attributes the
        code names, anything else is a value."""
        if isinstance(v, types.ModuleType):
            if _users_module(v):
                for a in sorted(attrs or ()):
                    if a in v.__dict__:
                        self._binding(v.__dict__, a, f"{v.__name__}.{a}")
                        self._reached(v.__dict__[a], f"{v.__name__}.{a}", depth - 1, attrs=attrs)  # a submodule
            return
        if isinstance(v, (types.FunctionType, types.MethodType, functools.partial)) or (
                callable(v) and hasattr(v, "__wrapped__") and not isinstance(v, type)):  # an lru_cache'd function
            self.add_function(v, depth - 1)
            return
        if isinstance(v, type):
            self.add_function(v, depth - 1)
            return
        self._value(v, name)
        if not isinstance(v, (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)) and _users_class(type(v)):
            self._class(type(v), depth - 1)  # an object of the user's class: the code of its methods

    def _class(self, cls: type, depth: int) -> None:
        if id(cls) in self._seen_val:
            return
        self._seen_val.add(id(cls))
        self._keep.append(cls)
        attrs = dict(vars(cls))
        self.classes.append((cls, attrs, cls.__qualname__))
        for k, v in attrs.items():
            if k.startswith("__") and k.endswith("__") and k != "__call__":
                continue
            f = v.__func__ if isinstance(v, (staticmethod, classmethod)) else v
            if isinstance(f, property):
                for acc in (f.fget, f.fset, f.fdel):
                    if acc is not None:
                        self.add_function(acc, depth)
            elif isinstance(f, (types.FunctionType, functools.partial)) or (callable(f) and hasattr(f, "__wrapped__")):
                self.add_function(f, depth)
            else:
                self._value(f, f"{cls.__qualname__}.{k}")

    # --- values ----------------------------------------------------------------------------
    def _value(self, value: Any, where: str, in_model: bool = False) -> None:
        """Record ``value`` and what it holds, at any depth (``d``: levels below the name), up to :data:`BUDGET`."""
        stack: list[tuple[Any, Any, int]] = [(value, where, 0)]
        while stack:
            v, path, d = stack.pop()
            t = type(v)  # classes, not isinstance: a lazy proxy's __class__ would run its factory
            if issubclass(t, (types.BuiltinMethodType, types.MethodWrapperType)):  # record = losses.append
                owner = getattr(v, "__self__", None)
                if owner is not None and not isinstance(owner, (types.ModuleType, type)):
                    stack.append((owner, path, d))
                continue
            if issubclass(t, torch.Tensor):
                # handed to the real step's snapshot, which records each tensor once (the model's parameters,
                # buffers and the tensors in its attributes' containers it has already): one a module keeps in a
                # plain object (``self.stats.total``), an EMA's shadow dict behind a hook. Deeper than one
                # container or attribute from the name, only up to MAX_DEEP_TENSOR_BYTES in all (a dataset
                # inside a loader named by the code is kept by its binding, and named as not checked)
                if self.add_tensor is not None and id(v) not in self._tensors:
                    size = _nbytes(v)
                    if d <= 1 or self._deep_bytes + size <= MAX_DEEP_TENSOR_BYTES:
                        self._tensors.add(id(v))
                        self._keep.append(v)
                        self._deep_bytes += size if d > 1 else 0
                        self.add_tensor(v)
                    else:
                        self.unchecked.append(f"{_path(path)} (a tensor of {size} bytes, past "
                                              f"{MAX_DEEP_TENSOR_BYTES} bytes of tensors this deep)")
                continue
            if issubclass(t, _ATOMS) or id(v) in self._seen_val or v is builtins.__dict__:
                continue
            if issubclass(t, weakref.ref):  # what it refers to is reached (REF().n += 1); the ref cannot change
                target = v()
                if target is not None:
                    stack.append((target, (path, "()", ""), d))
                continue
            if issubclass(t, (weakref.WeakValueDictionary, weakref.WeakKeyDictionary, weakref.WeakSet)):
                stack.append((v.data, path, d))  # its entries: weak references to what the code reaches
                continue
            if issubclass(t, (types.FunctionType, types.MethodType, functools.partial, types.ModuleType, type)):
                continue  # functions are walked as code (add_function), not as values
            if issubclass(t, torch.optim.Optimizer) and not in_model:
                stack += self._groups(v, path, d)  # its hyperparameters (a scheduler sets lr); its state: the step's own
                continue
            if issubclass(t, torch.nn.Module) and not in_model:
                self._module(v, path)  # a module the code names (a metric, a tracker): its methods may change it
                continue
            if issubclass(t, (torch.nn.Module, torch.optim.Optimizer)):
                continue  # the step's own mechanisms (module docstring)
            if type(v).__module__.startswith("vramnb."):
                continue  # vramnb's own objects (a snapshot, a watch) are its to keep
            kind = generator_kind(v)
            if kind is not None:  # a helper object's, a config's generator: its state (not its attributes)
                if id(v) not in self._seen_val:
                    self._seen_val.add(id(v))
                    self._keep.append(v)
                    self.generators.append((v, kind, get_state(v, kind), path))
                continue
            if issubclass(t, (io.IOBase, mmap.mmap)):  # a file, a BytesIO, an mmap the code reads from
                if id(v) not in self._seen_val:
                    self._seen_val.add(id(v))
                    self._keep.append(v)
                    self._stream(v, path)
                continue
            if self._walked >= BUDGET:
                if self._walked == BUDGET:  # said once
                    self.unchecked.append(f"{_path(path)} and what else is left (over {BUDGET} objects to record)")
                    self._walked += 1
                return
            self._walked += 1
            self._seen_val.add(id(v))
            self._keep.append(v)
            if issubclass(t, (dict, list, set, deque)):
                entries = shallow_copy(v)
                self.containers.append((v, entries, path))
                if issubclass(t, dict):  # (paths are formatted only when said: a vocabulary has 10⁵ keys)
                    stack += [(x, (path, "[]", k), d + 1) for k, x in entries if not issubclass(type(x), _ATOMS)]
                else:
                    stack += [(x, (path, "[]", i), d + 1) for i, x in enumerate(entries)
                              if not issubclass(type(x), _ATOMS)]
            elif issubclass(t, (tuple, frozenset)):
                stack += [(x, (path, "[]", i), d + 1) for i, x in enumerate(list(v)) if not issubclass(type(x), _ATOMS)]
            elif type(v).__module__ == "numpy" and hasattr(v, "flags") and hasattr(v, "shape"):
                if not v.flags.writeable:
                    continue
                if v.nbytes > MAX_ARRAY_BYTES:
                    self.unchecked.append(f"{_path(path)} (a NumPy array of {v.nbytes} bytes, over {MAX_ARRAY_BYTES})")
                else:
                    self.arrays.append((v, v.copy(), path))
            elif issubclass(t, (bytearray, array.array)):
                self.arrays.append((v, v[:], path))
            elif type(v).__module__ == "numpy":  # a NumPy scalar, dtype: cannot change
                continue
            elif not _users_class(t) and t not in _DATA_CLASSES and not _plain_object(v):  # a library's object
                if in_model or issubclass(t, _OUTPUT_CLASSES):
                    continue  # the model's: the fake copy copies it, the snapshot keeps its binding; output: not state
                if self._stateful(v, path):  # an LR scheduler, a GradScaler: its own state_dict, put back whole
                    opt = getattr(v, "optimizer", None)
                    if isinstance(opt, torch.optim.Optimizer):  # a scheduler sets its optimizer's lr
                        stack += self._groups(opt, (path, ".", "optimizer"), d)
                    continue
                self.unchecked.append(f"{_path(path)} ({t.__module__}.{t.__qualname__}, a library's object)")
            elif isinstance(getattr(v, "__dict__", None), dict) or _slots(type(v)):
                attrs = getattr(v, "__dict__", None)
                if isinstance(attrs, dict):
                    self.containers.append((attrs, shallow_copy(attrs), path))
                    self.dicts.append((v, attrs, path))  # the dict itself may be replaced (pydantic's assignment)
                    values = list(attrs.items())
                else:
                    attrs = {}
                slots = _slots(type(v))
                if slots:  # a class with __slots__ (a dataclass(slots=True)): each slot's binding
                    held = {k: getattr(v, k, _EMPTY) for k in slots}
                    self.slotted.append((v, held, path))
                    values = [*attrs.items(), *((k, x) for k, x in held.items() if x is not _EMPTY)]
                stack += [(x, (path, ".", k), d + 1) for k, x in values if not issubclass(type(x), _ATOMS)]
                if _opaque(type(v)):  # a C base class keeps state outside __dict__ (a file's, a StringIO's)
                    self.unchecked.append(f"{_path(path)} ({type(v).__module__}.{type(v).__qualname__})")
            elif not _immutable(v):
                self.unchecked.append(f"{_path(path)} ({type(v).__module__}.{type(v).__qualname__})")

    def _stateful(self, v: Any, path: Any) -> bool:
        """Record a library object that keeps its state through ``state_dict()`` / ``load_state_dict()`` (PyTorch's
        LR schedulers, ``GradScaler``): its state as plain data, and its attributes' bindings (a lazily made tensor).
        False where it has no such methods or its state is not plain data."""
        if not (callable(getattr(type(v), "state_dict", None)) and callable(getattr(type(v), "load_state_dict", None))):
            return False
        try:
            sd = v.state_dict()
        except Exception:  # noqa: BLE001 - a library's method that fails: not recorded (named as unchecked)
            return False
        plain = _plain(sd)
        if plain is _NOT_PLAIN:
            return False
        self.stateful.append((v, copy.deepcopy(sd), plain, path))
        attrs = getattr(v, "__dict__", None)
        if isinstance(attrs, dict):
            self.containers.append((attrs, shallow_copy(attrs), path))
        return True

    def _stream(self, v: Any, path: Any) -> None:
        """A stream the code reaches: a seekable one's position is recorded (put back with ``seek``; a read moved
        it); what is written into a writable one is not put back, and it is named in :attr:`unchecked`, as is a
        stream that cannot seek (a pipe, a socket: what was read from it is gone)."""
        name = f"{_path(path)} ({type(v).__module__}.{type(v).__qualname__}"
        try:
            if getattr(v, "closed", False):
                return
            seekable = v.seekable() if isinstance(v, io.IOBase) else True
            pos = v.tell() if seekable else None
        except (OSError, ValueError):
            seekable, pos = False, None
        if pos is None:
            self.unchecked.append(f"{name}, a stream that cannot seek: what is read from it is consumed)")
            return
        self.streams.append((v, pos, path))
        writable = v.writable() if isinstance(v, io.IOBase) else not getattr(v, "closed", False) and _mmap_writable(v)
        if writable:
            self.unchecked.append(f"{name}: its position is put back, not what is written into it)")

    def _module(self, mod: torch.nn.Module, path: Any) -> None:
        """A module the code names (not through the model): each submodule's attributes' bindings (a counter,
        its parameter and buffer dicts) and, for the real step, its parameters and buffers (bytes, ``.grad``)."""
        if id(mod) in self._seen_val:
            return
        for name, sub in mod.named_modules():
            if id(sub) in self._seen_val:
                continue
            self._seen_val.add(id(sub))
            self._keep.append(sub)
            where = (path, ".", name) if name else path
            for d in (sub.__dict__, sub._parameters, sub._buffers):
                self.containers.append((d, shallow_copy(d), where))
            if self.add_tensor is not None:
                for t in [*sub._parameters.values(), *sub._buffers.values()]:
                    if t is not None:
                        self.add_tensor(t)

    def _groups(self, opt: torch.optim.Optimizer, path: Any, d: int) -> list[tuple[Any, Any, int]]:
        """Record an optimizer's param groups' settings (``lr`` and the rest, not the parameters); returns what
        they hold to be walked as values (a user's list or dict in a group, which code appends to in place,
        a tensor ``lr``), ``d`` being the optimizer's level below the name."""
        if id(opt) in self._seen_val:
            return []
        self._seen_val.add(id(opt))
        self._keep.append(opt)
        out: list[tuple[Any, Any, int]] = []
        for i, g in enumerate(opt.param_groups):
            where = (path, ".", f"param_groups[{i}]")
            self.groups.append((g, {k: x for k, x in g.items() if k != "params"}, where))
            out += [(x, (where, "[]", k), d + 2) for k, x in g.items()
                    if k != "params" and not issubclass(type(x), _ATOMS)]
        return out

    # --- putting back ----------------------------------------------------------------------
    def changed(self) -> list[str]:
        """Names of what differs from the record now (without putting anything back)."""
        out: list[str] = []
        for d, name, present, v, where in self.bindings:
            if (name in d) != present or (present and d.get(name) is not v):
                out.append(where)
        for cell, present, v, where in self.cells:
            try:
                now, has = cell.cell_contents, True
            except ValueError:
                now, has = None, False
            if has != present or (present and now is not v):
                out.append(where)
        for cls, attrs, where in self.classes:
            live = vars(cls)
            out += [f"{where}.{k}" for k in [*attrs, *(live.keys() - attrs.keys())]
                    if k not in ("__dict__", "__weakref__") and live.get(k) is not attrs.get(k)]
        for live, saved, where in self.containers:
            if not same(live, saved):
                out.append(_path(where))
        for arr, kept, where in self.arrays:
            if _array_changed(arr, kept):
                out.append(_path(where))
        for obj, held, where in self.slotted:
            out += [f"{_path(where)}.{k}" for k, x in held.items() if getattr(obj, k, _EMPTY) is not x]
        out += [_path(where) for obj, _, plain, where in self.stateful if _state_changed(obj, plain)]
        out += [f"{where} (a functools cache: cleared, as it kept values of the step)"
                for fn, info, where in self.caches if _cache_grew(fn, info)]
        for g, held, where in self.groups:
            out += [f"{_path(where)}[{k!r}]" for k in [*held, *(g.keys() - held.keys() - {"params"})]
                    if g.get(k, _EMPTY) is not held.get(k, _EMPTY)]
        out += [_path(where) for gen, kind, state, where in self.generators
                if not same_state(get_state(gen, kind), state)]
        out += [_path(where) for obj, attrs, where in self.dicts if _own_dict(obj) is not attrs]
        out += [f"{_path(where)} (its position)" for v, pos, where in self.streams if _stream_moved(v, pos)]
        return list(dict.fromkeys(out))

    def restore(self) -> list[str]:
        """Put everything recorded back; returns the names that had changed (in the order recorded)."""
        changed = self.changed()
        errors: list[BaseException] = []

        def attempt(fn: Callable[..., object], *args: Any) -> None:
            try:
                fn(*args)
            except Exception as e:  # noqa: BLE001 - every part is put back; the first error is raised after
                errors.append(e)

        for obj, attrs, _ in self.dicts:  # a class that replaces its __dict__ on assignment (pydantic's models)
            if _own_dict(obj) is not attrs:
                attempt(object.__setattr__, obj, "__dict__", attrs)
        for live, saved, _ in reversed(self.containers):
            attempt(put_back, live, saved)
        for d, name, present, v, _ in self.bindings:
            attempt(_rebind, d, name, present, v)
        for cell, present, v, _ in self.cells:
            attempt(_refill, cell, present, v)
        for cls, attrs, _ in self.classes:
            attempt(_class_back, cls, attrs)
        for arr, kept, _ in self.arrays:
            attempt(_array_back, arr, kept)
        for obj, held, _ in self.slotted:
            attempt(_slots_back, obj, held)
        for obj, sd, plain, _ in self.stateful:
            if _state_changed(obj, plain):
                attempt(obj.load_state_dict, copy.deepcopy(sd))
        for g, held, _ in self.groups:
            attempt(_group_back, g, held)
        for gen, kind, state, _ in self.generators:
            attempt(set_state, gen, kind, state)
        for fn, info, _ in self.caches:  # its entries cannot be taken out one by one: emptied (a cache, never a result)
            if _cache_grew(fn, info):
                attempt(fn.cache_clear)
        for v, pos, _ in self.streams:
            if _stream_moved(v, pos):
                attempt(v.seek, pos)
        if errors:
            raise errors[0]
        return changed


def _own_dict(obj: Any) -> Any:
    """``obj``'s ``__dict__`` now, read without running its class's attribute code."""
    try:
        return object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return None


def _path(p: Any) -> str:
    """A path recorded as ``(parent, "[]" or ".", key)`` nests, or a name, as text."""
    parts = []
    while isinstance(p, tuple):
        p, kind, k = p
        parts.append(f"[{_key(k)}]" if kind == "[]" else "()" if kind == "()" else f".{k}")
    return str(p) + "".join(reversed(parts))


def _key(k: Any) -> str:
    """A dict key as the path names it (its repr, short; a tensor key by its shape: no values read)."""
    if isinstance(k, torch.Tensor):
        return f"<tensor of shape {tuple(k.shape)}>"
    try:
        return repr(k)[:60]
    except Exception:  # noqa: BLE001 - a key whose repr fails
        return f"<{type(k).__qualname__}>"


def _qualname(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


def _immutable(v: Any) -> bool:
    """Objects without ``__dict__`` with nothing to record: hashable by value (immutable by Python's
    convention: a compiled pattern, a named constant) or a lock (its state lasts the call that holds it)."""
    import threading

    if isinstance(v, (type(threading.Lock()), type(threading.RLock()))):
        return True
    h = type(v).__hash__
    return h is not None and h is not object.__hash__


_EMPTY = object()  # an unset slot
_NOT_PLAIN = object()  # a value that is not plain data
PLAIN_ITEMS = 10_000
"""The most values a library object's attributes may hold to be recorded as plain data (:func:`_plain_object`)."""


def _plain(v: Any, budget: list[int] | None = None) -> Any:
    """A copy of ``v`` if it is plain data (atoms, and dicts, lists and tuples of plain data, at most
    :data:`PLAIN_ITEMS` values), else :data:`_NOT_PLAIN`."""
    budget = [PLAIN_ITEMS] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        return _NOT_PLAIN
    t = type(v)
    if issubclass(t, _ATOMS) and not issubclass(t, (types.BuiltinFunctionType, types.MethodWrapperType)):
        return v
    if t in (dict, list, tuple):
        items = list(v.items()) if t is dict else list(enumerate(v))
        out = []
        for k, x in items:
            if t is dict and not issubclass(type(k), _ATOMS):
                return _NOT_PLAIN
            c = _plain(x, budget)
            if c is _NOT_PLAIN:
                return _NOT_PLAIN
            out.append((k, c))
        return (t, out)
    return _NOT_PLAIN


def _plain_object(v: Any) -> bool:
    """A library's object whose attributes are all plain data (a model's config): recorded and put back like
    the user's objects (nothing in it can have acted outside the process)."""
    d = getattr(v, "__dict__", None)
    return isinstance(d, dict) and not _opaque(type(v)) and not _slots(type(v)) and _plain(d) is not _NOT_PLAIN


def _slots(cls: type) -> tuple[str, ...]:
    """The slot names a class and its bases declare (``__dict__`` and ``__weakref__`` left out)."""
    out: list[str] = []
    for c in cls.__mro__:
        names = c.__dict__.get("__slots__", ())
        out += [n for n in ([names] if isinstance(names, str) else names) if n not in ("__dict__", "__weakref__")]
    return tuple(dict.fromkeys(out))


def _stream_moved(v: Any, pos: Any) -> bool:
    """Whether a recorded stream's position is not ``pos`` now (a closed one cannot be put back: not said)."""
    try:
        return not getattr(v, "closed", False) and v.tell() != pos
    except (OSError, ValueError):
        return False


def _mmap_writable(v: Any) -> bool:
    """Whether an ``mmap`` can be written (writing nothing into a read-only map raises TypeError)."""
    try:
        v.write(b"")
    except TypeError:
        return False
    except (OSError, ValueError):
        return False
    return True


def _opaque(cls: type) -> bool:
    """Whether a base class of ``cls`` is written in C (not a heap type) and so may hold state that is not in
    attributes: an open file, a ``StringIO``'s buffer."""
    return any(not c.__flags__ & (1 << 9) for c in cls.__mro__ if c is not object)  # Py_TPFLAGS_HEAPTYPE


def _slots_back(obj: Any, held: dict[str, Any]) -> None:
    for k, x in held.items():
        now = getattr(obj, k, _EMPTY)
        if now is x:
            continue
        if x is _EMPTY:
            delattr(obj, k)
        else:
            setattr(obj, k, x)


def _cache_grew(fn: Any, info: Any) -> bool:
    """Whether a ``functools`` cache took an entry since ``info`` (a miss stores one; a hit changes nothing)."""
    now = fn.cache_info()
    return bool(now.misses != info.misses or now.currsize != info.currsize)


def _state_changed(obj: Any, plain: Any) -> bool:
    try:
        return bool(_plain(obj.state_dict()) != plain)
    except Exception:  # noqa: BLE001 - a state_dict that now fails: put back
        return True


def _group_back(g: dict[str, Any], held: dict[str, Any]) -> None:
    for k in g.keys() - held.keys() - {"params"}:
        del g[k]
    for k, x in held.items():
        if g.get(k, _EMPTY) is not x:
            g[k] = x


def _rebind(d: dict[str, Any], name: str, present: bool, v: Any) -> None:
    if present:
        if name not in d or d[name] is not v:
            d[name] = v
    elif name in d:
        del d[name]


def _refill(cell: Any, present: bool, v: Any) -> None:
    try:
        now, has = cell.cell_contents, True
    except ValueError:
        now, has = None, False
    if present and (not has or now is not v):
        cell.cell_contents = v
    elif not present and has:
        del cell.cell_contents


def _class_back(cls: type, attrs: dict[str, Any]) -> None:
    live = dict(vars(cls))
    for k in live.keys() - attrs.keys():
        delattr(cls, k)
    for k, v in attrs.items():
        if live.get(k) is not v and k not in ("__dict__", "__weakref__"):
            setattr(cls, k, v)


_CHUNK = 16 * 2**20  # bytes compared at a time (see _array_changed)


def _array_changed(arr: Any, copy: Any) -> bool:
    """Whether ``arr``'s bytes differ from ``copy``'s. A contiguous array is compared as bytes, a chunk at a
    time: ``np.array_equal(..., equal_nan=True)`` made temporaries of 2.7 times the array (NaN masks and
    the non-NaN values of both), 520 MiB beside a 191 MiB array the estimate had only copied once."""
    if isinstance(arr, (bytearray, array.array)):
        return arr != copy
    import numpy as np

    if arr.shape != copy.shape or arr.dtype != copy.dtype:
        return True
    if arr.flags.c_contiguous and copy.flags.c_contiguous and not arr.dtype.hasobject:
        a, b = arr.reshape(-1).view(np.uint8), copy.reshape(-1).view(np.uint8)
        return any(not np.array_equal(a[i:i + _CHUNK], b[i:i + _CHUNK]) for i in range(0, a.size, _CHUNK))
    return not np.array_equal(arr, copy, equal_nan=True)


def _array_back(arr: Any, copy: Any) -> None:
    if isinstance(arr, (bytearray, array.array)):
        arr[:] = copy
        return
    import numpy as np

    if arr.shape == copy.shape and arr.dtype == copy.dtype:
        np.copyto(arr, copy)
    else:  # resized in place (ndarray.resize): its old shape and bytes
        arr.resize(copy.shape, refcheck=False)
        np.copyto(arr, copy)
