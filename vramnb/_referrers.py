"""Who, besides IPython's own out-of-sight slots, refers to an object: what ``%vram free`` leaves alone.

IPython keeps its last exception in ``sys.last_*``, its ``InteractiveTB.tb`` and the last
``ExecutionResult``, and its outputs in the history manager's ``output_hist`` dict (``Out``/``_oh``,
``_N``, ``_``/``__``/``___``). Anything else that refers to such an object, at any depth (a list
of tuples, an attribute, a dict value, a logging record, a generator, another name for ``Out``), is
the user's (or another library's) and keeps it: the answer comes from the interpreter's own
referrer lists (``gc.get_referrers``), not from guessing where a user might put things.
"""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Iterable
from typing import Any

__all__ = ["Slots", "describe_holder", "outside_referrers"]

_LAST = frozenset({"last_type", "last_value", "last_traceback", "last_exc"})
_UNDERS = frozenset({"_", "__", "___"})


class Slots:
    """IPython's own slots in ``shell``: id of each container -> the names in it that are IPython's
    (``None``: all of them). ``user_oh``: the output dict is the user's too (held outside IPython)."""

    def __init__(self, shell: Any, bound: Iterable[str] = (), *, user_oh: bool = False) -> None:
        self.by_id: dict[int, frozenset[str] | None] = {}
        self._keep: list[Any] = []  # the containers, alive while their ids are used
        ns, hidden = shell.user_ns, shell.user_ns_hidden
        self.ns = ns
        hm = getattr(shell, "history_manager", None)
        oh = getattr(hm, "output_hist", None)
        own = {n for n, v in list(ns.items()) if n in hidden and hidden[n] is v and n not in bound}
        own |= {n for n in ("Out", "_oh") if oh is not None and ns.get(n) is oh and n not in bound}
        self._add(ns, frozenset(own))
        self._add(hidden, None)
        self._add(sys.__dict__, _LAST)
        if hm is not None:
            self._add(hm, frozenset({"output_hist"}))
            self._add(getattr(hm, "_trait_values", None), frozenset({"output_hist"}))
        if isinstance(oh, dict) and not user_oh:
            self._add(oh, None)
        self._add(getattr(shell, "displayhook", None), _UNDERS | {"exec_result"})
        for res in (getattr(shell, "last_execution_result", None),
                    getattr(getattr(shell, "displayhook", None), "exec_result", None)):
            self._add(res, frozenset({"error_in_exec", "result"}))
        itb = getattr(shell, "InteractiveTB", None)
        self._add(itb, frozenset({"tb", "pdb"}))
        self._add(getattr(itb, "pdb", None), None)  # the debugger `%debug` left behind

    def _add(self, obj: Any, names: frozenset[str] | None) -> None:
        if obj is None:
            return
        self._keep.append(obj)
        self.by_id[id(obj)] = names
        d = getattr(obj, "__dict__", None) if not isinstance(obj, dict) else None
        if isinstance(d, dict):  # an instance's attributes may live in its own dict object
            self._keep.append(d)
            self.by_id[id(d)] = names

    def owns(self, container: Any, targets: set[int]) -> bool:
        """Whether every reference ``container`` holds to one of ``targets`` (ids) is IPython's."""
        if id(container) not in self.by_id:
            return False
        names = self.by_id[id(container)]
        if names is None:
            return True
        items = container if isinstance(container, dict) else getattr(container, "__dict__", {})
        return all(k in names for k, v in list(items.items()) if id(v) in targets)


def _stack_ids() -> set[int]:
    f: Any = sys._getframe(1)
    out = set()
    while f is not None:
        out.add(id(f))
        f = f.f_back
    return out


def _callers(targets: Iterable[Any], stack: set[int]) -> list[Any]:
    """The finished frames the targets' frames were called from (``f_back``, up to one still running):
    the exception keeps them alive with their locals (IPython's ``run_code``, ``run_cell_async`` of the
    failed cell, which on Python 3.12 refer to its ``ExecutionResult``), so they are part of it, not
    another holder."""
    out: list[Any] = []
    seen: set[int] = set()
    for t in targets:
        f = t.f_back if type(t) is types.FrameType else None
        while f is not None and id(f) not in stack and id(f) not in seen:
            seen.add(id(f))
            out.append(f)
            f = f.f_back
    return out


def _locals_dicts(frames: Iterable[Any]) -> set[int]:
    """ids of the locals snapshot dicts of these function frames (Python < 3.13 keeps one on the
    frame once ``f_locals`` was read): part of the frame, not another holder. A module-level
    frame's locals are a real namespace and are not among them."""
    out: set[int] = set()
    for f in frames:
        if type(f) is types.FrameType and f.f_code.co_flags & 0x1:  # CO_OPTIMIZED: a function's frame
            out.update(id(d) for d in gc.get_referents(f) if type(d) is dict and d is not f.f_globals
                       and d is not f.f_builtins)
    return out


