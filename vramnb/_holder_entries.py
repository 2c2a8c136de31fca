"""The entries of what a name holds, and the parts of what one object holds.

* :func:`parts_of` splits the storages an object keeps alive into disjoint,
  named parts: a module's parameters, gradients, buffers and other attributes;
  an optimizer's state, parameters, gradients and other attributes; a tensor
  itself, its gradient, and for a result that requires grad the parameters
  its graph keeps, their gradients and the rest of the graph. Every report row
  (a name or an entry) is split by this one helper (:func:`detail_of`).
* :func:`entries_of` expands a container (dicts, lists, tuples, namedtuples,
  ``UserDict``, ``ModuleDict``/``ModuleList``/``ParameterDict``/``ParameterList``,
  plain objects' attributes, ``__slots__`` too, and the plain attributes of
  modules and optimizers) into the entries that hold the memory, named as a
  user types them: ``models['a']``, ``trainer.model``, ``cache[3]``,
  ``net.blocks[0].cache``. The walk is the one
  :func:`vramnb._holders.storages_held` makes, level by level, so the entries
  of a name add up to its total: within one name a storage reached from two
  entries counts for the first entry (in the container's order; a module's or
  optimizer's own parameters, gradients, buffers and state count for it before
  its attributes), and the others say whose it is.

Bytes are ints; nothing here formats except :func:`describe`, through
:func:`vramnb._units.format_bytes`.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import heapq
import itertools
from collections import UserDict
from collections.abc import Callable, Container, Iterable
from collections.abc import Set as AbstractSet
from typing import Any

import torch

from ._optim_state import state_tensors
from ._graph import (
    _MODULE_OWN,
    _SKIP_TYPES,
    container_items,
    graph_tensors,
    is_tooling,
    object_attributes,
    plain_leaves,
)
from ._storages import storages_of_tensor
from ._units import format_bytes

__all__ = ["MAX_ENTRIES", "MAX_ITEMS", "MAX_LEVELS", "Entry", "KeysBut", "describe", "detail_of", "entries_of",
           "first_items", "items_of", "own_storages", "parts_of"]

MAX_LEVELS = 3  # entry levels shown beneath a name
MAX_ENTRIES = 8  # entries shown per container; the rest are summed in one "… and N more entries" row
MAX_ITEMS = 1000  # items walked one by one per container; the memory of the rest is summed without walking each

Held = dict[int, int]  # storage key -> bytes
Canon = Callable[[Held], Held]  # renames storages over another one's bytes to that one


def _own(tensors: Iterable[Any], device: torch.device, on_device: Callable[..., bool]) -> set[int]:
    out: set[int] = set()
    for t in tensors:
        if t is None:
            continue
        try:
            for key, st in storages_of_tensor(t):
                if on_device(st, device):
                    out.add(key)
        except Exception:  # noqa: BLE001, S112 - a strange tensor holds nothing we can see
            continue
    return out


# what ``backward(create_graph=True)`` leaves: each gradient's own autograd graph (it refers back
# to the parameter, a cycle gc cannot break: it lives until the gradient is set to None)
GRAD_GRAPH = "autograd graph of gradients (a .grad with a graph)"


def _grad_graphs(leaves: list[Any]) -> list[Any]:
    """The tensors the autograd graphs of ``leaves``' gradients keep (those gradients have one
    after ``backward(create_graph=True)``), saved tensors never unpacked."""
    seen: dict[int, Any] = {}
    out = []
    for p in leaves:
        g = getattr(p, "grad", None)
        if g is not None and g.grad_fn is not None:
            out += [t for t in graph_tensors(g.grad_fn, seen) if isinstance(t, torch.Tensor)]
    return out


def parts_of(obj: Any, held: Held, device: torch.device, canon: Canon,
             on_device: Callable[..., bool]) -> list[tuple[str, Held]]:
    """``[(part name, {storage key: bytes})]``: ``held`` (what ``obj`` keeps
    alive, keys already through ``canon``) split into disjoint parts, in order,
    each storage in the first part that claims it; what no part claims is the
    last one (``other attributes``, ``autograd graph`` or ``other``); a tensor's
    first part is ``parameters`` (an ``nn.Parameter``) or ``tensors``; a result
    that requires grad splits the parameters its graph keeps (and their
    gradients) from the rest of the graph (saved activations). Parts
    that hold nothing are left out. The parts' bytes add up to ``held``'s."""
    named: list[tuple[str, set[int]]] = []
    rest = "other"
    try:
        if issubclass(type(obj), torch.nn.Module):
            params = list(obj.parameters())
            named = [("parameters", _own(params, device, on_device)),
                     ("gradients", _own((p.grad for p in params), device, on_device)),
                     ("buffers", _own(obj.buffers(), device, on_device)),
                     (GRAD_GRAPH, _own(_grad_graphs(params), device, on_device))]
            rest = "other attributes"
        elif issubclass(type(obj), torch.optim.Optimizer):
            params = [p for g in obj.param_groups for p in g["params"]]
            state = state_tensors(obj)
            named = [("state", _own(state, device, on_device)),
                     ("parameters", _own(params, device, on_device)),
                     ("gradients", _own((p.grad for p in params), device, on_device)),
                     (GRAD_GRAPH, _own(_grad_graphs(params), device, on_device))]
            rest = "other attributes"
        elif issubclass(type(obj), torch.Tensor):
            own = "parameters" if isinstance(obj, torch.nn.Parameter) else "tensors"
            named = [(own, _own([obj], device, on_device))]
            if obj.is_leaf:
                named.append(("gradients", _own([obj.grad], device, on_device)))
            elif obj.grad_fn is not None:  # the graph's parameters (its leaves, or saved) are not its activations
                params = [t for t in graph_tensors(obj.grad_fn, {}, grads=False) if isinstance(t, torch.nn.Parameter)]
                named += [("parameters", _own(params, device, on_device)),
                          ("gradients", _own((p.grad for p in params), device, on_device))]
            rest = "autograd graph"
    except Exception:  # noqa: BLE001 - an object that raises when inspected: all of it is "other"
        named = []
    out: list[tuple[str, Held]] = []
    left = dict(held)
    for name, keys in named:
        part = {k: left.pop(k) for k in canon({k: 0 for k in keys}) if k in left}
        if part:
            out.append((name, part))
    if left:
        out.append((rest, left))
    return out


def own_storages(obj: Any, device: torch.device, canon: Canon, on_device: Callable[..., bool]) -> set[int]:
    """What ``obj`` counts for itself before its entries: a (non-container)
    module's parameters, their gradients and its buffers; an optimizer's state,
    parameters and gradients; nothing for others."""
    try:
        if issubclass(type(obj), torch.optim.Optimizer):
            params = [p for g in obj.param_groups for p in g["params"]]
            state = state_tensors(obj)
            keys = _own([*state, *params, *(p.grad for p in params)], device, on_device)
        elif issubclass(type(obj), torch.nn.Module) and not issubclass(type(obj), _CONTAINER_MODULES):
            params = list(obj.parameters())
            keys = _own([*params, *(p.grad for p in params), *obj.buffers()], device, on_device)
        else:
            return set()
    except Exception:  # noqa: BLE001 - a traversal that raises: its attributes count first
        return set()
    return set(canon({k: 0 for k in keys}))


def _key_text(k: Any) -> str:
    """A dict key as the user types it: ``'a'``, ``3``, ``('x', 1)``; others by type."""
    if isinstance(k, enum.Enum):
        return str(k)
    plain = (str, int, float, bool, bytes, type(None))
    if type(k) in plain or (type(k) is tuple and all(type(x) in plain for x in k)):
        r = repr(k)
        return r if len(r) <= 40 else r[:39] + "…"
    return f"<{type(k).__name__}>"


def _attr(name: str) -> str:
    return f".{name}" if name.isidentifier() else f".__dict__[{_key_text(name)}]"


def _module_path(prefix: str) -> str:
    """``layers.0.attn`` (a submodule's name) as typed: ``.layers[0].attn``."""
    out = ""
    for part in prefix.split(".") if prefix else ():
        out += f"[{part}]" if part.isdigit() else _attr(part) if part.isidentifier() else f"[{part!r}]"
    return out


_CONTAINER_MODULES = (torch.nn.ModuleDict, torch.nn.ModuleList, torch.nn.ParameterDict, torch.nn.ParameterList)


def items_of(obj: Any) -> list[tuple[str, Any, int]]:
    """``[(path suffix, value, levels of the walk it costs)]`` of a container,
    in its order; ``[]`` for what is not one (tensors, modules, optimizers,
    sets, tooling); for a module, the plain attributes of it and its submodules
    (``.acts``, ``.encoder.cache``), never its parameters, buffers or submodules
    themselves (its row splits those); for an optimizer, its attributes but
    ``state``, ``param_groups`` and ``defaults``. The costs follow :func:`vramnb._graph.held_tensors`: an
    item of a dict, list, tuple or object's ``__dict__`` is one level down, a
    ``UserDict``'s item two (through its ``data``)."""
    return first_items(obj, None)[0]


def first_items(obj: Any, limit: int | None) -> tuple[list[tuple[str, Any, int]], int]:
    """The first ``limit`` (all if ``None``) of :func:`items_of`, and how many
    there are: a dict's, list's or tuple's other items are counted, not named."""
    try:
        if issubclass(type(obj), _CONTAINER_MODULES):
            out = [(f"[{_key_text(k)}]", v, 1) for k, v in obj.items()] if hasattr(obj, "items") else \
                [(f"[{i}]", v, 1) for i, v in enumerate(obj)]
        elif issubclass(type(obj), torch.nn.Module):  # its plain attributes: a cache, a list a hook appends to
            out = [(_module_path(prefix) + _attr(name), v, 1)
                   for prefix, m in obj.named_modules() for name, v in list(vars(m).items())
                   if name not in _MODULE_OWN and not isinstance(v, (bool, int, float, str, type(None)))]
        elif issubclass(type(obj), torch.optim.Optimizer):  # its plain attributes: an EMA copy, a cache
            out = [(_attr(name), v, 1) for name, v in list(vars(obj).items())
                   if name not in ("state", "param_groups", "defaults")]
        elif issubclass(type(obj), (torch.Tensor, _SKIP_TYPES)) or is_tooling(obj):
            out = []
        elif issubclass(type(obj), dict):  # dict's own items: a subclass's overridden items() is user code
            pairs = list(dict.items(obj))
            return [(f"[{_key_text(k)}]", v, 1) for k, v in pairs[:limit]], len(pairs)
        elif issubclass(type(obj), tuple) and isinstance(getattr(type(obj), "_fields", None), tuple):
            out = [(_attr(f), v, 1) for f, v in zip(type(obj)._fields, container_items(obj))]
        elif issubclass(type(obj), (list, tuple)):  # the built-in's items, not a subclass's __iter__ (user code)
            values = container_items(obj)
            return [(f"[{i}]", v, 1) for i, v in enumerate(values[:limit])], len(values)
        elif issubclass(type(obj), (set, frozenset)):
            out = []  # no name to type for a set's element: the set is one entry
        else:
            out = []
            for name, v in object_attributes(obj):
                if issubclass(type(obj), UserDict) and name == "data" and isinstance(v, dict):
                    out += [(f"[{_key_text(k)}]", x, 2) for k, x in list(dict.items(v))]
                else:
                    out.append((_attr(name), v, 1))
        return out[:limit], len(out)
    except Exception:  # noqa: BLE001 - a container that raises when listed is one entry
        return [], 0


@dataclasses.dataclass
class Entry:
    """One entry of a name's tree (before it becomes a :class:`Holder` row)."""

    path: str
    obj: Any
    held: Held  # every storage it keeps alive
    counted: Held = dataclasses.field(default_factory=dict)  # those counted for it (first entry to reach them)
    shared: dict[str, int] = dataclasses.field(default_factory=dict)  # owner path -> bytes it shares, counted there
    shared_keys: dict[str, set[int]] = dataclasses.field(default_factory=dict)  # owner path -> the storages shared
    unique: int = 0  # bytes deleting this entry alone frees
    children: list[Entry] = dataclasses.field(default_factory=list)
    lumped: int = 0  # items past MAX_ITEMS, not walked one by one
    lumped_bytes: int = 0  # what they hold that no walked entry counts
    lumped_unique: int = 0
    lumped_tensors: Held = dataclasses.field(default_factory=dict)  # lumped plain tensors' storages (bulk entries)
    plain: bool = False  # a plain leaf tensor read in bulk (vramnb._graph.plain_leaves): its one storage is all it holds


WalkPlain = Callable[[list[Any]], "tuple[list[int], list[int]] | list[Held] | None"]


def entries_of(path: str, obj: Any, held: Held, unique_keys: Container[int], depth: int,
               walk: Callable[[Any, int], Held], own: Callable[[Any], set[int]] = lambda obj: set(),
               walk_plain: WalkPlain | None = None) -> Entry:
    """The tree of entries beneath the name ``path`` holding ``obj`` (whose
    storages are ``held``, walked ``depth`` levels deep; ``unique_keys``: those
    no other name keeps): an :class:`Entry` for the name, its ``children`` the
    entries (none when ``obj`` is no container). ``walk(value, depth)``: the
    storages a value keeps alive, keys canonical; ``own(value)``: the storages
    a value counts for itself before its entries (a module's parameters,
    gradients and buffers, which its attributes may alias). A container's first
    ``MAX_ITEMS`` items are walked one by one; what the rest hold is summed in
    its ``lumped_bytes``. ``walk_plain(values)``, if given: what ``walk`` gives each of
    ``values``, plain leaf tensors (:func:`vramnb._graph.plain_leaves`), read in bulk, or
    ``None`` where they need ``walk`` one by one."""
    root = Entry(path, obj, held)
    owner: dict[int, str] = {}
    _expand(root, depth, walk, own, owner, {id(obj)}, last=True, walk_plain=walk_plain)
    _set_unique(root, unique_keys)
    return root


def _expand(node: Entry, depth: int, walk: Callable[[Any, int], Held], own: Callable[[Any], set[int]],
            owner: dict[int, str], ancestors: set[int], last: bool = False, walk_plain: WalkPlain | None = None) -> None:
    """Fill ``node``'s children, ``counted``, ``shared`` and ``lumped`` (``owner``:
    storage key -> the path of the entry it counts for; ``last``: no entry
    after this one reads ``owner``)."""
    for k in own(node.obj):
        if k in node.held and k not in owner:
            owner[k] = node.path
            node.counted[k] = node.held[k]
    children: list[Entry] = []
    if depth > 0:
        items, n_items = first_items(node.obj, MAX_ITEMS)
        node.lumped = max(0, n_items - MAX_ITEMS)
        if _plain_entries(node, items, owner, children, walk_plain):
            items = []  # all of them read in bulk
        for suffix, value, cost in items:
            if id(value) in ancestors or depth - cost < 0:
                continue
            held = walk(value, depth - cost)
            if not held:
                continue
            child = Entry(node.path + suffix, value, held)
            _expand(child, depth - cost, walk, own, owner, ancestors | {id(value)}, walk_plain=walk_plain)
            if (len(child.children) == 1 and child.children[0].held.keys() == child.held.keys()
                    and not isinstance(value, (torch.nn.Module, torch.optim.Optimizer, torch.Tensor))):
                child = child.children[0]  # a container whose memory is all in one entry: that entry names it
            children.append(child)
    node.children = children
    _count_rest(node, owner, set().union(*(c.held.keys() for c in children)) if children else set(), last)
    for c in children:
        node.counted.update(c.counted)
    if children:  # a container reports what its entries share with entries elsewhere
        if any(c.shared_keys for c in children):
            inside = {node.path} | {c.path for c in _walk(node)}
            for c in children:  # a storage several entries share with one owner counts once
                for o, keys in c.shared_keys.items():
                    if o not in inside:
                        node.shared_keys.setdefault(o, set()).update(keys)
        for o, keys in node.shared_keys.items():
            node.shared[o] = sum(node.held.get(k, 0) for k in keys)
    node.children.sort(key=lambda c: -sum(c.counted.values()))


def _plain_entries(node: Entry, items: list[tuple[str, Any, int]], owner: dict[int, str], children: list[Entry],
                   walk_plain: WalkPlain | None) -> bool:
    """Entries for ``items`` when every one is a plain leaf tensor (one level down), read in
    bulk: what :func:`_expand` makes of each (a tensor has no entries and claims nothing of its
    own first: its storage counts for it, or it shares it with the entry that counts it), in
    order, appended to ``children``. False (nothing done) otherwise."""
    if walk_plain is None or len(items) < 2 or any(cost != 1 for _, _, cost in items):
        return False
    path = node.path
    values = [v for _, v, _ in items]
    if not plain_leaves(values, {}):
        return False
    found = walk_plain(values)
    if found is None:
        return False
    if not isinstance(found, tuple):
        helds = found
    else:  # one storage each, as read
        keys, sizes = found
        keep = MAX_ENTRIES + 2  # more than the rows shown: the "… and N more entries" row stays as it is
        if (len(items) > keep and len(set(keys)) == len(keys) and owner.keys().isdisjoint(keys)
                and set(map(type, values)) == {torch.Tensor}):
            # each item keeps one storage of its own, none shared: it counts for that item whatever the order, so
            # only the largest become entries (the rows are sorted by bytes, ties in item order: a stable sort), and
            # the rest are lumped, counted for the container (_count_rest) as the items past MAX_ITEMS are
            top = sorted(heapq.nlargest(keep, range(len(items)), key=sizes.__getitem__))
            for i in top:
                suffix, value, _ = items[i]
                children.append(Entry(path + suffix, value, {keys[i]: sizes[i]}, counted={keys[i]: sizes[i]},
                                      plain=True))
                owner[keys[i]] = path + suffix
            node.lumped += len(items) - keep
            node.lumped_tensors = dict(zip(keys, sizes))  # (its split: tensors; the entries' keys come off there)
            return True
        helds = [{k: n} for k, n in zip(keys, sizes)]
    get = owner.get
    for (suffix, value, _), held in zip(items, helds):
        if not held:
            continue
        p = path + suffix
        if len(held) == 1:  # (always, but where canon renamed two storages to one)
            [(k, n)] = held.items()
            o = get(k)
            if o is None:
                owner[k] = p
                children.append(Entry(p, value, held, counted={k: n}, plain=True))
            else:
                children.append(Entry(p, value, held, shared={o: n}, shared_keys={o: {k}}, plain=True))
            continue
        child = Entry(p, value, held, plain=True)
        fresh: Held = {}
        for k, n in held.items():
            o = get(k)
            if o is None:
                fresh[k] = n
            elif k not in child.shared_keys.setdefault(o, set()):
                child.shared_keys[o].add(k)
                child.shared[o] = child.shared.get(o, 0) + n
        owner.update(dict.fromkeys(fresh, p))
        child.counted = fresh
        children.append(child)
    return True


def _count_rest(node: Entry, owner: dict[int, str], via_children: set[int], last: bool) -> None:
    """What no child counted (a leaf's memory, or storages reached only from
    the container itself): a storage no entry counts yet counts for ``node``
    (in ``held``'s order, after what the object claims itself); one an entry
    elsewhere counts, not through a child, is shared with that entry. By set
    operations and dict copies, in C: a list of a million tensors is one row."""
    held = node.held
    taken = owner.keys() & held.keys()  # (iterates the smaller)
    skip = taken | node.counted.keys()
    elsewhere = taken - node.counted.keys() - via_children  # (set operations, in C)
    if elsewhere:  # in held's order: the order of node.shared
        for k in (held if len(elsewhere) > 1 else elsewhere):
            if k in elsewhere:
                o = owner[k]
                if k not in node.shared_keys.setdefault(o, set()):
                    node.shared_keys[o].add(k)
                    node.shared[o] = node.shared.get(o, 0) + held[k]
    if len(skip) == len(held) and skip >= held.keys():  # every storage counted already (a list's entries)
        fresh: Held = {}
    else:
        fresh = dict(held)  # a copy of a dict is made in C
        for k in skip:
            fresh.pop(k, None)
    if node.lumped:
        node.lumped_bytes += sum(fresh.values())
    if not last:
        owner.update(dict.fromkeys(fresh, node.path))
    if node.counted:
        node.counted.update(fresh)
    else:
        node.counted = fresh


def _walk(node: Entry) -> Iterable[Entry]:
    for c in node.children:
        yield c
        yield from _walk(c)


class KeysBut:
    """The keys of ``held`` but those in ``but``, without making that set (a
    name's storages that no other name keeps: a million of them, a few shared)."""

    __slots__ = ("but", "held")

    def __init__(self, held: Held, but: set[int]) -> None:
        self.held = held
        self.but = but

    def __contains__(self, k: object) -> bool:
        return k in self.held and k not in self.but


def _lumped_unique(node: Entry, keys: Container[int], via: AbstractSet[int]) -> int:
    """``sum(n for k, n in node.counted.items() if k in keys and k not in via)``.
    In C where ``keys`` is a :class:`KeysBut` over ``node.held``: ``counted``
    (:func:`_expand`) is what ``node`` claimed of ``held`` and its children's
    ``counted``; when those lie in ``held`` too, all of ``counted`` does."""
    d = node.counted
    if (isinstance(keys, KeysBut) and keys.held is node.held
            and all(c.counted.keys() <= node.held.keys() for c in node.children)):
        drop = (d.keys() & keys.but) | (d.keys() & via)  # (set operations, in C)
        return sum(d.values()) - sum(map(d.__getitem__, drop))
    if isinstance(keys, (set, frozenset)):
        return sum(map(d.__getitem__, (d.keys() & keys) - via))
    return sum(n for k, n in d.items() if k in keys and k not in via)


def _set_unique(node: Entry, unique_keys: Container[int]) -> None:
    """An entry's ``unique``: its storages that no other name and no other
    entry beside it keeps (``del models['a']`` frees them)."""
    reached: set[int] = set().union(*(c.held.keys() for c in node.children))
    multi: set[int] = set()  # storages two entries beside each other reach
    if sum(len(c.held) for c in node.children) != len(reached):
        reach = collections.Counter(itertools.chain.from_iterable(c.held for c in node.children))
        multi = {k for k, n in reach.items() if n > 1}
    if node.lumped:
        node.lumped_unique = _lumped_unique(node, unique_keys, reached)
    for c in node.children:
        if isinstance(unique_keys, KeysBut):  # (set operations, in C: a list of a million entries)
            mine = (c.held.keys() & unique_keys.held.keys()) - unique_keys.but - multi
        elif isinstance(unique_keys, (set, frozenset)):
            mine = (c.held.keys() & unique_keys) - multi
        else:
            mine = {k for k in c.held if k in unique_keys and k not in multi}
        c.unique = sum(map(c.held.__getitem__, mine))
        if c.children or c.lumped:  # (a leaf's is set: it has nothing beneath it)
            _set_unique(c, mine)


def _merged_parts(obj: Any, held: Held, device: torch.device, canon: Canon, on_device: Callable[..., bool],
                  children: list[Entry], lumped_tensors: Held | None = None) -> list[tuple[str, Held]]:
    """The split of ``held``: :func:`parts_of` for an object, the sum of its
    entries' splits for a container (what no entry counts is ``other``; ``lumped_tensors``:
    the storages of plain tensors lumped without entries, ``tensors``)."""
    if not children or issubclass(type(obj), (torch.nn.Module, torch.optim.Optimizer, torch.Tensor)):
        return parts_of(obj, held, device, canon, on_device)
    merged: dict[str, Held] = {}
    left = dict(held)
    if lumped_tensors:
        part = {k: left.pop(k) for k in lumped_tensors.keys() & left.keys()}
        if part:
            merged["tensors"] = part
    for c in children:
        if c.plain:  # parts_of's split of a plain leaf: its storage is the tensor's own
            own = "parameters" if type(c.obj) is torch.nn.Parameter else "tensors"  # (plain: one of the two)
            part = {k: left.pop(k) for k in c.counted if k in left}
            if part:
                merged.setdefault(own, {}).update(part)
            continue
        for name, part in _merged_parts(c.obj, c.counted, device, canon, on_device, c.children, c.lumped_tensors):
            part = {k: left.pop(k) for k in part if k in left}
            if part:
                merged.setdefault(name, {}).update(part)
    if left:
        if "other" in merged:
            merged["other"].update(left)
        else:
            merged["other"] = left
    return list(merged.items())


def _shape(t: torch.Tensor) -> str:
    layout = "" if t.layout == torch.strided else f" {str(t.layout).replace('torch.', '')}"
    out = f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}{layout}"
    try:  # a view keeps its whole base storage alive: say so where it is larger than the view's own bytes
        if t.layout == torch.strided and type(t) in (torch.Tensor, torch.nn.Parameter) and not t.is_nested:
            whole = t.untyped_storage().nbytes()
            if whole > t.numel() * t.element_size():
                out += f" · a view of a {format_bytes(whole)} storage"
    except Exception:  # noqa: BLE001 - meta, fake or odd tensors: the shape alone
        pass
    return out


