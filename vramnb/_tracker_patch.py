"""What the tracker changes outside itself while it tracks, reference-counted.

* ``UntypedStorage.resize_`` (FSDP frees and re-allocates its unsharded
  parameters this way, without an ATen operator the dispatch mode would see)
  is wrapped while any tracker tracks, in any thread; the original goes back
  when the last block ends, whatever the order they end in.
* :func:`_exit_mode` leaves the tracker's dispatch mode even when the user's
  code pushed modes above it and left them on.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__: list[str] = []


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


# The resize_ patch, shared by every tracker while any of them tracks (reference-counted).
_PATCH_LOCK = threading.Lock()
_PATCHED: dict[Any, int] = {}  # tracker -> blocks tracking
_ORIGINAL_RESIZE: Any = None
_HAD_OWN_RESIZE = False


def _patched_resize_(st: torch.UntypedStorage, size: int) -> Any:
    # storage.resize_ (FSDP frees and re-allocates its unsharded parameters
    # this way) changes memory without an ATen operator the mode would see
    out = _ORIGINAL_RESIZE(st, size)
    for tracker in list(_PATCHED):
        tracker.add_storage(st)
    return out


def _patch_acquire(tracker: Any) -> None:
    global _ORIGINAL_RESIZE, _HAD_OWN_RESIZE
    with _PATCH_LOCK:
        if not _PATCHED:
            _HAD_OWN_RESIZE = "resize_" in torch.UntypedStorage.__dict__
            _ORIGINAL_RESIZE = torch.UntypedStorage.resize_
            # assignment: torch types resize_ on the private _StorageBase; this one is UntypedStorage's
            torch.UntypedStorage.resize_ = _patched_resize_  # type: ignore[method-assign,assignment]
        _PATCHED[tracker] = _PATCHED.get(tracker, 0) + 1


def _patch_release(tracker: Any) -> None:
    with _PATCH_LOCK:
        n = _PATCHED.get(tracker, 0) - 1
        if n > 0:
            _PATCHED[tracker] = n
            return
        _PATCHED.pop(tracker, None)
        if not _PATCHED:
            if _HAD_OWN_RESIZE:
                torch.UntypedStorage.resize_ = _ORIGINAL_RESIZE  # type: ignore[method-assign]
            else:  # it was inherited: remove ours so the base class's shows again
                with contextlib.suppress(AttributeError):
                    del torch.UntypedStorage.resize_
