"""A model of PyTorch's CUDA caching allocator, replayed over a sequence of
allocations and frees: what ``memory_allocated`` and ``memory_reserved`` would
read on a card, given only the requested sizes.

Rules and constants are those of ``c10/cuda/CUDACachingAllocator.cpp``
(PyTorch 2.4–2.11, default settings):

* a request is rounded up to a multiple of 512 bytes (``kMinBlockSize``);
* requests up to 1 MiB (``kSmallSize``) come from the *small* pool, whose
  segments are 2 MiB (``kSmallBuffer``); larger ones from the *large* pool,
  whose segments are 20 MiB (``kLargeBuffer``) for requests under 10 MiB
  (``kMinLargeAlloc``), else the request rounded up to 2 MiB (``kRoundLarge``);
* a request takes the smallest free block of its pool that fits (best fit,
  lowest address first); the block is split when the rest would be at least
  512 bytes (small pool) or more than 1 MiB (large pool), otherwise the whole
  block is handed out and counted as allocated;
* a freed block merges with free neighbours of its segment; segments go back
  to the driver only when a new segment does not fit (then every wholly free
  segment is released and the request retried) or on ``empty_cache``;
* with ``expandable_segments:True`` each pool is one segment that grows by
  mapping pages (2 MiB small pool, 20 MiB large pool) at its end.

Streams other than the default, ``max_split_size_mb``,
``roundup_power2_divisions`` and the garbage-collection threshold are not
modelled (all off by default).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

__all__ = ["AllocatorModel", "Replay", "replay", "OutOfMemory", "round_size"]

KiB, MiB = 1 << 10, 1 << 20
MIN_BLOCK = 512
SMALL_SIZE = 1 * MiB
SMALL_BUFFER = 2 * MiB
LARGE_BUFFER = 20 * MiB
MIN_LARGE_ALLOC = 10 * MiB
ROUND_LARGE = 2 * MiB


def round_size(size: int) -> int:
    """The block size for a request of ``size`` bytes (``round_size`` in the allocator)."""
    return MIN_BLOCK if size < MIN_BLOCK else -(-size // MIN_BLOCK) * MIN_BLOCK


def segment_size(size: int) -> int:
    """Bytes a new segment gets from ``cudaMalloc`` for a rounded request (``get_allocation_size``)."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


class OutOfMemory(Exception):
    """The modelled card cannot hold a request: ``requested`` bytes with
    ``reserved`` already reserved out of ``capacity``."""

    def __init__(self, requested: int, reserved: int, capacity: int) -> None:
        super().__init__(f"out of memory: {requested} bytes requested, {reserved} of {capacity} bytes reserved")
        self.requested, self.reserved, self.capacity = requested, reserved, capacity


@dataclass
class _Block:
    addr: int
    size: int
    segment: int
    small: bool
    free: bool = True
    prev: _Block | None = None
    next: _Block | None = None

    def key(self) -> tuple[int, int]:
        return (self.size, self.addr)


