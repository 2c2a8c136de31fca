"""What an object keeps alive, autograd graphs included, without running any hook.

Two walks share this module:

* :func:`graph_tensors` follows an autograd graph from a node and yields the
  tensors it keeps alive: those saved for backward, the attributes a custom
  ``autograd.Function`` stored on its ``ctx``, the leaves (``AccumulateGrad``'s
  variable) and, with ``grads``, their ``.grad``.
* :func:`held_tensors` follows a Python object (tensors, modules, optimizers,
  containers, plain objects' ``__dict__``) and, through :func:`graph_tensors`,
  the graphs of the results it holds.

**Saved tensors are never unpacked.** Reading ``grad_fn._saved_x`` runs the
saved-tensor *unpack* hook when one was registered
(``torch.autograd.graph.saved_tensors_hooks``, ``save_on_cpu``, and
non-reentrant ``torch.utils.checkpoint``, whose unpack hook recomputes the
checkpointed forward every time it is read outside backward). The walk reads
the ``SavedTensor`` object (``_raw_saved_x``) instead:

* with ``SavedTensor.data`` (PyTorch >= 2.10; it returns the saved tensor, or
  what the *pack* hook returned, without calling any hook), a hooked saved
  tensor holds exactly what its pack hook returned, plus what its unpack hook
  keeps alive (its closure: checkpoint's frame keeps the block's inputs and
  RNG state): both are walked as objects. Checkpoint's packed ``_Holder``\\ s
  hold no tensor until recomputation, so a checkpointed block counts only
  what checkpoint really keeps.
* on older PyTorch the attribute is read with a profile function installed
  that aborts the first Python call: a saved tensor without hooks is read in
  C++ alone, one with a Python unpack hook is aborted before the hook's first
  line runs and is skipped (what it packed cannot be reached there).
"""

from __future__ import annotations

import collections
import contextlib
import gc
import inspect
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter
from typing import Any

import torch

__all__ = ["MAX_DEPTH", "RUN", "collector_paused", "graph_tensors", "input_leaves", "held_tensors", "module_attributes",
           "object_attributes", "only_atoms", "plain_leaves", "saved_tensors_of", "tensor_items"]

# levels of containers and objects a walk follows below a name: 6 reaches a Hugging Face model output's
# key/value cache (output → EncoderDecoderCache → DynamicCache → layers → a layer → keys) in a dict of outputs
MAX_DEPTH = 6
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_PLAIN_TYPES = frozenset(_PLAIN)
RUN = 4096  # items of a container checked, and handed to a ``bulk`` consumer, at once
_IS_LEAF = attrgetter("is_leaf")  # no grad_fn (C++: ``!grad_fn()``)
_GRAD = attrgetter("grad")
_SAVED = getattr(getattr(torch._C, "_autograd", None), "SavedTensor", None)
_HAS_DATA = _SAVED is not None and hasattr(_SAVED, "data") and hasattr(_SAVED, "unpack_hook")
_SKIP_TYPES = (types.ModuleType, types.BuiltinFunctionType, types.MethodType, types.FunctionType, type, str, bytes,
               bytearray, int, float, complex, bool, types.FrameType, types.CodeType, memoryview, range)
_CONTAINERS = (dict, list, tuple, set, frozenset, collections.deque)  # followed through their own C methods
_ATOMS = {str, bytes, int, float, complex, bool, type(None)}  # exact types that hold nothing (not subclasses)
_TOOLING = ("IPython.", "ipykernel.", "vramnb.", "traitlets.", "jupyter_client.", "zmq.", "tornado.", "asyncio.")


def is_tooling(obj: Any) -> bool:
    """Objects of the notebook machinery itself (the shell, kernels, vramnb):
    never followed, since they reach the whole namespace."""
    mod = getattr(type(obj), "__module__", "") or ""
    return mod.startswith(_TOOLING) or mod in ("IPython", "vramnb", "ipykernel")


