"""Autocast's weight-cast cache, seen from a dispatch mode.

Inside an ``autocast`` region, the first time an eligible op (a matmul, a linear,
a convolution) uses a float32 leaf tensor that requires grad (a parameter), autocast
casts it to the region's lower precision and keeps the copy in a cache, so later uses
in the region reuse it; the cache is cleared when the outermost region exits
(``aten/src/ATen/autocast_mode.cpp``: ``cached_cast``, ``can_try_cache``;
``torch.autocast.__exit__`` calls ``torch.clear_autocast_cache()``). Under
``torch.no_grad()`` nothing else keeps those copies, so a weight-heavy model's peak
inside the region carries a lower-precision copy of every weight it used;
``torch.autocast(..., cache_enabled=False)`` frees each copy after its use. With
gradients on, the ops save the copies for backward anyway: the cache costs nothing
extra there, and no verdict is given.

A cast is the cache's when a dispatch mode sees ``aten._to_copy`` of a float32,
requires-grad, non-view leaf to the region's autocast dtype, with the cache enabled
and an autocast region open (``torch.autocast_increment_nesting`` / ``_decrement_``
read the nesting count, leaving it as it was). The dispatch mode runs below the
autocast keys, so ``torch.is_autocast_enabled()`` reads ``False`` there; the nesting
count does not. A user's own ``param.to(torch.bfloat16)`` inside a region looks the
same and is counted too.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .._units import format_bytes

__all__ = ["CastCache", "CastMode", "is_cached_cast", "cache_note", "TO_COPY", "CACHE_ROW"]

#: the breakdown's row for the cached copies
CACHE_ROW = "autocast weight-cast cache"

TO_COPY = torch.ops.aten._to_copy.default
_LOWER = (torch.float16, torch.bfloat16)


def _autocast_dtype(device_type: str) -> torch.dtype | None:
    get = getattr(torch, "get_autocast_dtype", None)  # torch >= 2.4
    try:
        if get is not None:
            return get(device_type)
        return torch.get_autocast_gpu_dtype() if device_type == "cuda" else torch.get_autocast_cpu_dtype()
    except Exception:  # noqa: BLE001 - a device type autocast does not know
        return None


def _nesting() -> int:
    """How many autocast regions are open in this thread (read without changing it)."""
    torch.autocast_increment_nesting()
    return int(torch.autocast_decrement_nesting())


def is_cached_cast(args: Any, out: Any) -> bool:
    """Whether ``aten._to_copy(*args) -> out`` is a cast autocast keeps in its cache."""
    if not args or type(out) is not torch.Tensor:
        return False
    src = args[0]
    if not isinstance(src, torch.Tensor) or src.dtype is not torch.float32 or out.dtype not in _LOWER:
        return False
    if not (src.requires_grad and src.is_leaf) or src._is_view():
        return False
    if not torch.is_autocast_cache_enabled() or out.dtype != _autocast_dtype(src.device.type):
        return False
    return _nesting() > 0


class CastCache:
    """The cached casts of one measurement: bytes held, and held at the measured peak.

    Attributes:
        copies: number of cached casts seen.
        held: bytes of their storages (each counted once).
        alive: bytes of those still alive now.
        at_peak: bytes alive when the tracker last reached a new peak (CPU).
        no_grad: whether every op that used a cached copy ran with gradients off
            (else the ops saved the copies for backward, and the cache added
            nothing). Read at the op after the casts: autocast makes its cached
            copies with gradients on whatever the caller's mode.
        dtype: the lower precision of the copies.
        locate: called with each copy (a tensor) at its cast, where a recording
            labels the copies (``%%vram --breakdown``), else ``None``.
    """

    def __init__(self) -> None:
        self.copies = 0
        self.held = 0
        self.alive = 0
        self.at_peak = 0
        self.no_grad = True
        self.pending = False  # a cast was seen; the next op tells the grad mode it runs in
        self.dtype: torch.dtype | None = None
        self.locate: Any = None
        self._refs: dict[int, Any] = {}  # storage address -> weak reference (never the storage itself)
        # re-entrant: a weak reference's callback can run in this thread while it holds the lock (a
        # garbage collection triggered inside cast() frees an earlier copy)
        self._lock = threading.RLock()

    def cast(self, args: Any, out: Any) -> bool:
        """Called by a dispatch mode after ``aten._to_copy(*args)`` returned ``out``; whether
        it was a cached cast (then the next operator should call :meth:`used`)."""
        try:
            if not is_cached_cast(args, out):
                return False
            st = out.untyped_storage()
            n = st.nbytes()
            addr = st.data_ptr()
        except Exception:  # noqa: BLE001 - an odd tensor is not a cached cast
            return False
        ref = weakref.ref(st, lambda r: self._freed(r, addr, n))  # made outside the lock
        with self._lock:
            old = self._refs.get(addr)
            if old is not None and old() is not None:
                return False
            self.copies += 1
            self.held += n
            self.alive += n
            self.dtype = out.dtype
            self.pending = True
            self._refs[addr] = ref
        if self.locate is not None:
            try:
                self.locate(out)
            except Exception:  # noqa: BLE001 - a label must never break the user's op
                pass
        return True

    def used(self) -> None:
        """Called by a dispatch mode at the first other op after cached casts."""
        self.pending = False
        if torch.is_grad_enabled():
            self.no_grad = False

    def _freed(self, ref: Any, addr: int, n: int) -> None:
        with self._lock:
            if self._refs.get(addr) is ref:  # not a later copy at the same address
                del self._refs[addr]
                self.alive -= n

    def new_peak(self) -> None:
        """Called when the tracker reaches a new peak."""
        self.at_peak = self.alive

    def release(self) -> None:
        """Drop the weak references (the measurement is over)."""
        with self._lock:
            self._refs.clear()


class CastMode(TorchDispatchMode):
    """A dispatch mode that hands ``aten._to_copy`` calls to a :class:`CastCache` (the CUDA
    breakdown, where no tracker mode runs)."""

    _vramnb_tracks = True  # left in a forked child (vramnb._tracker_patch._untrack_child)

    def __init__(self, cache: CastCache) -> None:
        super().__init__()
        self.cache = cache

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        __tracebackhide__ = True
        out = func(*args, **(kwargs or {}))
        if func is TO_COPY:
            self.cache.cast(args, out)
        elif self.cache.pending:
            self.cache.used()
        return out


def cache_note(cache: CastCache | None, at_peak: int, rise: int) -> str | None:
    """The report line for autocast's weight-cast cache: ``at_peak`` bytes of it alive at the
    cell's peak, which rose ``rise`` bytes above the start; ``None`` where it is small (under
    1 MiB or a tenth of the rise) or where gradients were on (the copies were saved anyway)."""
    if cache is None or not cache.copies or not cache.no_grad:
        return None
    if at_peak < (1 << 20) or at_peak * 10 < rise:
        return None
    dt = str(cache.dtype).replace("torch.", "")
    return (f"{format_bytes(at_peak)} of this peak is autocast's weight-cast cache: {dt} copies of "
            f"{cache.copies} parameter(s) ({format_bytes(cache.held)}), kept from each one's first use until the "
            "autocast block exits. Under no_grad, torch.autocast(..., cache_enabled=False) frees each copy after "
            "its use (each use casts again)")
