"""Attribution: give every allocation interval of a timeline one source.

A *claim* says "the storages with these keys, alive at this point, are
<source>". Claims are applied in order; the first claim on an interval wins,
so the order of claims is the priority (parameters before activations, so a
parameter saved for backward stays a parameter). What no claim covers is
*workspace* on CUDA when it backs no tensor (library workspaces), otherwise
*temporaries* if it began inside the timeline and *other* if it was there
before. Activations are recorded by :class:`SavedTensors`, which walks the
graph at each autograd engine call (no saved-tensor hook: :mod:`vramnb._saved`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any

import torch

from ._graph import graph_tensors
from ._saved import observing_backward
from ._storages import _live_tensors, storage_key, storage_of, storages_of_tensor
from ._timeline import Timeline
from ._tracker import cpu_tracker

__all__ = ["key_fn", "keys_of", "viewed_bytes_of", "Labels", "tensor_keys", "saved_in_live_graphs", "SavedTensors",
           "label_intervals", "sum_by_label"]


def key_fn(device: torch.device, storages: str | None = None) -> Callable[[torch.Tensor], int | None]:
    """How a tensor's storage is named in a timeline: its ``StorageImpl`` on CPU
    (as the tracker does), its block address on CUDA (as the allocator trace does).
    ``storages`` names the storage device type a tracker counts (``"meta"`` for
    the fake tensors of an estimate), overriding ``device``."""
    if device.type == "cuda" and storages is None:

        def key(t: torch.Tensor) -> int | None:
            st = storage_of(t)
            if st is None or st.device != device or st.nbytes() == 0:
                return None
            return st.data_ptr()

        return key

    kind = storages or "cpu"
    same_as = cpu_tracker().same_as if kind == "cpu" else (lambda k: k)

    def key_cpu(t: torch.Tensor) -> int | None:
        st = storage_of(t)
        if st is None or st.device.type != kind:
            return None
        return same_as(storage_key(st))  # a second StorageImpl over a storage's bytes is that storage

    return key_cpu


def keys_of(tensors: Iterable[torch.Tensor | None], key: Callable[[torch.Tensor], int | None]) -> set[int]:
    """Keys of the storages holding ``tensors``' data (a sparse gradient or a
    wrapper subclass has several: each is named through a byte view of it)."""
    out = set()
    for t in tensors:
        if t is None:
            continue
        k = key(t)
        if k is not None:
            out.add(k)
        if isinstance(t, torch.Tensor) and (
                (k is None and (t.layout != torch.strided or type(t) not in (torch.Tensor, torch.nn.Parameter)))
                or (k is not None and (t.is_nested or t.is_quantized))):
            # besides its own storage, a nested tensor keeps its sizes, strides and offsets, a
            # per-channel quantized one its scales and zero points (storages_of_tensor names them)
            for _, st in storages_of_tensor(t):
                kv = key(_byte_view(st))
                if kv is not None:
                    out.add(kv)
    return out


def _byte_view(st: torch.UntypedStorage) -> torch.Tensor:
    """A ``uint8`` tensor over the whole of ``st``, made below every dispatch mode.

    Under a ``FakeTensorMode`` (an estimate), ``set_(storage)`` would go through
    the fake mode's dispatch cache, whose key keeps the storage argument itself
    (``FakeTensorMode._prep_args_for_hash`` appends it): the storage would then
    live as long as that process-wide cache, and a gradient named this way (a
    DTensor's, under FSDP2) would never be freed by ``zero_grad``."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        return torch.empty(0, dtype=torch.uint8, device=st.device).set_(st)


def viewed_bytes_of(tensors: Iterable[torch.Tensor | None], key: Callable[[torch.Tensor], int | None]) -> dict[int, int]:
    """``{storage key: bytes these tensors view of it}``: a batch sliced from a
    dataset held in one tensor (``data[i:i + 32]``) views a few rows of the
    dataset's storage; a claim with these bytes gets only them, and the rest of
    the storage keeps its own label ("other": held outside, by the dataset).
    Overlapping views count once; a tensor whose extent cannot be read claims
    its whole storage."""
    spans: dict[int, list[tuple[int, int]]] = {}
    size: dict[int, int] = {}
    whole: set[int] = set()
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        k = key(t)
        if k is None:
            continue
        try:
            if t.layout != torch.strided or type(t) not in (torch.Tensor, torch.nn.Parameter):
                raise TypeError
            item = t.element_size()
            first = int(t.storage_offset()) * item  # int: no symbolic shapes here (torch types it int | SymInt)
            extent = 0 if t.numel() == 0 else (1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()))) * item
            if any(s < 0 for s in t.stride()):
                raise TypeError
        except Exception:
            whole.add(k)
            continue
        spans.setdefault(k, []).append((first, first + extent))
        size[k] = storage_of(t).nbytes()  # type: ignore[union-attr]
    out: dict[int, int] = {}
    for k, ranges in spans.items():
        total, end = 0, -1
        for a, b in sorted(ranges):
            if b > end:
                total += b - max(a, end)
                end = b
        out[k] = total if total < size[k] else _WHOLE  # all of it: the whole block (CUDA rounds blocks up)
    for k in whole:
        out[k] = _WHOLE
    return out


