"""Who keeps a cell's new storages where the holders' walk does not look: the interpreter's own
referrer lists (``gc.get_referrers``) followed up from the tensors to a root the notebook can
see (a name of the notebook, another module's global), with the path named
(``model[0]._forward_pre_hooks[3]._pruning_methods[1].mask``, ``embed_frames.__defaults__[0]``,
a key of ``reporter.tensor_name``, ``_callbacks['ev'][4]`` through a bound method) and the fix
that fits the holder found on the path (checked on the objects: a pruning method, a tensor's
or a module's hook dict, a function's default argument, a dict's key, a bound method in a
registry, a ``functools`` cache).

Bounded: only the given tensors (a cell's grown storages, at report time), at most
:data:`MAX_TARGETS` of them, :data:`MAX_DEPTH` levels and :data:`MAX_FRONTIER` objects a level.
Nothing is called on the user's objects but the interpreter's accessors (``type()``,
``gc.get_referents``, ``object.__getattribute__`` of ``__dict__``): no user code runs.
"""

from __future__ import annotations

import functools
import gc
import itertools
import logging
import sys
import threading
import types
import weakref
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from .._storages import storages_of_tensor
from .._units import format_bytes

__all__ = ["live_storages", "Holding", "holding_paths", "kept_elsewhere", "GrowthTrace", "MAX_DEPTH"]

MAX_TARGETS = 64
MAX_DEPTH = 14
MAX_FRONTIER = 256


def live_storages(device: torch.device) -> dict[int, tuple[int, list[Any]]]:
    """``{storage key: (bytes, [the live tensors over it])}`` of every tensor the garbage
    collector tracks whose storage is on ``device`` (one pass over ``gc.get_objects()``)."""
    out: dict[int, tuple[int, list[Any]]] = {}
    with torch._C.DisableTorchFunctionSubclass():
        for o in gc.get_objects():
            if not issubclass(type(o), torch.Tensor):
                continue
            try:
                for key, st in storages_of_tensor(o):
                    d = st.device
                    if d.type != device.type or (device.index is not None and d.index not in (None, device.index)):
                        continue
                    got = out.get(key)
                    if got is None:
                        out[key] = (st.nbytes(), [o])
                    else:
                        got[1].append(o)
            except Exception:  # noqa: BLE001 - a tensor without storage (fake, meta, sparse compressed)
                continue
    return out


def _dict_of(o: Any) -> Any:
    try:
        return object.__getattribute__(o, "__dict__")
    except Exception:  # noqa: BLE001
        return None


_TENSOR_SLOTS = ("_backward_hooks", "_post_accumulate_grad_hooks", "grad", "grad_fn")


def _attrs_of(o: Any) -> list[tuple[str, Any]]:
    """``(attribute, value)`` of ``o`` read without running its code: its ``__dict__``, and for a
    tensor the hook dicts and gradient PyTorch keeps in C (read through ``TensorBase``'s getters)."""
    out: list[tuple[str, Any]] = []
    d = _dict_of(o)
    if isinstance(d, dict):
        out += [(k, v) for k, v in list(d.items()) if isinstance(k, str)]
    if issubclass(type(o), torch.Tensor):
        for n in _TENSOR_SLOTS:
            desc = torch._C.TensorBase.__dict__.get(n)
            try:
                out.append((n, desc.__get__(o)))  # type: ignore[union-attr]
            except Exception:  # noqa: BLE001
                continue
    return out


_MODULE_DICTS = ("_modules", "_parameters", "_buffers")


