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

__all__ = ["bounded_sentence", "threads_using"]


def threads_using(obj: Any) -> list[str]:
    """Names of the live threads other than the calling one and the front-end's own whose running frames
    use ``obj``: a local variable bound to it, or a global name of the frame's code bound to it (a producer
    closure's queue). Reads the threads' frames (:func:`._threads.other_threads`); runs no user code
    (identity tests only)."""
    from ._threads import other_threads

    out = []
    for _ident, name, _th, frames in other_threads():
        for f in frames:
            if any(f.f_globals.get(n) is obj for n in f.f_code.co_names) or any(
                    v is obj for v in f.f_locals.values()):
                out.append(name)
                break
    return out

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
        producers = threads_using(owner)
        if producers:  # refilled by a thread as the cell takes items: taking them is not the fix, its size is
            who = ", ".join(f"'{t}'" for t in producers[:3]) + (" and more" if len(producers) > 3 else "")
            kind = f"{type(owner).__name__}(maxsize={cap})" if cap and cap > 0 else f"{type(owner).__name__} without a maxsize"
            return (f"{owner_path} is a {kind} holding {n} items ({format_bytes(nbytes)}, ≈{format_bytes(int(per))} "
                    f"each) that the thread{'s' if len(producers) > 1 else ''} {who} put{'' if len(producers) > 1 else 's'} "
                    "into as items are taken out: "
                    + (f"it keeps up to {cap} items (≈{format_bytes(int(per * cap))} at the current item size) for as "
                       "long as the thread runs; give it a smaller maxsize (a few items keep the consumer fed), or "
                       "stop the thread when done" if cap and cap > 0 else
                       "it grows for as long as the thread puts faster than items are taken; give it a maxsize (a "
                       "few items keep the consumer fed) so that put() waits"))
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
    import logging.handlers

    if issubclass(type(owner), logging.handlers.MemoryHandler) and getattr(owner, "buffer", None) is node \
            and getattr(owner, "target", None) is None:  # flush() sends to the target, then clears: neither here
        return (f"{owner_path} is a logging MemoryHandler without a target: its flush() has nowhere to send the "
                f"records and keeps them, so its buffer ({n} records, {format_bytes(nbytes)} with what their "
                f"arguments hold) grows without bound whatever its capacity: give it a target "
                f"(`{owner_path}.setTarget(...)`) or remove it from its logger (`removeHandler`)")
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


def _dataset_len(owner: Any) -> int | None:
    """``len(owner)`` where ``owner`` is a map-style data set (its class defines ``__getitem__`` and
    ``__len__``, or it is a ``torch.utils.data.Dataset``), else ``None``. ``__len__`` is the one
    piece of the user's code this calls (a data set's length, read as ``DataLoader`` reads it)."""
    tp = type(owner)
    from collections.abc import Mapping, Set

    if issubclass(tp, (list, tuple, dict, deque, str, bytes, type, Mapping, Set)):
        return None  # a mapping's length is its own entries' count (a UserDict over the dict): not a data set's
    try:
        import torch.utils.data as tud

        dataset = issubclass(tp, tud.Dataset)
    except Exception:  # noqa: BLE001
        dataset = False
    if not dataset and not (callable(getattr(tp, "__getitem__", None)) and callable(getattr(tp, "__len__", None))):
        return None
    try:
        n = len(owner)
    except Exception:  # noqa: BLE001 - an iterable data set, a length that cannot be read
        return None
    return n if type(n) is int and n > 0 else None


