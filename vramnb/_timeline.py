"""A step's memory as allocation intervals, recorded on CPU or CUDA.

An :class:`Interval` is one allocation: a key (the storage's identity on CPU,
the block address on CUDA), its size in bytes, and the event indices where it
began and ended (``-1``: it existed before recording; ``None``: still alive).
:class:`Timeline` replays the intervals to give the total at every event, the
peak, and the live set at any event, which attribution then labels.

* CPU: :class:`CpuRecorder` listens to the exact storage tracker.
* CUDA: :class:`CudaRecorder` records the caching allocator's own trace
  (``torch.cuda.memory._record_memory_history(context=None)``: no stack
  collection, no Python per allocation) and reads it back with
  ``torch.cuda.memory._snapshot()``. Phase marks are placed in the trace by the
  allocator's cumulative allocation/free counters, read at each mark. Sizes are
  the allocator's rounded block sizes, so totals match
  ``torch.cuda.memory_allocated``. When the user is already recording memory
  history (``torch._C._cuda_isHistoryEnabled()``), the recorder changes nothing
  of it (no new settings, not switched off, nothing cleared) and reads this
  step's events from the user's trace: those after its last entry at the start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ._tracker import StorageTracker

__all__ = ["Interval", "Timeline", "CpuRecorder", "CudaRecorder", "raw_counts", "block_size", "history_enabled"]


@dataclass
class Interval:
    key: int
    size: int
    start: int  # event index of the allocation; -1 if before recording
    end: int | None = None  # event index of the free; None if still alive


@dataclass
class Timeline:
    """Intervals plus named marks (event index at which each mark was taken:
    the state *before* that event)."""

    intervals: list[Interval] = field(default_factory=list)
    n_events: int = 0
    marks: dict[str, int] = field(default_factory=dict)
    # CUDA: reserved bytes after each event, relative to the start (segment
    # allocations and frees in the allocator's trace); None on CPU
    reserved_delta: list[int] | None = None

    def totals(self) -> list[int]:
        """Allocated bytes after each event; ``totals()[0]`` is the start."""
        delta = [0] * (self.n_events + 1)
        base = 0
        for iv in self.intervals:
            if iv.start < 0:
                base += iv.size
            else:
                delta[iv.start + 1] += iv.size
            if iv.end is not None:
                delta[iv.end + 1] -= iv.size
        out, cur = [], base
        for d in delta:
            cur += d
            out.append(cur)
        return out

    def live_at(self, point: int) -> list[int]:
        """Indices of the intervals alive at ``point`` (an index into
        :meth:`totals`: 0 is the start, ``i + 1`` is just after event ``i``)."""
        ev = point - 1
        return [
            i for i, iv in enumerate(self.intervals) if iv.start <= ev and (iv.end is None or iv.end > ev)
        ]


class CpuRecorder:
    """Records a tracker's changes as intervals (exact bytes)."""

    def __init__(self, tracker: StorageTracker, size: Callable[[int], int] | None = None) -> None:
        self.tracker = tracker
        self.timeline = Timeline()
        self.open: dict[int, int] = {}  # storage key -> interval index
        self.size = size  # bytes -> what the allocator hands out (estimates of CUDA), or None
        for key, nbytes in tracker.live().items():
            self.open[key] = len(self.timeline.intervals)
            self.timeline.intervals.append(Interval(key, size(nbytes) if size and nbytes else nbytes, -1))

    def __call__(self, key: int, old: int, new: int) -> None:
        if self.size is not None and new:
            new = self.size(new)
        tl = self.timeline
        ev = tl.n_events
        tl.n_events += 1
        idx = self.open.pop(key, None) if old else None
        if new:
            self.open[key] = len(tl.intervals)
            tl.intervals.append(Interval(key, new, ev))
            if idx is not None:
                # a resize (both non-zero): c10's resize_bytes_cpu allocates the new buffer and
                # copies before it frees the old one, so the old one ends one event later (the
                # tracker's peak counts both too)
                ev = tl.n_events
                tl.n_events += 1
        if idx is not None:
            tl.intervals[idx].end = ev

    def mark(self, name: str) -> None:
        self.timeline.marks[name] = self.timeline.n_events

    def interval_of(self, key: int) -> int | None:
        """The open interval of a live storage (used at pack time for activations)."""
        return self.open.get(key)

    def finish(self) -> Timeline:
        return self.timeline


