"""Which objects hold device memory: variables, output history, tracebacks.

Walks a namespace (a notebook's ``user_ns``) and finds the tensor storages each
name keeps alive on one device: tensors (and their ``.grad``), modules
(parameters, buffers, gradients), optimizers (state and the parameters they
hold), dicts, sequences and sets, and the ``__dict__`` of plain objects, a
few levels deep, and the autograd graphs of results that require grad (never
running saved-tensor hooks: see :mod:`vramnb._graph`). A name holding a
container (a dict of models, a trainer object, a list of tensors) gets rows
for its entries beneath it, named as the user types them (``models['a']``,
``trainer.model``, ``cache[3]``: :mod:`vramnb._holder_entries`), and every
row splits what it holds into parameters, gradients, buffers, optimizer state
and the rest. A storage shared by
several names (a view, tied weights, a model also held by an optimizer, a leaf
also kept by a graph, one memory reached through two storage objects such as
``torch.from_numpy(t.numpy())``) is counted once in the total and is "not shared" for
none of them: "not shared" is what deleting that name alone frees. Nothing here can fail because of a strange user
object: whatever raises while being inspected is skipped.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import torch

from ._graph import MAX_DEPTH, collector_paused, held_tensors
from ._tracker import cpu_tracker
from ._holder_entries import (
    MAX_ENTRIES,
    MAX_LEVELS,
    Canon,
    Entry,
    KeysBut,
    detail_of,
    entries_of,
    own_storages,
)
from ._render import Rendered, Table
from ._storages import RangeLog, ScanTable, data_range, storages_of_plain, storages_of_tensor
from ._units import format_bytes

__all__ = ["Holder", "HoldersReport", "find_holders", "storages_held"]

_MAX_DEPTH = MAX_DEPTH


def _on_device(st: torch.UntypedStorage, device: torch.device) -> bool:
    return _same_device(st.device, device)


def _same_device(d: torch.device, device: torch.device) -> bool:
    return d.type == device.type and (device.index is None or d.index in (None, device.index))


def storages_held(obj: Any, device: torch.device, depth: int = _MAX_DEPTH,
                  ranges: RangeLog | None = None, known: ScanTable | None = None) -> dict[int, int]:
    """``{storage key: bytes}`` of the storages on ``device`` that ``obj`` keeps alive.

    Follows tensors (a leaf tensor's ``.grad``; for a result that requires
    grad, its autograd graph: the tensors saved for backward, read without
    running saved-tensor hooks, what those hooks packed, and the leaves it
    accumulates into with their gradients), bare storages, the parts of sparse
    tensors and of wrapper subclasses, ``nn.Module`` parameters, buffers and
    gradients, ``torch.optim.Optimizer`` state and parameters, dicts, lists,
    tuples and sets, and the ``__dict__`` of plain objects, up to ``depth``
    levels of nesting (see :func:`vramnb._graph.held_tensors`). Fake and meta
    tensors hold no device memory and are skipped. ``ranges``, if given, gets each
    storage's data range (:func:`vramnb._storages.data_range`), to find storages
    over the same bytes. ``known``: what this call's scan read of the plain tensors it found
    unchanged (:class:`vramnb._storages.ScanTable`), taken for those of them met in a
    container's run instead of reading each again.
    """
    out: dict[int, int] = {}
    with torch._C.DisableTorchFunctionSubclass():  # a subclass's __torch_function__ is the user's code
        _storages_into(out, obj, device, depth, ranges, known)
    return out


def _storages_into(out: dict[int, int], obj: Any, device: torch.device, depth: int,
                   ranges: RangeLog | None, known: ScanTable | None = None) -> None:
    def one(t: Any) -> None:
        for key, st in storages_of_tensor(t):
            if _on_device(st, device):
                out[key] = st.nbytes()
                if ranges is not None:
                    r = data_range(st)
                    if r is not None:
                        ranges.add(key, r)

    def bulk(ts: list[Any]) -> None:  # plain leaves of a container: what one(t) does for each, in C
        if not _plain_into(out, ts, device, ranges, known):
            for t in ts:
                one(t)

    for t in held_tensors(obj, depth, {}, bulk=bulk):
        one(t)


_CDATA = attrgetter("_cdata")
_DEVICE = attrgetter("device")
_IS_CPU = attrgetter("is_cpu")


def _plain_storages_on(ts: list[Any], device: torch.device, ranges: bool = False,
                       known: ScanTable | None = None) -> tuple[Any, ...] | None:
    """``(keys, sizes, starts)`` of the storages of plain leaves ``ts``
    (:func:`vramnb._graph.plain_leaves`), one each, in order, each step in C over the whole
    list (``starts``, their data addresses, only with ``ranges``, else ``None``); ``None``
    where they need the general path: sparse, nested or quantized tensors, storages on
    another device, or anything that raises. Where ``ts`` are a stretch of ``known``'s tensors
    (found unchanged by this call's scan, on ``device``'s type), what the scan read of them."""
    if device.type == "meta":
        return None
    if known is not None and known.device_type == device.type == "cpu":  # (the CPU tracker's scan)
        found = known.lookup(ts)
        if found is not None:
            try:
                return found[0], array("q", found[1]), array("q", found[2]) if ranges else None
            except OverflowError:  # an address past 63 bits: read again below
                pass
    try:
        if device.type == "cpu":  # a plain strided tensor is on its storage's device
            if not all(map(_IS_CPU, ts)):
                return None
            sts = storages_of_plain(ts)
        else:
            sts = storages_of_plain(ts)
            if sts is not None and not all(_same_device(d, device) for d in set(map(_DEVICE, sts))):
                return None
        if sts is None:
            return None
        keys = list(map(_CDATA, sts))
        sizes = array("q", map(torch.UntypedStorage.nbytes, sts))
        starts = array("q", map(torch.UntypedStorage.data_ptr, sts)) if ranges else None
    except Exception:  # noqa: BLE001 - the general path skips what raises, one tensor at a time (and big addresses)
        return None
    return keys, sizes, starts


def _plain_into(out: dict[int, int], ts: list[Any], device: torch.device, ranges: RangeLog | None,
                known: ScanTable | None = None) -> bool:
    """Record the storages of plain leaves ``ts`` (:func:`vramnb._graph.plain_leaves`)
    as :func:`_storages_into` records each one's, in order, each step in C
    over the whole list; False (nothing recorded) where they need the general
    path (see :func:`_plain_storages_on`)."""
    found = _plain_storages_on(ts, device, ranges is not None, known)
    if found is None:
        return False
    keys, sizes, starts = found
    out.update(zip(keys, sizes))
    if ranges is not None and starts is not None:
        if 0 in sizes or 0 in starts:  # no data to compare (data_range): left out
            some = [(k, p, n) for k, p, n in zip(keys, starts, sizes) if p and n]
            keys, starts, sizes = [x[0] for x in some], array("q", [x[1] for x in some]), array("q", [x[2] for x in some])
        ranges.extend(keys, starts, sizes)
    return True


def _same_bytes_once(helds: list[dict[int, int]], ranges: RangeLog, device: torch.device | None = None) -> Canon:
    """Rename, in place, storages over another one's bytes to that one (one
    memory reached through two ``StorageImpl`` objects counts once); returns
    the renaming, for the dicts found later. On CPU, a storage the tracker counts
    as part of a live storage no name reaches (a tensor of ``torch.load(mmap=True)``:
    a slice of the file's mapping, which it keeps mapped whole) is renamed to that
    storage, with its bytes, as the tracker's total counts them."""
    alias = ranges.same_memory()
    tracker = cpu_tracker() if device is not None and device.type == "cpu" else None

    def canon(held: dict[int, int]) -> dict[int, int]:
        inside = tracker.counted_as(held.keys()) if tracker is not None else {}
        if not inside and (not alias or alias.keys().isdisjoint(held.keys())):
            return held
        out: dict[int, int] = {}
        for k, n in held.items():
            if k in alias:
                owner, size = alias[k]
                out[owner] = size
            elif k in inside:
                owner, size = inside[k]
                out[owner] = size
            else:
                out[k] = n
        return out

    for held in helds:
        renamed = canon(held)
        if renamed is not held:
            held.clear()
            held.update(renamed)
    return canon


def _largest(helds: list[dict[int, int]]) -> int:
    return max(range(len(helds)), key=lambda i: len(helds[i]))


def _kept_twice(helds: list[dict[int, int]]) -> set[int]:
    """The storage keys in two or more of ``helds``. Python walks the keys of
    all but the largest (a name holding a million tensors is walked in C)."""
    if len(helds) < 2:
        return set()
    big = _largest(helds)
    count: dict[int, int] = {}
    for i, held in enumerate(helds):
        if i != big:
            for k in held:
                count[k] = count.get(k, 0) + 1
    top = helds[big]
    return {k for k, c in count.items() if c > 1 or k in top}


def _union_bytes(helds: list[dict[int, int]]) -> int:
    """Bytes of the storages in any of ``helds``, each counted once."""
    if not helds:
        return 0
    big = _largest(helds)
    top = helds[big]
    extra: dict[int, int] = {}
    for i, held in enumerate(helds):
        if i != big:
            for k, n in held.items():
                if k not in top:
                    extra[k] = n
    return sum(top.values()) + sum(extra.values())


def _bytes_of(held: dict[int, int], keys: set[int]) -> int:
    """Bytes of the storages of ``held`` whose keys are in ``keys``."""
    if len(keys) < len(held):
        return sum(held[k] for k in keys if k in held)
    return sum(n for k, n in held.items() if k in keys)


def _kind(obj: Any) -> str:
    if issubclass(type(obj), torch.Tensor) and isinstance(obj, torch.nn.Parameter):
        return "Parameter"
    if issubclass(type(obj), torch.Tensor):
        return "Tensor"
    if issubclass(type(obj), torch.nn.Module):
        return "Module"
    if issubclass(type(obj), torch.optim.Optimizer):
        return "Optimizer"
    if issubclass(type(obj), type):  # a class defined in the notebook, holding class attributes
        return "class"
    return type(obj).__name__


@dataclass
class Holder:
    """One name and the memory it keeps alive on the device.

    Attributes:
        name: the variable (or ``(Out, _ __ ___)``, ``(last exception)``).
        kind: ``Tensor``, ``Module``, ``Optimizer``, ``list``...
        nbytes: bytes of all storages it keeps alive.
        unique: bytes that deleting this name alone would free (kept alive by
            no other name or hidden holder).
        detail: shape and dtype, then the split of what it holds
            (parameters, gradients, buffers, optimizer state, autograd graph,
            other attributes), and for an entry what it shares with an
            entry before it.
        hidden: True for holders the user does not see (output history,
            the last exception's traceback).
        entries: for a container, the entries beneath it that hold memory,
            largest first, as :class:`Holder` rows named by their full path
            (``models['a']``, ``trainer.model``). An entry's ``nbytes`` counts
            each storage once, for the first entry (in the container's order)
            that reaches it, so the entries of a row add up to its
            ``nbytes``; its ``unique`` is what deleting that entry alone frees.
        more, more_bytes, more_unique: entries not listed in ``entries``
            (beyond the first few): how many, and their ``nbytes`` and
            ``unique`` summed.
    """

    name: str
    kind: str
    nbytes: int
    unique: int
    detail: str = ""
    hidden: bool = False
    entries: list[Holder] = field(default_factory=list)
    more: int = 0
    more_bytes: int = 0
    more_unique: int = 0


@dataclass
class HoldersReport(Rendered):
    """What holds memory on one device, largest first.

    Attributes:
        device: the device measured.
        holders: :class:`Holder` rows, largest first.
        total: bytes held by all of them together, each storage counted once.
        out_of_sight: bytes only the out-of-sight rows keep alive (``%vram free`` releases them).
        allocated: bytes allocated on the device now (all tensors, also those
            held by no name).
        reserved, total_memory, free, non_pytorch: device state where known
            (on CPU, ``total_memory`` and ``free`` are the host's RAM).
        workspaces: CUDA: bytes of cuBLAS's and cuBLASLt's workspaces, which PyTorch
            takes at the first matrix multiply of each thread and stream and keeps.
        rounding: CUDA: bytes the caching allocator's rounding of each named storage
            up to a 512-byte block adds to ``total``.
    """

    device: str
    holders: list[Holder] = field(default_factory=list)
    total: int = 0
    allocated: int | None = None
    reserved: int | None = None
    total_memory: int | None = None
    free: int | None = None
    non_pytorch: int | None = None
    method: str = ""
    versions: dict[str, str] = field(default_factory=dict)  # what it was measured with
    out_of_sight: int = 0
    notes: list[str] = field(default_factory=list)  # verdicts on what the rows hold (a gradient's graph)
    workspaces: int = 0
    rounding: int = 0

    def _table(self) -> Table:
        t = Table(f"vram · {self.device} · what holds the memory", ("name", "type", "holds", "not shared", "detail"),
                  align="llrrl")
        nested = False
        for h in self.holders:
            nested |= _add_rows(t, h, 0)
        state = []
        if self.allocated is not None:
            state.append(f"allocated {format_bytes(self.allocated)}")
        if self.reserved is not None:
            state.append(f"reserved {format_bytes(self.reserved)}")
        if self.non_pytorch is not None:
            state.append(f"non-PyTorch {format_bytes(self.non_pytorch)}")
        if self.free is not None and self.total_memory is not None:
            where = "host RAM " if self.device == "cpu" else ""
            state.append(f"{where}free {format_bytes(self.free)} of {format_bytes(self.total_memory)}")
        if not self.holders:
            t.note("no variable holds tensors on this device")
        t.note(f"named above: {format_bytes(self.total)} (shared storages counted once)")
        if nested:
            t.note("indented rows are a name's entries: each storage counts for the first entry that reaches it")
        if state:
            t.note("device: " + " · ".join(state))
        if self.rounding:
            t.note(f"the allocator holds the named storages in 512-byte blocks: {format_bytes(self.rounding)} more")
        if self.workspaces:
            t.note(f"cuBLAS's workspaces: {format_bytes(self.workspaces)}, which PyTorch takes at the first matrix "
                   "multiply of each thread and stream and keeps for the process (not a leak; "
                   "torch._C._cuda_clearCublasWorkspaces() frees them)")
        unnamed = (self.allocated or 0) - self.total - self.rounding - self.workspaces
        if self.allocated is not None and unnamed > 0:
            t.note(
                f"{format_bytes(unnamed)} allocated is not found under the names listed "
                "(no row above reaches it: objects this listing does not walk into, such as a module's or a tensor's "
                "hooks, a function's cache or default arguments, "
                "a class attribute of a class from another module, another module's globals or an autograd graph, "
                "or objects no variable reaches; those in a reference cycle waiting for gc, such as an earlier "
                "error's traceback, `%vram free` releases)"
            )
        if self.out_of_sight:
            t.note(f"rows in parentheses keep {format_bytes(self.out_of_sight)} alive out of sight "
                   "(no name above holds it): `%vram free` releases it", warn=True)
        for n in self.notes:
            t.note(n, warn=True)
        if self.method:
            t.note(f"measured by the {self.method}")
        return t

    def to_records(self) -> list[dict[str, Any]]:
        """One record per row, entries after their name's row (with ``parent``,
        the name whose entry it is, and ``level``, 0 for a name)."""
        out: list[dict[str, Any]] = []

        def add(h: Holder, parent: str | None, level: int) -> None:
            rec = {k: v for k, v in vars(h).items() if k != "entries"}
            out.append({**rec, "parent": parent, "level": level})
            for e in h.entries:
                add(e, parent or h.name, level + 1)

        for h in self.holders:
            add(h, None, 0)
        return out


_INDENT = "\u00a0\u00a0"  # no-break spaces: HTML keeps them, so entries are indented in both renderings


def _add_rows(t: Table, h: Holder, level: int) -> bool:
    """Append ``h`` and, indented beneath it, its entries; True if it has any."""
    pad = _INDENT * level
    t.rows.append((pad + h.name, h.kind, format_bytes(h.nbytes), format_bytes(h.unique), h.detail))
    for e in h.entries:
        _add_rows(t, e, level + 1)
    if h.more:
        t.rows.append((pad + _INDENT + f"… and {h.more} more entries", "", format_bytes(h.more_bytes),
                       format_bytes(h.more_unique), ""))
    return bool(h.entries or h.more)


@dataclass
class _Rows:
    """What turning a name's :class:`Entry` tree into rows needs."""

    device: torch.device
    canon: Canon
    max_entries: int
    kept_by: Callable[[Iterable[int], str], list[str]]  # (storage keys, own name) -> the other names keeping any
    root: str = ""

    def detail(self, e: Entry, held: dict[int, int]) -> str:
        return detail_of(e.obj, held, self.device, self.canon, _on_device, e.children, e.shared,
                         self.kept_by(e.held, self.root), e.lumped_tensors)

    def entries(self, node: Entry, level: int) -> tuple[list[Holder], int, int, int]:
        """Rows of ``node``'s entries (``level``: 1 beneath a name), the first
        ``max_entries`` listed, and ``(how many, bytes, not shared)`` of the
        rest, with the items not walked one by one (past ``MAX_ITEMS``)."""
        kids = node.children
        shown = kids if len(kids) <= self.max_entries + 1 else kids[:self.max_entries]
        rows = []
        for e in shown:
            row = Holder(e.path, _kind(e.obj), sum(e.counted.values()), e.unique, self.detail(e, e.counted))
            if level < MAX_LEVELS:
                row.entries, row.more, row.more_bytes, row.more_unique = self.entries(e, level + 1)
            elif e.children:  # below the last level shown: its entries are summed in its "more" row
                row.more = len(e.children) + e.lumped
                row.more_bytes = sum(sum(c.counted.values()) for c in e.children) + e.lumped_bytes
                row.more_unique = sum(c.unique for c in e.children) + e.lumped_unique
            rows.append(row)
        rest = kids[len(shown):]
        return (rows, len(rest) + node.lumped, sum(sum(e.counted.values()) for e in rest) + node.lumped_bytes,
                sum(e.unique for e in rest) + node.lumped_unique)


class HolderRows(list):  # type: ignore[type-arg]
    """The :class:`Holder` rows of :func:`find_holders`, with ``total``: the
    bytes all of them keep alive together, each storage counted once; and
    ``out_of_sight``: the bytes only out-of-sight holders keep alive (what
    ``%vram free`` gives back), each storage counted once."""

    total: int = 0
    out_of_sight: int = 0
    blocks: int = 0  # CUDA: ``total`` as the caching allocator's blocks hold it (each storage rounded up to 512 B)


def find_holders(
    namespace: Mapping[str, Any],
    device: torch.device,
    *,
    hidden: Mapping[str, tuple[str, Any]] | None = None,
    skip: Iterable[str] = (),
    limit: int | None = None,
    entries: bool = True,
    max_entries: int = MAX_ENTRIES,
    known: ScanTable | None = None,
) -> HolderRows:
    """Rank the names in ``namespace`` (and the out-of-sight ``hidden`` holders)
    by the device memory they keep alive.

    Args:
        namespace: name → object (a notebook's ``user_ns``).
        device: the device whose storages count.
        hidden: out-of-sight holders, name → (kind shown, object), e.g.
            ``{"Out": ("output history", [...])}``.
        skip: names in ``namespace`` not to list (IPython's own variables);
            what they keep alive still counts as kept by another name.
        limit: keep only the largest ``limit`` rows.
        entries: expand the containers the (kept, not out-of-sight) names
            hold into their entries (:attr:`Holder.entries`), up to
            ``MAX_LEVELS`` levels beneath the name.
        max_entries: entries listed per container; the rest are summed in
            :attr:`Holder.more`, ``more_bytes``, ``more_unique``.
        known: what the scan just made read of the plain tensors it found unchanged
            (:class:`vramnb._storages.ScanTable`, from :meth:`vramnb._tracker.StorageTracker.scan`):
            taken for those met in containers instead of reading each again (the same rows).

    Returns:
        :class:`Holder` rows, largest first (a :class:`HolderRows` whose
        ``total`` is the bytes of all listed rows together). A row's
        ``unique`` ("not shared") is what deleting that name alone frees: the
        storages it keeps alive that no other name, listed or skipped, and no
        hidden holder keeps alive (storages reachable from it and from no
        other root; a leaf only another variable's graph keeps is that
        variable's).
    """
    with torch._C.DisableTorchFunctionSubclass(), collector_paused():  # __torch_function__ is the user's code
        return _find_holders(namespace, device, hidden, skip, limit, entries, max_entries, known)


def _find_holders(namespace: Mapping[str, Any], device: torch.device, hidden: Mapping[str, tuple[str, Any]] | None,
                  skip: Iterable[str], limit: int | None, entries: bool, max_entries: int,
                  known: ScanTable | None = None) -> HolderRows:
    skip = set(skip)
    ranges = RangeLog()
    found: list[tuple[str, str, Any, dict[int, int], bool]] = []
    others: list[dict[int, int]] = []  # what the skipped names keep: never listed, but they keep memory alive
    for name, obj in list(namespace.items()):
        if obj is namespace:
            continue
        held = storages_held(obj, device, ranges=ranges, known=known)
        if not held:
            continue
        if name in skip:
            others.append(held)
        else:
            found.append((name, _kind(obj), obj, held, False))
    for name, (kind, obj) in (hidden or {}).items():
        held = storages_held(obj, device, ranges=ranges, known=known)
        if held:
            found.append((f"({name})", kind, obj, held, True))
    canon = _same_bytes_once([r[3] for r in found] + others, ranges, device)
    twice = _kept_twice([r[3] for r in found] + others)  # storages more than one root keeps
    rows = HolderRows()
    kept: dict[int, tuple[Any, dict[int, int]]] = {}  # id(row) -> (object, storages)
    for name, kind, obj, held, is_hidden in found:
        total = sum(held.values())
        row = Holder(name, kind, total, total - _bytes_of(held, twice), "", is_hidden)
        kept[id(row)] = (obj, held)
        rows.append(row)
    rows.total = _union_bytes([r[3] for r in found])
    if device.type == "cuda":  # the allocator's blocks: every request rounded up to 512 bytes
        union: dict[int, int] = {}
        for r in found:
            union.update(r[3])
        rows.blocks = sum(-(-n // 512) * 512 for n in union.values())
    visible = [r[3] for r in found if not r[4]]
    top = visible[_largest(visible)] if visible else {}
    lost: dict[int, int] = {}  # what only out-of-sight rows keep
    for held in (r[3] for r in found if r[4]):
        for k, n in held.items():
            if k not in top and not any(k in v for v in visible if v is not top):
                lost[k] = n
    rows.out_of_sight = sum(lost.values())
    rows.sort(key=lambda h: -h.nbytes)
    if limit:
        del rows[limit:]

    def walk(value: Any, depth: int) -> dict[int, int]:
        return canon(storages_held(value, device, depth))

    def walk_plain(values: list[Any]) -> tuple[list[int], list[int]] | list[dict[int, int]] | None:
        """``walk`` of each of ``values`` (plain leaf tensors), in bulk: ``(keys, sizes)``, one storage
        each, where ``canon`` renames none of them; else one dict each."""
        found = _plain_storages_on(values, device, known=known)
        if found is None:
            return None
        keys, sizes = list(found[0]), list(found[1])
        whole = dict(zip(keys, sizes))
        if canon(dict(whole)) == whole:  # (one call: what it renames, it renames in any dict)
            return keys, sizes
        return [canon({k: n}) for k, n in zip(keys, sizes)]

    listed = [(row.name, kept[id(row)][1]) for row in rows]

    def kept_by(keys: Iterable[int], own: str) -> list[str]:
        """The listed names other than ``own`` keeping any of ``keys``, in the
        order of the first key each keeps (then of the rows)."""
        keys = keys if isinstance(keys, (dict, set, frozenset)) else list(keys)
        ks = keys.keys() if isinstance(keys, dict) else set(keys)
        hits = [(n, h) for n, h in listed if n != own and not h.keys().isdisjoint(ks)]
        if len(hits) < 2:
            return [n for n, _ in hits]
        out: dict[str, None] = {}
        for k in keys:
            for n, h in hits:
                if k in h:
                    out[n] = None
            if len(out) == len(hits):
                break
        return list(out)

    for row in rows:
        if row.hidden:
            continue
        obj, held = kept[id(row)]
        tree = Entry(row.name, obj, held)
        if entries:
            try:
                tree = entries_of(row.name, obj, held, KeysBut(held, twice), _MAX_DEPTH, walk,
                                  lambda o: own_storages(o, device, canon, _on_device), walk_plain)
            except Exception:  # noqa: BLE001 - a container that fails while expanded: its row alone
                tree = Entry(row.name, obj, held)
        build = _Rows(device, canon, max_entries, kept_by, row.name)
        row.detail = build.detail(tree, held)
        row.entries, row.more, row.more_bytes, row.more_unique = build.entries(tree, 1)
    return rows