class Holding:
    """One path from a root the notebook sees down to kept tensors: ``path`` (code-like text),
    ``nbytes`` (bytes of the grown storages reached through it), ``kind`` (``"module hook"``,
    ``"pruning"``, ``"tensor hook"``, ``"default argument"``, ``"dict key"``, ``"bound method"``,
    ``"cache"``, ``"bounded deque"``, ``"other"``), ``advice`` (the fix for that kind)."""

    def __init__(self, root: str, chain: list[Any]) -> None:
        self.root, self.chain = root, chain  # chain: root object ... target tensor
        self.nbytes = 0
        self.others: set[str] = set()  # the paths like it (another index) whose bytes count here
        self.path, self.kind, self.advice, self.cut = _describe(root, chain)

    @property
    def where(self) -> str:
        """The path, with how many more like it (another entry of the same containers) count here."""
        return self.cut + (f" (and {len(self.others)} more like it)" if self.others else "")

    def line(self) -> str:
        return f"{self.where} keeps {format_bytes(self.nbytes)} more each run ({self.advice})"


def _edge(parent: Any, child: Any) -> str | None:
    """How ``parent`` refers to ``child``, as code after the parent's text (``None``: through
    an object that needs no text, such as an instance's ``__dict__``)."""
    tp = type(parent)
    if issubclass(tp, dict):
        if getattr(parent, "_vramnb_module", False):  # never set: kept for the type checker
            return None
        for k, v in list(parent.items()):
            if v is child:
                return f".{k}" if isinstance(k, str) and k.isidentifier() and getattr(parent, "_vramnb_attrs", False) \
                    else f"[{k!r}]" if isinstance(k, (str, int, float, bool)) or k is None else "[...]"
        for k in list(parent.keys()):
            if k is child:
                return " (a key)"
        return "[...]"
    if issubclass(tp, (list, tuple, deque)):
        for i, v in enumerate(list(parent)):
            if v is child:
                return f"[{i}]"
        return "[...]"
    if tp is types.FunctionType:
        if parent.__defaults__ is child:
            return ".__defaults__"
        if parent.__kwdefaults__ is child:
            return ".__kwdefaults__"
        if parent.__closure__ is child:
            return ".__closure__"
        if parent.__globals__ is child:
            return ".__globals__"
    if tp is types.MethodType:
        if parent.__self__ is child:
            return ".__self__"
        return ".__func__"
    if tp is types.CellType:
        return ".cell_contents"
    if tp is functools._lru_cache_wrapper:  # type: ignore[attr-defined]
        return " (its cache)"
    d = _dict_of(parent)
    if d is child:
        return None
    for k, v in _attrs_of(parent):
        if v is child:
            return f".{k}"
    for slot in getattr(tp, "__slots__", ()) or ():
        try:
            if object.__getattribute__(parent, slot) is child:
                return f".{slot}"
        except Exception:  # noqa: BLE001
            continue
    return f" (a {tp.__name__})"


def _text(root: str, chain: list[Any]) -> str:
    """The chain as code: dict edges under an object's ``__dict__`` read as attributes; from the
    last logger on the chain, ``logging.getLogger(name)``."""
    out = root
    i = 0
    for j in range(len(chain) - 1, -1, -1):
        if type(chain[j]) is logging.Logger:
            out, i = f"logging.getLogger({chain[j].name!r})", j
            break
    if i == 0 and root in ("threading._active", "threading._limbo") and len(chain) > 1 \
            and issubclass(type(chain[1]), threading.Thread):
        out, i = f"the thread {chain[1].name!r}", 1  # a running thread, by its name rather than its ident
    while i + 1 < len(chain):
        parent, child = chain[i], chain[i + 1]
        if _dict_of(parent) is child and i + 2 < len(chain) and issubclass(type(child), dict):
            for k, v in list(child.items()):
                if v is chain[i + 2]:
                    out += f".{k}" if isinstance(k, str) else f"[{k!r}]"
                    break
            else:
                out += " (attributes)"
            i += 2
            continue
        if type(parent) is types.FunctionType and parent.__closure__ is child and i + 2 < len(chain) \
                and type(chain[i + 2]) is types.CellType:
            try:
                var = parent.__code__.co_freevars[list(parent.__closure__ or ()).index(chain[i + 2])]
            except (ValueError, IndexError):
                var = "?"
            out += f" (a closure of {parent.__qualname__}, its `{var}`)"
            i += 3
            continue
        e = _edge(parent, child)
        if e in {f".{n}" for n in _MODULE_DICTS} and issubclass(type(parent), torch.nn.Module) \
                and i + 2 < len(chain):
            k = next((k for k, v in list(child.items()) if v is chain[i + 2]), None)
            if isinstance(k, str):
                out += f"[{k}]" if k.isdigit() else f".{k}"
                i += 2
                continue
        if e is not None:
            out += e
        i += 1
    import re

    return re.sub(r"\._(?:modules|parameters|buffers)\['(\w+)'\]",
                  lambda m: f"[{m.group(1)}]" if m.group(1).isdigit() else f".{m.group(1)}", out)


