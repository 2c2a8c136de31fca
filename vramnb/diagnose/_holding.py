"""How an object holds its memory, read from what it is at run time, and the fix that follows.

One mechanism for every holder the other views name (the ``%vram`` listing, the "grows on every
re-run" line, the out-of-memory post-mortem's largest holder): from the notebook name, follow the
part that holds the bytes (an attribute, an entry, a class attribute) while one part holds nearly
all of them, then classify what is found there by its type and by how the bytes hang off it:

* **exceptions**: an exception's ``__traceback__`` keeps the frames it was raised through, and
  those frames their local variables: keep ``str(e)``, or drop the traceback;
* **graphs**: tensors that carry a ``grad_fn`` keep what their forward saved for backward:
  store ``.item()`` / ``.detach()``;
* **weight copies**: entries that are dicts of tensors with a notebook module's ``state_dict``
  keys: keep the last and the best, or save to disk;
* **class attribute**: a class's own ``__dict__`` entry, one object for the class and its
  instances, alive as long as the class: make it an instance attribute, or empty it;
* **an object's state**: an object whose attributes hold the bytes; where its class has a
  callable ``reset()`` (``clear()``), that method; else ``del obj.attr``.

Each sentence is checked against the object (a ``reset`` is named only where the class has a
callable one, a graph only where a ``grad_fn`` is kept). No user code runs: attributes are read
through ``object_attributes`` / the class's own ``__dict__``, containers through the built-in
types' methods, tracebacks' frames without leaving references (:func:`vramnb._graph.frame_locals`).
Bytes are those of storages on the device asked for, each storage counted once.
"""

from __future__ import annotations

import collections
import inspect
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .._graph import (container_items, held_tensors, input_leaves, is_tooling, notebook_class, object_attributes,
                      tensor_items)
from .._storages import storages_of_tensor
from .._units import format_bytes
from ._cell_code import backward_calls

__all__ = ["Holding", "holding", "holding_note", "holding_notes"]

_DEPTH = 6  # levels of attributes and entries followed below a name
_SHARE = 0.9  # a part holding at least this share of its parent's bytes is followed into
_PART = 0.1  # parts holding at least this share are named
_MIN = 1 << 20  # a holder below this is not explained in %vram
_CONTAINERS = (list, tuple, dict, collections.deque)
_MAX_PARTS = 256  # a node with more parts is not searched for one that holds nearly all
_NOTHING = (int, float, complex, bool, str, bytes, type(None))  # parts that hold no device memory


@dataclass
class Holding:
    """What holds a name's memory and how (bytes on one device).

    Attributes:
        path: where the bytes are, as typed (``ssim``, ``Tracker._track_features``).
        kind: ``"exceptions"``, ``"graphs"``, ``"weight copies"``, ``"class attribute"``,
            ``"object state"``, ``"bounded"``, ``"keyed cache"``; ``""`` where none applies.
        nbytes: bytes of the storages kept through ``path``.
        sentence: the mechanism and its fix, one line (empty where ``kind`` is empty).
    """

    path: str
    kind: str
    nbytes: int
    sentence: str


def _bytes(obj: Any, device: torch.device, graphs: bool = True, grads: bool = True) -> dict[int, int]:
    """``{storage key: bytes}`` of the storages on ``device`` that ``obj`` keeps alive."""
    if graphs and grads:  # the holders' own walk (plain tensors of a container read in bulk, in C)
        from .._holders import storages_held

        return storages_held(obj, device, _DEPTH)
    out: dict[int, int] = {}
    with torch._C.DisableTorchFunctionSubclass():
        for t in held_tensors(obj, _DEPTH, {}, graphs=graphs, grads=grads):
            for key, st in storages_of_tensor(t):
                if st.device.type == device.type and (device.index is None or st.device.index in (None, device.index)):
                    out[key] = st.nbytes()
    return out