class _HookCalled(BaseException):
    """Raised by the profile function to stop a saved-tensor hook before it runs."""


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The garbage collector off for a walk over many objects, then as it was. A
    walk makes an object per storage it finds (kept until its end), and each
    collection those would start traverses every live object again and runs the
    CPU tracker's callback: for a million tensors that was most of the time of
    ``%vram`` and of a full scan. Garbage made meanwhile is collected after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _refuse_python_calls(frame: Any, event: str, arg: Any) -> None:
    if event == "call":
        raise _HookCalled


def _read_without_hooks(node: Any, name: str) -> Any:
    """``getattr(node, name)`` where running any Python function (a saved-tensor
    unpack hook) is aborted before its first line; ``None`` if that happened.
    The garbage collector is paused so that no finalizer runs meanwhile."""
    old = sys.getprofile()
    was_enabled = gc.isenabled()
    gc.disable()
    sys.setprofile(_refuse_python_calls)
    try:
        return getattr(node, name)
    except _HookCalled:
        return None
    except Exception:  # a saved tensor modified in place: PyTorch's own backward will say so
        return None
    finally:
        sys.setprofile(old)
        if was_enabled:
            gc.enable()


_SAVED_NAMES: dict[type, tuple[str, ...]] = {}


def saved_tensors_of(node: Any, depth: int = MAX_DEPTH) -> Iterator[Any]:
    """The objects one autograd node keeps for backward, hooks never run: saved
    tensors without hooks, and for hooked ones what the pack hook returned and
    the unpack hook itself (see the module docstring). Freed ones yield nothing."""
    names = _SAVED_NAMES.get(type(node))
    if names is None:  # dir() is slow and the same for every node of a type: once per type
        names = _SAVED_NAMES[type(node)] = tuple(n for n in dir(node) if n.startswith("_raw_saved_"))
    for name in names:
        try:
            raw = getattr(node, name)
        except Exception:
            continue
        items = raw if isinstance(raw, (list, tuple)) else (raw,)
        if _HAS_DATA:
            for st in items:
                if _SAVED is None or not isinstance(st, _SAVED):
                    continue
                try:
                    hook = st.unpack_hook
                    data = st.data
                except Exception:  # a hook from C++ the binding cannot show, or a freed graph
                    continue
                if data is not None:
                    yield data
                if hook is not None:
                    yield hook
            continue
        # PyTorch without SavedTensor.data: read the unpacked attribute, hooks refused
        plain = "saved_tensors" if name == "_raw_saved_tensors" else name.replace("_raw_saved_", "_saved_", 1)
        val = _read_without_hooks(node, plain)
        if val is not None:
            yield val


def graph_tensors(root: Any, seen: dict[int, Any], grads: bool = True, depth: int = MAX_DEPTH) -> Iterator[Any]:
    """Tensors a live autograd graph keeps alive, found from node ``root``.

    Yields the tensors saved for backward (never unpacking those with hooks:
    see the module docstring), the tensors held by what saved-tensor hooks
    packed and by the hooks, the tensor attributes a custom ``Function`` set on
    its ``ctx``, every leaf the graph accumulates into and, with ``grads``, the
    leaves' ``.grad``. ``seen`` is shared across calls so that each node and
    object is walked once: it maps ``id`` to the object and so keeps each one
    alive while walking (Python wrappers of autograd nodes and of saved
    tensors are made on access and freed after, so an id could be reused).
    Yields tensors and, from saved-tensor hooks, bare storages.
    """
    stack = [root]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        for obj in saved_tensors_of(node):
            if type(obj) in _PLAIN:  # the common case, walked here: recursing would nest a generator per node
                yield obj
                try:
                    fn = obj.grad_fn
                    if fn is not None:
                        stack.append(fn)
                    elif grads and obj.grad is not None:
                        yield obj.grad
                        if obj.grad.grad_fn is not None:  # backward(create_graph=True): the gradient's graph
                            stack.append(obj.grad.grad_fn)
                except Exception:
                    pass
                continue
            yield from held_tensors(obj, depth, seen, grads=grads, closures=True)
        ctx = getattr(node, "__dict__", None)  # a custom Function's ctx attributes
        if isinstance(ctx, dict) and ctx:
            yield from held_tensors(ctx, depth, seen, grads=grads, closures=True)
        var = getattr(node, "variable", None)  # AccumulateGrad's leaf
        if isinstance(var, torch.Tensor):
            yield var
            g = var.grad if grads else None
            if g is not None:
                yield g
                if g.grad_fn is not None:  # backward(create_graph=True): the gradient's graph
                    stack.append(g.grad_fn)
        for nxt, _ in getattr(node, "next_functions", ()):
            stack.append(nxt)


