"""One memory behind two ``StorageImpl`` objects counts once, in the tracker.

``torch.from_numpy(t.numpy())``, ``torch.frombuffer`` over a tensor's buffer
and DLPack round trips make a second ``StorageImpl`` over bytes a live storage
already holds. :class:`SameMemory` (a part of
:class:`vramnb._tracker.StorageTracker`) keeps the data ranges of the counted
storages: a storage whose data lies inside one of them is an *alias* that
counts 0 bytes; when the counted one is freed while an alias lives (the NumPy
array keeps the bytes), the alias is counted instead.
"""

from __future__ import annotations

import weakref
from typing import Any

from ._storages import DataRanges, data_range

__all__ = ["Entry", "SameMemory"]


class Entry(weakref.ref):  # type: ignore[type-arg]
    """One registered storage: a weak reference to it (the entry itself: ``entry.ref`` is the
    entry), its key, the bytes it counts, and the thread that made it while tracking (``None``:
    no thread owns it). One object per storage, which the garbage collector tracks (a full scan
    lists every such object: a reference, a closure with its cells and a record per storage made
    that list several times as long as the storages). Mutable, so that a resize or the end of a
    thread's block changes it in place: a new object per entry there would put every storage of
    a big block back in the collector's youngest generation, which the next young scan then walks
    (see :mod:`vramnb._young`)."""

    __slots__ = ("key", "nbytes", "owner")

    def __new__(cls, st: Any, callback: Any, key: int, nbytes: int, owner: int | None) -> Entry:
        return super().__new__(cls, st, callback)  # type: ignore[call-arg]

    def __init__(self, st: Any, callback: Any, key: int, nbytes: int, owner: int | None) -> None:
        # (weakref.ref.__init__ only checks the arguments __new__ took)
        self.key = key
        self.nbytes = nbytes
        self.owner = owner

    @property
    def ref(self) -> Entry:
        """The weak reference (the entry itself): ``entry.ref()`` is the storage or ``None``."""
        return self


class SameMemory:
    """The data-range part of the tracker. Expects ``_entries`` (key ->
    :class:`Entry`), ``_change`` and ``add_storage`` from the tracker."""

    _entries: dict[int, Entry]
    _ranges: DataRanges
    _alias_of: dict[int, int]
    _aliases: dict[int, set[int]]
    _alias_bytes: dict[int, int]
    _owned: dict[int, set[int]]

    def _change(self, key: int, old: int, new: int, owner: int | None,  # pragma: no cover - the tracker's
                resized: bool = False) -> None:
        raise NotImplementedError

    def add_storage(self, st: Any, owner: Any = "auto") -> None:  # pragma: no cover - the tracker's
        raise NotImplementedError

    def _unverify(self, key: int) -> None:  # pragma: no cover - the tracker's
        raise NotImplementedError

    def same_as(self, key: int) -> int:
        """The key under which a storage's bytes are counted: its own, or that of
        the live storage whose data contains its data."""
        return self._alias_of.get(key, key)

    def counted_as(self, keys: Any) -> dict[int, tuple[int, int]]:
        """``{key: (container key, its bytes)}`` for those of ``keys`` that are aliases: the storage
        whose bytes are counted for them, and its size (``torch.load(mmap=True)``: each tensor's
        storage is a slice of the whole file's mapping, which any one of them keeps mapped)."""
        alias_of = self._alias_of
        if not alias_of or alias_of.keys().isdisjoint(keys):
            return {}
        out = {}
        for k in keys:
            c = alias_of.get(k)
            if c is not None:
                entry = self._entries.get(c)
                if entry is not None:
                    out[k] = (c, entry.nbytes)
        return out

    def _container(self, rng: tuple[int, int]) -> int | None:
        """The live counted storage whose data contains ``rng``."""
        while True:
            found = self._ranges.nearest(rng)
            if found is None:
                return None
            key, contains = found
            entry = self._entries.get(key)
            if entry is None or entry.ref() is None:  # freed, its callback not run yet
                self._ranges.remove(key)
                self._drop(key)
                continue
            return key if contains else None

    def _contain(self, key: int, rng: tuple[int, int]) -> None:
        """``key``, about to be counted over ``rng``, holds the bytes of counted storages
        registered before it (``torch.load(mmap=True)``: the whole file's storage is found
        after the tensors' slices of it): they become its aliases, counting 0 bytes, as if
        it had been registered first."""
        for inner in self._ranges.inside(rng):
            if inner == key:
                continue
            entry = self._entries.get(inner)
            if entry is None or entry.ref() is None:
                continue
            self._unverify(inner)
            self._ranges.remove(inner)
            self._change(inner, entry.nbytes, 0, entry.owner)
            self._alias_bytes[inner] = entry.nbytes
            entry.nbytes = 0  # in place (see Entry)
            self._alias_of[inner] = key
            moved = self._aliases.pop(inner, set())
            for a in moved:
                self._alias_of[a] = key
            self._aliases.setdefault(key, set()).update(moved | {inner})

    def _drop(self, key: int) -> None:
        """Forget a freed storage; what it counted moves to a live storage over
        the same bytes, if one is left."""
        self._unverify(key)
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        if entry.owner is not None:
            owned = self._owned.get(entry.owner)
            if owned is not None:
                owned.discard(key)
        container = self._alias_of.pop(key, None)
        if container is not None:  # an alias: it counted nothing
            self._alias_bytes.pop(key, None)
            self._aliases.get(container, set()).discard(key)
            return
        self._ranges.remove(key)
        self._change(key, entry.nbytes, 0, entry.owner)
        left = []
        for alias in self._aliases.pop(key, ()):
            a = self._entries.pop(alias, None)
            self._alias_of.pop(alias, None)
            self._alias_bytes.pop(alias, None)
            if a is None:
                continue
            st = a.ref()
            if st is not None:
                left.append(((data_range(st) or (0, 0))[0], -st.nbytes(), st, a.owner))
        for _, _, st, owner in sorted(left, key=lambda x: x[:2]):  # the widest first: it contains the others
            self.add_storage(st, owner)

