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
import importlib.util
import os
import signal
import sys
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
    """Raise ``KeyboardInterrupt`` only where it can unwind to the caller: in the user's own code or vramnb's,
    never inside an operator PyTorch is dispatching, and never lost.

    Under ``FakeTensorMode`` PyTorch's C++ calls back into Python while it dispatches an operator (dispatch
    modes, ``prim.device`` queries, its rule lookups, Python kernels), in places an exception cannot unwind:
    one raised there aborts the whole process ("terminate called after throwing an instance of
    'python_error'"). A Python signal handler runs between the bytecodes of whatever Python frame the main
    thread executes, so where it lands is decided from the frames: it is raised at once when the innermost
    frame is not PyTorch's own code and no frame out to this guard is an operator's dispatch (a
    ``__torch_dispatch__``, PyTorch's operator or library machinery); anywhere else it is held (``pending``)
    and SIGINT is delivered again 2 ms later from a timer of vramnb's own, until it lands at such a point, or
    it is raised when the guard exits. One that Python swallows where it lands (a weakref callback, a
    finalizer, a ``gc`` callback: "Exception ignored") reaches ``sys.unraisablehook``, which this guard
    hooks while open: it is delivered again instead of lost. Each Ctrl-C is raised exactly once. Only the
    main thread receives SIGINT; elsewhere it changes nothing."""

    def __enter__(self) -> outside_dispatch:
        super().__enter__()
        self.outer = sys._getframe(1)
        self.lock = threading.RLock()  # (the handler may run while this thread holds it)
        self.timer: threading.Timer | None = None
        if self.installed:
            self.prev_hook = sys.unraisablehook
            sys.unraisablehook = self._unraisable
        return self

    def _handler(self, signum: int, frame: Any) -> None:
        with self.lock:
            self.timer = None  # (this delivery is the timer's, or a new Ctrl-C: either way the next retry is new)
        if not self.installed or _can_unwind(frame, self.outer):
            self.pending = None
            self._raise(signum, frame)
            return
        self.pending = (signum, frame)
        self._retry()

    def _raise(self, signum: int, frame: Any) -> None:
        try:
            self._forward(signum, frame)
        except KeyboardInterrupt as err:
            err._vramnb_signum = signum  # type: ignore[attr-defined]  # recognized if Python swallows it
            raise

    def _retry(self) -> None:
        with self.lock:
            if self.timer is None and self.installed:
                self.timer = threading.Timer(0.002, self._deliver)
                self.timer.daemon = True
                self.timer._vramnb_own = True  # type: ignore[attr-defined]  # runs no user code
                self.timer.start()

    def _deliver(self) -> None:
        with self.lock:  # (not once the guard is closed: it raises what is held itself)
            if self.installed and self.timer is not None and self.pending is not None:
                _thread.interrupt_main(signal.SIGINT)

    def _unraisable(self, info: Any) -> None:
        signum = getattr(info.exc_value, "_vramnb_signum", None)
        if signum is None or not self.installed:
            self.prev_hook(info)
            return
        self.pending = (signum, None)  # swallowed where it landed: delivered again where the program goes next
        self._retry()

    def __exit__(self, *exc: Any) -> None:
        if self.installed:
            try:
                with self.lock:
                    timer, self.timer = self.timer, None
                    if timer is not None:
                        timer.cancel()
                # a delivery the timer made just before may still wait for a bytecode boundary: let it reach
                # this handler (which raises it here, once) before the previous handler is back
                for _ in range(100):
                    pass
            finally:
                if sys.unraisablehook == self._unraisable:
                    sys.unraisablehook = self.prev_hook
                signal.signal(signal.SIGINT, self.previous)
                self.installed = False
        if self.pending is not None:
            signum, frame = self.pending
            self.pending = None
            self._raise(signum, frame)


def _can_unwind(frame: Any, outer: Any) -> bool:
    """Whether a ``KeyboardInterrupt`` raised in ``frame`` unwinds through Python to ``outer`` (the frame that
    opened the guard): the innermost frame is not PyTorch's own code, and no frame between is a dispatch of an
    operator (where PyTorch's C++ called back into Python, and an exception may abort the process)."""
    if frame is None or _in_torch(frame.f_code.co_filename):
        return False
    while frame is not None and frame is not outer:
        code = frame.f_code
        if code.co_name in _DISPATCH_ENTRIES or code.co_filename.startswith(_TORCH_DISPATCH_DIRS):
            return False
        frame = frame.f_back
    return True


def _in_torch(filename: str) -> bool:
    return filename.startswith(_TORCH_DIR)


_TORCH_SPEC = importlib.util.find_spec("torch")
_TORCH_DIR = os.path.dirname(os.path.abspath(_TORCH_SPEC.origin)) + os.sep if _TORCH_SPEC and _TORCH_SPEC.origin else "\0"
# PyTorch's Python that its C++ dispatcher calls while an operator runs: operator objects and the Python
# dispatcher, its library of registered kernels and rules, the fake tensor implementation
_TORCH_DISPATCH_DIRS = tuple(os.path.join(_TORCH_DIR, d) for d in ("_ops.py", "_library" + os.sep, "_subclasses" + os.sep,
                                                                   "_prims" + os.sep, "_decomp" + os.sep))
_DISPATCH_ENTRIES = frozenset({"__torch_dispatch__"})  # the protocol every dispatch mode and tensor subclass implements