def _param_of_default(fn: types.FunctionType, value: Any) -> str | None:
    code = fn.__code__
    defaults = fn.__defaults__ or ()
    names = code.co_varnames[:code.co_argcount]
    for name, d in zip(names[len(names) - len(defaults):], defaults):
        if d is value:
            return name
    for k, v in (fn.__kwdefaults__ or {}).items():
        if v is value:
            return k
    return None


def _describe(root: str, chain: list[Any]) -> tuple[str, str, str, str]:
    """(path text, kind, advice, the path to the holder) for ``chain``, the objects from the root down to a tensor."""
    path = _text(root, chain)
    from torch.nn.utils import prune

    if root in ("threading._active", "threading._limbo") and len(chain) > 2 \
            and issubclass(type(chain[1]), threading.Thread):
        th = chain[1]
        return (path, "thread",
                f"the thread {th.name!r} is still running ({'a daemon' if th.daemon else 'not a daemon'}), and a "
                "running thread keeps its target, its arguments and what they refer to until it ends: make it end "
                "(a threading.Event it checks; a put() with a timeout where it feeds a queue nobody reads any more) "
                "and join() it", _text(root, chain[:3]))
    for i, o in enumerate(chain):
        tp = type(o)
        prev = chain[i - 1] if i else None
        # a hook dict of a module or a tensor: the object before it owns it
        if issubclass(tp, dict) and prev is not None:
            owner = chain[i - 2] if i >= 2 and _dict_of(chain[i - 2]) is prev else prev
            attr = next((k for k, v in _attrs_of(owner) if v is o), None)
            if isinstance(attr, str) and attr.endswith("_hooks") and len(chain) > i + 1:
                hook = chain[i + 1]
                owner_text = _text(root, chain[:chain.index(owner) + 1])
                end = i + 2
                if type(hook) is types.FunctionType and i + 4 < len(chain) and chain[i + 2] is hook.__closure__:
                    end = i + 5  # the hook's closure variable that keeps the tensor
                cut = _text(root, chain[:end])
                if issubclass(type(hook), prune.BasePruningMethod):
                    tname = getattr(hook, "_tensor_name", None) or "weight"
                    return (path, "pruning",
                            f"{owner_text}'s pruning hook ({type(hook).__name__}) keeps a mask for every round; once a "
                            f"round is done make it permanent with `prune.remove({owner_text}, '{tname}')`, which "
                            f"leaves one pruned {tname}", cut)
                n = len(o)
                if issubclass(type(owner), torch.Tensor):
                    return (path, "tensor hook",
                            f"{owner_text} has {n} hooks registered and keeps each, with what it refers to, until it is "
                            "removed: keep the handle `register_hook` returns and call `handle.remove()` after "
                            "backward, or register the hook once (or on a per-call copy of the tensor: the hooks die "
                            "with it)", cut)
                return (path, "module hook",
                        f"{owner_text} has {n} {attr.lstrip('_').replace('_', ' ')[:-1]}s and keeps each, with what it "
                        "refers to, until it is removed: keep the handle each `register_..._hook` returns and call "
                        "`handle.remove()` when done, or register it once", cut)
        if tp is types.FunctionType and i + 1 < len(chain) and chain[i + 1] is o.__defaults__ \
                or tp is types.FunctionType and i + 1 < len(chain) and chain[i + 1] is o.__kwdefaults__:
            value = chain[i + 2] if i + 2 < len(chain) else None
            p = _param_of_default(o, value)
            # a mutable default that the calls add to; a default bound per function (`w=w`) is not shared
            if p is not None and i + 3 < len(chain) and issubclass(type(value), (list, dict, set, deque)):
                return (path, "default argument",
                        f"`{p}`, a default argument of {o.__name__}, is one {type(value).__name__} shared by every "
                        f"call, which adds to it: `def {o.__name__}(..., {p}=None)` and `{p} = "
                        f"{type(value).__name__}() if {p} is None else {p}` inside", _text(root, chain[:i + 3]))
        if issubclass(tp, dict) and i + 1 < len(chain):
            child = chain[i + 1]
            if any(k is child for k in list(o.keys())):
                holder = _text(root, chain[:i + 1])
                return (path, "dict key",
                        f"the tensors are keys of {holder}, and a dict keeps its keys alive: key it by `id(t)` or a "
                        "name, or use `torch.utils.weak.WeakTensorKeyDictionary()`, or clear it once read",
                        f"the keys of {holder}")
        if tp is types.MethodType and i + 1 < len(chain) and chain[i + 1] is o.__self__:
            holder = _text(root, chain[:i])
            info = next((x for x in chain[:i] if type(x) is weakref.finalize._Info), None)  # type: ignore[attr-defined]
            if info is not None:  # a finalizer's callback: a weak method would never call it (Python's weakref docs)
                waits_for = info.weakref() if callable(getattr(info, "weakref", None)) else None
                obj = type(o.__self__).__name__
                return (path, "finalizer",
                        f"weakref.finalize keeps its callback {o.__func__.__qualname__}, a bound method of the "
                        + (f"{obj} it waits for, so that {obj} is never collected and its finalizer never runs: "
                           if waits_for is o.__self__ else
                           f"{obj}, until the {type(waits_for).__name__} it waits for is collected: ")
                        + "give weakref.finalize a function that does not refer to the object, with what it needs "
                        "as arguments (`weakref.finalize(self, close, self.resource)`, `close` a module-level function "
                        "or staticmethod), or call the method yourself when done",
                        f"{_text(root, chain[:i + 1])} (a finalizer's bound method of a {obj})")
            return (path, "bound method",
                    f"{holder} keeps the bound method {o.__func__.__qualname__}, and through it its object: keep "
                    "`weakref.WeakMethod(obj.method)` there (call it to get the method back, None once the object is "
                    "gone) or remove it when the object is no longer used",
                    f"{_text(root, chain[:i + 1])} (a bound method of a {type(o.__self__).__name__})")
        if issubclass(tp, logging.LogRecord):
            holder = _text(root, chain[:max(i - 1, 1)])
            return (path, "log records",
                    f"{holder} keeps each log record, and a record keeps its arguments (the tensors themselves): log a "
                    "number or a shape instead (`t.item()`, `tuple(t.shape)`), or keep only the formatted message "
                    "(`self.format(record)`) in the handler", holder)
        if tp is functools._lru_cache_wrapper:  # type: ignore[attr-defined]
            fn = _text(root, chain[:i + 1])
            info = o.cache_info()  # the C wrapper's own counters: no user code
            if info.maxsize is not None and info.maxsize > 0:
                if info.currsize >= info.maxsize:
                    return (path, "bounded cache",
                            f"{fn} is a functools cache with maxsize={info.maxsize} and full ({info.currsize} "
                            f"entries): each new call's result drops the least recently used one, so it no longer "
                            f"grows; not a leak; where it holds too much, a smaller maxsize", fn)
                return (path, "bounded cache",
                        f"{fn} is a functools cache with maxsize={info.maxsize} holding {info.currsize} entries: it "
                        f"grows until it holds {info.maxsize} and then stops (each new result drops the least "
                        f"recently used); not a leak; where that is more than the memory available, a smaller "
                        f"maxsize, or `{fn}.cache_clear()`", fn)
            return (path, "cache",
                    f"{fn} is a functools cache keeping each call's result: "
                    f"`{fn}.cache_clear()`, or a small maxsize", fn)
        if tp is itertools.cycle:
            name = _text(root, chain[:i + 1])
            return (path, "cycle",
                    f"{name} is an itertools.cycle: it saves every element it returns so that it can repeat them "
                    "(its documentation), so it keeps every item of the first pass; loop forever with a generator "
                    "that starts the iterable again instead "
                    "(`def forever(it):` / `    while True:` / `        yield from it`), or re-create `iter(loader)` "
                    "when it raises StopIteration", name)
        if type(o).__module__ == "itertools" and tp.__name__ in ("_tee", "_tee_dataobject"):
            name = _text(root, chain[:i + 1])
            return (path, "tee",
                    f"{name} comes from itertools.tee: the items one copy has read are kept until every other copy "
                    "has read them too, so a copy that is read less (or never) keeps all of them; iterate the "
                    "iterable itself where one copy is enough, or delete the copy that lags behind (`del` its name)",
                    name)
        if tp is types.CellType and i >= 2 and type(chain[i - 2]) is types.FunctionType:
            fn = chain[i - 2]
            try:
                var = fn.__code__.co_freevars[list(fn.__closure__ or ()).index(o)]
            except (ValueError, IndexError):
                var = "?"
            if i + 1 < len(chain) and not any(type(c) is dict and str(_edge(c, chain[chain.index(c) + 1])).endswith("_hooks']")
                                              for c in chain[:i]):
                return (path, "closure",
                        f"{fn.__qualname__}'s closure keeps `{var}`: drop the function where it is stored when done",
                        _text(root, chain[:i + 2]))
    return path, "other", "remove it from there once it is no longer needed", path