def input_leaves(tensors: list[Any], limit: int = 4000) -> list[Any]:
    """The leaves of the autograd graphs of ``tensors`` that require grad and are not
    ``nn.Parameter``: tensors code made require grad (``pos.requires_grad_(True)``), whose
    gradients the user asked for. Walks at most ``limit`` nodes (``AccumulateGrad.variable``);
    reads attributes only, runs no hook."""
    out: list[Any] = []
    seen: set[int] = set()
    with torch._C.DisableTorchFunctionSubclass():  # a subclass's __torch_function__ does not run
        todo = [t.grad_fn for t in tensors if issubclass(type(t), torch.Tensor) and t.grad_fn is not None]
        while todo and len(seen) < limit:
            node = todo.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            var: Any = getattr(node, "variable", None)
            if issubclass(type(var), torch.Tensor) and not isinstance(var, torch.nn.Parameter) and var.requires_grad:
                if all(v is not var for v in out):
                    out.append(var)
            todo.extend(f for f, _ in getattr(node, "next_functions", ()) if f is not None)
    return out


def plain_leaves(items: list[Any], seen: dict[int, Any], grads: bool = True) -> bool:
    """Whether every one of ``items`` is a plain tensor (``torch.Tensor`` or
    ``nn.Parameter``, not a subclass) that keeps nothing alive but its own
    storage: no autograd graph (a leaf), with ``grads`` no ``.grad``, and not
    in ``seen``. :func:`held_tensors` yields such a tensor and follows nothing
    from it. The tests run in C over the whole list (``map``); anything that
    raises answers False."""
    try:
        if not (set(map(type, items)) <= _PLAIN_TYPES and all(map(_IS_LEAF, items))
                and (not grads or list(map(_GRAD, items)).count(None) == len(items))):
            return False
        if len(seen) <= len(items):  # (a tensor of items in seen is one of seen's plain tensors)
            ids = [k for k, v in seen.items() if type(v) in _PLAIN_TYPES]
            return not ids or set(ids).isdisjoint(map(id, items))
        return seen.keys().isdisjoint(map(id, items))
    except Exception:
        return False


