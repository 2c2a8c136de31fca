"""The tensor-storage tracker: exact bytes of every live tensor storage on a device.

PyTorch's CPU allocator keeps no statistics, so on CPU vramnb counts storages
itself (the CUDA path reads the caching allocator's counters instead). The
tracker holds one *weak* reference per live ``torch.UntypedStorage``; its
callback runs when the storage is freed. Storages are found two ways:

* while :meth:`StorageTracker.tracking` is active, a ``TorchDispatchMode`` sees
  the outputs of every ATen operator (forward and backward, since autograd
  propagates the mode) and registers their storages, noting resizes;
* :meth:`StorageTracker.scan` walks the garbage collector's objects for
  tensors made before tracking began, the ``.grad`` of leaf tensors, and the
  tensors autograd saved for backward in live graphs, so that frees of
  memory that existed before a cell are seen too.

A storage shared by views, tied weights or a gradient aliasing another tensor
is counted once (keyed by its ``StorageImpl``). The same weakref technique is
used by ``torch.distributed._tools.mem_tracker.MemTracker``.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["StorageTracker", "storage_key", "storage_of", "storages_of_tensor", "graph_tensors", "cpu_tracker"]

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def storage_of(t: torch.Tensor) -> torch.UntypedStorage | None:
    """The ``UntypedStorage`` behind a strided tensor, or ``None`` for tensors
    that have none of their own (sparse, nested, wrapper subclasses)."""
    try:
        with torch._C.DisableTorchFunctionSubclass():
            st = t.untyped_storage()
    except Exception:
        return None
    return st if isinstance(st, torch.UntypedStorage) else None


def storages_of_tensor(t: torch.Tensor, _depth: int = 0) -> list[tuple[int, torch.UntypedStorage]]:
    """``(key, storage)`` of every storage that holds ``t``'s data: its own, or
    for a sparse tensor its indices and values, for a wrapper subclass
    (``__tensor_flatten__``) those of its inner tensors. Meta and fake tensors
    have meta storages, which callers filter out by device."""
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
        if layout == torch.sparse_coo:
            return storages_of_tensor(t._indices(), _depth + 1) + storages_of_tensor(t._values(), _depth + 1)
        if layout in (torch.sparse_csr, torch.sparse_bsr):
            parts = (t.crow_indices(), t.col_indices(), t.values())
            return [kv for p in parts for kv in storages_of_tensor(p, _depth + 1)]
        if layout in (torch.sparse_csc, torch.sparse_bsc):
            parts = (t.ccol_indices(), t.row_indices(), t.values())
            return [kv for p in parts for kv in storages_of_tensor(p, _depth + 1)]
    except Exception:
        return []
    st = storage_of(t)
    return [] if st is None else [(storage_key(st), st)]


def storage_key(st: torch.UntypedStorage) -> int:
    """An identity for a live storage: the address of its ``StorageImpl``."""
    return st._cdata


class _Mode(TorchDispatchMode):
    def __init__(self, tracker: StorageTracker) -> None:
        super().__init__()
        self.tracker = tracker

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # Let torch.compile compile code run under the tracker (PyTorch >= 2.9
        # asks; older versions skip compiling frames while any mode is active).
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        __tracebackhide__ = True
        try:
            out = func(*args, **(kwargs or {}))
        except BaseException:
            del args, kwargs  # an exception's traceback must not keep the operands alive through this frame
            raise
        add = self.tracker.add_tensor
        if isinstance(out, torch.Tensor):
            add(out)
        elif isinstance(out, (tuple, list)):
            for o in out:
                if isinstance(o, torch.Tensor):
                    add(o)
        return out


class StorageTracker:
    """Live storages on one device type, their total bytes and its peak.

    Attributes:
        device_type: ``"cpu"`` (or any ``torch.device.type``) whose storages count.
        current: bytes in live storages registered so far (int).
        peak: the highest ``current`` since :meth:`reset_peak` (int).

    The tracker never holds a strong reference to a tensor or storage.
    """

    def __init__(self, device_type: str = "cpu") -> None:
        self.device_type = device_type
        self.current = 0
        self.peak = 0
        self._entries: dict[int, tuple[weakref.ref[Any], int]] = {}
        self._lock = threading.RLock()
        self._listeners: list[Callable[[int, int, int], None]] = []
        self.resets = 0  # times reset_peak was called (lets a measurement notice a reset)

    # -- registration -------------------------------------------------------
    def add_tensor(self, t: torch.Tensor) -> None:
        """Register the storage(s) of ``t`` that live on this tracker's device type."""
        if type(t) in _PLAIN and t.layout == torch.strided:  # the fast path: almost every tensor
            st = storage_of(t)
            if st is not None:
                self.add_storage(st)
            return
        for _, st in storages_of_tensor(t):
            self.add_storage(st)

    def add_storage(self, st: torch.UntypedStorage) -> None:
        """Register a storage (idempotent; a resized storage updates its size)."""
        if st.device.type != self.device_type:
            return
        key = storage_key(st)
        nbytes = st.nbytes()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0]() is st:
                if entry[1] == nbytes:
                    return
                self._entries[key] = (entry[0], nbytes)
                self._change(key, entry[1], nbytes)
                return
            ref = weakref.ref(st, self._make_callback(key))
            self._entries[key] = (ref, nbytes)
            self._change(key, 0, nbytes)

    def _make_callback(self, key: int) -> Callable[[weakref.ref[Any]], None]:
        def freed(ref: weakref.ref[Any]) -> None:
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None and entry[0] is ref:
                    del self._entries[key]
                    self._change(key, entry[1], 0)

        return freed

    def _change(self, key: int, old: int, new: int) -> None:
        self.current += new - old
        if self.current > self.peak:
            self.peak = self.current
        for listener in self._listeners:
            listener(key, old, new)

    # -- queries ------------------------------------------------------------
    def reset_peak(self) -> None:
        """Set ``peak`` to ``current``."""
        with self._lock:
            self.peak = self.current
            self.resets += 1

    def nbytes_of(self, key: int) -> int:
        """Registered size of the storage with this key (0 if unknown)."""
        entry = self._entries.get(key)
        return entry[1] if entry is not None else 0

    def live(self) -> dict[int, int]:
        """A copy of ``{storage key: bytes}`` for the live registered storages."""
        with self._lock:
            return {k: n for k, (_, n) in self._entries.items()}

    def __len__(self) -> int:
        return len(self._entries)

    @contextlib.contextmanager
    def listening(self, listener: Callable[[int, int, int], None]) -> Iterator[None]:
        """Call ``listener(storage_key, old_bytes, new_bytes)`` on every change while
        active: ``old == 0`` for a new storage, ``new == 0`` for a freed one,
        both non-zero for a resize."""
        self._listeners.append(listener)
        try:
            yield
        finally:
            self._listeners.remove(listener)

    # -- discovery ----------------------------------------------------------
    @contextlib.contextmanager
    def tracking(self) -> Iterator[StorageTracker]:
        """Register the outputs of every ATen operator run inside the block.

        If the block leaves a dispatch mode of its own on the stack, only the
        tracker's mode is removed; the user's stays where it was."""
        mode = _Mode(self)
        mode.__enter__()
        original = torch.UntypedStorage.resize_

        def resize_(st: torch.UntypedStorage, size: int) -> Any:
            # storage.resize_ (FSDP frees and re-allocates its unsharded parameters
            # this way) changes memory without an ATen operator the mode would see
            out = original(st, size)
            self.add_storage(st)
            return out

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign]
        try:
            yield self
        finally:
            torch.UntypedStorage.resize_ = original  # type: ignore[method-assign]
            _exit_mode(mode)

    def warm_up(self) -> None:
        """Enter and leave the dispatch mode once: the first time any
        ``TorchDispatchMode`` is entered PyTorch imports ``torch._dynamo``
        (about 1 s), which must not be counted as the user's time."""
        global _WARM
        if not _WARM:
            with self.tracking():
                torch.zeros(1).add_(1)  # the first operator under a mode imports torch._dynamo
            _WARM = True

    def scan(self) -> int:
        """Register storages of tensors that exist now: every tensor object the
        garbage collector knows, the ``.grad`` of leaf tensors, and the tensors
        saved for backward in live autograd graphs. Returns the number of
        storages newly registered."""
        before = len(self._entries)
        seen_nodes: set[Any] = set()  # autograd nodes (kept alive while scanning)
        tensors = _live_tensors()
        for t in tensors:
            self.add_tensor(t)
            try:
                if t.requires_grad:
                    if t.grad_fn is None:
                        g = t.grad
                        if g is not None:
                            self.add_tensor(g)
                    else:
                        self._scan_graph(t.grad_fn, seen_nodes)
            except Exception:
                continue
        return len(self._entries) - before

    def _scan_graph(self, root: Any, seen: set[Any]) -> None:
        for t in graph_tensors(root, seen):
            self.add_tensor(t)