def _namespace_copy(d: Any, names: Mapping[str, Any]) -> bool:
    """Whether ``d`` is a copy of the notebook's namespace (vramnb's own snapshot of the names, a
    caller's ``dict(user_ns)``): a dict holding at least half of ``names``' bindings, the same objects."""
    if type(d) is not dict or len(names) < 2 or len(d) * 2 < len(names):
        return False
    same = 0
    for k, v in list(names.items()):
        if d.get(k, d) is v:
            same += 1
    return same * 2 >= len(names)


def _roots(names: Mapping[str, Any]) -> dict[int, tuple[str, Any]]:
    """Root containers: the notebook's namespace (by the mapping's ids of its values) and other modules' dicts."""
    out: dict[int, tuple[str, Any]] = {}
    for mname, mod in list(sys.modules.items()):
        d = getattr(mod, "__dict__", None) if isinstance(mod, types.ModuleType) else None
        if isinstance(d, dict) and mname != "__main__" and mname.split(".")[0] != "vramnb":
            out[id(d)] = (mname, d)
    return out


def holding_paths(targets: Iterable[tuple[int, list[Any]]], names: Mapping[str, Any],
                  ignore: Iterable[Any] = (), own: Mapping[int, str] | None = None,
                  each: dict[int, Holding] | None = None,
                  orphans: list[Any] | None = None) -> tuple[list[Holding], int, int]:
    """The paths from a root down to the tensors of ``targets`` (``(bytes, tensors)`` per storage).

    A root is a name of ``names`` (the notebook's namespace, IPython's own names excluded by the
    caller) or a global of another module (``module.name``). Returns ``(holdings, bytes no path was
    found for, bytes not followed)`` (only the :data:`MAX_TARGETS` largest storages are followed),
    the holdings with the most bytes first; each storage counts for the first path found to one of
    its tensors. ``ignore``: objects that are not holders (the caller's lists). ``own``: target index ->
    a name that is not a root for it (the name being asked about); ``each``, if given, gets target
    index -> its own path (targets in the order given, all followed). ``orphans``, if given, gets the
    functions, bound methods and ``functools.partial`` objects met on the way up from the storages no path
    was found for that no object the garbage collector sees refers to (not even a frame): kept from C; and the
    contexts of custom autograd Functions met on the way (an attribute set on ``ctx``)."""
    targets = list(targets) if each is not None else sorted(targets, key=lambda t: -t[0])
    chosen = targets[:MAX_TARGETS]
    rest = sum(b for b, _ in targets[MAX_TARGETS:])
    ns_by_val: dict[int, str] = {}
    for n, v in list(names.items()):
        ns_by_val.setdefault(id(v), n)
    mods = _roots(names)
    skip = {id(x) for x in ignore} | {id(names), id(targets), id(chosen), id(sys._getframe())}  # no local
    # holds the frame: a frame in its own locals is a reference cycle that keeps every target alive until gc
    for pair in targets:  # the caller's own tuples and lists of tensors
        skip |= {id(pair), id(pair[1])}
    # BFS upward from all targets together, keeping every referrer edge met (bounded)
    objs: dict[int, Any] = {}
    for _b, ts in chosen:
        for t in ts:
            objs[id(t)] = t
    parents: dict[int, list[int]] = {}
    roots: dict[int, str] = {}  # id of an object -> the root text naming it
    frontier = list(objs.values())
    skip |= {id(frontier), id(objs)}
    depth = 0
    found: dict[int, tuple[str, list[Any]]] = {}
    expanded: set[int] = set()  # the objects whose referrers were asked for
    referred: set[int] = set()  # ... and those of them something (a frame too) refers to

    def resolve(si: int, ts: list[Any]) -> None:
        """The nearest root above storage ``si``'s tensors in the edges met so far, if any."""
        prev: dict[int, int] = {id(t): 0 for t in ts}
        level = [id(t) for t in ts]
        while level:
            hits = [oid for oid in level if oid in roots and (own is None or roots[oid] != own.get(si))]
            if hits:  # a root that is an object of its own before a list or dict of references to it
                oid = min(hits, key=lambda h: issubclass(type(objs[h]), (list, tuple, dict, set)))
                chain = [objs[oid]]
                while prev[oid]:
                    oid = prev[oid]
                    chain.append(objs[oid])
                found[si] = (roots[id(chain[0])], chain)
                return
            nxt_level = []
            for oid in level:
                for p in parents.get(oid, ()):
                    if p not in prev:
                        prev[p] = oid
                        nxt_level.append(p)
            level = nxt_level

    while True:
        for o in frontier:  # a notebook name holds it directly
            nm = ns_by_val.get(id(o))
            if nm is not None and names.get(nm) is o:
                roots.setdefault(id(o), nm)
        for si, (_b, ts) in enumerate(chosen):
            if si not in found:
                resolve(si, ts)
        if len(found) == len(chosen) or not frontier or depth >= MAX_DEPTH:
            break  # every storage has its root, or the walk's bound is reached
        refs = gc.get_referrers(*frontier)
        skip.add(id(refs))
        fids = {id(o) for o in frontier}
        expanded.update(fids)
        nxt: list[Any] = []
        skip.add(id(nxt))  # the walk's own lists are no holders
        for r in refs:
            rid = id(r)
            if rid not in skip or type(r) is types.FrameType and r is not sys._getframe():
                referred.update(id(c) for c in gc.get_referents(r) if id(c) in fids)
            if rid in skip or type(r) is types.FrameType:
                continue
            if type(r) is dict and _namespace_copy(r, names):
                skip.add(rid)
                continue
            if rid in mods:  # another module's global
                mname, d = mods[rid]
                for k, v in list(d.items()):
                    if id(v) in fids:
                        roots.setdefault(id(v), f"{mname}.{k}")
                continue
            for c in gc.get_referents(r):
                if id(c) in fids:
                    parents.setdefault(id(c), []).append(rid)
            if rid not in objs:
                objs[rid] = r
                nxt.append(r)
        del refs
        frontier = nxt[:MAX_FRONTIER]
        skip.add(id(frontier))
        depth += 1
    out: dict[str, Holding] = {}
    seen_paths: list[Holding] = []
    unfound = 0
    for si, (b, _ts) in enumerate(chosen):
        if si not in found:
            unfound += b
            continue
        root, chain = found[si]
        h = Holding(root, chain)
        if each is not None:
            each[si] = Holding(root, chain)
        # group the per-call entries of one holder: a path to it that differs only in an index
        key = _group(h.cut)
        if key in out:
            out[key].nbytes += b
            if h.cut != out[key].cut:
                out[key].others.add(h.cut)
        else:
            h.nbytes = b
            out[key] = h
            seen_paths.append(h)
    if orphans is not None and unfound:
        from ._interp_holders import is_hook_dict

        callables = (types.FunctionType, types.MethodType, functools.partial)
        orphans += [objs[i] for i in expanded - referred if i in objs and (type(objs[i]) in callables or
                                                                            is_hook_dict(objs[i]))]
        # a custom autograd Function's ctx met on the way up: its attributes are in a cycle with its output
        ctxs = [objs[i] for i in expanded if i in objs and issubclass(type(objs[i]), torch.autograd.function.BackwardCFunction)]
        orphans += ctxs[:16]
    objs.clear()
    parents.clear()
    return sorted(seen_paths, key=lambda h: -h.nbytes), unfound, rest