def held_tensors(obj: Any, depth: int, seen: dict[int, Any], *, grads: bool = True, closures: bool = False,
                 bulk: Callable[[list[Any]], None] | None = None, graphs: bool = True) -> Iterator[Any]:
    """Tensors ``obj`` keeps alive, up to ``depth`` levels of containers.

    Follows a tensor's own storage, a leaf's ``.grad`` (with ``grads``) and the
    graph of a result that requires grad; ``nn.Module`` parameters (and their
    gradients), buffers and the plain attributes of it and its submodules
    (:func:`module_attributes`); ``torch.optim.Optimizer`` parameters and state;
    the class attributes of a class defined in the notebook (:func:`class_attributes`);
    dicts, lists, tuples, sets and deques; the ``__dict__`` and ``__slots__`` of plain
    objects (:func:`object_attributes`); with
    ``closures``, the cells of functions and the object of bound methods (the
    hooks of saved tensors). Yields tensors and bare ``UntypedStorage`` /
    ``TypedStorage`` objects. Tooling objects (the shell, vramnb) are not
    followed. Whatever raises while being inspected is skipped. ``seen``: as
    for :func:`graph_tensors`.

    ``bulk``, if given, is called with lists of plain tensors that keep
    nothing but their own storage (:func:`plain_leaves`: runs of up to ``RUN``
    items of a dict, list, tuple or set) instead of yielding them one by one,
    at the point where they would have been yielded: a consumer that handles
    each such list as it would each of its tensors, in order, sees the same
    walk, at C speed for a container of a million tensors.

    ``graphs=False`` does not follow autograd graphs (a result's ``grad_fn``, a gradient's
    graph, a bare ``Node``): what ``obj`` holds itself, not what its graphs saved.
    """
    # type(), not isinstance: isinstance reads ``__class__``, which a mock with a spec, a proxy
    # or a lazy object answers by pretending (and then a call on it is recorded, or loads it)
    tp = type(obj)
    try:
        if obj is None or issubclass(type(obj), torch.autograd.graph.Node):
            if obj is not None and graphs:
                yield from graph_tensors(obj, seen, grads, depth)
            return
        if closures and issubclass(type(obj), (types.FunctionType, types.MethodType)):
            if id(obj) in seen or depth <= 0:
                return
            seen[id(obj)] = obj
            if issubclass(type(obj), types.MethodType):
                items: Iterable[Any] = [obj.__self__]
            else:
                items = [c.cell_contents for c in (obj.__closure__ or ()) if _cell_full(c)]
            for item in items:
                yield from held_tensors(item, depth - 1, seen, grads=grads, graphs=graphs, closures=closures, bulk=bulk)
            return
        if issubclass(tp, type):  # a class defined in the notebook: its class attributes (a class-level cache)
            if id(obj) not in seen and depth > 0 and notebook_class(obj):
                seen[id(obj)] = obj
                for item in class_attributes(obj):
                    yield from held_tensors(item, depth - 1, seen, grads=grads, graphs=graphs, closures=closures,
                                            bulk=bulk)
            return
        if id(obj) in seen or issubclass(tp, _SKIP_TYPES):
            return
        if type(obj) in _PLAIN and obj.grad_fn is None and (not grads or obj.grad is None):
            # nothing to follow beyond its own storage: yielded, not remembered, so that a
            # walk does not keep saved tensors alive (another thread's backward frees them)
            yield obj
            return
        seen[id(obj)] = obj
        if issubclass(tp, (torch.UntypedStorage, torch.TypedStorage)):
            yield obj
            return
        if issubclass(tp, torch.Tensor):
            yield obj
            if obj.is_leaf:
                g = obj.grad if grads else None
                if g is not None:
                    yield g
                    if g.grad_fn is not None and graphs:  # backward(create_graph=True): the gradient's graph
                        yield from graph_tensors(g.grad_fn, seen, grads, depth)
            elif obj.grad_fn is not None and graphs:  # a result that requires grad keeps its graph's saved tensors alive
                yield from graph_tensors(obj.grad_fn, seen, grads, depth)
            return
        if issubclass(tp, torch.nn.Module):
            for p in obj.parameters():
                yield from held_tensors(p, 0, seen, grads=grads, graphs=graphs)
            yield from obj.buffers()
            for item in module_attributes(obj):  # tensors in plain attributes: caches, hook-collected lists
                yield from held_tensors(item, max(depth, 1) - 1, seen, grads=grads, graphs=graphs, bulk=bulk)
            return
        if issubclass(tp, torch.optim.Optimizer):
            for group in obj.param_groups:
                for p in group["params"]:
                    yield from held_tensors(p, 0, seen, grads=grads, graphs=graphs)
            for state in list(obj.state.values()):
                for v in state.values() if type(state) is dict else ():  # a custom entry: state["step"] = 3
                    if isinstance(v, torch.Tensor):
                        yield v
            for name, v in list(vars(obj).items()):  # plain attributes (an EMA copy, a cache)
                if name not in ("state", "param_groups", "defaults"):
                    yield from held_tensors(v, max(depth, 1) - 1, seen, grads=grads, graphs=graphs, bulk=bulk)
            return
        if depth <= 0 or is_tooling(obj):
            return
        if issubclass(tp, BaseException):  # a kept error: its traceback's frames keep their variables
            items = exception_locals(obj)
        elif issubclass(tp, _CONTAINERS):  # not every Mapping: a shelf would load itself
            items = container_items(obj)
        else:
            items = [v for _, v in object_attributes(obj)]
    except Exception:  # a user object that raises when inspected holds nothing we can see
        return
    if only_atoms(items):  # a container of plain values (a list of token ids): nothing to follow, told in C
        return
    if bulk is None or len(items) < 2:
        for item in items:
            yield from held_tensors(item, depth - 1, seen, grads=grads, graphs=graphs, closures=closures, bulk=bulk)
        return
    if not isinstance(items, list):
        items = list(items)
    for start in range(0, len(items), RUN):
        run = items[start:start + RUN]
        if len(run) > 1 and plain_leaves(run, seen, grads):
            bulk(run)  # what yielding each of them would do, in order
            continue
        for item in run:
            yield from held_tensors(item, depth - 1, seen, grads=grads, graphs=graphs, closures=closures, bulk=bulk)


