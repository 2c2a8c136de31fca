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

from typing import Any

from ._storages import DataRanges, data_range

__all__ = ["SameMemory"]


class SameMemory:
    """The data-range part of the tracker. Expects ``_entries`` (key -> (weak
    ref, counted bytes, owner)), ``_change`` and ``add_storage`` from the tracker."""

    _entries: dict[int, tuple[Any, int, int | None]]
    _ranges: DataRanges
    _alias_of: dict[int, int]
    _aliases: dict[int, set[int]]
    _alias_bytes: dict[int, int]
    _owned: dict[int, set[int]]

    def _change(self, key: int, old: int, new: int, owner: int | None) -> None:  # pragma: no cover - the tracker's
        raise NotImplementedError

    def add_storage(self, st: Any, owner: Any = "auto") -> None:  # pragma: no cover - the tracker's
        raise NotImplementedError

    def same_as(self, key: int) -> int:
        """The key under which a storage's bytes are counted: its own, or that of
        the live storage whose data contains its data."""
        return self._alias_of.get(key, key)

    def _container(self, rng: tuple[int, int]) -> int | None:
        """The live counted storage whose data contains ``rng``."""
        while True:
            found = self._ranges.nearest(rng)
            if found is None:
                return None
            key, contains = found
            entry = self._entries.get(key)
            if entry is None or entry[0]() is None:  # freed, its callback not run yet
                self._ranges.remove(key)
                self._drop(key)
                continue
            return key if contains else None

    def _drop(self, key: int) -> None:
        """Forget a freed storage; what it counted moves to a live storage over
        the same bytes, if one is left."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        if entry[2] is not None:
            owned = self._owned.get(entry[2])
            if owned is not None:
                owned.discard(key)
        container = self._alias_of.pop(key, None)
        if container is not None:  # an alias: it counted nothing
            self._alias_bytes.pop(key, None)
            self._aliases.get(container, set()).discard(key)
            return
        self._ranges.remove(key)
        self._change(key, entry[1], 0, entry[2])
        left = []
        for alias in self._aliases.pop(key, ()):
            a = self._entries.pop(alias, None)
            self._alias_of.pop(alias, None)
            self._alias_bytes.pop(alias, None)
            if a is None:
                continue
            st = a[0]()
            if st is not None:
                left.append(((data_range(st) or (0, 0))[0], -st.nbytes(), st, a[2]))
        for _, _, st, owner in sorted(left, key=lambda x: x[:2]):  # the widest first: it contains the others
            self.add_storage(st, owner)