def _group(path: str) -> str:
    import re

    return re.sub(r"\[\d+\]", "[*]", path)


#: the start of :func:`kept_elsewhere`'s answer for a container whose tensors (not the container) are kept elsewhere
ENTRIES_KEPT = "(its tensors) "


def kept_elsewhere(names: Mapping[str, Any], asked: list[str], ignore: Iterable[Any] = ()) -> dict[str, str]:
    """What else keeps the objects bound to the names ``asked``: name -> the path from another root
    (``input_image._backward_hooks[3] (a closure of ...)``, the keys of a dict), for those that
    something besides ``names`` itself and the namespaces in ``ignore`` refers to on a path up to a
    root; a name whose object nothing else reaches (deleting it lets the object go, a reference cycle
    of its own at the next collection) is not in the answer. A built-in dict, list or tuple every one
    of whose tensors something else keeps (a copy of a dict a hook fills) is answered with
    :data:`ENTRIES_KEPT` before the path to its first tensor. One walk for all of them."""
    skip = {id(names), *(id(x) for x in ignore)}
    objs = {id(o): (n, o) for n in asked for o in [names.get(n)] if o is not None}
    if not objs:
        return {}
    # the tensors a built-in container holds directly (a dict of features a hook also keeps): deleting the name
    # frees them only where the container is all that keeps them
    entries: dict[int, tuple[str, Any, Any]] = {}
    for n, o in list(objs.values()):
        if type(o) in (dict, list, tuple):
            for v in (dict.values(o) if type(o) is dict else o):
                if issubclass(type(v), torch.Tensor):
                    entries.setdefault(id(v), (n, v, o))
    containers = {id(c) for _, _, c in entries.values()}
    refs = gc.get_referrers(*[o for _, o in objs.values()], *[v for _, v, _ in entries.values()])
    referred: set[int] = set()
    try:
        for r in refs:
            if id(r) in skip or type(r) is types.FrameType or r is refs or _namespace_copy(r, names):
                continue
            inside = id(r) in containers  # the container's own reference to its entry is not another holder
            referred.update(id(c) for c in gc.get_referents(r)
                            if id(c) in objs or (id(c) in entries and not (inside and entries[id(c)][2] is r)))
    finally:
        del refs
    todo = [objs[i] for i in referred if i in objs]
    by_name: dict[str, list[Any]] = {}
    for i, (n, v, _) in entries.items():
        by_name.setdefault(n, []).append((i in referred, v))
    # a container every one of whose tensors something else keeps: its first tensor's path names the holder
    held = [(n, vs[0][1]) for n, vs in by_name.items() if all(k for k, _ in vs)]
    entries.clear()
    if not todo and not held:
        return {}
    each: dict[int, Holding] = {}
    chosen = todo + held
    holding_paths([(1, [obj]) for _, obj in chosen], names,
                  ignore=[*ignore, names, *[names.get(n) for n, _ in held]],
                  own={i: n for i, (n, _) in enumerate(chosen)}, each=each)
    out: dict[str, str] = {}
    for i in sorted(each):  # the object's own holder before its entries'
        out.setdefault(chosen[i][0], each[i].path if i < len(todo) else ENTRIES_KEPT + each[i].path)
    return out