def notebook_class(cls: type) -> bool:
    """A class defined in the notebook (its ``__module__`` is the notebook's, ``__main__``), read
    from the class's own ``__dict__`` (no metaclass code runs)."""
    try:
        return type.__getattribute__(cls, "__dict__").get("__module__") == "__main__"
    except Exception:  # noqa: BLE001 - a class that cannot be read holds nothing we can see
        return False


def class_attributes(cls: type) -> list[Any]:
    """The values of a class's own attributes (``cls.__dict__``, read without running a
    descriptor or metaclass), less its methods and Python's own entries (``__doc__``, ...)."""
    out = []
    for name, v in list(type.__getattribute__(cls, "__dict__").items()):
        if isinstance(name, str) and name.startswith("__") and name.endswith("__"):
            continue
        if issubclass(type(v), (staticmethod, classmethod, property, types.FunctionType)):
            continue
        out.append(v)
    return out


def frame_locals(frame: Any) -> list[tuple[str, Any]]:
    """``(name, value)`` of a frame's local variables, leaving no reference behind.

    Before Python 3.13, ``frame.f_locals`` of a function's frame is a dict that Python
    fills from the frame's variables and keeps on the frame until it returns: a tensor
    the function deletes after catching the error (to retry smaller) would stay alive
    through it. That dict is emptied again when only the frame holds it (the function
    never called ``locals()`` itself; a later ``locals()`` fills it afresh). A class body's
    or ``exec``'s locals are the real namespace, never emptied; 3.13's ``f_locals`` is a
    view (PEP 667) that keeps nothing."""
    d = frame.f_locals
    items = list(dict.items(d)) if isinstance(d, dict) else list(d.items())
    if sys.version_info < (3, 13) and type(d) is dict and frame.f_code.co_flags & inspect.CO_OPTIMIZED:
        # references: the frame's, ``d``'s and getrefcount's argument; more: the user's ``locals()``
        if sys.getrefcount(d) <= 3:
            d.clear()
    del d
    return items


def _tooling_frame(frame: Any) -> bool:
    """A frame of the notebook machinery's code (IPython, ipykernel, vramnb)."""
    mod = frame.f_globals.get("__name__", "")
    mod = mod if isinstance(mod, str) else ""
    return mod.startswith(_TOOLING) or mod in ("IPython", "vramnb", "ipykernel")


def exception_locals(exc: BaseException, limit: int = 64, *, machinery: bool = False) -> list[Any]:
    """The values of the local variables of the function frames in ``exc``'s traceback and in
    those of the exceptions chained to it (``__cause__``, ``__context__``), read without
    leaving a reference on the frames (:func:`frame_locals`); a module's top level (a
    namespace) is not followed, nor, unless ``machinery``, the frames of the notebook machinery
    (IPython's, vramnb's: an error on its way up through them, as in a measured cell, would
    otherwise reach the whole namespace through their variables). ``machinery=True``: vramnb's
    own runner's frames too (a step's output in the runner's frame when the loss failed)."""
    out: list[Any] = []
    seen: set[int] = set()
    todo: list[Any] = [exc]
    while todo and len(seen) < limit:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        tb = BaseException.__getattribute__(e, "__traceback__")
        while tb is not None:
            f = tb.tb_frame
            if f.f_code.co_flags & inspect.CO_OPTIMIZED and (machinery or not _tooling_frame(f)):
                out.extend(v for _, v in frame_locals(f))
            tb = tb.tb_next
        todo += [BaseException.__getattribute__(e, "__cause__"), BaseException.__getattribute__(e, "__context__")]
    return out


