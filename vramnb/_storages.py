"""Storages of tensors, and the tensors and storages the garbage collector knows.

A storage is named by its ``StorageImpl`` (its ``_cdata``), so views, tied
weights and a gradient aliasing another tensor share one name. Two
``StorageImpl`` objects over the same bytes (``torch.from_numpy(t.numpy())``) are
found by their data ranges (:func:`same_memory`) and counted once.
"""

from __future__ import annotations

import gc
import itertools
import operator
from array import array
from collections.abc import Iterable
from operator import attrgetter, itemgetter
from typing import Any

import torch
from sortedcontainers import SortedList
from torch.utils.weak import WeakIdKeyDictionary

__all__ = ["storage_of", "storages_of_tensor", "storages_of_plain", "storage_key", "live_tensors", "data_range",
           "same_memory", "RangeLog", "ScanTable", "note_sparse_parts", "sparse_parts_of"]

_PLAIN = (torch.Tensor, torch.nn.Parameter)
# a fake sparse COO tensor's own indices and values: FakeTensorMode builds the result of
# ``_sparse_coo_tensor_with_dims_and_tensors`` with none (nnz 0), while the real operator keeps the
# tensors it was given (an embedding's sparse gradient: the looked-up indices and the output's
# gradient rows); the tracker's mode notes them here (:func:`note_sparse_parts`)
_SPARSE_PARTS: WeakIdKeyDictionary = WeakIdKeyDictionary()


def note_sparse_parts(t: torch.Tensor, indices: Any, values: Any) -> None:
    """Remember that the sparse COO tensor ``t`` holds ``indices`` and ``values`` (kept alive as
    long as ``t`` is), where its own ``_indices()``/``_values()`` are not them (a fake tensor's)."""
    if isinstance(indices, torch.Tensor) and isinstance(values, torch.Tensor):
        _SPARSE_PARTS[t] = (indices, values)


