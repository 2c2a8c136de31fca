"""A container that exists to keep a bounded number of entries (a replay buffer, a window of
recent values), or to be emptied by its consumer (a ``queue.Queue``: its items stay until a
``get()``, so the fix is to take them, not to delete its deque): a ``collections.deque`` with a
``maxlen`` drops its oldest entry once full, so it grows to ``maxlen`` entries and then stops.
Growing on every run until then is what it is for, not a leak: the line says where it stops
(entries, and bytes at the current entry size), never to empty it.
An object that names a capacity for such a container gets the same line, said conditionally (its
own code decides whether it drops entries)."""

from __future__ import annotations

from collections import deque
from typing import Any

from .._units import format_bytes

__all__ = ["bounded_sentence"]

#: attribute names that state a container's capacity in number of entries
CAPACITY_NAMES = ("capacity", "maxlen", "max_size", "buffer_size", "memory_size", "max_len", "size_limit")


def bounded_sentence(path: str, node: Any, owner: Any, owner_path: str, nbytes: int) -> str | None:
    """The line for ``path`` (``node``: a deque, list or dict holding ``nbytes``; ``owner``: the
    object whose attribute it is, at ``owner_path``, or ``None``) where it is bounded, else ``None``.
    Bytes at capacity are ``nbytes / len(node) * capacity`` (the current entry size)."""
    n = len(node) if issubclass(type(node), (deque, list, dict)) else 0
    if not n or nbytes <= 0:
        return None
    per = nbytes / n
    import queue

    if owner is not None and issubclass(type(owner), queue.Queue) and getattr(owner, "queue", None) is node:
        cap = getattr(owner, "maxsize", 0)
        return (f"{owner_path} is a {type(owner).__name__} holding {n} items ({format_bytes(nbytes)}) that nothing has "
                f"taken out: each put() keeps its item until a get() takes it; take them where they are consumed "
                f"(`{owner_path}.get()`)" + ("" if cap and cap > 0 else ", or give it a maxsize so that put() waits"))
    if type(node) is deque and node.maxlen is not None:
        cap = node.maxlen
        if cap <= n:
            return (f"{path} is a deque(maxlen={cap}) and full ({n} entries, {format_bytes(nbytes)}): each new entry "
                    "drops the oldest, so it no longer grows; not a leak")
        return (f"{path} is a deque(maxlen={cap}) holding {n} entries ({format_bytes(nbytes)}, "
                f"≈{format_bytes(int(per))} each): it grows until it holds {cap} entries "
                f"(≈{format_bytes(int(per * cap))} at the current entry size) and then stops (each new entry drops "
                f"the oldest): not a leak; where that is more than the memory available, give it a smaller maxlen")
    if owner is None:
        return None
    od = getattr(owner, "__dict__", None)
    if not isinstance(od, dict):
        return None
    stated = next(((k, v) for k, v in od.items() if k in CAPACITY_NAMES and type(v) is int and v > n), None)
    if stated is None:
        return None
    k, v = stated
    return (f"{path} holds {n} entries ({format_bytes(nbytes)}, ≈{format_bytes(int(per))} each) and "
            f"{owner_path}.{k} is {v}: if {type(owner).__name__} drops entries beyond it (as a replay buffer does), "
            f"it grows to {v} entries (≈{format_bytes(int(per * v))} at the current entry size) and then stops, "
            "which is not a leak; size the capacity to the memory available")
