"""Hold ``KeyboardInterrupt`` back while vramnb puts the user's state back.

An interrupt (Jupyter's *Interrupt kernel*, Ctrl-C, ``_thread.interrupt_main``)
that lands in the middle of a restore would leave the model half restored.
Functions marked :func:`protected` (a restore, an undo, profile_step's own
bookkeeping) hold it back; functions marked :func:`interruptible` (the user's
step) take it at once. :class:`InterruptGuard` installs the SIGINT handler
that decides, by walking the interrupted frames.
"""

from __future__ import annotations

import _thread
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["InterruptGuard", "deliver_later", "held_back", "interruptible", "outside_dispatch", "protected"]

_PROTECTED: set[Any] = set()
_OPEN: set[Any] = set()


def protected(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a function whose frames a ``KeyboardInterrupt`` must not cut (see :class:`InterruptGuard`)."""
    _PROTECTED.add(fn.__code__)
    return fn


def interruptible(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a function (the user's step) where an interrupt is raised at once, even inside a protected one."""
    _OPEN.add(fn.__code__)
    return fn


def _is_protected(frame: Any) -> bool:
    """Walk out from the interrupted frame: the innermost :func:`protected` or
    :func:`interruptible` function decides (code called from a restore, PyTorch's
    or a hook's, is protected with it; the user's step is not); outside both, not."""
    while frame is not None:
        code = frame.f_code
        if code in _PROTECTED:
            return True
        if code in _OPEN:
            return False
        frame = frame.f_back
    return False


class InterruptGuard:
    """Hold back ``KeyboardInterrupt`` (SIGINT, also ``_thread.interrupt_main``)
    that lands inside a :func:`protected` function of vramnb (a restore, an undo,
    the bookkeeping between the user's step and the restore, and whatever they
    call), and raise it at :meth:`check` or when the guard exits. An interrupt
    that lands inside an :func:`interruptible` one (the user's step) is raised at
    once: the step stays interruptible, and the ``finally`` that restores runs
    protected.

    Protection is a property of the code being run (found by walking the
    interrupted frames, as trio does), not of a flag flipped around a span, so
    there is no gap between the end of a step and the start of its restore.
    Only the main thread receives SIGINT; elsewhere (or when the current
    handler was not set from Python) the guard changes nothing.
    """

    def __init__(self) -> None:
        self.previous: Any = None
        self.installed = False
        self.pending: tuple[int, Any] | None = None

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            prev = signal.getsignal(signal.SIGINT)
            if prev is not None:
                self.previous = prev
                signal.signal(signal.SIGINT, self._handler)
                self.installed = True
        return self

    def _handler(self, signum: int, frame: Any) -> None:
        if _is_protected(frame):
            self.pending = (signum, frame)
            return
        self._forward(signum, frame)

    def _forward(self, signum: int, frame: Any) -> None:
        prev = self.previous
        if callable(prev):
            prev(signum, frame)
        elif prev == signal.SIG_DFL:
            raise KeyboardInterrupt
        # SIG_IGN: ignored, as it would have been

    def check(self) -> None:
        """Raise a held-back interrupt now (call it where stopping is safe)."""
        if self.pending is not None:
            signum, frame = self.pending
            self.pending = None
            self._forward(signum, frame)

    def __exit__(self, *exc: Any) -> None:
        if self.installed:
            signal.signal(signal.SIGINT, self.previous)
            self.installed = False
        self.check()



class held_back(InterruptGuard):  # noqa: N801 - used as a context manager, like contextlib's
    """Hold back every ``KeyboardInterrupt`` (SIGINT, also ``_thread.interrupt_main``)
    that arrives inside the block, whatever code runs there, and raise it once the
    block is done. For work that must not stop halfway whoever runs it (the imports
    the first dispatch mode makes: cut there, they leave half-imported modules that
    break ``torch.compile`` until the kernel restarts). Only the main thread receives
    SIGINT; elsewhere, or where the handler was not set from Python, it changes nothing."""

    def _handler(self, signum: int, frame: Any) -> None:
        self.pending = (signum, frame)


def deliver_later(delay: float = 0.002) -> None:
    """Deliver SIGINT to the main thread again ``delay`` seconds from now, from a thread of vramnb's
    own (a Ctrl-C that landed where it cannot be raised: it is raised where it lands next)."""
    timer = threading.Timer(delay, _thread.interrupt_main, args=(signal.SIGINT,))
    timer.daemon = True
    timer._vramnb_own = True  # type: ignore[attr-defined]  # runs no user code (StorageTracker._untracked_threads)
    timer.start()


class outside_dispatch(InterruptGuard):  # noqa: N801 - used as a context manager, like held_back
    """Raise ``KeyboardInterrupt`` anywhere but inside a dispatch mode's handling of a ``prim`` operator.
    Under ``FakeTensorMode`` PyTorch's C++ asks a tensor's device through the dispatch modes
    (``prim.device``), in places an exception cannot unwind: one raised there aborts the whole process
    ("terminate called after throwing an instance of 'python_error'"; the kernel dies; seen for
    ``prim.device`` in 5 of 27 calls of a Linear step with any exception). An interrupt that lands in a
    ``__torch_dispatch__`` handling a ``prim`` operator is delivered again a moment later
    (:func:`deliver_later`); anywhere else it is raised at once, as usual. Only the main thread
    receives SIGINT; elsewhere it changes nothing."""

    def _handler(self, signum: int, frame: Any) -> None:
        if frame is not None and (frame.f_code.co_filename.endswith(_CALLED_FROM_DISPATCH)
                                  or frame.f_code.co_filename.endswith(_SWALLOWED)
                                  or frame.f_code.co_name in _SWALLOWED_NAMES):
            # PyTorch's C++ dispatcher calls this lookup directly (no Python caller to unwind to): an
            # interrupt redelivered while it runs aborted the process too; in a weakref callback or a
            # finalizer Python would print "Exception ignored" and lose it
            deliver_later()
            return
        f = frame
        while f is not None:
            if f.f_code.co_name == "__torch_dispatch__" and str(f.f_locals.get("func", "")).startswith("prim."):
                deliver_later()
                return
            f = f.f_back
        self._forward(signum, frame)


# Python files whose functions PyTorch's C++ dispatcher calls while it dispatches an operator
_CALLED_FROM_DISPATCH = (os.path.join("torch", "_library", "simple_registry.py"),)
# where Python swallows an exception ("Exception ignored in ..."): weakref callbacks, finalizers; an
# interrupt landing there would be lost, so it is delivered again where the program goes next
_SWALLOWED = ("weakref.py",)
_SWALLOWED_NAMES = frozenset({"__del__", "_freed"})  # finalizers; the CPU tracker's weakref callback
