"""What the exception being handled keeps, at an out-of-memory error raised inside its
``except`` block (a retry there: ``except OutOfMemoryError: return f(x)``): that exception's
traceback keeps the frames of the attempt that failed, with their locals (the first attempt's
activations), alive until the ``except`` block ends. Its chain (``__context__``,
``__cause__``) is walked too. Storages the running frames keep are counted for them, not here;
no user code runs and no reference is kept (see :func:`._postmortem.frame_sharing`)."""

from __future__ import annotations

import sys
from typing import Any

import torch

__all__ = ["handled_sharing"]

_CHAIN = 8


def handled_sharing(device: torch.device, limit: int = 8) -> list[tuple[str, str, int, int]]:
    """``(frame, variable, bytes, of which through its autograd graph)`` of tensors on ``device``
    that the finished frames of the exception being handled on this thread (and the exceptions
    it chains to) keep in their locals, the ``limit`` largest; each storage counted once, and
    not where a frame still running keeps it. ``[]`` where no exception is being handled."""
    from .._graph import frame_locals
    from ._postmortem import _tensor_bytes, _user_frame, _Walk

    handled = sys.exc_info()[1]
    if handled is None:
        return []
    walk = _Walk(device)
    running: set[int] = set()
    frame: Any = sys._getframe(1)
    depth = 0
    while frame is not None and depth < 64:  # what running frames keep is theirs
        depth += 1
        running.add(id(frame))
        if _user_frame(frame):
            for _, val in frame_locals(frame):
                try:
                    _tensor_bytes(val, walk)
                except Exception:  # noqa: BLE001
                    pass
            val = None
        frame = frame.f_back
    out: list[tuple[str, str, int, int]] = []
    seen: set[int] = set()
    todo: list[Any] = [handled]
    while todo and len(seen) < _CHAIN:
        exc = todo.pop(0)
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        tb = getattr(exc, "__traceback__", None)
        while tb is not None:
            f = tb.tb_frame
            if id(f) not in running and _user_frame(f):
                where = f"{getattr(f.f_code, 'co_qualname', f.f_code.co_name)}:{tb.tb_lineno}"
                for var, val in frame_locals(f):
                    g0 = walk.graph
                    try:
                        n = _tensor_bytes(val, walk)
                    except Exception:  # noqa: BLE001
                        n = 0
                    if n:
                        out.append((where, var, n, walk.graph - g0))
                val = None
            tb = tb.tb_next
        todo += [getattr(exc, "__cause__", None), getattr(exc, "__context__", None)]
    frame = f = tb = None
    walk.nodes.clear()
    walk.visited.clear()
    out.sort(key=lambda t: -t[2])
    return out[:limit]