def per_example_sentence(path: str, node: Any, owner: Any, owner_path: str, nbytes: int) -> str | None:
    """The line for a dict ``node`` (``owner``'s attribute at ``path``, holding ``nbytes``) keyed by
    example indices of the data set ``owner`` (every key an ``int`` in ``range(len(owner))``): it
    holds at most one entry per example, so it stops growing at ``len(owner)`` entries; full when it
    has that many. ``None`` where that is not checked to hold."""
    if type(node) is not dict or owner is None or not node or nbytes <= 0:
        return None
    total = _dataset_len(owner)
    if total is None or len(node) > total:
        return None
    attr = path.rsplit(".", 1)[-1]
    length = getattr(getattr(type(owner), "__len__", None), "__code__", None)
    if length is None or attr in length.co_names:
        return None  # a length counted from the cache itself (`len(self.cache)`) bounds nothing
    keys = list(node.keys())
    if not all(type(k) is int and 0 <= k < total for k in keys):
        return None
    n = len(node)
    per = nbytes / n
    cls = type(owner).__name__
    # "example" for a data set (a torch Dataset, or a class named so), else the neutral "index"
    try:
        import torch.utils.data as tud

        data = issubclass(type(owner), tud.Dataset) or "data" in cls.lower()
    except Exception:  # noqa: BLE001
        data = "data" in cls.lower()
    unit = "example" if data else "index"
    key = "example index" if data else "index"
    if n == total:
        return (f"{path} holds one entry per {unit} of {owner_path} (len({owner_path}) = {total}, keys 0 to "
                f"{total - 1}): it is full ({n} of {total} entries, {format_bytes(nbytes)}), so reading more {unit}s "
                f"adds nothing to it: it has stopped growing, which is not a leak; where {format_bytes(nbytes)} is "
                f"too much, have {cls} cache less (or not at all)")
    return (f"{path} holds {n} entries ({format_bytes(nbytes)}, ≈{format_bytes(int(per))} each), keyed by "
            f"{key} of {owner_path} (len({owner_path}) = {total}): it grows until it holds one entry per {unit} "
            f"(≈{format_bytes(int(per * total))} at the current entry size) and then stops, which is not a leak; "
            f"where that is more than the memory available, have {cls} cache less (or not at all)")


def _key_kind(k: Any) -> str | None:
    """What a cache key is, where it is a size or shape (an int, a tuple of ints or of such tuples, a
    ``torch.Size``), else ``None``."""
    import torch

    if type(k) is int:
        return "an integer"
    if type(k) is torch.Size:
        return "a torch.Size"
    if type(k) is tuple and k and all(type(x) is int or (type(x) in (tuple, torch.Size) and x
                                                         and all(type(y) is int for y in x)) for x in k):
        return "a tuple of sizes" if any(type(x) is not int for x in k) else "a tuple of integers"
    return None


def keyed_cache_sentence(path: str, node: Any, nbytes: int, code: str | None = None) -> str | None:
    """The line for a dict ``node`` at ``path`` (holding ``nbytes``) that caches tensors keyed by
    sizes or shapes (:func:`_key_kind`: every key one kind, at least 4 entries, every value a tensor,
    the tensors of more than one shape: what is cached depends on the key): one entry per distinct
    key, so it grows with each new key and never stops while the keys keep changing. ``None`` where
    that does not hold. ``code``: the dict as its owner's code names it (``self._cache``), else ``path``."""
    import torch

    c = code or path
    if type(node) is not dict or len(node) < 4 or nbytes <= 0:
        return None
    items = list(node.items())
    kinds = {_key_kind(k) for k, _ in items}
    if len(kinds) != 1 or None in kinds:
        return None
    if not all(issubclass(type(v), torch.Tensor) for _, v in items):
        return None
    shapes = {tuple(v.shape) for _, v in items}
    if len(shapes) < 2:
        return None
    kind = next(iter(kinds))
    shown = ", ".join(repr(k) for k, _ in items[-2:])
    return (f"{path} is a cache keyed by {kind} ({len(items)} entries, {format_bytes(nbytes)}; the latest keys "
            f"{shown}) whose tensors' shapes follow the key: it keeps one entry per distinct key and drops none, so "
            f"it grows with every new key for as long as the keys keep changing; bound it (drop the oldest entry "
            f"beyond a few where it is filled: `if len({c}) > 8: {c}.pop(next(iter({c})))`), key it by a small set (round the "
            f"sizes up to a multiple, e.g. 32, or pad inputs to a few fixed sizes), or compute the value per call")