def _parts(obj: Any, limit: int | None = None) -> list[tuple[str, Any]]:
    """``(path suffix, value)`` of the parts of ``obj`` the walk can follow into (``[]`` for a
    container of more than ``limit`` entries)."""
    tp = type(obj)
    if limit is not None and issubclass(tp, (*_CONTAINERS, set, frozenset)) and len(container_items(obj)) > limit:
        return []
    if issubclass(tp, type):
        if not notebook_class(obj):
            return []
        d = type.__getattribute__(obj, "__dict__")
        return [(f".{k}", v) for k, v in list(d.items())
                if isinstance(k, str) and not (k.startswith("__") and k.endswith("__"))
                and not issubclass(type(v), (staticmethod, classmethod, property, types.FunctionType))]
    if issubclass(tp, (torch.Tensor, torch.nn.Module, torch.optim.Optimizer, BaseException, types.ModuleType,
                       types.FunctionType, types.MethodType, str, bytes)) or is_tooling(obj):
        return []
    if issubclass(tp, dict):
        return [(f"[{k!r}]", v) for k, v in list(dict.items(obj))]
    if issubclass(tp, _CONTAINERS):
        return [(f"[{i}]", v) for i, v in enumerate(container_items(obj))]
    if issubclass(tp, (set, frozenset)):
        return []
    return [(f".{k}", v) for k, v in object_attributes(obj) if isinstance(k, str)]


def _methods_reading(cls: type, attr: str) -> list[str]:
    """The methods of the user's class ``cls`` (and its bases outside torch and vramnb) that read
    ``<obj>.<attr>`` without ever setting it (a ``LOAD_ATTR`` of that name and no ``STORE_ATTR``, in
    nested functions and comprehensions too; special methods such as a dataclass's ``__eq__`` left
    out): the object works with what another method put there. A method that sets the attribute
    and reads it (a loader keeping its last batch) is not counted. Read from the bytecode: nothing runs."""
    import dis

    def ops(code: types.CodeType) -> set[str]:
        out = {i.opname for i in dis.get_instructions(code)
               if i.opname in ("LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR") and i.argval == attr}
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                out |= ops(c)
        return out

    def reads(code: types.CodeType) -> bool:
        found = ops(code)
        return "STORE_ATTR" not in found and bool(found)

    out: list[str] = []
    for base in cls.__mro__:
        if base is object or getattr(base, "__module__", "").split(".")[0] in ("builtins", "torch", "vramnb"):
            continue
        for name, v in list(base.__dict__.items()):
            fn = v.__func__ if issubclass(type(v), (staticmethod, classmethod)) else v
            code = getattr(fn, "__code__", None) if type(fn) is types.FunctionType else None
            if code is not None and not (name.startswith("__") and name.endswith("__")) and name not in out \
                    and reads(code):
                out.append(name)
    return out


