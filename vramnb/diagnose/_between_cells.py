"""Growth between measured cells: memory allocated after a ``%%vram`` cell ended and before the next
one started (a prefetch thread refilling its queue, a timer, a pipe's reader thread) makes no cell's
"change", so each cell reads "±0 B" while memory climbs. The note says how much grew while no cell
ran, and which threads still running keep memory that no name of the notebook reaches (their
frames' variables, a thread's target and arguments), with the fix only where it is checked: a
thread blocked in ``Queue.put`` on a full queue.

Cheap for a plain cell: the threads are walked only when the start of a cell is at least
:data:`MIN_GROWTH` above the end of the last measured cell on the same device. Nothing of the
user's is called: frames' ``f_locals``, ``__dict__`` and the holders' walk only."""

from __future__ import annotations

import queue
import threading
import types
from collections import deque
from collections.abc import Iterable
from typing import Any

import torch

from .._units import format_bytes
from ._threads import other_threads

__all__ = ["MIN_GROWTH", "between_cells_note", "thread_holdings"]

#: the least growth between two measured cells worth a note (bytes)
MIN_GROWTH = 1 << 20


class ThreadHolding:
    """What one live thread keeps that no notebook name reaches: ``thread``, ``nbytes``,
    ``parts`` (``[(variable, bytes, what)]``, largest first), ``blocked`` (the text of a full
    queue's ``put`` it waits in, or ``""``), ``code`` (the thread's function)."""

    def __init__(self, thread: threading.Thread) -> None:
        self.thread = thread
        self.nbytes = 0
        self.parts: list[tuple[str, int, str]] = []
        self.blocked = ""
        self.code = ""


def _what(v: Any, nbytes: int) -> str:
    if issubclass(type(v), queue.Queue):
        items: Any = getattr(v, "queue", None)
        n = len(items) if type(items) is deque else 0
        cap = v.maxsize if type(getattr(v, "maxsize", None)) is int else 0
        return f"a {type(v).__name__} with {n} items" + (f" (maxsize={cap})" if cap > 0 else "")
    if issubclass(type(v), torch.Tensor):
        return f"a tensor {tuple(v.shape)}"
    return f"a {type(v).__name__}"


def _blocked_put(frames: list[types.FrameType]) -> tuple[str, Any] | None:
    """``(the user's line that calls put, the queue)`` where the thread waits in ``queue.Queue.put`` on
    a full queue (its ``maxsize`` entries in it), else ``None``."""
    put = queue.Queue.put.__code__
    for i, f in enumerate(frames):
        if f.f_code is not put:
            continue
        loc = f.f_locals
        q: Any = loc.get("self")
        if not issubclass(type(q), queue.Queue) or loc.get("block") is not True or loc.get("timeout") is not None:
            return None  # a put with a timeout, or one that does not block, ends by itself
        cap = q.maxsize if type(q.maxsize) is int else 0
        items = q.queue if type(q.queue) is deque else None
        if cap <= 0 or items is None or len(items) < cap:
            return None
        caller = frames[i + 1] if i + 1 < len(frames) else None
        where = f"line {caller.f_lineno} of {caller.f_code.co_name}" if caller is not None else "Queue.put"
        return where, q
    return None


