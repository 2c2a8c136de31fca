"""Host copies of the bytes of tensors' storages, each storage once, each byte range once.

:class:`StorageCopies` records, per storage (keyed by the storage object, kept
alive with the copy so the key cannot be reused), its size in bytes and the
byte ranges the recorded tensors cover, copied into host ``bytearray`` s;
:meth:`StorageCopies.restore` gives each storage its size back and writes the
ranges back. Parameters that are views of one flat buffer share one copy; a
batch sliced from a dataset (``data[:32]``) copies the slice, not the dataset:
a step can only change the bytes its tensors cover (or resize the storage, which
is undone).

CPU bytes are moved with ``ctypes.memmove`` (no PyTorch operator runs, so a
copy taken in the middle of a recorded step is no allocation of the step);
other devices through a ``uint8`` alias of the storage (no device allocation).
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

__all__ = ["StorageCopies", "tensor_range", "save_bytes", "load_bytes"]


def tensor_range(t: torch.Tensor) -> tuple[int, int]:
    """The byte range ``[lo, hi)`` of ``t``'s storage that ``t`` can read or write."""
    offset = int(t.storage_offset())  # int: no symbolic shapes here (torch types it int | SymInt)
    if t.numel() == 0:
        lo = offset * t.element_size()
        return lo, lo
    lo = hi = offset
    for size, stride in zip(t.shape, t.stride()):
        if stride >= 0:
            hi += (size - 1) * stride
        else:
            lo += (size - 1) * stride
    return lo * t.element_size(), (hi + 1) * t.element_size()


def _alias(st: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=st.device).set_(st)


def _read(st: torch.UntypedStorage, lo: int, hi: int) -> bytearray:
    buf = bytearray(hi - lo)
    if hi <= lo:
        return buf
    if st.device.type == "cpu" and st.data_ptr():
        ctypes.memmove((ctypes.c_char * len(buf)).from_buffer(buf), st.data_ptr() + lo, len(buf))
    else:
        torch.frombuffer(buf, dtype=torch.uint8).copy_(_alias(st)[lo:hi])
    return buf


def _write(st: torch.UntypedStorage, lo: int, buf: bytearray) -> None:
    if not len(buf):
        return
    if st.device.type == "cpu" and st.data_ptr():
        ctypes.memmove(st.data_ptr() + lo, (ctypes.c_char * len(buf)).from_buffer(buf), len(buf))
    else:
        with torch.no_grad():
            _alias(st)[lo:lo + len(buf)].copy_(torch.frombuffer(buf, dtype=torch.uint8))


def save_bytes(t: torch.Tensor) -> bytearray:
    """A host copy of all of ``t``'s storage."""
    st = t.untyped_storage()
    return _read(st, 0, st.nbytes())


def load_bytes(t: torch.Tensor, buf: bytearray) -> None:
    """Give ``t``'s storage ``len(buf)`` bytes and write ``buf`` into it."""
    st = t.untyped_storage()
    if st.nbytes() != len(buf):
        st.resize_(len(buf))
    _write(st, 0, buf)


class _Entry:
    def __init__(self, st: torch.UntypedStorage) -> None:
        self.storage = st
        self.nbytes = st.nbytes()
        self.parts: list[tuple[int, bytearray]] = []  # (start, bytes), disjoint

    def add(self, lo: int, hi: int) -> None:
        """Copy the bytes of ``[lo, hi)`` not copied yet (clipped to the storage)."""
        hi = min(hi, self.storage.nbytes())
        cur = lo
        for start, buf in sorted(self.parts, key=lambda p: p[0]):
            end = start + len(buf)
            if end <= cur:
                continue
            if start >= hi:
                break
            if start > cur:
                self.parts.append((cur, _read(self.storage, cur, start)))
            cur = max(cur, end)
        if cur < hi:
            self.parts.append((cur, _read(self.storage, cur, hi)))

    def restore(self) -> None:
        st = self.storage
        if st.nbytes() != self.nbytes:
            st.resize_(self.nbytes)
        for start, buf in self.parts:
            _write(st, start, buf)


class StorageCopies:
    """Copies of the byte ranges that tensors cover, one entry per storage."""

    def __init__(self) -> None:
        self.entries: dict[int, _Entry] = {}

    def add(self, t: torch.Tensor) -> None:
        """Copy the bytes ``t`` covers (what is already copied is not copied again)."""
        st = t.untyped_storage()
        e = self.entries.get(st._cdata)
        if e is None:
            e = self.entries[st._cdata] = _Entry(st)
        e.add(*tensor_range(t))

    def add_whole(self, t: torch.Tensor) -> None:
        """Copy all of ``t``'s storage (what is already copied is not copied again)."""
        st = t.untyped_storage()
        e = self.entries.get(st._cdata)
        if e is None:
            e = self.entries[st._cdata] = _Entry(st)
        e.add(0, e.nbytes)

    def covers(self, t: torch.Tensor) -> bool:
        e = self.entries.get(t.untyped_storage()._cdata)
        if e is None:
            return False
        lo, hi = tensor_range(t)
        return sum(max(0, min(hi, s + len(b)) - max(lo, s)) for s, b in e.parts) >= min(hi, e.nbytes) - lo

    def restore(self) -> None:
        """Each storage's size, then its bytes, back."""
        for e in self.entries.values():
            e.restore()

    @property
    def nbytes(self) -> int:
        """Host bytes held by the copies."""
        return sum(len(b) for e in self.entries.values() for _, b in e.parts)

    def storages(self) -> list[Any]:
        return [e.storage for e in self.entries.values()]
