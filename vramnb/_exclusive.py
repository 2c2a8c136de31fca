"""One profiled step at a time per process.

Two ``profile_step`` calls in two threads would count each other's memory, and
PyTorch's module tracking (``ModTracker``, process-wide module hooks) breaks
when two threads' forwards overlap. The CPU tracker refuses a second recording
itself; :func:`one_at_a_time` refuses it on every device, before anything runs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from ._errors import VramnbError

__all__ = ["one_at_a_time"]

_ACTIVE_LOCK = threading.Lock()
_ACTIVE: dict[str, Any] = {"thread": None, "name": "", "depth": 0}


@contextlib.contextmanager
def one_at_a_time() -> Iterator[None]:
    """Refuse a profile_step while another thread runs one (the same thread may nest).

    Raises:
        VramnbError: another thread is inside one; the message names it."""
    me = threading.get_ident()
    with _ACTIVE_LOCK:
        if _ACTIVE["thread"] not in (None, me):
            raise VramnbError(
                f"thread {_ACTIVE['name']!r} is already recording (a profile_step, compare or panel run); vramnb "
                "records one at a time per process, since two recordings would count each other's memory and "
                "PyTorch's module tracking breaks when two threads' forwards overlap: run them one after another "
                "(e.g. behind a threading.Lock)")
        _ACTIVE.update(thread=me, name=threading.current_thread().name, depth=_ACTIVE["depth"] + 1)
    try:
        yield
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE["depth"] -= 1
            if not _ACTIVE["depth"]:
                _ACTIVE["thread"] = None


