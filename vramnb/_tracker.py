"""The tensor-storage tracker: exact bytes of every live tensor storage on a device.

PyTorch's CPU allocator keeps no statistics, so on CPU vramnb counts storages
itself (the CUDA path reads the caching allocator's counters instead). The
tracker holds one *weak* reference per live ``torch.UntypedStorage``; its
callback runs when the storage is freed. Storages are found two ways:

* while :meth:`StorageTracker.tracking` is active, a ``TorchDispatchMode`` sees
  the outputs of every ATen operator (forward and backward, since autograd
  propagates the mode) and registers their storages, noting resizes;
* :meth:`StorageTracker.scan` walks the garbage collector's objects for
  tensors and bare storages, the ``.grad`` of leaf tensors, and what live
  autograd graphs keep (never unpacking saved tensors: :mod:`vramnb._graph`).
  It finds what no dispatch mode saw: storages made before tracking began,
  in other threads (dispatch modes are thread-local), or outside the
  dispatcher (``torch.frombuffer``, ``torch.from_numpy``, ``UntypedStorage(n)``,
  typed storages, deserialisation); a measurement scans at its start and end.

A storage shared by views, tied weights or a gradient aliasing another tensor
is counted once (keyed by its ``StorageImpl``), and so is one memory behind two
``StorageImpl`` objects (``torch.from_numpy(t.numpy())``), found by data range. The same weakref technique is
used by ``torch.distributed._tools.mem_tracker.MemTracker``.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ._graph import collector_paused, graph_tensors
from ._same_memory import Entry, SameMemory
from ._tracker_patch import _ON_FORK, _exit_mode, _patch_acquire, _patch_release
from ._young import YoungWatch, generations_supported
from ._interrupt import deliver_later
from ._storages import (
    _PLAIN, DataRanges, ScanTable, _live_tensors_and_storages, data_range, note_sparse_parts, sparse_parts_of,
    storage_key, storage_of, storages_of_tensor,
)

_TO_COPY = torch.ops.aten._to_copy.default  # the cast autocast's weight-cast cache keeps (diagnose._autocast_cache)

_RUN = 1 << 14  # objects a scan checks at once, in C (StorageTracker._unknown)
_CDATA = attrgetter("_cdata")
_DATA_PTR = torch.UntypedStorage.data_ptr
_NBYTES = torch.UntypedStorage.nbytes
_REQUIRES_GRAD = attrgetter("requires_grad")
_IS_NESTED = attrgetter("is_nested")
_IS_QUANTIZED = attrgetter("is_quantized")
_LAYOUT = attrgetter("layout")
_PLAIN_SET = frozenset(_PLAIN)


def _plain_storages(run: list[Any]) -> list[Any] | None:
    """The storage of each of ``run`` (tensors or bare storages a scan found), each step in C
    over the run, when every one is a bare ``UntypedStorage`` (itself) or every one a plain
    strided tensor (``torch.Tensor``, ``nn.Parameter``) that does not require grad and is
    neither nested nor quantized (its one storage is all it holds); else ``None``."""
    types = set(map(type, run))
    if types == {torch.UntypedStorage}:
        return run
    if not types <= _PLAIN_SET:
        return None
    try:
        if (any(map(_REQUIRES_GRAD, run)) or any(map(_IS_NESTED, run)) or any(map(_IS_QUANTIZED, run))
                or list(map(_LAYOUT, run)).count(torch.strided) != len(run)):
            return None
        return list(map(torch.Tensor.untyped_storage, run))
    except Exception:  # noqa: BLE001 - a tensor without a storage to read: one at a time
        return None


__all__ = ["StorageTracker", "storage_key", "storage_of", "storages_of_tensor", "graph_tensors", "cpu_tracker"]

def _failed_allocation(tracker: StorageTracker, exc: RuntimeError, func: Any, args: Any, kwargs: Any) -> None:
    """An operator raised under the tracker: if its allocation failed, hand the live bytes at this
    moment (before anything unwinds) and the operator's one record (:func:`vramnb.diagnose._failing_op.record`:
    shapes, dtypes and numbers, no reference to ``args``) to the out-of-memory post-mortem."""
    from ._oom import is_oom, requested_bytes

    # the allocator's own error is a plain RuntimeError: a subclass (the user's, raised by a
    # __torch_dispatch__ subclass) is not read here, whose __str__ is the user's code
    if type(exc) is not RuntimeError and type(exc) is not getattr(torch, "OutOfMemoryError", None):
        return
    try:
        if is_oom(exc):
            from .diagnose._failing_op import record
            from .diagnose._postmortem import capture_cpu_oom

            capture_cpu_oom(requested_bytes(exc), tracker.current, record(func, args, kwargs))
    except Exception:  # noqa: BLE001 - the post-mortem must never replace the user's error
        pass


# Frames the tracker puts between a user's operator call and the operator, which without vramnb runs
# from C++ with no Python frame: torch's dynamo-disable shim that calls the mode's __torch_dispatch__
# (SHIM_MODULES), the tracker's own (TRACKER_MODULES: also its UntypedStorage.resize_ wrapper), and
# torch's OpOverload.__call__ that it calls (CALLED_MODULES). Each holds the operator's arguments.
TRACKER_MODULES = ("vramnb._tracker", "vramnb._tracker_patch", "vramnb._saved")
SHIM_MODULES = ("torch._compile", "torch._dynamo.eval_frame", "torch.utils._python_dispatch")
CALLED_MODULES = ("torch._ops", "torch.utils._python_dispatch")


def _module(frame: Any) -> str:
    return str(frame.f_globals.get("__name__", ""))


def _clear_frames(frames: list[Any]) -> list[Any]:
    """Clear each finished frame of ``frames`` (its locals let go); return those still running,
    which ``frame.clear()`` refuses (RuntimeError), to be cleared later."""
    running = []
    for f in frames:
        try:
            f.clear()
        except RuntimeError:
            running.append(f)
    return running


_SPARSE_COO = torch.ops.aten._sparse_coo_tensor_with_dims_and_tensors.default
_CLONE = torch.ops.aten.clone.default


def _sparse_parts(out: torch.Tensor, indices: Any, values: Any) -> None:
    """A sparse COO tensor made from ``indices`` and ``values`` keeps them (no copy); a fake
    one is made without them (nnz 0): note them, so that its storages are theirs."""
    try:
        if (isinstance(values, torch.Tensor) and out.layout == torch.sparse_coo
                and out._values().shape != values.shape):
            note_sparse_parts(out, indices, values)
    except Exception:  # noqa: BLE001 - a tensor that cannot say: counted as it is
        pass


def _sparse_copy(tracker: StorageTracker, out: torch.Tensor, src: Any) -> None:
    try:
        indices, values = sparse_parts_of(src) or (src._indices(), src._values())
        if out._values().shape != values.shape:
            parts = (indices.clone(), values.clone())
            for p in parts:
                tracker.add_tensor(p)
            note_sparse_parts(out, *parts)
    except Exception:  # noqa: BLE001 - a tensor that cannot say: counted as it is
        pass


class _Mode(TorchDispatchMode):
    _vramnb_tracks = True  # left in a forked child (vramnb._tracker_patch._untrack_child)

    def __init__(self, tracker: StorageTracker) -> None:
        super().__init__()
        self.tracker = tracker
        self.unwound: list[Any] = []  # frames of a failed operator, cleared once finished (see _failed)

    def _failed(self, exc: BaseException, frame: Any) -> None:
        """An operator raised in ``frame`` (this mode's ``__torch_dispatch__``): drop the arguments that
        the frames vramnb added keep in the exception's traceback, which a user's ``except ... as err``
        would keep (their traceback without vramnb keeps no such frame). The frames below (torch's
        ``OpOverload.__call__``) have finished and are cleared now; this one and torch's shim above it
        are still running, and are cleared at this mode's next operator or at its exit, when they have
        finished: before the next allocation that this mode sees."""
        below = []
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame is not frame:
            tb = tb.tb_next
        tb = tb.tb_next if tb is not None else None
        while tb is not None and _module(tb.tb_frame) in CALLED_MODULES:
            below.append(tb.tb_frame)
            tb = tb.tb_next
        _clear_frames(below)
        self.unwound.append(frame)
        f = frame.f_back
        while f is not None and _module(f) in SHIM_MODULES:
            self.unwound.append(f)
            f = f.f_back

    def let_go(self) -> None:
        """Clear the frames of an earlier failed operator that have finished (see :meth:`_failed`)."""
        if self.unwound:
            unwound, self.unwound = self.unwound, []
            self.unwound.extend(_clear_frames(unwound))

    def __exit__(self, *exc: Any) -> Any:
        self.let_go()
        return super().__exit__(*exc)

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # Let torch.compile compile code run under the tracker (PyTorch >= 2.9
        # asks; older versions skip compiling frames while any mode is active).
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        __tracebackhide__ = True
        if self.unwound:  # an earlier operator's failure has unwound: its frames let go of its arguments
            self.let_go()
        try:
            out = func(*args, **(kwargs or {}))
        except BaseException as e:
            if self.tracker.device_type == "cpu" and isinstance(e, RuntimeError):
                _failed_allocation(self.tracker, e, func, args, kwargs)
            del args, kwargs  # an exception's traceback must not keep the operands alive through this frame
            self._failed(e, sys._getframe())
            raise
        self.tracker.ops += 1
        if func is _SPARSE_COO and isinstance(out, torch.Tensor) and len(args) >= 5:
            _sparse_parts(out, args[3], args[4])  # (sparse_dim, dense_dim, size, indices, values)
        elif func is _CLONE and args and isinstance(out, torch.Tensor) and out.layout == torch.sparse_coo:
            # a fake clone of a sparse tensor (AccumulateGrad's copy of an embedding's sparse gradient)
            # is made empty: copies of the source's parts, as the real clone allocates them
            _sparse_copy(self.tracker, out, args[0])
        add = self.tracker.add_tensor
        if isinstance(out, torch.Tensor):
            add(out)
        elif isinstance(out, (tuple, list)):
            for o in out:
                if isinstance(o, torch.Tensor):
                    add(o)
        tracker = self.tracker
        if tracker.watches:
            if func is _TO_COPY:
                for w in list(tracker.watches):
                    tracker.cast_pending |= w.cast(args, out)
            elif tracker.cast_pending:  # the op that uses a cached copy runs in the caller's grad mode
                tracker.cast_pending = False
                for w in list(tracker.watches):
                    if w.pending:
                        w.used()
        return out


class StorageTracker(SameMemory):
    """Live storages on one device type, their total bytes and its peak.

    Attributes:
        device_type: ``"cpu"`` (or any ``torch.device.type``) whose storages count.
        current: bytes in live storages registered so far (int), process-wide.
        peak: the highest ``current`` since :meth:`reset_peak` (int).

    The tracker never holds a strong reference to a tensor or storage.

    **Threads.** ``current`` and ``peak`` count the whole process, as the CUDA
    allocator's counters do: a ``%%vram`` cell sees what other threads
    allocate (found by :meth:`scan`, since PyTorch's dispatch modes are
    thread-local and see only the thread that entered them). A *listener*
    (:meth:`listening`, which records a step's timeline) sees only its own
    thread by default: the storages that thread's operators made while it
    was tracking, and the frees and resizes of the other storages (there
    before, or left by a thread's earlier block) done by that thread or by
    a thread that is not tracking: a step recorded while another thread runs
    a measured cell counts only its own memory. Two recordings (listeners)
    in two threads at once are refused with a clear error (see
    :meth:`listening`).
    """

    def __init__(self, device_type: str = "cpu", *, watch_young: bool = False) -> None:
        self.device_type = device_type
        self.watch_young = watch_young  # keep the registry between scans (vramnb._young): the process-wide tracker
        self.current = 0
        self.peak = 0
        self._entries: dict[int, Entry] = {}  # key -> the storage's weak ref, bytes and owning thread
        self._lock = threading.RLock()
        # (listener, the thread whose changes it gets or None for all, its thread, that thread's name)
        self._listeners: list[tuple[Callable[[int, int, int], None], int | None, int, str]] = []
        self._tracking: dict[int, int] = {}  # thread ident -> nesting depth of tracking() and owning()
        self._modes: weakref.WeakSet[_Mode] = weakref.WeakSet()  # the modes of open tracking() blocks
        self.resets = 0  # times reset_peak was called (lets a measurement notice a reset)
        self.ops = 0  # ATen operators seen by the dispatch mode (what tracking slows down)
        # watchers of casts and new peaks (``cast(args, out)``, ``new_peak()``): autocast's
        # weight-cast cache while a measurement runs (vramnb.diagnose._autocast_cache)
        self.watches: list[Any] = []
        self.cast_pending = False  # a watch saw a cached cast; the next operator tells its grad mode
        self._ranges = DataRanges()  # data ranges of the counted storages
        self._alias_of: dict[int, int] = {}  # a storage over another's bytes -> that one
        self._aliases: dict[int, set[int]] = {}
        self._alias_bytes: dict[int, int] = {}
        self._owned: dict[int, set[int]] = {}  # thread -> keys of the entries it owns
        # key -> (data address, bytes) of storages a scan found registered, alive, counted at that
        # size and address; any change of their entry takes them out (_unverify): what a scan
        # finds in it unchanged needs no registration (_unknown)
        self._verified: dict[int, tuple[int, int]] = {}
        self._freed_callback = self._freed  # made once: every entry shares it
        # -- discovery between scans (vramnb._young) --
        # True while code may have run that no tracker saw (the next scan is a full one); the
        # end of every thread's outermost tracking() sets it, vouch() clears it
        self.stale = True
        self.full_scans = 0  # full scans so far
        self.last_scan: tuple[str, float, int] = ("none", 0.0, 0)  # ("full" | "young", seconds, new storages)
        self._freeze_count = -1  # gc.get_freeze_count() at the last scan
        self._leaves: dict[int, weakref.ref[Any]] = {}  # id -> leaf tensor that requires grad (its .grad)
        self._pending: list[weakref.ref[Any]] = []  # young objects a collection met while the tracker was busy
        self._pending_limit = 4096
        self._scanning = False
        # a scan or a collection's registration was cut short (Ctrl-C): what it had taken from
        # _pending is gone, so only a full scan makes the registry complete again
        self._incomplete = False
        # threads that run none of the user's code (a notebook kernel's, the test runner's): alive
        # when the tracker was made or the extension loaded; any other thread alive may change
        # storages no tracker sees (a dispatch mode is thread-local), so no scan may be a young one
        self._host_threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet(threading.enumerate())
        self._watch = YoungWatch(self._on_collection)
        _ON_FORK.append(weakref.WeakMethod(self._forked))

    def _forked(self) -> None:
        """In a child ``fork()`` made (after ``_untrack_child`` left the modes): track nothing
        there. Its only thread tracks no block and no listener listens; the ``gc`` callback is
        gone; the registry it keeps (the parent's storages, copied) needs a full scan before
        any use, as after unmeasured code."""
        self._lock = threading.RLock()  # another thread may have held it at the fork
        self._tracking.clear()
        self._listeners.clear()
        self._owned.clear()
        self.watches.clear()
        self._watch.uninstall()
        self._verified.clear()
        self.stale = True

    # -- registration -------------------------------------------------------
    def add_tensor(self, t: Any, owner: Any = "auto") -> None:
        """Register the storage(s) of ``t`` (a tensor, or a bare storage) that
        live on this tracker's device type."""
        if type(t) in _PLAIN and t.layout == torch.strided and not (t.is_nested or t.is_quantized):  # the fast path
            st = storage_of(t)
            if st is not None:
                self.add_storage(st, owner)
            return
        for _, st in storages_of_tensor(t):
            self.add_storage(st, owner)

    def add_storage(self, st: torch.UntypedStorage, owner: Any = "auto") -> None:
        """Register a storage (idempotent; a resized storage updates its size).

        ``owner``: the thread ident it is attributed to; by default the
        calling thread if it is inside :meth:`tracking`, :meth:`owning` or
        :meth:`listening` (what a recording thread registers is its own),
        else ``None``. A storage whose data lies inside a live registered
        storage's data (``torch.from_numpy(t.numpy())``: a second
        ``StorageImpl`` over ``t``'s bytes) counts 0 bytes while that one
        lives (see :meth:`same_as`)."""
        if st.device.type != self.device_type:
            return
        key = storage_key(st)
        nbytes = st.nbytes()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                if entry.ref() is not None:  # alive: the same StorageImpl (two live ones never share an
                    # address), maybe through another Python wrapper (fake tensors make new ones)
                    if key in self._alias_of:
                        self._alias_bytes[key] = nbytes
                    elif entry.nbytes != nbytes:
                        self._unverify(key)
                        if entry.nbytes and nbytes and self.current + nbytes > self.peak:
                            # a storage's resize allocates the new buffer and copies before it frees the old
                            # one (c10's resize_bytes_cpu): both were alive for a moment
                            self.peak = self.current + nbytes
                        old = entry.nbytes
                        entry.nbytes = nbytes
                        self._ranges.remove(key)
                        rng = data_range(st)
                        if rng is not None:
                            self._ranges.add(key, rng)
                        self._change(key, old, nbytes, entry.owner, resized=True)
                    elif nbytes:
                        span = self._ranges.span(key)
                        if span is not None and st.data_ptr() != span[0]:
                            # the same bytes moved (share_memory_ copies them to shared memory
                            # and frees the old ones, which a later allocation may reuse)
                            self._unverify(key)
                            self._ranges.remove(key)
                            self._ranges.add(key, (st.data_ptr(), nbytes))
                    return
                # the storage registered under this address was freed and the address reused
                # before its weakref callback ran: record that free first (the late
                # callback is then ignored)
                self._drop(key)
            if owner == "auto":
                me = threading.get_ident()
                mine = self._tracking.get(me) or any(ident == me for _, _, ident, _ in self._listeners)
                owner = me if mine else None
            try:
                ptr = st.data_ptr() if nbytes and self.device_type != "meta" else 0
            except Exception:  # a storage without data (fake, lazy)
                ptr = 0
            rng = (ptr, nbytes) if ptr else None
            container = self._container(rng) if rng is not None else None
            if owner is not None:
                self._owned.setdefault(owner, set()).add(key)
            if container is not None:  # the same bytes as a live storage: counted there
                self._entries[key] = Entry(st, self._freed_callback, key, 0, owner)
                self._alias_of[key] = container
                self._alias_bytes[key] = nbytes
                self._aliases.setdefault(container, set()).add(key)
                return
            self._entries[key] = Entry(st, self._freed_callback, key, nbytes, owner)
            if rng is not None:
                self._contain(key, rng)
                self._ranges.add(key, rng)
            self._change(key, 0, nbytes, owner)

    def _drop_freed(self, ref: Entry) -> None:
        with self._lock:
            entry = self._entries.get(ref.key)
            if entry is ref:
                self._drop(ref.key)

    def _freed(self, ref: Entry) -> None:
        """The weak reference's callback (one bound method for every entry: no object per storage)."""
        self._verified.pop(ref.key, None)  # first: the storage is gone whatever happens next
        try:
            self._drop_freed(ref)
        except KeyboardInterrupt:
            # Python only prints what a weakref callback raises: the Ctrl-C would be lost and the
            # freed storage stay counted. The drop is done (an interrupt at its start, the usual
            # place, cut nothing yet) and the interrupt delivered again where it can be raised.
            deliver_later()
            self._drop_freed(ref)

    def _change(self, key: int, old: int, new: int, owner: int | None, resized: bool = False) -> None:
        """Count a change of ``key`` from ``old`` to ``new`` bytes and tell the listeners concerned.

        ``resized``: a registered storage changed size (``old == 0``: re-allocated, as FSDP2's
        unsharded parameters are at each all-gather), as opposed to a storage seen for the first
        time (``old == 0`` there is a registration, not an allocation of the thread's)."""
        if old == new == 0:
            return
        self.current += new - old
        if self.current > self.peak:
            self.peak = self.current
            if self.watches:
                for w in self.watches:
                    w.new_peak()
        if not self._listeners:
            return
        me = threading.get_ident()
        other_tracking = bool(self._tracking.get(me))
        for listener, thread, _, _ in self._listeners:
            # a thread's listener: its own storages; and frees and resizes (from 0 too: a storage
            # re-allocated in place) of storages no tracking thread owns, done by itself or by a
            # thread that is not tracking
            if thread is None or owner == thread or (
                    owner is None and (old or resized) and (me == thread or not other_tracking)):
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
        return entry.nbytes if entry is not None else 0

    def settle(self) -> None:
        """Let go of what the frames of a failed operator still keep (its arguments and temporaries, in
        the traceback of an exception the tracker's mode saw raised) once those frames have finished:
        a block's end is read after it (the cell's last column, its allocated bytes), as without vramnb
        the operator's C++ call would have freed them while the error unwound."""
        for mode in list(self._modes):
            mode.let_go()

    def live(self, thread: Any = "auto") -> dict[int, int]:
        """A copy of ``{storage key: bytes}`` for the live registered storages
        a listener of ``thread`` (default: the calling thread; ``None``: all)
        starts from: all but those another thread is making while it tracks."""
        with self._lock:
            if thread == "auto":
                thread = threading.get_ident()
            return {k: e.nbytes for k, e in self._entries.items()
                    if thread is None or e.owner is None or e.owner == thread}

    def __len__(self) -> int:
        return len(self._entries)

    @contextlib.contextmanager
    def listening(self, listener: Callable[[int, int, int], None], *, all_threads: bool = False) -> Iterator[None]:
        """Call ``listener(storage_key, old_bytes, new_bytes)`` on every change while
        active: ``old == 0`` for a new storage, ``new == 0`` for a freed one,
        both non-zero for a resize. By default only the calling thread's
        changes (see the class docstring); ``all_threads`` for every change.

        Raises:
            VramnbError: another thread is listening (recording a step or a
                ``--breakdown`` cell). Recordings are refused, not queued: a
                wait could deadlock threads that wait on each other, and two
                at once would count each other's memory (the storage scan
                and torch's module hooks are process-wide)."""
        me = threading.get_ident()
        with self._lock:
            busy = [name for _, _, ident, name in self._listeners if ident != me]
            if busy:
                from ._errors import VramnbError

                raise VramnbError(
                    f"thread {busy[0]!r} is already recording (a profile_step, compare, panel run or a "
                    f"%%vram --breakdown cell) on the {self.device_type} tracker; vramnb records one at a "
                    "time per process, since two recordings would count each other's memory: run them "
                    "one after another (e.g. behind a threading.Lock)"
                )
            item = (listener, None if all_threads else me, me, threading.current_thread().name)
            self._listeners.append(item)
        try:
            yield
        finally:
            with self._lock:
                self._listeners.remove(item)
                if not self._tracking.get(me) and not any(ident == me for _, _, ident, _ in self._listeners):
                    self._release(me)

    # -- discovery ----------------------------------------------------------
    @contextlib.contextmanager
    def tracking(self) -> Iterator[StorageTracker]:
        """Register the outputs of every ATen operator run inside the block, in
        this thread (dispatch modes are thread-local), and the storages that
        ``UntypedStorage.resize_`` changes (in any thread).

        Blocks may nest and overlap, also across threads and trackers: the
        ``resize_`` patch is reference-counted and the original goes back when
        the last block ends, whatever the order they end in. If the block
        leaves a dispatch mode of its own on the stack, only the tracker's
        mode is removed; the user's stays where it was. When the thread's
        outermost block ends, the storages it made become ordinary ones
        (owned by no thread)."""
        me = threading.get_ident()
        mode = _Mode(self)
        self._modes.add(mode)
        counted = acquired = False
        try:  # each step is undone if an interrupt (or an error) lands before the block is open
            with self._lock:
                self._tracking[me] = self._tracking.get(me, 0) + 1
                counted = True
            _patch_acquire(self)
            acquired = True
            mode.__enter__()
        except BaseException:
            if acquired:
                _patch_release(self)
            if counted:
                self._untrack(me)
            raise
        try:
            yield self
        finally:
            try:
                _exit_mode(mode)
            finally:
                self._modes.discard(mode)
                _patch_release(self)
                self._untrack(me)

    @contextlib.contextmanager
    def owning(self) -> Iterator[None]:
        """Attribute to the calling thread, for the whole block, what it frees
        and what its :meth:`tracking` blocks make (they stay its own until the
        block ends), without tracking operators. A measurement that runs
        several tracked steps with untracked work between them (a snapshot,
        a restore) wraps all of it, so that a listener in another thread
        never sees that work."""
        me = threading.get_ident()
        with self._lock:
            self._tracking[me] = self._tracking.get(me, 0) + 1
        try:
            yield
        finally:
            self._untrack(me)

    def _untrack(self, me: int) -> None:
        with self._lock:
            depth = self._tracking.get(me, 0) - 1
            if depth > 0:
                self._tracking[me] = depth
                return
            self._tracking.pop(me, None)
            self.stale = True  # what this thread runs next, no tracker sees
            if not any(ident == me for _, _, ident, _ in self._listeners):
                self._release(me)

    def _release(self, me: int) -> None:
        """The thread's storages become ordinary ones (owned by no thread)."""
        for key in self._owned.pop(me, ()):
            entry = self._entries.get(key)
            if entry is not None and entry.owner == me:
                entry.owner = None  # in place (see Entry)

    def warm_up(self) -> None:
        """Enter and leave the dispatch mode once: the first time any
        ``TorchDispatchMode`` is entered PyTorch imports ``torch._dynamo``
        (about 1 s), which must not be counted as the user's time. An interrupt
        that arrives meanwhile is held back until the imports are done (cut, they
        would leave half-imported modules: ``torch.compile`` would fail until the
        kernel restarts) and raised then. The extension's load calls it, so that a
        notebook's first measured cell does not wait for it."""
        global _WARM
        if not _WARM:
            from ._interrupt import held_back

            with held_back(), self.tracking():
                torch.zeros(1).add_(1)  # the first operator under a mode imports torch._dynamo
            _WARM = True

    def vouch(self) -> None:
        """Say that since the last scan no code ran that no tracker saw (the
        magics call it after a cell measured on CPU from its first line to its
        last), so that the next :meth:`scan` may be a young one. Refused (``stale``
        stays set) while a thread of the user's is alive that does not track (it
        may resize or re-point old storages between cells and during the next
        one), and after a scan cut short (see :meth:`scan`)."""
        self.stale = self._incomplete or self._untracked_threads()

    def stop_watching(self) -> None:
        """Take the garbage collector's callback out of ``gc.callbacks`` (``%unload_ext vramnb``); the
        next scan walks every live object, since the collections in between were not watched, and puts
        it back."""
        self._watch.uninstall()

    def host_threads(self) -> None:
        """Take the threads alive now as the host's, running none of the user's code
        (the extension's load calls it: a notebook kernel's threads exist by then)."""
        self._host_threads.update(threading.enumerate())

    def _untracked_threads(self) -> bool:
        """Whether a thread other than the caller, the host's and vramnb's own is
        alive and not tracking: its operators no dispatch mode sees."""
        me = threading.current_thread()
        host = self._host_threads
        for th in threading.enumerate():
            if th is me or th in host or getattr(th, "_vramnb_own", False) or self._tracking.get(th.ident or 0):
                continue
            return True
        return False

    def scan(self, full: bool | None = None, *, block_starts: bool = False, table: ScanTable | None = None) -> int:
        """Register storages that exist now: those of every tensor and bare
        storage (``UntypedStorage``, ``TypedStorage``) the garbage collector
        knows, the ``.grad`` of leaf tensors, and what live autograd graphs keep
        (saved tensors, never unpacked: see :mod:`vramnb._graph`). This finds
        storages no dispatch mode saw: made in other threads, by
        ``torch.frombuffer``/``from_numpy``, by storage constructors, or before
        tracking began. Returns the number of storages newly registered.

        ``full=None`` (the default) walks every live object only when it must
        (the first scan, ``stale``, a ``gc.freeze()`` since the last scan, a
        free-threaded Python); otherwise it looks only at what no collection has
        seen since the last scan and at the leaves' ``.grad``, since the
        collections in between handed their young objects over
        (:mod:`vramnb._young`). ``full=False`` asks for the young scan even
        when ``stale`` (the end of a tracked block, whose start was scanned).
        ``block_starts``: a tracked block starts right after this scan (a
        measurement's start), so a full scan leaves the registry complete
        (``stale`` cleared); other scans leave ``stale`` as it was, since
        untracked code follows them. ``table``, if given (for this tracker's device
        type), gets what a full scan read of the plain tensors it found unchanged (see
        :class:`vramnb._storages.ScanTable`), for the holders listing that follows it. ``last_scan`` says which ran and how long
        it took. The garbage collector is paused while scanning (each storage
        registered allocates; the collections that set off made a full scan
        about twice as slow) and resumed as it was."""
        t0 = time.perf_counter()
        before = len(self._entries)
        young_ok = (self.watch_young and generations_supported() and self._watch.installed
                    and gc.get_freeze_count() <= self._freeze_count  # it falls as frozen objects die
                    and not self._incomplete and not self._untracked_threads())
        if full is None:
            full = self.stale or not young_ok
        elif not young_ok:
            full = True
        with collector_paused():
            self._scanning = True
            try:
                if full:
                    self._scan_all(table if table is not None and table.device_type == self.device_type else None)
                else:
                    self._scan_young(leaves=True)
            except BaseException:
                self._incomplete = True  # Ctrl-C mid-scan: what it had taken from _pending is lost
                raise
            finally:
                self._scanning = False
        self._freeze_count = gc.get_freeze_count()
        if self.watch_young and generations_supported():
            self._watch.install()
        if full:
            self.full_scans += 1
            self._incomplete = False
            if block_starts:
                self.stale = False
        added = len(self._entries) - before
        self.last_scan = ("full" if full else "young", time.perf_counter() - t0, added)
        return added

    def _scan_all(self, table: ScanTable | None = None) -> None:
        tensors, storages = _live_tensors_and_storages()
        self._pending.clear()
        self._leaves.clear()
        self._register(tensors, storages, young=False, table=table)

    def _register(self, tensors: list[Any], storages: list[Any], young: bool, table: ScanTable | None = None) -> None:
        """Register the storages and tensors a scan found (the lists are emptied), the
        tensors with their ``.grad`` and what their graphs keep (see :meth:`_scan_tensors`);
        ``table``: see :meth:`scan`."""
        ok: set[Any] = set()  # storages found unchanged through a tensor (a bare one needs no second look)
        pending: list[Any] = []  # storages looked at and registered below: verified once they are
        tensors = self._unknown(tensors, ok, pending) if table is None else self._unknown(tensors, ok, pending, table)
        if ok and storages:
            if set(map(type, storages)) == {torch.UntypedStorage}:  # (a TypedStorage may hash by value)
                storages = list(itertools.filterfalse(ok.__contains__, storages))
        ok.clear()
        for st in self._unknown(storages, None, pending):
            self.add_tensor(st, None)
        # weakly: holding every tensor for the whole scan would keep those another
        # thread frees meanwhile (its backward releasing saved tensors) alive
        refs = [weakref.ref(t) for t in tensors]
        tensors.clear()
        seen: dict[int, Any] = {}  # objects walked (kept alive while scanning)
        # a subclass's __torch_function__ is the user's code (a counter, a lazy load): reading
        # .layout, .requires_grad, .grad must not run it
        with torch._C.DisableTorchFunctionSubclass():
            self._scan_tensors(refs, threading.get_ident(), seen, young=young)
        if young:  # (a collection's survivors: verified by the next full scan, not at every collection)
            pending.clear()
        else:
            self._verify(pending)

    def _verify(self, sts: list[Any]) -> None:
        """Note in ``_verified`` those of ``sts`` (storages a scan looked at) that are now
        registered alive, counted (not an alias) at their size and data address: the next
        scan skips them while they stay so (see :meth:`_unknown`). Under the lock, a few
        thousand at a time: an entry another thread changes meanwhile is either changed
        before (then it is read as changed) or after (then its change takes the key out)."""
        entries, spans, alias_of, verified = self._entries, self._ranges._span, self._alias_of, self._verified
        for i in range(0, len(sts), 4096):
            with self._lock:
                for st in sts[i:i + 4096]:
                    try:
                        key = st._cdata
                        entry = entries.get(key)
                        held: Any = entry.ref() if entry is not None else None
                        if entry is None or held is not st or key in alias_of:
                            continue
                        nbytes = st.nbytes()
                        ptr = st.data_ptr()
                    except Exception:  # noqa: S112 - a storage without data: looked at one by one each time
                        continue
                    if entry.nbytes != nbytes:
                        continue
                    if nbytes:
                        span = spans.get(key)
                        if span is None or span[0] != ptr:
                            continue
                    verified[key] = (ptr, nbytes)
        sts.clear()

    def _unknown(self, objs: list[Any], ok: set[Any] | None, pending: list[Any],
                 table: ScanTable | None = None) -> list[Any]:
        """``objs`` (tensors or bare storages a scan found) less those whose registration
        would change nothing: a plain strided tensor that does not require grad (nothing of
        it but its storage is read) or a bare ``UntypedStorage``, whose storage is the very
        object registered, alive, at the same size and data address. Pure: registers nothing.

        Checked in runs of ``_RUN``, each in C (``map``): the run's storages' (key, data
        address, size) against ``_verified``, the storages found so at the last scan and
        unchanged in the registry since (a free, a resize, a move or an alias takes a key out
        of it: :meth:`_unverify`). A run where any object is not such a tensor or storage, or
        any storage is not in ``_verified`` as it is now, is checked one object at a time as
        before; its storages are added to ``pending``, for :meth:`_verify` after registration.
        ``ok``, if given, gets the storages of the tensors skipped; ``table``, if given, the
        tensors skipped with their storages' keys and (data address, size) as read here."""
        rest: list[Any] = []
        verified_get = self._verified.get
        with torch._C.DisableTorchFunctionSubclass():
            for i in range(0, len(objs), _RUN):
                run = objs[i:i + _RUN]
                sts = _plain_storages(run)
                if sts is not None:
                    # what _verified holds for each storage, in the run's order (None: not verified)
                    keys = list(map(_CDATA, sts))
                    was = list(map(verified_get, keys))
                    same = False
                    # the data addresses are read only of storages verified before: a storage of the
                    # user's fake tensors (never registered) is not asked for one (deprecated there)
                    if None not in was:
                        try:  # compared as lists, in the run's order: no dict built, nothing hashed
                            same = list(zip(map(_DATA_PTR, sts), map(_NBYTES, sts))) == was
                        except Exception:  # noqa: BLE001 - a storage without data (meta): one at a time
                            same = False
                    if same:
                        if ok is not None:
                            ok.update(sts)
                        if table is not None and sts is not run:  # (tensors, not bare storages)
                            table.add(run, keys, was)  # type: ignore[arg-type]  # (no None: same)
                        continue
                self._unknown_one_by_one(run, rest, pending)
        objs.clear()
        return rest

    def _unknown_one_by_one(self, objs: list[Any], rest: list[Any], pending: list[Any]) -> None:
        """:meth:`_unknown` for a run, one object at a time."""
        entries, spans, alias_of = self._entries, self._ranges._span, self._alias_of
        strided, plain, untyped = torch.strided, _PLAIN, torch.UntypedStorage
        keep = rest.append
        for t in objs:
            tp = type(t)
            if tp is untyped:
                st = t
            elif (tp in plain and t.layout is strided and not t.requires_grad
                  and not t.is_nested and not t.is_quantized):
                try:
                    st = t.untyped_storage()
                except Exception:
                    keep(t)
                    continue
            else:
                keep(t)
                continue
            pending.append(st)
            key = st._cdata
            entry = entries.get(key)
            held: Any = entry.ref() if entry is not None else None
            if entry is None or held is not st or key in alias_of:
                keep(t)
                continue
            nbytes = st.nbytes()
            if entry.nbytes != nbytes:
                keep(t)
                continue
            if nbytes:
                span = spans.get(key)
                if span is not None and span[0] != st.data_ptr():
                    keep(t)

    def _unverify(self, key: int) -> None:
        """The registry's entry for ``key`` changed (freed, resized, moved, made an alias): the
        next scan looks at its storage again."""
        self._verified.pop(key, None)

    def _scan_young(self, leaves: bool, young: bool = True) -> None:
        """What no collection has seen (generation 0), what collections met
        while the tracker was busy, and with ``leaves`` the ``.grad`` of known
        leaves (made by autograd without a Python object, so never young).

        ``young=False``: only what collections met (the end of a collection)."""
        tensors, storages = _live_tensors_and_storages(0) if young else ([], [])
        pending, self._pending = self._pending, []
        for ref in pending:
            obj = ref()
            if obj is None:
                continue
            if isinstance(obj, torch.Tensor):
                tensors.append(obj)
            else:
                storages.append(obj)
        del pending
        self._register(tensors, storages, young=True)
        if leaves:
            with torch._C.DisableTorchFunctionSubclass():
                for ref in list(self._leaves.values()):
                    t = ref()
                    if t is None:
                        continue
                    try:
                        g = t.grad
                    except Exception:
                        continue
                    if g is not None:
                        self.add_tensor(g, None)

    def _on_collection(self, starts: bool) -> None:
        """A garbage collection starts or ends (:class:`vramnb._young.YoungWatch`).
        At its start, weak references to generation 0's tensors and storages are
        kept before the survivors move to an older generation, where a young scan
        no longer looks; at its end, the survivors among them are registered (the
        collection's garbage is gone by then, and is never touched mid-collection).
        While a thread tracks (the operator running now may be making what
        generation 0 holds, which its dispatch mode registers as that thread's own
        once it returns) or the tracker is busy, they wait for the next scan; the
        dead references are dropped as they pile up."""
        if self.stale or self._scanning:
            return  # the next scan is a full one anyway, or this is the scan's own allocation
        if starts:
            try:
                tensors, storages = _live_tensors_and_storages(0)
                if len(self._pending) > self._pending_limit:
                    self._pending = [r for r in self._pending if r() is not None]
                    self._pending_limit = max(4096, 2 * len(self._pending))  # amortised: O(1) per reference
                self._pending.extend(map(weakref.ref, tensors))
                self._pending.extend(map(weakref.ref, storages))
            except BaseException:
                self._incomplete = True  # Ctrl-C: young objects this collection moves were not kept
                raise
            return
        lock = self._lock
        if self._tracking or lock._is_owned() or not lock.acquire(blocking=False):  # type: ignore[attr-defined]
            return
        try:
            self._scanning = True
            self._scan_young(leaves=False, young=False)
        except BaseException:
            self._incomplete = True  # Ctrl-C here (the watch delivers it again): the rest of _pending is lost
            raise
        finally:
            self._scanning = False
            lock.release()

    def _note_leaf(self, t: Any) -> None:
        key = id(t)
        if key in self._leaves:
            return
        leaves = self._leaves

        def gone(_: Any, key: int = key) -> None:
            leaves.pop(key, None)

        self._leaves[key] = weakref.ref(t, gone)

    def _scan_tensors(self, refs: list[weakref.ref[Any]], me: int, seen: dict[int, Any], young: bool) -> None:
        for ref in refs:
            t = ref()
            if t is None:
                continue
            st = storage_of(t)
            entry = self._entries.get(storage_key(st)) if st is not None else None
            if entry is not None and entry.owner not in (None, me) and self._tracking.get(entry.owner):
                # another thread is making it under its own tracking: its storages are registered
                # already, and walking its graph now would hold what its backward releases
                continue
            # a young tensor whose storage is registered at its size: the dispatch mode saw it made,
            # and the operators that built its graph too
            known = (young and st is not None and entry is not None and type(t) in _PLAIN and entry.ref() is not None
                     and (entry.nbytes == st.nbytes() or storage_key(st) in self._alias_of))
            if not known:
                self.add_tensor(t, None)
            try:
                if t.requires_grad:
                    leaf = t.grad_fn is None
                    if leaf or t.retains_grad:  # backward fills its .grad in C++ (no young object)
                        self._note_leaf(t)
                        g = t.grad
                        if g is not None:
                            self.add_tensor(g, None)
                    if not leaf and not known:
                        for x in graph_tensors(t.grad_fn, seen):
                            self.add_tensor(x, None)
            except Exception:
                continue


_WARM = False

_CPU_TRACKER: StorageTracker | None = None


def cpu_tracker() -> StorageTracker:
    """The process-wide tracker of CPU storages (created on first use)."""
    global _CPU_TRACKER
    if _CPU_TRACKER is None:
        _CPU_TRACKER = StorageTracker("cpu", watch_young=True)
    return _CPU_TRACKER
