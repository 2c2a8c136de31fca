"""Storages made since the last scan, found without walking every live object.

A full scan (:meth:`vramnb._tracker.StorageTracker.scan`) lists every object
the garbage collector tracks, about 40 ms per million objects before a single
tensor is looked at, and then looks at every tensor: seconds at a million
tensors. Between two measured cells most of that work finds nothing new.

Every new object the collector tracks starts in its youngest generation
(generation 0) and leaves it only at a collection, which moves the survivors
to an older one. :class:`YoungWatch` puts a callback in ``gc.callbacks`` that
runs at the start and the end of every collection: at the start, before
anything moves, the tracker keeps weak references to that generation's tensors
and storages; at the end, once the collection's garbage is gone, it registers
the survivors (or, while a thread tracks or the tracker is busy, leaves them
for its next scan). A later scan then needs only generation 0 (what no
collection has seen yet), not every live object.

What this cannot see, and so what makes the next scan a full one
(``StorageTracker.stale``): code that ran while nothing tracked operators
(an unmeasured cell) can resize or re-point storages that already existed;
``gc.freeze()`` moves young objects where ``gc.get_objects`` no longer lists
them; a free-threaded Python has no generations. See
https://docs.python.org/3/library/gc.html#gc.callbacks.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from typing import Any

from ._interrupt import deliver_later

__all__ = ["YoungWatch", "generations_supported"]


def generations_supported() -> bool:
    """Whether ``gc.get_objects(generation=0)`` lists what no collection has seen
    (not on a free-threaded build, which keeps no generations)."""
    is_gil_enabled = getattr(sys, "_is_gil_enabled", None)
    return is_gil_enabled is None or bool(is_gil_enabled())


def _deliver_interrupt_later() -> None:
    """Ctrl-C landed in the callback, whose exceptions Python only prints: deliver it again
    from a thread a moment later, once the collection has returned to the user's code (if it
    lands in a callback again, this runs again)."""
    deliver_later()


class YoungWatch:
    """Calls ``on_collection(True)`` at the start of every garbage collection and
    ``on_collection(False)`` at its end while installed. The callback's own
    errors are swallowed (a ``gc.callbacks`` entry that raises prints an
    "Exception ignored" message inside the user's code); a Ctrl-C that lands
    in it is delivered again."""

    def __init__(self, on_collection: Callable[[bool], None]) -> None:
        self._on_collection = on_collection
        self._callback = self._make_callback()

    def _make_callback(self) -> Callable[[str, dict[str, Any]], None]:
        on_collection = self._on_collection

        def vramnb_young_watch(phase: str, info: dict[str, Any]) -> None:
            try:
                on_collection(phase == "start")
            except KeyboardInterrupt:
                _deliver_interrupt_later()
            except Exception:  # noqa: BLE001 - never an error inside the user's code
                pass

        return vramnb_young_watch

    @property
    def installed(self) -> bool:
        """Whether the callback is in ``gc.callbacks`` now (the user's code may
        have cleared the list)."""
        return any(cb is self._callback for cb in gc.callbacks)

    def install(self) -> None:
        if not self.installed:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        while self.installed:
            gc.callbacks.remove(self._callback)