def detail_of(obj: Any, held: Held, device: torch.device, canon: Canon, on_device: Callable[..., bool],
              children: list[Entry] | None = None, shared: dict[str, int] | None = None,
              kept_by: list[str] | None = None, lumped_tensors: Held | None = None) -> str:
    """A row's detail: shape and dtype for a tensor, then the parts of ``held``
    (:func:`parts_of`, summed over the entries for a container), what it
    shares with entries before it, and the other names that keep some of it."""
    try:
        parts = _merged_parts(obj, held, device, canon, on_device, children or [], lumped_tensors)
        if issubclass(type(obj), torch.Tensor):
            own = "parameters" if isinstance(obj, torch.nn.Parameter) else "tensors"
            one = obj.is_leaf  # a leaf's own gradient; a graph's are its parameters' gradients
            rest = describe([("gradient" if n == "gradients" and one else n, p) for n, p in parts if n != own],
                            shared, kept_by)
            return _shape(obj) + (f" · {rest}" if rest else "")
        return describe(parts, shared, kept_by)
    except Exception:  # noqa: BLE001 - a strange object: its row without a detail
        return ""


def _some(names: list[str]) -> str:
    if len(names) <= 3:
        return ", ".join(names)
    return ", ".join(names[:2]) + f" and {len(names) - 2} more"


def describe(parts: list[tuple[str, Held]], shared: dict[str, int] | None = None,
             kept_by: list[str] | None = None) -> str:
    """``parameters 256 MiB · gradients 256 MiB · shares 4 MiB with models['a']
    (counted there) · also kept by opt``."""
    text = [f"{name} {format_bytes(sum(p.values()))}" for name, p in parts]
    if shared:
        owners = sorted(shared, key=lambda o: -shared[o])
        text.append(f"shares {format_bytes(sum(shared.values()))} with {_some(owners)} (counted there)")
    if kept_by:
        text.append(f"also kept by {_some(kept_by)}")
    return " · ".join(text)