def _class_registry(owner: type, attr: str) -> tuple[str, str | None]:
    """``(the first method of the user's class ``owner`` or its bases that reads ``attr`` through the class,
    ``Owner.attr`` or ``cls.attr``: ``"__init__"``, else ``""``; a classmethod or staticmethod that empties or
    resets it, else ``None``)``, read from the bytecode (nothing runs)."""
    import dis

    names = {base.__name__ for base in owner.__mro__ if base is not object}
    via, clearer = "", None
    for base in owner.__mro__:
        if base is object or getattr(base, "__module__", "").split(".")[0] in ("builtins", "torch", "vramnb"):
            continue
        for name, v in list(base.__dict__.items()):
            klass = issubclass(type(v), (staticmethod, classmethod))
            fn = v.__func__ if klass else v
            code = getattr(fn, "__code__", None) if type(fn) is types.FunctionType else None
            if code is None:
                continue
            ins = list(dis.get_instructions(code))
            for a, b in zip(ins, ins[1:]):
                on_class = (a.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF") and a.argval in names) or \
                    (klass and a.opname == "LOAD_FAST" and a.argval == "cls")
                if on_class and b.argval == attr and b.opname in ("LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR"):
                    if b.opname == "STORE_ATTR" or klass and any(i.argval == "clear" for i in ins):
                        clearer = clearer or (name if klass else None)
                    if b.opname != "STORE_ATTR" and not via and not klass:
                        via = f"{base.__name__}.{name}"
    return via, clearer


def _class_has(cls: type, method: str) -> bool:
    """``cls`` (or a base) defines a callable ``method`` in its own ``__dict__`` (no descriptor runs)."""
    for base in cls.__mro__:
        v = base.__dict__.get(method)
        if v is not None:
            return callable(v) or issubclass(type(v), (staticmethod, classmethod))
    return False


def _tensors(obj: Any, depth: int = 3, limit: int | None = None) -> list[torch.Tensor]:
    """The tensors ``obj`` is or holds as entries of lists, tuples and dict values (of the first
    ``limit`` entries of ``obj`` itself, where given)."""
    if issubclass(type(obj), torch.Tensor):
        return [obj]
    if depth <= 0 or not issubclass(type(obj), _CONTAINERS):
        return []
    return [t for v in tensor_items(obj)[:limit] for t in _tensors(v, depth - 1)]


def _has_graph(obj: Any) -> bool:
    """A tensor ``obj`` holds (among its first entries first: a cheap no) carries a ``grad_fn``."""
    if not any(t.grad_fn is not None for t in _tensors(obj, limit=_MAX_PARTS)):
        return False
    return True


def _a(word: str) -> str:
    return f"{'an' if word[:1].upper() in 'AEIOU' else 'a'} {word}"


def _what(obj: Any) -> str:
    """``a list of 20 tensors``, ``a dict of 30 tensors``, ``a tensor``, ``a BatchIterator``."""
    tp = type(obj)
    if issubclass(tp, torch.Tensor):
        return "a tensor"
    if issubclass(tp, _CONTAINERS):
        n = len(container_items(obj))
        ts = _tensors(obj, 1)
        kind = tp.__name__
        if ts and len(ts) == n:
            return f"a {kind} of {n} tensor{'s' if n != 1 else ''}"
        return f"a {kind} of {n} entr{'ies' if n != 1 else 'y'}"
    return _a(tp.__name__)


def _exceptions(obj: Any) -> list[BaseException]:
    if issubclass(type(obj), BaseException):
        return [obj]
    if issubclass(type(obj), _CONTAINERS):
        items = container_items(obj)
        if not any(issubclass(type(e), BaseException) for e in items[:_MAX_PARTS]):
            return []
        found = [e for e in items if issubclass(type(e), BaseException)]
        return found if found and len(found) * 2 >= len(items) else []
    return []


def _traceback_locals(excs: list[BaseException], device: torch.device) -> tuple[list[str], int]:
    """(``h in process()`` for each local variable holding device memory in the frames of the
    exceptions' tracebacks, bytes they keep counted once)."""
    from .._graph import frame_locals

    said: dict[str, None] = {}
    held: dict[int, int] = {}
    for e in excs:
        tb = BaseException.__getattribute__(e, "__traceback__")
        while tb is not None:
            f = tb.tb_frame
            if f.f_code.co_flags & inspect.CO_OPTIMIZED:
                for name, v in frame_locals(f):
                    b = _bytes(v, device)
                    if sum(b.values()):
                        said[f"{name} in {f.f_code.co_name}()"] = None
                        held.update(b)
            tb = tb.tb_next
    return list(said), sum(held.values())


def _state_dict_like(obj: Any) -> bool:
    return (issubclass(type(obj), dict) and len(obj) > 0
            and all(isinstance(k, str) and issubclass(type(v), torch.Tensor) for k, v in dict.items(obj)))


def _weights_of(entries: list[Any], names: Mapping[str, Any]) -> str | None:
    """The notebook module whose ``state_dict`` keys the entries have, if one does."""
    keys = set(entries[0])
    for n, m in list(names.items()):
        if n.startswith("_") or not issubclass(type(m), torch.nn.Module):
            continue
        try:
            if set(m.state_dict().keys()) == keys:
                return n
        except Exception:  # noqa: BLE001 - a module whose state_dict raises is not it
            continue
    return None


def _copies_share(copies: list[dict[str, Any]], module: Any) -> bool:
    """Whether a tensor of the copies is over the module's own parameter or buffer storage (a
    ``state_dict()`` kept without ``clone()``: no copy)."""
    own = {k for t in [*module.parameters(), *module.buffers()] for k, _ in storages_of_tensor(t)}
    return any(k in own for c in copies for t in dict.values(c) for k, _ in storages_of_tensor(t))


def _second_order(tensors: list[torch.Tensor], limit: int = 2000) -> str:
    """The name of an autograd node made by differentiating a backward formula (``ThresholdBackwardBackward0``:
    ``torch.autograd.grad(..., create_graph=True)``) in the graphs of ``tensors``, the first found within
    ``limit`` nodes; ``""`` where none is."""
    todo = [t.grad_fn for t in tensors if t.grad_fn is not None]
    seen: set[int] = set()
    while todo and len(seen) < limit:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        name = type(node).__name__
        if "BackwardBackward" in name:
            return name
        todo.extend(f for f, _ in getattr(node, "next_functions", ()) if f is not None)
    return ""


def _leaf_names(leaves: list[Any], names: Mapping[str, Any]) -> str:
    """The notebook's names of ``leaves`` (``pos``), else what they are."""
    found = [n for leaf in leaves[:3] for n, v in list(names.items()) if v is leaf and not n.startswith("_")][:3]
    if found:
        return " or ".join(dict.fromkeys(found))
    return "the tensors made to require grad (not parameters) that they come from"


def _graph_only(obj: Any, device: torch.device) -> int:
    """Bytes ``obj`` keeps only through autograd graphs (saved for backward), parameters and other
    leaves that require grad left out (their modules keep them anyway)."""
    with_graphs = _bytes(obj, device, grads=False)  # a leaf's .grad is its module's, not saved for backward
    own = _bytes(obj, device, graphs=False, grads=False)
    leaves: set[int] = set()
    with torch._C.DisableTorchFunctionSubclass():
        for t in held_tensors(obj, _DEPTH, {}, grads=False):
            if issubclass(type(t), torch.Tensor) and t.is_leaf and t.requires_grad:
                leaves.update(k for k, _ in storages_of_tensor(t))
    return sum(b for k, b in with_graphs.items() if k not in own and k not in leaves)


def holding(name: str, obj: Any, device: torch.device, names: Mapping[str, Any] | None = None,
            nbytes: int | None = None, source: str | None = None) -> Holding:
    """How ``obj`` (the notebook's ``name``) holds its memory on ``device``: see the module's
    docstring. ``names``: the notebook's namespace (to name the module whose weights are copied);
    ``nbytes``: what ``obj`` holds on ``device``, where the caller has it already (the holders'
    listing: :func:`vramnb._holders.storages_held` at the same depth); ``source``: the code that made
    ``obj`` where it is known (a cell): computing under ``torch.no_grad()`` is offered only where that code
    runs no backward."""
    names = names or {}
    path, node, owner, owner_path = name, obj, None, ""
    here = sum(_bytes(obj, device).values()) if nbytes is None else nbytes
    for _ in range(_DEPTH):
        found = _parts(node, _MAX_PARTS)  # many entries: the container is the holder
        if not here or not found or _exceptions(node) or _has_graph(node):
            break
        found = [(suffix, v) for suffix, v in found if not issubclass(type(v), _NOTHING)]
        if len(found) == 1:  # the only part that can hold anything holds what its parent holds: no second walk
            (suffix, v), held = found[0], here
        elif found:
            parts = [(suffix, v, sum(_bytes(v, device).values())) for suffix, v in found]
            suffix, v, held = max(parts, key=lambda p: p[2])
        else:
            break
        if held < _SHARE * here:
            break
        if issubclass(type(node), _CONTAINERS) and issubclass(type(v), torch.Tensor):
            break  # a container's one large tensor: the container (an object's attribute) is what keeps it
        owner, owner_path = node, path
        path, node, here = path + suffix, v, held
    return _classify(path, node, owner, owner_path, here, device, names, source)


def _classify(path: str, node: Any, owner: Any, owner_path: str, nbytes: int, device: torch.device,
              names: Mapping[str, Any], source: str | None = None) -> Holding:
    size = format_bytes(nbytes)
    from ._bounded import bounded_sentence

    bounded = bounded_sentence(path, node, owner, owner_path, nbytes)
    if bounded:  # a container that stops growing at its capacity: not a leak, never emptied
        return Holding(path, "bounded", nbytes, bounded)
    cached = _cache_of(path, node, owner, owner_path, nbytes, device)
    if cached is not None:
        return cached
    excs = _exceptions(node)
    if excs:
        kept, via = _traceback_locals(excs, device)
        if via:
            n = len(excs)
            kinds = list(dict.fromkeys(type(e).__name__ for e in excs))
            which = ", ".join(kinds[:3]) + (", …" if len(kinds) > 3 else "")
            what = (f"{path} is {_a(which)}" if n == 1 and node is excs[0] else
                    f"{path} keeps {n} exception{'s' if n != 1 else ''} ({which})")
            shown = ", ".join(kept[:4]) + (f" and {len(kept) - 4} more" if len(kept) > 4 else "")
            store = f"`{path}.append(str(e))`" if issubclass(type(node), list) else "`str(e)`"
            return Holding(path, "exceptions", nbytes, (
                f"{what}: an exception keeps its traceback, and the traceback the frames it was raised through "
                f"with their local variables ({shown}: {format_bytes(via)}): keep the message instead ({store}), "
                f"or drop the traceback before keeping the exception (`e.__traceback__ = None`, or "
                f"`e.with_traceback(None)`)"))
    graphs = [t for t in _tensors(node) if t.grad_fn is not None] if _has_graph(node) else []
    if graphs and (owner is not None or not issubclass(type(node), torch.Tensor)):  # a name's own: kept_graph_note's
        saved = _graph_only(node, device)
        if saved:
            n = len(graphs)
            if _second_order(graphs):  # made by a differentiable backward: kept for a further gradient on purpose
                return Holding(path, "graphs", nbytes, (
                    f"{path} keeps {n} tensor{'s' if n != 1 else ''} whose autograd graph was made by a backward with "
                    f"create_graph=True (its nodes are backward formulas' own: {_second_order(graphs)}), which keeps "
                    f"what both passes saved ({format_bytes(saved)}) for a second-order gradient; where none is "
                    "needed, create_graph=False returns plain gradients (first-order: they keep nothing)"))
            # `.item()` only where every such tensor is one number (a loss); else detached tensors
            numbers = "numbers (`.item()`) or " if all(t.numel() == 1 for t in graphs) else ""
            # a tensor code made require grad (not a parameter) in the graphs: its gradients are wanted, so
            # computing under no_grad is no fix, and detaching is one only where no gradient goes through
            # no_grad only where the code that made them is known and runs no backward (a Hessian's rows made
            # by autograd.grad cannot be computed under no_grad)
            leaves = input_leaves(graphs)
            how = "detached tensors (`.detach()`) instead" + (
                f" where no gradient has to reach {_leaf_names(leaves, names)} through them" if leaves else "")
            if source is not None and not backward_calls(source)[0]:
                how += ", or compute what is stored under `torch.no_grad()` if no backward needs it"
            return Holding(path, "graphs", nbytes, (
                f"{path} keeps {n} tensor{'s' if n != 1 else ''} with an autograd graph (grad_fn), which "
                f"{'keep' if n != 1 else 'keeps'} what {'their' if n != 1 else 'its'} forward saved for backward "
                f"({format_bytes(saved)}): store {numbers}{how}"))
    entries = container_items(node) if issubclass(type(node), _CONTAINERS) else []
    copies = [e for e in entries if _state_dict_like(e)] if entries and _state_dict_like(entries[0]) else []
    if len(copies) >= 2 and len(copies) == len(entries) and all(set(c) == set(copies[0]) for c in copies):
        of = _weights_of(copies, names)
        if of is not None and not _copies_share(copies, names[of]):
            each = format_bytes(nbytes // len(copies))
            return Holding(path, "weight copies", nbytes, (
                f"{path} keeps {len(copies)} copies of {of}'s weights ({of}.state_dict()), about {each} each "
                f"({size}): keep only the copies you will load (the last and the best: replace, don't add), or "
                f"save each to disk (`torch.save`) and keep its file name"))
    if owner is not None and issubclass(type(owner), type):
        attr = path[len(owner_path) + 1:]
        mutable = issubclass(type(node), (list, dict, set, collections.deque))
        empty = "{}" if type(node) is dict else "[]" if type(node) is list else f"{type(node).__name__}()"
        through, clearer = _class_registry(owner, attr)
        if through and mutable:  # the class's own code adds to it through the class: a registry on purpose
            fix = (f"{owner_path}'s own code adds to it through the class ({through}), a registry of every "
                   f"instance: empty it when a set of them is discarded or rebuilt (`{path}.clear()`"
                   + (f", or `{owner_path}.{clearer}()`, its own" if clearer else "") + ")")
        else:
            fix = (f"make it an instance attribute (`self.{attr} = {empty}` in `__init__`), or "
                   f"empty it when done (`{path}.clear()`)" if mutable else
                   f"make it an instance attribute, or `del {path}` when done")
        stays = (", so what is added to it through any of them stays until it is removed" if mutable else "")
        return Holding(path, "class attribute", nbytes, (
            f"{path} ({_what(node)}, {size}) is a class attribute: one object for {owner_path} and every "
            f"instance that does not set its own, alive as long as the class{stays}: {fix}"))
    if owner is not None and not issubclass(type(owner), (*_CONTAINERS, torch.nn.Module, torch.optim.Optimizer)) \
            and not issubclass(type(node), (torch.nn.Module, torch.optim.Optimizer)):
        own = sum(_bytes(node, device, graphs=False).values())  # not what a graph reaches (a model's leaves)
        if own * 2 < nbytes:  # mostly what a graph reaches: the graph line's, or a model's own bytes
            return Holding(path, "", nbytes, "")
        return _object_state(path, node, owner, owner_path, own)
    if owner is None and not issubclass(type(node), (*_CONTAINERS, torch.Tensor, torch.nn.Module,
                                                         torch.optim.Optimizer, type)) and not is_tooling(node):
        return _object_parts(path, node, _parts(node), device)
    if issubclass(type(node), torch.nn.Module) and any(_class_has(type(node), m) for m in ("reset", "clear")):
        # a metric module: its states are lists and dicts in plain attributes (a model's lists filled by hooks
        # are hook_advice's, a module without reset() the re-run line's own Module advice)
        from .._holder_entries import items_of

        states = [(s, v) for s, v, _ in items_of(node)
                  if issubclass(type(v), (list, dict, collections.deque)) and _tensors(v)]
        if states:
            return _object_parts(path, node, states, device)
    return Holding(path, "", nbytes, "")


def _cache_of(path: str, node: Any, owner: Any, owner_path: str, nbytes: int, device: torch.device) -> Holding | None:
    """A dict that caches per example of its owner, a data set (full at one entry per example: not a
    leak), or keyed by sizes (grows with each new key): ``node`` itself, or, for a module or a plain
    object, the dict attribute that holds at least half of its ``nbytes``."""
    from ._bounded import keyed_cache_sentence, per_example_sentence

    def check(p: str, d: Any, o: Any, op: str, b: int) -> Holding | None:
        said = per_example_sentence(p, d, o, op, b)
        if said:
            return Holding(p, "bounded", b, said)
        said = keyed_cache_sentence(p, d, b, f"self.{p.rsplit('.', 1)[-1]}" if o is not None and "." in p else None)
        return Holding(p, "keyed cache", b, said) if said else None

    if type(node) is dict:
        return check(path, node, owner, owner_path, nbytes)
    if issubclass(type(node), (*_CONTAINERS, torch.Tensor, type, torch.optim.Optimizer)) or not nbytes:
        return None
    try:
        d = object.__getattribute__(node, "__dict__")
    except (AttributeError, TypeError):
        return None
    if type(d) is not dict:
        return None
    for k, v in list(d.items())[:256]:
        if type(k) is str and type(v) is dict and v:
            b = sum(_bytes(v, device).values())
            if b * 2 >= nbytes:
                return check(f"{path}.{k}", v, node, path, b)
    return None


def _object_state(path: str, node: Any, owner: Any, owner_path: str, nbytes: int) -> Holding:
    """An attribute of a plain object holds the bytes (``loader.samples``)."""
    size = format_bytes(nbytes)
    cls = type(owner).__name__
    reset = next((m for m in ("reset", "clear") if _class_has(type(owner), m)), None)
    attr = path.rsplit(".", 1)[-1]
    users = _methods_reading(type(owner), attr)
    if reset:
        fix = (f"{cls} has a {reset}(): call `{owner_path}.{reset}()` once what it holds has been used (e.g. "
               f"each epoch, after its result is read)")
    elif users:  # what the object works with (a writer's buffer, a model's probe): deleting it breaks the object
        shown = ", ".join(f"{m}()" for m in users[:3]) + (f" and {len(users) - 3} more" if len(users) > 3 else "")
        return Holding(path, "object state", nbytes, (
            f"{path} ({_what(node)}, {size}) is an attribute of {owner_path} ({_a(cls)}) that {cls}'s own methods "
            f"read ({shown}): it is what {owner_path} works with, and goes when {owner_path} does (`del "
            f"{owner_path}` and every other reference to it once done), or have {cls} keep less of it"))
    else:
        fix = (f"`del {path}` lets it go where it is no longer needed (or have {cls}'s code not keep it: a local "
               f"variable, or `del self.{path.rsplit('.', 1)[-1]}` once used)")
    return Holding(path, "object state", nbytes, (
        f"{path} ({_what(node)}, {size}) is an attribute of {owner_path} ({_a(cls)}): it stays alive as long as "
        f"{owner_path} does, not only while it is used: {fix}"))


def _object_parts(path: str, node: Any, candidates: list[tuple[str, Any]], device: torch.device) -> Holding:
    """An object whose several attributes hold the bytes (``ssim.preds`` and ``ssim.target``); the
    bytes said are those of the attributes named, each storage once."""
    parts = [(s, v) for s, v in candidates if _tensors(v)]
    if not parts:
        return Holding(path, "", 0, "")
    held: dict[int, int] = {}
    reached: dict[int, int] = {}
    for _, v in parts[:3]:
        held.update(_bytes(v, device, graphs=False))  # what they hold themselves, not what a graph reaches
        reached.update(_bytes(v, device))
    nbytes = sum(held.values())
    if nbytes * 2 < sum(reached.values()):
        return Holding(path, "", 0, "")  # mostly what a graph reaches: the graph line's, or a model's own bytes
    size = format_bytes(nbytes)
    cls = type(node).__name__
    shown = " and ".join(f"{path}{s} ({_what(v)})" for s, v in parts[:3]) + (
        f" and {len(parts) - 3} more" if len(parts) > 3 else "")
    grows = [s for s, v in parts if issubclass(type(v), (list, dict, collections.deque))]
    reset = next((m for m in ("reset", "clear") if _class_has(type(node), m)), None)
    if reset:
        fix = f"{cls} has a {reset}(): call `{path}.{reset}()` once its result is read (e.g. at the end of each epoch)"
    elif grows:
        empties = ", ".join(f"`{path}{s}.clear()`" for s in grows[:3])
        fix = f"{cls} has no reset(): empty them once the result is read ({empties})"
        if any(_class_has(type(node), m) for m in ("compute", "update")):  # a metric: a value per batch may do
            fix += (", or, where the result can be accumulated, keep a running value per batch (a sum and a count) "
                    "instead of every entry")
    else:
        fix = f"`del {path}{parts[0][0]}` lets it go once it is no longer needed"
    what = (f"{path} ({_a(cls)}) keeps {size} in {shown}" +
            (": containers, which keep what is added to them until it is removed" if grows else ""))
    return Holding(path, "object state", nbytes, f"{what}: {fix}")


def holding_note(name: str, obj: Any, device: torch.device, names: Mapping[str, Any] | None = None,
                 nbytes: int | None = None, source: str | None = None) -> str | None:
    """The one-line mechanism and fix for ``name`` (:func:`holding`), ``None`` where no kind applies
    or reading the object failed."""
    try:
        h = holding(name, obj, device, names, nbytes, source)
    except Exception:  # noqa: BLE001 - a note must never break a report
        return None
    return h.sentence or None


def holding_notes(names: Mapping[str, Any], device: torch.device, rows: list[Any], limit: int = 3) -> list[str]:
    """For ``%vram``: the notes of the ``limit`` largest listed names (``rows``: holders with ``name``,
    ``nbytes`` and ``hidden``) holding at least 1 MiB, one line each where a kind applies."""
    out = []
    for h in [r for r in rows if not getattr(r, "hidden", False) and r.nbytes >= _MIN][:limit]:
        if h.name not in names:
            continue
        from ._hook_owners import hook_advice

        try:  # an object whose methods are hooks on the notebook's modules: removing the hooks comes first
            hooks = hook_advice(h.name, names[h.name], names)
        except Exception:  # noqa: BLE001 - a note must never break %vram
            hooks = None
        note = hooks and f"{h.name} holds {format_bytes(h.nbytes)}: {hooks}" or holding_note(
            h.name, names[h.name], device, names, h.nbytes)
        if note:
            out.append(note)
    return out