def container_items(obj: Any) -> list[Any]:
    """The values a dict, list, tuple, set, frozenset or deque holds, read through the built-in
    type's own methods: a subclass's overridden ``values``/``items``/``__iter__`` is the
    user's code (a mapping that loads its entries lazily, a counter), never run here."""
    tp = type(obj)
    for base in _CONTAINERS:
        if issubclass(tp, base):
            return list(dict.values(obj)) if base is dict else list(base.__iter__(obj))
    return []


def only_atoms(items: list[Any]) -> bool:
    """Whether ``items`` (more than 8 of them) are all plain values that hold nothing (``int``, ``float``,
    ``str``, ``bytes``, ``bool``, ``complex``, ``None``: exact types), told in C: a walk looking for
    tensors skips a list of a million token ids without visiting each."""
    try:
        return len(items) > 8 and set(map(type, items)) <= _ATOMS
    except Exception:  # noqa: BLE001 - items that cannot be counted: walked one by one
        return False


def tensor_items(obj: Any) -> list[Any]:
    """:func:`container_items` for a walk looking for tensors: ``[]`` where they are all plain values
    (:func:`only_atoms`)."""
    items = container_items(obj)
    return [] if only_atoms(items) else items


def _instance_dict(obj: Any) -> dict[str, Any] | None:
    """The object's own attribute dict, never through a ``__dict__`` its class defines (a
    property, a proxy forwarding to what it wraps, a lazy object loading itself): that is
    user code. Such an object's real dict is found among its referents, if it has one."""
    desc = None
    for cls in type(obj).__mro__:
        desc = cls.__dict__.get("__dict__")
        if desc is not None:
            break
    if desc is None:
        return None
    if type(desc) is types.GetSetDescriptorType:  # the interpreter's own slot
        try:
            d = desc.__get__(obj, type(obj))
        except (AttributeError, TypeError):
            return None
        return d if type(d) is dict else None
    found = [r for r in gc.get_referents(obj) if type(r) is dict]
    return found[0] if len(found) == 1 else None


def object_attributes(obj: Any) -> list[tuple[str, Any]]:
    """``(name, value)`` of a plain object's attributes: its ``__dict__`` and the
    ``__slots__`` of its classes (``@dataclass(slots=True)``), read through the
    slot descriptors (no ``__getattr__``, property or other user code runs);
    unset slots are left out. A private slot is named as Python stores it
    (``_Cls__x``)."""
    d = _instance_dict(obj)
    out = list(dict.items(d)) if isinstance(d, dict) else []
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if not isinstance(name, str) or name in ("__dict__", "__weakref__"):
                continue
            if name.startswith("__") and not name.endswith("__"):
                name = f"_{cls.__name__.lstrip('_')}{name}"
            desc = cls.__dict__.get(name)
            if type(desc) is types.MemberDescriptorType:
                try:
                    out.append((name, desc.__get__(obj, cls)))
                except AttributeError:  # a slot never set
                    continue
    return out


_MODULE_OWN = frozenset(torch.nn.Module().__dict__)  # nn.Module's own slots: parameters, hooks...


def module_attributes(module: torch.nn.Module) -> list[Any]:
    """The values of the plain attributes of ``module`` and its submodules
    (``self.cache = ...``, a list a forward hook appends to, a dict of
    tensors): everything in their ``__dict__`` but nn.Module's own slots
    (parameters, buffers, submodules, hooks, flags)."""
    out = []
    try:
        for m in module.modules():
            for name, value in list(vars(m).items()):
                if name not in _MODULE_OWN and not isinstance(value, (bool, int, float, str, type(None))):
                    out.append(value)
    except Exception:  # a module whose traversal raises: its attributes are not looked at
        pass
    return out


def _cell_full(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True