def sparse_parts_of(t: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The indices and values noted for the sparse tensor ``t`` (:func:`note_sparse_parts`), or ``None``."""
    try:
        return _SPARSE_PARTS.get(t) if isinstance(t, torch.Tensor) else None
    except Exception:  # noqa: BLE001 - a tensor that cannot be looked up has none
        return None


_PER_CHANNEL = (torch.per_channel_affine, torch.per_channel_symmetric, torch.per_channel_affine_float_qparams)


def storage_of(t: Any) -> torch.UntypedStorage | None:
    """The ``UntypedStorage`` behind a strided tensor (or a bare storage), or
    ``None`` for tensors that have none of their own (sparse, nested, wrapper
    subclasses)."""
    if isinstance(t, torch.UntypedStorage):
        return t
    if isinstance(t, torch.TypedStorage):
        return t._untyped_storage
    if type(t) not in _PLAIN and hasattr(t, "__tensor_flatten__"):
        return None  # a wrapper subclass (torchao's 8-bit optimizer state, DTensor): its data is in its inner tensors
    try:
        with torch._C.DisableTorchFunctionSubclass():
            st = t.untyped_storage()
    except Exception:
        return None
    if not isinstance(st, torch.UntypedStorage):
        return None
    if type(t) not in _PLAIN and st.device.type != "meta":
        try:
            st.data_ptr()
        except RuntimeError:  # a wrapper subclass's storage has no data ("invalid python storage")
            return None
    return st


def storages_of_tensor(t: Any, _depth: int = 0) -> list[tuple[int, torch.UntypedStorage]]:
    """``(key, storage)`` of every storage that holds ``t``'s data: its own, or
    for a sparse tensor its indices and values, for a wrapper subclass
    (``__tensor_flatten__``) those of its inner tensors. A bare
    ``UntypedStorage`` or ``TypedStorage`` is its own storage. Meta and fake
    tensors have meta storages, which callers filter out by device."""
    if isinstance(t, torch.UntypedStorage):
        return [(storage_key(t), t)]
    if isinstance(t, torch.TypedStorage):
        st = t._untyped_storage
        return [(storage_key(st), st)] if isinstance(st, torch.UntypedStorage) else []
    try:
        if type(t) not in _PLAIN and hasattr(t, "__tensor_flatten__") and _depth < 4:
            names, _ = t.__tensor_flatten__()
            out = []
            for n in names:
                inner = getattr(t, n)
                if isinstance(inner, torch.Tensor):
                    out += storages_of_tensor(inner, _depth + 1)
            return out
        layout = t.layout
        if type(t) in _PLAIN and t.is_nested and layout == torch.strided:  # its sizes, strides and offsets too
            own = storage_of(t)
            meta: tuple[Any, ...] = (t._nested_tensor_size(), t._nested_tensor_strides(), t._nested_tensor_storage_offsets())
            return ([] if own is None else [(storage_key(own), own)]) + [
                kv for p in meta for kv in storages_of_tensor(p, _depth + 1)]
        if type(t) in _PLAIN and t.is_quantized and t.qscheme() in _PER_CHANNEL:  # its scales and zero points
            own = storage_of(t)
            meta = (t.q_per_channel_scales(), t.q_per_channel_zero_points())
            return ([] if own is None else [(storage_key(own), own)]) + [
                kv for p in meta for kv in storages_of_tensor(p, _depth + 1)]
        if layout == torch.sparse_coo:
            indices, values = _SPARSE_PARTS.get(t) or (t._indices(), t._values())
            return storages_of_tensor(indices, _depth + 1) + storages_of_tensor(values, _depth + 1)
        if layout in (torch.sparse_csr, torch.sparse_bsr):
            parts = (t.crow_indices(), t.col_indices(), t.values())
            return [kv for p in parts for kv in storages_of_tensor(p, _depth + 1)]
        if layout in (torch.sparse_csc, torch.sparse_bsc):
            parts = (t.ccol_indices(), t.row_indices(), t.values())
            return [kv for p in parts for kv in storages_of_tensor(p, _depth + 1)]
    except Exception:
        return []
    st = storage_of(t)
    if st is None and type(t) not in _PLAIN and _depth < 4:
        # a wrapper subclass without __tensor_flatten__ (MaskedTensor keeps its data and mask as
        # attributes): the storages of the tensors it holds, its own (no data) counting nothing
        try:
            inner = [v for v in vars(t).values() if isinstance(v, torch.Tensor) and v is not t]
        except TypeError:
            return []
        return [kv for v in inner for kv in storages_of_tensor(v, _depth + 1)]
    return [] if st is None else [(storage_key(st), st)]


_LAYOUT = attrgetter("layout")
_NESTED = attrgetter("is_nested")
_QUANTIZED = attrgetter("is_quantized")


def storages_of_plain(tensors: list[Any]) -> list[torch.UntypedStorage] | None:
    """The storage of each of ``tensors``, in order, read in C over the whole
    list: what :func:`storages_of_tensor` gives each of them (its one
    storage), for tensors of type ``torch.Tensor`` or ``nn.Parameter`` (the
    caller checks the types: :func:`vramnb._graph.plain_leaves`). ``None``
    when any of them is sparse, nested or quantized, or has no storage to read
    (a functorch wrapper): then ask :func:`storages_of_tensor` for each."""
    try:
        n = len(tensors)
        if (list(map(_LAYOUT, tensors)).count(torch.strided) != n or any(map(_NESTED, tensors))
                or any(map(_QUANTIZED, tensors))):
            return None
        sts = list(map(torch.Tensor.untyped_storage, tensors))
    except Exception:
        return None
    return sts


def storage_key(st: torch.UntypedStorage) -> int:
    """An identity for a live storage: the address of its ``StorageImpl``."""
    return st._cdata


_IS_TENSOR_TYPE: dict[type, int] = {}  # 1: a tensor type, 2: a storage type, 0: neither
_TENSOR_TYPES: set[type] = set()
_STORAGE_TYPES: set[type] = set()


def _kinds(objs: list[Any], types: list[type] | None = None) -> tuple[set[type], set[type]]:
    """The tensor types and the storage types seen so far, ``objs``' included (``types``: their
    types, if known). Kept as sets (a type is classified once): a scan of generation 0 runs at
    every collection, which may come every few allocations, and must not cost the number of
    types ever seen. Raises ``TypeError`` if a type is unhashable (its metaclass defines
    ``__eq__`` without ``__hash__``)."""
    cache = _IS_TENSOR_TYPE
    kinds = set(map(type, objs) if types is None else types)
    for tp in kinds:
        if tp not in cache:
            kind = (1 if issubclass(tp, torch.Tensor)
                    else 2 if issubclass(tp, (torch.UntypedStorage, torch.TypedStorage)) else 0)
            cache[tp] = kind
            if kind == 1:
                _TENSOR_TYPES.add(tp)
            elif kind == 2:
                _STORAGE_TYPES.add(tp)
    return _TENSOR_TYPES, _STORAGE_TYPES


def _live_tensors() -> list[torch.Tensor]:
    """Every tensor object the garbage collector tracks. Each type is tested
    once and cached (``issubclass`` against ``torch.Tensor`` goes through its
    metaclass); ``type()`` is used rather than ``isinstance``, which reads
    ``__class__`` and wakes lazy module attributes. The filtering runs in C
    (``map``/``compress``): ~10 ms for 200k objects."""
    return _live_tensors_and_storages()[0]


def _live_tensors_and_storages(generation: int | None = None) -> tuple[list[torch.Tensor], list[Any]]:
    """Every tensor, and every bare ``UntypedStorage``/``TypedStorage`` object,
    the garbage collector tracks (see :func:`_live_tensors`); with
    ``generation``, only those in that generation (``0``: made since the last
    collection, which no collection has seen yet)."""
    objs = gc.get_objects() if generation is None else gc.get_objects(generation=generation)
    types = list(map(type, objs))
    try:
        tensor_types, storage_types = _kinds(objs, types)
    except TypeError:  # a class whose metaclass is unhashable (defines __eq__ without __hash__): by the types' ids
        hashable = [tp for tp in {id(tp): tp for tp in types}.values() if _hashable(tp)]
        tensor_types, storage_types = _kinds(objs, hashable)
        type_ids = list(map(id, types))
        tensor_ids, storage_ids = {id(tp) for tp in tensor_types}, {id(tp) for tp in storage_types}
        return (list(itertools.compress(objs, map(tensor_ids.__contains__, type_ids))),
                list(itertools.compress(objs, map(storage_ids.__contains__, type_ids))))
    # a set lookup per object's type, in C (a type hashes by its address)
    tensors = list(itertools.compress(objs, map(tensor_types.__contains__, types)))
    storages = list(itertools.compress(objs, map(storage_types.__contains__, types))) if storage_types else []
    return tensors, storages


def _hashable(tp: type) -> bool:
    try:
        hash(tp)
    except TypeError:
        return False
    return True


live_tensors = _live_tensors


def data_range(st: Any) -> tuple[int, int] | None:
    """``(first byte address, nbytes)`` of a storage's data, or ``None`` when it
    has none to compare (empty, meta or fake storages)."""
    try:
        if st.device.type == "meta":  # fake tensors' storages too: their data_ptr warns and means nothing
            return None
        n = st.nbytes()
        ptr = st.data_ptr() if n else 0
    except Exception:
        return None
    return (ptr, n) if ptr and n else None


def same_memory(ranges: dict[int, tuple[int, int]]) -> dict[int, int]:
    """``{key: key of the storage whose bytes these are}`` for storages whose
    data lies inside another storage's data (``torch.from_numpy(t.numpy())``
    makes a second ``StorageImpl`` over ``t``'s bytes; so do ``frombuffer`` and
    DLPack round trips): the same memory, to be counted once. ``ranges``: key ->
    :func:`data_range` (address and size in bytes). Keys not returned are
    their own. Of storages over the same bytes, the first in ``ranges`` owns them."""
    log = RangeLog()
    log.extend(list(ranges), [r[0] for r in ranges.values()], [r[1] for r in ranges.values()])
    return {k: owner for k, (owner, _) in log.same_memory().items()}


class RangeLog:
    """The data ranges of storages in the order they were found (a key may
    come again, with the same range), kept in three arrays of 64-bit ints:
    appending makes no object per storage, and a walk over a million storages
    adds theirs in bulk. Ranges are ``(address of the first byte, size in
    bytes)``, both nonzero (:func:`data_range`). (Arrays become lists if an
    address does not fit in 64 signed bits.)"""

    _TORCH_FROM = 2048  # from this many ranges on, scanned by torch

    def __init__(self) -> None:
        self.keys: list[int] = []
        self.starts: Any = array("q")
        self.sizes: Any = array("q")

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, key: int, rng: tuple[int, int]) -> None:
        self.extend([key], [rng[0]], [rng[1]])

    def extend(self, keys: list[int], starts: Iterable[int], sizes: Iterable[int]) -> None:
        """Add ranges in bulk: one start and one size (both nonzero) per key."""
        starts = starts if isinstance(starts, (list, array)) else list(starts)
        sizes = sizes if isinstance(sizes, (list, array)) else list(sizes)
        try:
            self.starts.extend(starts)
            self.sizes.extend(sizes)
        except OverflowError:  # keep what fits in lists from now on
            del self.starts[len(self.keys):], self.sizes[len(self.keys):]
            self.starts, self.sizes = list(self.starts) + list(starts), list(self.sizes) + list(sizes)
        self.keys += keys

    def same_memory(self) -> dict[int, tuple[int, int]]:
        """``{key: (owner's key, owner's size in bytes)}`` for the storages
        whose data lies inside another one's (see :func:`same_memory`): sorted
        by start, larger first, ties in the order found (a stable sort), a range
        lies inside the last one before it that lies inside none, if that one's
        end is not before its own. Many ranges are sorted by torch; the answer
        is the same."""
        if len(self.keys) >= self._TORCH_FROM:
            try:
                return self._same_memory_torch()
            except (OverflowError, TypeError, ValueError, RuntimeError):  # past 2**53: the Python sort
                pass
        return self._same_memory_py()

    def _same_memory_py(self) -> dict[int, tuple[int, int]]:
        first: dict[int, tuple[int, int]] = {}
        for k, p, n in zip(self.keys, self.starts, self.sizes):
            first.setdefault(k, (p, n))
        out: dict[int, tuple[int, int]] = {}
        cur_key, cur_end, cur_size = None, -1, 0
        for key, (ptr, n) in sorted(first.items(), key=lambda kv: (kv[1][0], -kv[1][1])):
            if cur_key is not None and ptr + n <= cur_end:
                out[key] = (cur_key, cur_size)
                continue
            cur_key, cur_end, cur_size = key, ptr + n, n
        return out

    def _same_memory_torch(self) -> dict[int, tuple[int, int]]:
        n = len(self.keys)
        starts = torch.frombuffer(self.starts, dtype=torch.int64)  # (TypeError for lists: the Python sort)
        sizes = torch.frombuffer(self.sizes, dtype=torch.int64)
        if int(sizes.min()) <= 0 or int(starts.min()) <= 0 or int(starts.max()) + int(sizes.max()) >= 2 ** 53:
            raise OverflowError("a range's end is past 2**53")  # (float64 holds every int below, exactly)
        fs = starts.double()  # torch sorts float64 several times faster than int64
        by_start = torch.sort(fs, stable=True)
        order = by_start.indices
        if bool((by_start.values[1:] == by_start.values[:-1]).any()):  # starting together: the larger first
            order = torch.sort(sizes.double(), descending=True, stable=True).indices
            order = order[torch.sort(fs[order], stable=True).indices]
        ends = (starts + sizes)[order]
        before = torch.cat([ends.new_full((1,), -1), torch.cummax(ends, 0).values[:-1]])
        inside = ends <= before  # (a key found again is inside its first range)
        if not bool(inside.any()):
            return {}
        owner_pos = torch.cummax(torch.where(inside, -1, torch.arange(n)), 0).values
        at = inside.nonzero().flatten()
        keys, sz = self.keys, self.sizes
        out: dict[int, tuple[int, int]] = {}
        for i, j in zip(order[at].tolist(), order[owner_pos[at]].tolist()):
            if keys[i] != keys[j]:
                out[keys[i]] = (keys[j], sz[j])
        return out


class DataRanges:
    """Data ranges of counted storages, sorted by start, to find the storage
    whose data contains another's (counted ranges never nest: the nearest one
    starting at or before an address decides). Adding and removing are
    O(log n) (``sortedcontainers.SortedList``): the tracker adds one range per
    new storage, so a plain sorted list's O(n) insert made every operator
    slower as the number of live tensors grew.

    ``SortedList`` is not reentrant, and its own allocations can start a garbage
    collection whose frees call back into the tracker (a weakref callback
    removing a range) in the middle of an operation: a change asked for while
    one runs in this thread is queued and applied when that one returns."""

    def __init__(self) -> None:
        self._starts: SortedList = SortedList()  # (start, key)
        self._span: dict[int, tuple[int, int]] = {}  # key -> (start, end)
        self._busy = False
        self._queued: list[tuple[bool, int, tuple[int, int] | None]] = []  # (add, key, range)

    def __bool__(self) -> bool:
        return bool(self._span)

    def span(self, key: int) -> tuple[int, int] | None:
        """``(start, end)`` of a storage's recorded data range, or ``None``."""
        return self._span.get(key)

    def add(self, key: int, rng: tuple[int, int]) -> None:
        self._change(True, key, rng)

    def remove(self, key: int) -> None:
        self._change(False, key, None)

    def _change(self, add: bool, key: int, rng: tuple[int, int] | None) -> None:
        if self._busy:
            self._queued.append((add, key, rng))
            return
        self._busy = True
        try:
            self._apply(add, key, rng)
            self._drain()
        finally:
            self._busy = False

    def _apply(self, add: bool, key: int, rng: tuple[int, int] | None) -> None:
        if add and rng is not None:
            self._starts.add((rng[0], key))
            self._span[key] = (rng[0], rng[0] + rng[1])
            return
        span = self._span.pop(key, None)
        if span is not None:
            self._starts.discard((span[0], key))

    def _drain(self) -> None:
        while self._queued:
            self._apply(*self._queued.pop(0))

    def inside(self, rng: tuple[int, int]) -> list[int]:
        """Keys of the counted storages whose data lies inside ``rng`` (``(start, nbytes)``):
        a storage registered after the storages over parts of its bytes (``torch.load(mmap=True)``
        maps the whole file, each tensor's storage a slice of it). Empty while a change runs."""
        if self._busy:
            return []
        end = rng[0] + rng[1]
        out = []
        for start, key in self._starts.irange((rng[0], -1), (end, -1), inclusive=(True, False)):
            span = self._span.get(key)
            if span is not None and span[1] <= end and start >= rng[0]:
                out.append(key)
        return out

    def nearest(self, rng: tuple[int, int]) -> tuple[int, bool] | None:
        """``(key, contains rng)`` of the storage starting nearest at or before
        ``rng``, or ``None``. (The key may be one whose removal was queued
        meanwhile: callers check that its storage lives.)"""
        if self._busy:  # asked from a callback inside an operation: nothing to trust yet
            return None
        self._busy = True
        try:
            i = self._starts.bisect_right((rng[0], float("inf"))) - 1
            found = None
            if i >= 0:
                start, key = self._starts[i]
                span = self._span.get(key)
                found = (key, span is not None and rng[0] + rng[1] <= span[1])
            self._drain()
        finally:
            self._busy = False
        return found