def graph_tensors(root: Any, seen: set[Any], grads: bool = True) -> Iterator[torch.Tensor]:
    """Tensors a live autograd graph keeps: those saved for backward
    (``_saved_*`` attributes of its nodes) and, with ``grads``, the ``.grad`` of
    its leaves. ``seen`` is shared across calls so each node is walked once; it
    holds the node objects themselves: Python wrappers of autograd nodes are
    made on access and freed after, so an id could be reused by another node."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for name in dir(node):
            if not name.startswith("_saved_"):
                continue
            try:
                val = getattr(node, name)
            except Exception:  # graph already freed by backward
                continue
            if isinstance(val, torch.Tensor):
                yield val
            elif isinstance(val, (tuple, list)):
                yield from (v for v in val if isinstance(v, torch.Tensor))
        var = getattr(node, "variable", None) if grads else None  # AccumulateGrad's leaf
        if isinstance(var, torch.Tensor) and var.grad is not None:
            yield var.grad
        for nxt, _ in getattr(node, "next_functions", ()):
            stack.append(nxt)


def _exit_mode(mode: TorchDispatchMode) -> None:
    """Leave ``mode`` even if the user's code pushed modes above it and left them
    on: those are lifted off, the tracker's mode exits, and they go back."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode, _push_mode

    stack = _get_current_dispatch_mode_stack()
    if not stack or stack[-1] is mode or not any(m is mode for m in stack):
        mode.__exit__(None, None, None)
        return
    above = []
    while _get_current_dispatch_mode_stack()[-1] is not mode:
        above.append(_pop_mode())
    mode.__exit__(None, None, None)
    for m in reversed(above):
        _push_mode(m)


_WARM = False
_IS_TENSOR_TYPE: dict[type, bool] = {}


def _live_tensors() -> list[torch.Tensor]:
    """Every tensor object the garbage collector tracks. Each type is tested
    once and cached (``issubclass`` against ``torch.Tensor`` goes through its
    metaclass); ``type()`` is used rather than ``isinstance``, which reads
    ``__class__`` and wakes lazy module attributes. The filtering runs in C
    (``map``/``compress``): ~10 ms for 200k objects."""
    objs = gc.get_objects()
    cache = _IS_TENSOR_TYPE
    for tp in set(map(type, objs)):
        if tp not in cache:
            cache[tp] = issubclass(tp, torch.Tensor)
    tensor_types = {tp for tp, hit in cache.items() if hit}
    return list(itertools.compress(objs, map(tensor_types.__contains__, map(type, objs))))


_CPU_TRACKER: StorageTracker | None = None


def cpu_tracker() -> StorageTracker:
    """The process-wide tracker of CPU storages (created on first use)."""
    global _CPU_TRACKER
    if _CPU_TRACKER is None:
        _CPU_TRACKER = StorageTracker("cpu")
    return _CPU_TRACKER
