"""Holders in the interpreter's own state, for the regrowth line: a callable that keeps a cell's new
storages and that no object the garbage collector sees refers to (found by
:func:`._referrer_paths.holding_paths`, ``orphans``) is kept from C. Which registry keeps it is
checked where Python can tell: a signal's handler (``signal.getsignal``), the current trace or
profile function (``sys.gettrace``/``sys.getprofile``); ``atexit`` has no public list of its
callbacks, so it is named only as the likely holder, where its count of callbacks
(``atexit._ncallbacks()``) grew during the run. Nothing of the user's is called: the callables'
attributes are read, never called."""

from __future__ import annotations

import functools
import signal
import sys
import types
from collections.abc import Mapping
from typing import Any

import torch

from .._units import format_bytes

__all__ = ["CHeld", "kept_from_c"]


class CHeld:
    """One callable kept from C, as the regrowth line shows it: ``where`` (what it is and what keeps it),
    ``nbytes`` (this run's new storages it reaches), ``advice`` (the fix), ``kind``."""

    def __init__(self, where: str, nbytes: int, advice: str, kind: str) -> None:
        self.where, self.nbytes, self.advice, self.kind = where, nbytes, advice, kind
        self.others: set[str] = set()
        self.path = self.cut = where

    def line(self) -> str:
        return f"{self.where} keeps {format_bytes(self.nbytes)} more each run ({self.advice})"


def _what(fn: Any) -> tuple[str, list[Any], str]:
    """(text, the objects it keeps, the code that names it) for a function, bound method or partial."""
    if type(fn) is types.MethodType:
        owner = type(fn.__self__).__name__
        name = fn.__func__.__name__
        return (f"the bound method {owner}.{fn.__func__.__name__} of a {owner}", [fn.__self__],
                f"obj.{name}")
    if type(fn) is functools.partial:
        name = getattr(fn.func, "__name__", type(fn.func).__name__)
        return (f"functools.partial({getattr(fn.func, '__qualname__', name)}, ...)",
                [fn.func, fn.args, fn.keywords], f"functools.partial({name}, ...)")
    cells = [c.cell_contents for c in (fn.__closure__ or ()) if _filled(c)]
    return (f"the function {fn.__qualname__}", [*cells, fn.__defaults__, fn.__kwdefaults__], fn.__name__)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _signal_of(fn: Any) -> str | None:
    for sig in signal.valid_signals():
        try:
            if signal.getsignal(sig) is fn:
                return signal.Signals(sig).name
        except (ValueError, OSError):
            continue
    return None


def kept_from_c(orphans: list[Any], keys: Mapping[int, int], device: torch.device, atexit_before: int | None,
                atexit_now: int | None) -> list[CHeld]:
    """For each callable of ``orphans`` that reaches some of the storages ``keys`` (storage key -> bytes:
    this run's new storages no name reaches) on ``device``, what keeps it and the fix. ``atexit_before``
    and ``atexit_now``: ``atexit._ncallbacks()`` at the previous run's end and at this run's (``None``:
    unknown); atexit is named only where it grew. The largest first; a storage counts once."""
    out: list[CHeld] = []
    left = dict(keys)
    grew = (atexit_now - atexit_before if atexit_before is not None and atexit_now is not None else 0)
    for fn in orphans:
        text, kept, code = _what(fn)
        mine = _keys_of(kept, device) & left.keys()
        n = sum(left.pop(k) for k in mine)
        if not n:
            continue
        sig = _signal_of(fn)
        if sig is not None:
            out.append(CHeld(f"{text}, the handler of {sig}", n,
                             f"signal.signal({sig}, ...) keeps its handler until another replaces it: put the previous "
                             f"handler back when done (`old = signal.signal({sig}, {code})` ... "
                             f"`signal.signal({sig}, old)`)", "signal handler"))
        elif fn is sys.gettrace() or fn is sys.getprofile():
            which = "settrace" if fn is sys.gettrace() else "setprofile"
            out.append(CHeld(f"{text}, set with sys.{which}", n,
                             f"sys.{which} keeps its function until it is replaced: `sys.{which}(None)` when done",
                             "tracer"))
        elif grew > 0:
            out.append(CHeld(
                f"{text}, which no object the garbage collector sees refers to (kept from C), while atexit's "
                f"registered callbacks went from {atexit_before} to {atexit_now} during the last run (atexit._ncallbacks(); "
                "atexit has no public list to check it against)", n,
                f"atexit is the likely holder: `atexit.register({code})` keeps it, and all it refers to, until the "
                f"interpreter exits; call `atexit.unregister({code})` (the same object) once it is closed or no "
                "longer needed (in its close()), or register a function that keeps only a `weakref.ref` to the object", "atexit"))
        else:
            out.append(CHeld(
                f"{text}, which no object the garbage collector sees refers to (kept from C: a registry of the "
                "interpreter or of an extension module, not a variable)", n,
                "find where it is registered and unregister it when done (an atexit callback, a C library's callback)",
                "kept from C"))
    return sorted(out, key=lambda h: -h.nbytes)


def _keys_of(objs: list[Any], device: torch.device) -> set[int]:
    from .._holders import storages_held

    got: set[int] = set()
    for o in objs:
        if o is None:
            continue
        try:
            got.update(storages_held(o, device))
        except Exception:  # noqa: BLE001
            continue
    return got