_SIZE = itemgetter(1)
_START = itemgetter(0)


class ScanTable:
    """What a full scan read of the plain tensors it found unchanged, for the holders listing
    of the same ``%vram`` call, which would read it again (:meth:`lookup`): the tensors
    (``torch.Tensor`` or ``nn.Parameter``, strided, not requiring grad, neither nested nor
    quantized), in the scan's order, and each one's storage key and its storage's
    ``(data address, size in bytes)`` as the scan read them (registered, alive, counted at that
    size and address on ``device_type``: :meth:`vramnb._tracker.StorageTracker._unknown`).

    It holds the tensors themselves, so that no id in it is reused while it lives: make one per
    call and drop it at the call's end (a tensor another thread frees meanwhile is freed then).
    The listing's answer is what these tensors were at the scan, the moment the tracker's total
    (``allocated``) was read."""

    _STRIDE = 16  # every 16th tensor is indexed by id: a run of 16 or more contiguous ones is found

    def __init__(self, device_type: str = "cpu") -> None:
        self.device_type = device_type
        self.tensors: list[Any] = []
        self.keys: list[int] = []
        self.spans: list[tuple[int, int]] = []  # (data address, bytes) of each one's storage
        self._index: dict[int, int] | None = None
        self.hits = 0  # tensors answered from the table (tests read it)

    def __len__(self) -> int:
        return len(self.tensors)

    def add(self, tensors: list[Any], keys: list[int], spans: list[tuple[int, int]]) -> None:
        """Append a run the scan found unchanged (three lists of the same length, in order)."""
        self.tensors += tensors
        self.keys += keys
        self.spans += spans
        self._index = None

    def clear(self) -> None:
        self.tensors, self.keys, self.spans, self._index = [], [], [], None

    def lookup(self, ts: list[Any]) -> tuple[list[int], list[int], list[int]] | None:
        """``(keys, sizes, data addresses)`` of the storages of ``ts`` (plain tensors), in order,
        where ``ts`` is a contiguous stretch of the table's tensors (the very objects: compared
        by identity); else ``None``."""
        n = len(ts)
        if n < self._STRIDE or n > len(self.tensors):
            return None
        index = self._index
        if index is None:
            step = self._STRIDE
            index = self._index = dict(zip(map(id, self.tensors[::step]), range(0, len(self.tensors), step)))
        get = index.get
        for j in range(self._STRIDE):
            pos = get(id(ts[j]))
            if pos is not None:
                break
        else:
            return None
        start = pos - j
        if start < 0 or start + n > len(self.tensors):
            return None
        if not all(map(operator.is_, ts, self.tensors[start:start + n])):
            return None
        spans = self.spans[start:start + n]
        self.hits += n
        return self.keys[start:start + n], list(map(_SIZE, spans)), list(map(_START, spans))
