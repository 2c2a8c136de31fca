"""Verdicts on a measured cell, read from its numbers: what a user would otherwise have to infer.

* **cached, not leaked**: reserved memory grew while allocated memory did not (the caching
  allocator keeps freed segments for reuse; a new largest size takes a new segment);
* **grows on every re-run**: the same cell, run again, leaves the same bytes more each time
  (a list appended to, ``total += loss`` keeping each step's graph), with the variable that grew.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from .._units import format_bytes, format_delta

__all__ = ["reserved_growth", "Regrowth", "CACHED_MIN"]

#: the least growth of reserved memory worth a verdict (bytes)
CACHED_MIN = 64 << 20


def reserved_growth(report: Any) -> str | None:
    """The "cached, not leaked" verdict for a CUDA report whose reserved memory grew by at
    least :data:`CACHED_MIN` and by four times more than its allocated memory, else ``None``."""
    dr = getattr(report, "delta_reserved", None)
    if dr is None or dr < CACHED_MIN or abs(report.delta_allocated) * 4 > dr:
        return None
    return (f"reserved grew by {format_bytes(dr)} while allocated changed by {format_delta(report.delta_allocated)}: "
            "cached by PyTorch's allocator for reuse, not leaked (other processes cannot use it; "
            "torch.cuda.empty_cache() gives it back). Each new largest size took a new segment: sort or bucket "
            "inputs by size, warm up with the largest first, or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
            "before CUDA starts")


class Regrowth:
    """Remembers each cell's (by its source) last growths of allocated memory, and names
    the variable that grew when three runs in a row each left more, the last two the same
    bytes (the first may differ: it also makes the gradients, an optimizer's state)."""

    RUNS = 3

    def __init__(self) -> None:
        self._deltas: dict[str, list[int]] = {}
        self._sizes: dict[str, dict[str, tuple[int, int, str]]] = {}

    def observe(self, source: str, delta: int, holders: Callable[[], list[tuple[Any, ...]]],
                advise: Callable[[str, str], str | None] | None = None,
                trace: Callable[[str, bool], Any] | None = None) -> str | None:
        """Record a run of ``source`` that changed allocated memory by ``delta`` bytes;
        ``holders`` gives ``(variable, bytes it keeps, bytes deleting it frees[, kind])``
        (called only when the pattern is under way; the variable is the one whose deletion
        frees more, else, where another name shares the growing object, the one that keeps
        more; the growth reported is of what it keeps). Returns the verdict line when this
        run completes the pattern. ``advise(variable, kind)``: the fix that fits what the variable
        is and what the cell does with it (``None``: the fix by its kind alone). ``trace(key, final)``:
        :meth:`._referrer_paths.GrowthTrace.step` bound to the notebook (called with ``holders``;
        ``final`` on the run that completes the pattern), naming what keeps the new storages that
        no listed name reaches."""
        key = hashlib.sha1(source.strip().encode()).hexdigest()
        runs = self._deltas.setdefault(key, [])
        if delta <= 0:
            runs.clear()
        runs.append(delta)  # the runs in a row that left more
        if delta <= 0 or len(runs) < 2:
            self._sizes.pop(key, None)
            return None
        sizes = {h[0]: (h[2], h[1], str(h[3]) if len(h) > 3 else "") for h in holders()}
        before = self._sizes.get(key)
        self._sizes[key] = sizes
        same = 1
        while same < len(runs) and runs[-1 - same] == delta:
            same += 1
        # growth that differs run to run (a cache keyed by each input's size): the last RUNS runs each grew, the
        # largest at most twice the smallest, and (below) one holder grew by most of this run's growth
        last = runs[-self.RUNS:]
        uneven = same < 2 and len(runs) >= self.RUNS and min(last) > 0 and min(last) * 2 >= max(last)
        final = not (len(runs) < self.RUNS or (same < 2 and not uneven) or before is None)
        traced = trace(key, final) if trace is not None else None
        if not final or before is None:
            return None
        kept = 0
        who, advice = "", ("no name that vramnb's listing walks grew by it (it may be held where the listing does not "
                           "reach: a function's cache or closure, another module's globals): %vram lists what holds "
                           "the memory")
        for i in (0, 1):
            grew = sorted(((int(sizes[n][i]) - int(before.get(n, (0, 0, ""))[i]), n) for n in sizes), reverse=True)
            if grew and grew[0][0] > 0:
                top = [n for g, n in grew if g == grew[0][0]]

                def below(n: str, m: str) -> bool:  # n is an entry of m (``m.attr``, ``m[3]``)
                    return n != m and n.startswith(m) and n[len(m):len(m) + 1] in (".", "[")

                # an entry that was there before and grew by as much as the name above it (inference._model_bank
                # of inference) is what grows: named instead of its parents; an entry new this run is not
                inner = [n for n in top if n in before and int(before[n][i]) > 0 and any(below(n, m) for m in top)
                         and 4 * (int(sizes[n][1]) - int(before[n][1])) >= 3 * delta]  # most of the run's growth
                top = [n for n in top if (not any(below(n, m) for m in sizes) or n in inner)
                       and not any(below(m, n) for m in inner)] or top
                shared = sorted(top) if i else [max(top, key=len)]
                kept = sizes[shared[0]][1] - before.get(shared[0], (0, 0, ""))[1]
                who = f": {' and '.join(shared[:3])} grew by {format_bytes(kept)}"
                advice = ((advise(shared[0], sizes[shared[0]][2]) if advise is not None else None)
                          or _regrowth_advice(shared[0], sizes[shared[0]][2]) or "see %vram for what it holds")
                break
        if uneven:
            by_name = kept if who else 0
            by_path = sum(h.nbytes for h in traced[0]) if traced is not None else 0
            if max(by_name, by_path) * 4 < delta * 3:
                return None  # no one holder grew by most of it: not shown to be the same growth each run
        if traced is not None:
            who, advice = _traced(traced, who, advice, delta)
        if uneven:
            shown = ", ".join(f"+{format_bytes(d)}" for d in last)
            return (f"each run of this cell leaves more ({shown} in the last {len(last)} runs in a row){who}: it keeps "
                    f"what each run makes ({advice})")
        runs_said = (f"{len(runs)} runs in a row" if same == len(runs)
                     else f"the last {same} of {len(runs)} runs in a row that grew")
        return (f"each run of this cell leaves {format_bytes(delta)} more ({runs_said}){who}: it keeps "
                f"what each run makes ({advice})")


def _regrowth_advice(name: str, kind: str) -> str | None:
    """The fix that fits what grew, by its kind (``None``: the general one)."""
    if kind in ("list", "dict", "deque", "set"):
        return f"{name} is added to on every run: empty it when done ({name}.clear()) or store less in it"
    if kind == "output history":
        return ("the output history (Out) keeps each run's result: end the cell with ';' so its value is not "
                "kept, or run %vram free")
    if kind == "Module":  # what inside it grows is not known here: its kinds named, none claimed
        return (f"what grows is held inside {name}: an attribute added to on every run (a list a forward hook fills: "
                f"remove the hook when done, handle.remove(), or empty the list), or its parameters' .grad carrying "
                "a graph (see %vram for its parts)")
    return None


def _traced(traced: Any, who: str, advice: str, delta: int) -> tuple[str, str]:
    """The verdict's holder and fix with what the referrer walk found: the paths that keep the new
    storages no listed name reaches (:class:`._referrer_paths.GrowthTrace`)."""
    holdings, unfound, rest = traced
    big = [h for h in holdings if h.nbytes * 8 >= delta]  # the paths that keep a real share of the growth
    extra = ""
    if unfound * 8 >= delta:
        import gc

        if not gc.isenabled():  # nothing collects cycles: the likeliest holder, said as it is
            extra += (f"; {format_bytes(unfound)} of this run's new storages is kept where no referrer path reaches a "
                      "name: objects in reference cycles, the autograd graph or objects outside Python; the garbage "
                      "collector is off (gc.disable()), so reference cycles are never freed: gc.enable(), or "
                      "gc.collect() after each step (%vram free shows what it frees)")
        else:
            extra += (f"; {format_bytes(unfound)} of this run's new storages is kept where no referrer path reaches a "
                      "name (reference cycles waiting for the garbage collector, the autograd graph or objects "
                      "outside Python)")
    if rest * 8 >= delta:
        extra += f"; {format_bytes(rest)} of smaller new storages was not followed"
    if not big:
        if not who and not unfound and not rest:  # the listing reaches every storage the run left
            return ": the names %vram lists keep it", "see %vram for what each holds"
        return who, advice + extra
    first = big[0]
    def keeps(h: Any) -> str:
        return "keep" if h.where.startswith("the keys of ") else "keeps"

    def more_each_run(h: Any) -> str:
        # a holder that replaces what it kept (a hook overwriting its dict's entries) keeps more of this run's new
        # storages than the cell grows by: those bytes are not a per-run growth
        if h.nbytes <= delta:
            return f"{h.where} {keeps(h)} {format_bytes(h.nbytes)} more each run"
        return (f"{h.where} {keeps(h)} {format_bytes(h.nbytes)} of what this run made (more than the "
                f"{format_bytes(delta)} a run grows by: it replaces some of what it kept before)")

    more = ", and ".join(more_each_run(h) + (f" ({h.advice})" if h.advice != first.advice else "") for h in big[1:3])
    said = more_each_run(first) + (f", and {more}" if more else "")
    if not who:
        return f": {said}", first.advice + extra
    return f"{who}; besides, {said}", f"{advice}; {first.advice}{extra}"