def block_size(requested: int) -> int:
    """The block the caching allocator hands out for a request: rounded up to a
    multiple of 512 bytes (``kMinBlockSize`` in c10/cuda/CUDACachingAllocator.cpp).
    The trace records the requested size, ``allocated_bytes`` the block size. (A
    large block is left unsplit when less than 1 MiB would remain; that
    remainder is invisible in the trace and shows as *unattributed*.)"""
    return max(512, -(-requested // 512) * 512)


def raw_counts(device: int) -> tuple[int, int]:
    """Cumulative allocation and free counts of the caching allocator. These are
    host-side counters, updated when an operator is launched, so reading them
    needs no synchronisation to be in program order."""
    raw = getattr(torch._C, "_cuda_memoryStats", None)
    if raw is not None:
        try:
            a = raw(device)["allocation"]["all"]
            return a["allocated"], a["freed"]
        except (KeyError, TypeError):
            pass
    s = torch.cuda.memory_stats(device)
    return s.get("allocation.all.allocated", 0), s.get("allocation.all.freed", 0)


def history_enabled() -> bool:
    """Whether memory history is being recorded now (by the user, say). PyTorch
    has no getter for the settings, so a recording found is used as it is."""
    fn = getattr(torch._C, "_cuda_isHistoryEnabled", None)
    try:
        return bool(fn()) if fn is not None else False
    except Exception:  # noqa: BLE001 - a build without the CUDA allocator
        return False


def _device_trace(snap: dict[str, Any], device: int) -> list[dict[str, Any]]:
    traces = snap.get("device_traces", [])
    return traces[device] if device < len(traces) else []


class CudaRecorder:
    """Records the CUDA caching allocator's trace for one device."""

    def __init__(self, device: int, max_entries: int = 2_000_000) -> None:
        self.device = device
        self.marks: dict[str, tuple[int, int]] = {}
        self.snapshot: dict[str, Any] | None = None
        torch.cuda.synchronize(device)
        self.users = history_enabled()
        self.last: dict[str, Any] | None = None
        if self.users:  # the user's recording: keep it as it is, remember where this step begins
            before = _device_trace(torch.cuda.memory._snapshot(), device)
            self.last = before[-1] if before else None
        self.start_counts = raw_counts(device)
        if not self.users:
            torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=max_entries)

    def _since_start(self, trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The entries of the user's trace after the one that was last at the start.

        Raises:
            VramnbError: the user's ring buffer (``max_entries``) dropped it."""
        if self.last is None:
            return trace
        for i in range(len(trace) - 1, -1, -1):
            if trace[i] == self.last:
                return trace[i + 1:]
        from ._errors import VramnbError

        raise VramnbError(
            "your CUDA memory-history recording is on, and its ring buffer (max_entries) dropped the start of this "
            "step, so the step's allocations cannot be read from it: record with a larger max_entries "
            "(torch.cuda.memory._record_memory_history(max_entries=...)), or stop your recording while profiling")

    def mark(self, name: str) -> None:
        self.marks[name] = raw_counts(self.device)

    def position(self) -> tuple[int, int]:
        return raw_counts(self.device)

    def interval_of(self, key: int) -> int | None:
        return None  # resolved from addresses after the trace is read

    def finish(self) -> Timeline:
        torch.cuda.synchronize(self.device)
        snap: dict[str, Any] = torch.cuda.memory._snapshot()
        if not self.users:
            torch.cuda.memory._record_memory_history(enabled=None)
        self.snapshot = snap
        traces = _device_trace(snap, self.device)
        if self.users:
            traces = self._since_start(traces)
        live_end: dict[int, int] = {}
        for seg in snap["segments"]:
            if seg.get("device", self.device) != self.device:
                continue
            addr = seg["address"]
            for blk in seg["blocks"]:
                if blk["state"] == "active_allocated":
                    live_end[addr] = blk["size"]
                addr += blk["size"]
        tl = Timeline()
        open_: dict[int, int] = {}
        freed_before: list[tuple[int, int, int]] = []  # (addr, size, event) freed but allocated before recording
        n_alloc, n_free = self.start_counts
        counts: list[tuple[int, int]] = []
        reserved = [0]
        seg = 0
        ev = 0
        for e in traces:
            action = e["action"]
            if action in ("segment_alloc", "segment_map"):
                seg += e["size"]
                continue
            if action in ("segment_free", "segment_unmap"):
                seg -= e["size"]
                continue
            if action == "alloc":
                open_[e["addr"]] = len(tl.intervals)
                tl.intervals.append(Interval(e["addr"], block_size(e["size"]), ev))
                n_alloc += 1
            elif action == "free_requested":
                # allocated_bytes and the free counter drop here; a block still in
                # use by another stream is handed back later (free_completed)
                idx = open_.pop(e["addr"], None)
                if idx is not None:
                    tl.intervals[idx].end = ev
                else:
                    freed_before.append((e["addr"], block_size(e["size"]), ev))
                n_free += 1
            else:
                continue
            counts.append((n_alloc, n_free))
            reserved.append(seg)
            ev += 1
        tl.n_events = ev
        tl.reserved_delta = reserved
        # blocks alive at the start: alive at the end and not allocated during recording,
        # plus those freed during recording without an alloc event
        for addr, size in live_end.items():
            if addr not in open_:
                tl.intervals.append(Interval(addr, size, -1))
        for addr, size, freed_at in freed_before:
            tl.intervals.append(Interval(addr, size, -1, freed_at))
        for name, c in self.marks.items():
            # number of events whose cumulative counts are <= the mark's counts
            pos = 0
            while pos < len(counts) and counts[pos][0] <= c[0] and counts[pos][1] <= c[1]:
                pos += 1
            tl.marks[name] = pos
        return tl