def _identity(key: int, entry: tuple[int, list[Any]]) -> tuple[int, int, int]:
    try:
        ptr = entry[1][0].untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001
        ptr = 0
    return key, ptr, entry[0]


class GrowthTrace:
    """The storages a re-run cell made and still keeps that no name of the listing reaches, by the
    path that keeps them. ``step`` is called at each growing run once the pattern is under way
    (the caller's ``holders()`` time): it remembers the live storages, and on the run that
    completes the pattern follows the new ones' referrers."""

    def __init__(self) -> None:
        # (StorageImpl address, data address, bytes): a storage freed after the snapshot and a new one made
        # at the same StorageImpl address are told apart by where their bytes are
        self._snap: dict[str, set[tuple[int, int, int]]] = {}
        self._atexit: dict[str, int | None] = {}  # atexit's count of registered callbacks at the last call, per cell

    def step(self, key: str, final: bool, names: Mapping[str, Any], hidden: Iterable[Any],
             device: torch.device, ignore: Iterable[Any] = ()) -> tuple[list[Holding], int, int] | None:
        """``None`` before the run that completes the pattern; then :func:`holding_paths`' answer for
        the storages made since the last call for ``key`` that neither ``names`` nor ``hidden``
        (IPython's out-of-sight holders) reach."""
        from .._holders import storages_held

        now = live_storages(device)
        callbacks = _atexit_count()
        before = self._atexit.pop(key, None)
        self._atexit[key] = callbacks
        while len(self._atexit) > 8:
            del self._atexit[next(iter(self._atexit))]
        prev = self._snap.pop(key, None)
        self._snap[key] = {_identity(k, v) for k, v in now.items()}
        while len(self._snap) > 8:  # the cells growing lately only
            del self._snap[next(iter(self._snap))]
        if not final or prev is None:
            now.clear()
            return None
        new = {k: v for k, v in now.items() if _identity(k, v) not in prev}
        now.clear()
        if not new:  # the growth is not in new storages (one resized in place): nothing to follow
            return None
        reached: set[int] = set()
        for o in [*list(names.values()), *hidden]:
            if type(o) in (types.ModuleType, types.FunctionType, type) and not issubclass(type(o), type):
                continue
            try:
                reached.update(storages_held(o, device))
            except Exception:  # noqa: BLE001 - an object the walk cannot read
                continue
        tkeys = {k: v[0] for k, v in new.items() if k not in reached}
        targets = [v for k, v in new.items() if k not in reached]
        new.clear()
        if not targets:
            return [], 0, 0
        orphans: list[Any] = []
        holdings, unfound, rest = holding_paths(targets, names, ignore=[*ignore, targets], orphans=orphans)
        if orphans and unfound:
            from ._interp_holders import kept_from_c

            for h in kept_from_c(orphans, tkeys, device, before, callbacks):
                h.nbytes = min(h.nbytes, unfound)
                unfound -= h.nbytes
                holdings.append(h)  # type: ignore[arg-type]
            holdings.sort(key=lambda h: -h.nbytes)
        return holdings, unfound, rest


def _atexit_count() -> int | None:
    """How many callbacks ``atexit`` holds (its ``_ncallbacks()``, CPython's), ``None`` where unknown."""
    import atexit

    count = getattr(atexit, "_ncallbacks", None)
    try:
        n = count() if callable(count) else None
    except Exception:  # noqa: BLE001
        return None
    return n if type(n) is int else None