@dataclass
class AllocatorModel:
    """The allocator's state: segments, blocks, the two free pools.

    Args:
        capacity: bytes the allocator may reserve (the card's memory less the
            CUDA context and other processes); ``None`` for no limit.
        expandable: model ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``.
    """

    capacity: int | None = None
    expandable: bool = False
    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    n_segments: int = 0
    _pools: dict[bool, list[tuple[int, int, _Block]]] = field(default_factory=lambda: {True: [], False: []})
    _next_addr: int = 0
    _segments: dict[int, list[_Block]] = field(default_factory=dict)  # segment id -> [first block, mapped bytes]
    _tail: dict[bool, _Block | None] = field(default_factory=lambda: {True: None, False: None})

    # -- pools ------------------------------------------------------------------
    def _insert(self, b: _Block) -> None:
        bisect.insort(self._pools[b.small], (b.size, b.addr, b))

    def _remove(self, b: _Block) -> None:
        pool = self._pools[b.small]
        i = bisect.bisect_left(pool, (b.size, b.addr), key=lambda e: (e[0], e[1]))
        del pool[i]

    def _best_fit(self, small: bool, size: int) -> _Block | None:
        pool = self._pools[small]
        i = bisect.bisect_left(pool, (size, -1), key=lambda e: (e[0], e[1]))
        return pool[i][2] if i < len(pool) else None

    # -- segments ---------------------------------------------------------------
    def _new_segment(self, small: bool, size: int) -> _Block:
        seg = segment_size(size)
        self._reserve(seg)
        b = _Block(self._next_addr, seg, self.n_segments, small)
        self._next_addr += seg + LARGE_BUFFER
        self.n_segments += 1
        self._segments[b.segment] = [b]
        return b

    def _reserve(self, nbytes: int) -> None:
        if self.capacity is not None and self.reserved + nbytes > self.capacity:
            self._release_free_segments()
            if self.reserved + nbytes > self.capacity:
                raise OutOfMemory(nbytes, self.reserved, self.capacity)
        self.reserved += nbytes
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def _release_free_segments(self) -> None:
        """``release_cached_blocks``: every segment that is one free block goes back."""
        for small in (True, False):
            for _, _, b in list(self._pools[small]):
                if b.prev is None and b.next is None and not self.expandable:
                    self._remove(b)
                    self.reserved -= b.size
                    del self._segments[b.segment]

    def _grow(self, small: bool, size: int) -> _Block:
        """Expandable segments: map pages at the end of the pool's one segment."""
        page = SMALL_BUFFER if small else LARGE_BUFFER
        tail = self._tail[small]
        if tail is None:
            need = -(-size // page) * page
            self._reserve(need)
            b = _Block(self._next_addr, need, self.n_segments, small)
            self._next_addr += 1 << 50
            self.n_segments += 1
            self._tail[small] = b
            return b
        # extend the free block at the end, or add a new one after the last block
        have = tail.size if tail.free else 0
        need = -(-(size - have) // page) * page
        self._reserve(need)
        if tail.free:
            self._remove(tail)
            tail.size += need
            return tail
        b = _Block(tail.addr + tail.size, need, tail.segment, small, prev=tail)
        tail.next = b
        self._tail[small] = b
        return b

    # -- requests ---------------------------------------------------------------
    def malloc(self, requested: int) -> _Block:
        """Hand out a block for ``requested`` bytes (0-byte requests get none:
        the allocator returns a null pointer for them)."""
        size = round_size(requested)
        small = size <= SMALL_SIZE
        b = self._best_fit(small, size)
        if b is not None:
            self._remove(b)
        elif self.expandable:
            b = self._grow(small, size)
        else:
            b = self._new_segment(small, size)
        rest = b.size - size
        if (rest >= MIN_BLOCK) if small else (rest > SMALL_SIZE):
            r = _Block(b.addr + size, rest, b.segment, small, True, prev=b, next=b.next)
            if b.next is not None:
                b.next.prev = r
            b.next = r
            b.size = size
            if self.expandable and self._tail[small] is b:
                self._tail[small] = r
            self._insert(r)
        b.free = False
        self.allocated += b.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return b

    def free(self, b: _Block) -> None:
        """Return a block; it merges with free neighbours of its segment."""
        self.allocated -= b.size
        if b.prev is not None and b.prev.free:
            self._remove(b.prev)
            b = self._absorb(b.prev, b)
        if b.next is not None and b.next.free:
            self._remove(b.next)
            b = self._absorb(b, b.next)
        b.free = True
        self._insert(b)

    def _absorb(self, left: _Block, right: _Block) -> _Block:
        """Merge ``right`` into its neighbour ``left``; returns ``left``."""
        left.size += right.size
        left.next = right.next
        if right.next is not None:
            right.next.prev = left
        if self.expandable and self._tail[left.small] is right:
            self._tail[left.small] = left
        return left


@dataclass
class Replay:
    """What the allocator model read after each event of a sequence.

    Attributes:
        allocated: ``memory_allocated`` after each event (bytes; block sizes,
            including blocks left unsplit).
        reserved: ``memory_reserved`` after each event (bytes).
        oom_at: index of the first event the card could not hold, or ``None``.
        model: the allocator state at the end.
    """

    allocated: list[int]
    reserved: list[int]
    oom_at: int | None
    model: AllocatorModel


def replay(events: list[tuple[int, int, int]], capacity: int | None = None, expandable: bool = False,
           model: AllocatorModel | None = None) -> Replay:
    """Replay ``events`` — ``(storage key, old bytes, new bytes)`` as the
    storage tracker reports them: ``old == 0`` a new storage, ``new == 0`` a
    freed one, both non-zero a resize (allocate the new size, then free the
    old block, as a reallocation does) — through the allocator model.

    Returns:
        a :class:`Replay`; on the first request the card cannot hold, the
        replay stops there (``oom_at``) and the lists end at that event.
    """
    m = model or AllocatorModel(capacity, expandable)
    blocks: dict[int, _Block] = {}
    alloc, res = [], []
    oom_at = None
    for i, (key, old, new) in enumerate(events):
        try:
            nb = m.malloc(new) if new else None
        except OutOfMemory:
            oom_at = i
            break
        ob = blocks.pop(key, None)
        if ob is not None:
            m.free(ob)
        if nb is not None:
            blocks[key] = nb
        alloc.append(m.allocated)
        res.append(m.reserved)
    return Replay(alloc, res, oom_at, m)
