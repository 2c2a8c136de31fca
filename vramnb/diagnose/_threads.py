"""The frames of the other live threads, for the verdicts that name what a thread keeps or uses
(:mod:`._between_cells`, :mod:`._bounded`).

``sys._current_frames()`` maps every thread, the calling one included, to its running frame. Held in a
local, the calling thread's entry is a cycle (the frame holds the dict that holds the frame) that only the
garbage collector breaks: until it runs, that frame and every caller's frame stay alive with their
locals, and a verdict's caller holds the notebook's names (the tensors a cell rebinds were kept: issue 28,
round g). :func:`other_threads` drops the calling thread's entry at once and returns plain lists.

The notebook front-end's own threads (ipykernel's heartbeat and IOPub, zmq, tornado, a debugger) are
left out where asked: they are not the user's, and walking them costs time for nothing."""

from __future__ import annotations

import sys
import threading
import types

__all__ = ["FRONT_END", "any_front_end", "other_threads"]

#: parts of a file name that mark the notebook front-end's own threads
FRONT_END = tuple(f"{sep}{m}{sep}" for m in ("ipykernel", "zmq", "tornado", "IPython", "jupyter_client", "debugpy",
                                             "comm", "ipywidgets") for sep in ("/", "\\"))


def any_front_end(frames: list[types.FrameType]) -> bool:
    """Whether any of ``frames`` runs the front-end's code (ipykernel, zmq, tornado, IPython...): a
    kernel's own thread. A cell's code (``/tmp/ipykernel_<pid>/<hash>.py``) is not."""
    return any(part in f.f_code.co_filename for f in frames for part in FRONT_END)


def other_threads(skip_front_end: bool = True, depth: int = 64) -> list[tuple[int, str, threading.Thread | None,
                                                                              list[types.FrameType]]]:
    """``(ident, name, thread, frames)`` for each live thread but the calling one: ``frames`` innermost
    first, at most ``depth``; ``thread`` is ``None`` (and ``name`` ``"thread <ident>"``) for one that
    ``threading`` does not know. With ``skip_front_end``, the front-end's threads (:func:`any_front_end`)
    are left out. No reference to the calling thread's frames is kept."""
    known = {t.ident: t for t in threading.enumerate()}
    current = sys._current_frames()
    current.pop(threading.get_ident(), None)  # the cycle: this frame -> current -> this frame
    out = []
    try:
        for ident, top in current.items():
            frames: list[types.FrameType] = []
            f: types.FrameType | None = top
            while f is not None and len(frames) < depth:
                frames.append(f)
                f = f.f_back
            if skip_front_end and any_front_end(frames):
                continue
            th = known.get(ident)
            out.append((ident, th.name if th is not None else f"thread {ident}", th, frames))
    finally:
        current.clear()

    return out