def thread_holdings(device: torch.device, reached: set[int],
                    threads: Iterable[threading.Thread] | None = None) -> list[ThreadHolding]:
    """For each live thread but this one and vramnb's own, the storages on ``device`` that its frames'
    variables (and, where it has them, its target, arguments or function) keep and that are not in
    ``reached`` (storage keys the notebook's names reach); threads that keep none are left out."""
    from .._holders import storages_held

    wanted = None if threads is None else {id(t) for t in threads}
    out: list[ThreadHolding] = []
    seen: set[int] = set(reached)
    # the kernel's own threads (heartbeat, IOPub, control, a debugger) are not the user's: left out
    for _ident, _name, th, frames in other_threads():
        if th is None or th is threading.main_thread() or th.name.startswith("vramnb") or (
                wanted is not None and id(th) not in wanted):
            continue
        h = ThreadHolding(th)
        sources: list[tuple[str, Any]] = []
        lib = (threading.__file__, queue.__file__)
        # the user's frames first (their variables name what is kept), then the library's (a Timer's `self`)
        for f in [f for f in frames if f.f_code.co_filename not in lib] + [f for f in frames
                                                                            if f.f_code.co_filename in lib]:
            if f.f_code.co_filename == __file__:
                continue
            try:
                loc = f.f_locals
            except Exception:  # noqa: BLE001
                continue
            for k, v in list(loc.items()):
                if type(v) in (types.ModuleType, types.FunctionType, type) or v is th:
                    continue
                sources.append((k, v))
        try:
            d = object.__getattribute__(th, "__dict__")
        except (AttributeError, TypeError):
            d = {}
        for k in ("_args", "_kwargs", "args", "kwargs"):  # a thread not yet running its target (a Timer)
            if k in d:
                sources.append((f"{th.name}.{k.lstrip('_')}", d[k]))
        for name, v in sources:
            try:
                got = storages_held(v, device)
            except Exception:  # noqa: BLE001 - an object the walk cannot read
                continue
            mine = {k: b for k, b in got.items() if k not in seen}
            if not mine:
                continue
            seen.update(mine)
            n = sum(mine.values())
            h.nbytes += n
            h.parts.append((name, n, _what(v, n)))
        if not h.nbytes:
            continue
        user = next((f for f in frames if f.f_code.co_filename != threading.__file__
                     and f.f_code.co_filename != queue.__file__), None)
        h.code = user.f_code.co_name if user is not None else ""
        blocked = _blocked_put(frames)  # (a put without a timeout on a full queue)
        if blocked is not None:
            where, q = blocked
            qname = next((n for n, _b, _w in h.parts if any(v is q for k, v in sources if k == n)), "the queue")
            h.blocked = f"blocked in `{qname}.put(...)` ({where}) on a full queue (maxsize={q.maxsize})"
        h.parts.sort(key=lambda p: -p[1])
        out.append(h)
    return sorted(out, key=lambda h: -h.nbytes)


def between_cells_note(grew: int, no_cell: bool, last_cell: int | None, holdings: list[ThreadHolding]) -> str | None:
    """The note for a cell that started ``grew`` bytes above the end of the last measured cell
    (``last_cell``: its number; ``no_cell``: no other cell ran in between), with the live threads'
    ``holdings`` (:func:`thread_holdings`); ``None`` where there is nothing to say."""
    held = sum(h.nbytes for h in holdings)
    if held < MIN_GROWTH and not no_cell:
        return None
    last = f" ([{last_cell}])" if last_cell is not None else ""
    said = (f"allocated grew by {format_bytes(grew)} after the last %%vram cell{last} ended and before this one "
            "started" + (", while no cell ran" if no_cell else " (other cells ran in between)"))
    if held < MIN_GROWTH:
        return said + ": no cell's change shows it; %vram lists what holds the memory"
    groups: dict[tuple[str, bool, bool], list[ThreadHolding]] = {}
    for h in holdings:  # the threads of one function together (one started by each run)
        groups.setdefault((h.code, h.thread.daemon, bool(h.blocked)), []).append(h)
    shown = []
    for (code, daemon, _b), hs in list(groups.items())[:3]:
        h = hs[0]
        parts = ", ".join(f"`{n}` ({w}, {format_bytes(b)})" for n, b, w in h.parts[:3])
        kind = "daemon thread" if daemon else "thread"
        running = f" (running {code})" if code and f"({code})" not in h.thread.name else ""
        line = (f"{kind} {h.thread.name}{running} keeps {format_bytes(h.nbytes)} in {parts}"
                + (f", {h.blocked}" if h.blocked else ""))
        if len(hs) > 1:
            line += (f", and {len(hs) - 1} more {kind}{'s' if len(hs) > 2 else ''} like it"
                     + (f" running {code}" if code else "") + f" ({format_bytes(sum(x.nbytes for x in hs))} in all)")
        shown.append(line)
    more = f" and {len(groups) - 3} more" if len(groups) > 3 else ""
    n = len(holdings)
    out = (f"{said}; {n} thread{'s' if n != 1 else ''} still running keep{'s' if n == 1 else ''} "
           f"{format_bytes(held)} that no name reaches: " + "; ".join(shown) + more)
    if any(h.blocked for h in holdings):
        out += (": a thread blocked in put() on a full queue waits until something takes from the queue, which "
                "nothing does once its consumer has stopped (e.g. a loop left early), so it and what it holds stay; "
                "when the consumer stops, stop the producer (a threading.Event it checks, with "
                "`q.put(item, timeout=...)` in a loop that checks the event) and drain the queue "
                "(`q.get_nowait()` until queue.Empty) in a `finally:` of the consuming code")
    else:
        out += ": a thread keeps what it refers to while it runs: stop it (and join() it) once its work is done, "
        out += "or have it let go of what it no longer needs"
    return out