def outside_referrers(targets: list[Any], slots: Slots) -> dict[int, Any]:
    """id of each of ``targets`` that something outside IPython's slots refers to -> one such
    referrer. References among ``targets`` (an exception's own traceback and frames refer to each
    other) and from the callers' frames do not count, nor does a referrer that only ``targets``
    or a garbage cycle reach (an older ``ExecutionResult`` that only the failed cell's
    ``run_code`` frame keeps; the cycles IPython's traceback formatter leaves around the frames
    it showed): walking its referrers upwards closes without meeting a module, a class, a frame
    outside ``targets`` or the notebook's namespace. An object kept only by references the
    garbage collector cannot see (a C extension's, another thread's running function) counts
    as not kept."""
    ids = {id(t) for t in targets}
    stack = _stack_ids()
    callers = _callers(targets, stack)
    skip = (ids | stack | {id(targets), id(slots._keep)} | _locals_dicts(targets) | {id(f) for f in callers}
            | _locals_dicts(callers))
    cands: dict[int, Any] = {}  # id(referrer) -> referrer
    reached: dict[int, list[int]] = {}  # id(referrer) -> ids of the targets it refers to
    refs = gc.get_referrers(*targets)
    for r in refs:
        if id(r) in skip or slots.owns(r, ids):
            continue
        hit = [id(t) for t in gc.get_referents(r) if id(t) in ids]
        if hit:
            cands[id(r)] = r
            reached[id(r)] = hit
    del refs
    found: dict[int, Any] = {}
    if not cands:
        return found
    skip |= {id(cands), id(reached), id(found)}
    alive = _alive(cands, skip, slots.ns)
    for i in alive:
        for t in reached[i]:
            found.setdefault(t, cands[i])
    return found


def _alive(cands: dict[int, Any], skip: set[int], ns: Any, levels: int = 12, limit: int = 5000) -> set[int]:
    """ids of those ``cands`` (id -> object) that something alive reaches: one walk up their
    referrers together (one ``gc.get_referrers`` pass per level, each object remembering which
    candidates it leads down to), ``skip`` aside. Meeting a module, a class, a frame or ``ns``
    makes the candidates below alive; a walk that closes leaves them garbage; what is still
    open after ``levels`` levels or ``limit`` objects counts as alive (unsure)."""
    modules = {id(vars(m)) for m in list(sys.modules.values()) if type(m) is types.ModuleType}
    skip = skip | _stack_ids()
    origin: dict[int, set[int]] = {i: {i} for i in cands}
    alive: set[int] = set()
    frontier: list[Any] = list(cands.values())
    for _ in range(levels):
        if not frontier:
            return alive
        skip.add(id(frontier))
        at = {id(o) for o in frontier}
        refs = gc.get_referrers(*frontier)
        nxt: list[Any] = []
        skip.add(id(nxt))
        for r in refs:
            if id(r) in skip:
                continue
            src: set[int] = set()
            for t in gc.get_referents(r):
                if id(t) in at:
                    src |= origin[id(t)]
            src -= alive
            if not src:
                continue
            tp = type(r)
            if r is ns or id(r) in modules or tp is types.FrameType or tp is types.ModuleType or issubclass(tp, type):
                alive |= src
            elif id(r) not in origin or not src <= origin[id(r)]:
                origin.setdefault(id(r), set()).update(src)
                nxt.append(r)
        del refs
        frontier = [o for o in nxt if origin[id(o)] - alive]
        del nxt
        if len(origin) > limit:
            break
    return alive | {i for o in frontier for i in origin[id(o)]}  # still open: unsure


def describe_holder(target: Any, holder: Any, shell: Any, skip: Iterable[int] = (), depth: int = 8,
                    width: int = 64) -> str:
    """Who keeps ``target`` alive through ``holder`` (one of its referrers), in words: ``"your
    variable failures"``, ``"mymod.cache"``, or the holder's type when no notebook name or module
    attribute reaches it within ``depth`` levels. ``skip``: ids of objects not to walk through."""
    ns = shell.user_ns
    hidden = shell.user_ns_hidden
    modules = {id(vars(m)): name for name, m in list(sys.modules.items())
               if type(m) is types.ModuleType and name != "__main__"}
    frontier = [target]
    seen = {id(target)} | _stack_ids() | set(skip)
    for level_no in range(depth + 1):
        level = {id(o) for o in frontier}
        refs = [holder] if level_no == 0 else gc.get_referrers(*frontier)
        for r in refs:
            if r is ns:
                for k, v in list(ns.items()):
                    if id(v) in level and not (k in hidden and hidden[k] is v):
                        return f"your variable {k}"
            elif id(r) in modules:
                for k, v in list(r.items()):
                    if id(v) in level:
                        return f"{modules[id(r)]}.{k}"
        nxt = [r for r in refs if id(r) not in seen and r is not frontier and r is not ns]
        del refs
        seen.update(id(r) for r in nxt)
        if not nxt:
            break
        frontier = nxt[:width]
        del nxt  # only the frontier refers to them now (skipped as one of ours)
    return f"a {type(holder).__name__} outside IPython"