_WHOLE = 1 << 62


class Labels(list):  # type: ignore[type-arg]
    """One source per interval (a list of ``str``), and ``split``: interval
    index -> (bytes of that interval its source gets, the label of the rest)."""

    split: dict[int, tuple[int, str]]


def tensor_keys(device: torch.device) -> set[int]:
    """Keys of every live tensor on ``device`` (a scan of the garbage collector's objects)."""
    key = key_fn(device)
    out = set()
    for t in _live_tensors():
        try:
            k = key(t)
        except Exception:
            continue
        if k is not None:
            out.add(k)
    return out


def saved_in_live_graphs(key: Callable[[torch.Tensor], int | None]) -> set[int]:
    """Keys of the tensors saved for backward by every live autograd graph
    (graphs of tensors made before recording began)."""
    seen: dict[int, Any] = {}
    out: set[int] = set()
    for t in _live_tensors():
        try:
            fn = t.grad_fn
        except Exception:
            continue
        if fn is None:
            continue
        for s in graph_tensors(fn, seen, grads=False):
            if _is_leaf(s):
                continue  # a parameter or input the graph saved: claimed by its owner
            k = key(s)
            if k is not None:
                out.add(k)
    return out


class SavedTensors:
    """The storages autograd saves for backward during a recording, observed
    without saved-tensor hooks (:mod:`vramnb._saved` says why): the graph of
    every autograd engine call started inside :meth:`hooks` is walked just
    before the engine runs, when all its saved tensors are alive.

    On CPU the interval is resolved at once through ``interval_of``; on CUDA
    the address is kept with the allocator's position (from ``recorder``'s
    host-side counters) and resolved after the trace is read. Storages that
    existed before the recording are not the recording's activations (their
    owner holds them: parameters, a dataset, an earlier graph).
    """

    def __init__(self, key: Callable[[torch.Tensor], int | None], interval_of: Callable[[int], int | None] | None,
                 recorder: Any = None) -> None:
        self.key = key
        self.interval_of = interval_of
        self.recorder = recorder
        self.intervals: set[int] = set()
        self.addresses: list[tuple[int, Any]] = []  # (address, allocator counts or the phase)
        self.phase = "forward"
        self.runs = 0  # autograd engine runs observed (backward, autograd.grad)

    def observe(self, roots: Iterable[Any]) -> None:
        """Note the storages the graphs from autograd nodes ``roots`` saved."""
        self.runs += 1
        where: Any = self.phase
        if self.interval_of is None and self.recorder is not None and hasattr(self.recorder, "position"):
            where = self.recorder.position()
        seen: dict[int, Any] = {}
        keys: set[int] = set()
        for root in roots:
            keys |= keys_of((s for s in graph_tensors(root, seen, grads=False) if not _is_leaf(s)), self.key)
        seen.clear()
        self.note(keys, where)

    def note(self, keys: Iterable[int], where: Any = None) -> None:
        """Note storages by key, alive now (``where``: the phase, or on CUDA the
        allocator's position; default: read now)."""
        if where is None:
            where = self.phase
            if self.interval_of is None and self.recorder is not None and hasattr(self.recorder, "position"):
                where = self.recorder.position()
        for k in keys:
            if self.interval_of is None:
                self.addresses.append((k, where))
            else:
                idx = self.interval_of(k)
                if idx is not None:
                    self.intervals.add(idx)

    def hooks(self) -> Any:
        """While active, observe each autograd engine call of this thread (the
        name is historical: no saved-tensor hook is installed)."""
        return observing_backward(self.observe)

    def observing_all_threads(self) -> Any:
        """As :meth:`hooks`, for engine calls of every thread."""
        return observing_backward(self.observe, all_threads=True)

    def claim(self, tl: Timeline, after_forward: str = "after forward", window_end: str = "after backward") -> set[int]:
        """Interval indices of the saved tensors."""
        first = tl.marks.get("start", 0)
        if self.interval_of is not None:
            return {i for i in self.intervals if tl.intervals[i].start >= first}
        out: set[int] = set()
        fw = tl.marks.get(after_forward, tl.n_events)
        end = tl.marks.get(window_end, tl.n_events)
        live_fw = {tl.intervals[i].key: i for i in tl.live_at(fw)}
        cache: dict[int, dict[int, int]] = {}
        for addr, where in self.addresses:
            if isinstance(where, tuple):  # the allocator's counts when the engine started
                a0, f0 = self.recorder.start_counts
                point = max(0, min(tl.n_events, (where[0] - a0) + (where[1] - f0)))
                if point not in cache:
                    cache[point] = {tl.intervals[i].key: i for i in tl.live_at(point)}
                i = cache[point].get(addr)
                if i is not None:
                    out.add(i)
            elif where == "forward" and addr in live_fw:
                out.add(live_fw[addr])
            else:  # saved again while recomputing in backward: the latest such interval
                cands = [i for i, iv in enumerate(tl.intervals) if iv.key == addr and fw - 1 <= iv.start < end]
                if cands:
                    out.add(cands[-1])
        return {i for i in out if tl.intervals[i].start >= first}


def _is_leaf(s: Any) -> bool:
    """A leaf that requires grad (a parameter, an input): its owner claims it."""
    return isinstance(s, torch.Tensor) and s.grad_fn is None and s.is_leaf and s.requires_grad


def label_intervals(
    tl: Timeline,
    claims: list[tuple[str, list[tuple[int, Collection[int]]] | set[int]]],
    *,
    cuda: bool = False,
    tensor_keys_start: set[int] | None = None,
    tensor_keys_end: set[int] | None = None,
) -> list[str]:
    """One source per interval.

    Args:
        tl: the timeline.
        claims: in priority order, ``(source, [(point, keys), ...])`` (the
            intervals alive at ``point`` whose key is in ``keys``; a dict
            ``{key: bytes}`` from :func:`viewed_bytes_of` claims only those
            bytes of each, the rest is labelled as if unclaimed) or
            ``(source, {interval indices})`` (activations recorded at pack time).
        cuda: apply the CUDA workspace rule (allocated, but backing no tensor:
            alive at the end and not in ``tensor_keys_end``, or alive at the
            start and not in ``tensor_keys_start``).
    """
    labels = Labels([""] * len(tl.intervals))
    labels.split = {}
    cache: dict[int, dict[int, int]] = {}
    for source, what in claims:
        if isinstance(what, (set, frozenset)):
            for i in what:
                if not labels[i]:
                    labels[i] = source
            continue
        for point, keys in what:
            if point not in cache:
                cache[point] = {tl.intervals[i].key: i for i in tl.live_at(point)}
            live = cache[point]
            for k in keys:
                hit = live.get(k)
                if hit is not None and not labels[hit]:
                    labels[hit] = source
                    if isinstance(keys, dict) and keys[k] < tl.intervals[hit].size:  # a view of part of it
                        labels.split[hit] = (keys[k], "")
    for i, iv in enumerate(tl.intervals):
        if labels[i]:
            continue
        if cuda and tensor_keys_end is not None and iv.end is None and iv.key not in tensor_keys_end:
            labels[i] = "workspace"
        elif cuda and tensor_keys_start is not None and iv.start < 0 and iv.key not in tensor_keys_start:
            labels[i] = "workspace"
        elif iv.start < 0:
            labels[i] = "other"
        else:
            labels[i] = "temporaries"
    for i, (n, _) in labels.split.items():  # the rest of a partly claimed storage: as if unclaimed
        labels.split[i] = (n, "other" if tl.intervals[i].start < 0 else "temporaries")
    return labels


def sum_by_label(tl: Timeline, labels: list[str], point: int, names: Iterable[str] = ()) -> dict[str, int]:
    """Bytes per label of the intervals alive at ``point`` (every name in
    ``names`` present, with 0 if none)."""
    out = dict.fromkeys(names, 0)
    split = getattr(labels, "split", {})
    for i in tl.live_at(point):
        size = tl.intervals[i].size
        if i in split:
            n, rest = split[i]
            out[rest] = out.get(rest, 0) + size - n
            size = n
        out[labels[i]] = out.get(labels[i], 0) + size
    return out
