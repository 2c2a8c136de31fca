"""Process memory that grows outside tensors on every re-run of a cell (CPU).

A cell that leaves pyplot figures open, or runs under a ``torch.profiler`` that was started and never
stopped, grows the process's memory on every run while the tensors it leaves stay the same: the
storage tracker sees nothing. Where the same cell's runs each grow the process by at least
:data:`MIN_GROWTH` more than its allocated tensor bytes (two runs in a row), the Python objects are
counted by type (one pass over ``gc.get_objects()``, only then); on the next such run the types whose
count grew are named, and two holders that keep memory outside any tensor are asked directly: pyplot's
open figures (``plt.get_fignums()``, only where ``matplotlib.pyplot`` is already imported) and
PyTorch's profiler (``torch.autograd.profiler._is_profiler_enabled``). Nothing of the user's runs:
types are read with ``type()``, never ``__class__``.

The process's growth is that of the bytes glibc's malloc has handed out (which counts what reuses memory
freed earlier, already resident, and so leaves the RSS where it was, and leaves out memory freed but kept
by the allocator, which the RSS counts), less the tracked tensors' growth; without glibc, the RSS's, only
where the tensors did not grow (by :data:`MIN_GROWTH`): new tensors' pages grow it by more than their
bytes (huge pages, rounding). It must hold both within the run and since the previous run's end, so that
memory alive only while a run ends does not count.
"""

from __future__ import annotations

import gc
import hashlib
import sys
from collections import Counter

from .._units import format_bytes

__all__ = ["OutsideGrowth", "MIN_GROWTH"]

#: the RSS growth beyond the tensors' own, per run, that counts (the allocator's and the interpreter's noise is less)
MIN_GROWTH = 8 << 20

#: packages whose objects are the notebook's own record of each run, never what a cell grows
_NOTEBOOK = frozenset({"vramnb", "IPython", "ipykernel", "ipywidgets", "comm", "traitlets"})


def _type_counts() -> Counter[str]:
    counts: Counter[str] = Counter()
    for o in gc.get_objects():
        tp = type(o)
        counts[f"{tp.__module__}.{tp.__qualname__}"] += 1
    return counts


def _known_holders(traced: int = 0) -> list[str]:
    """Holders outside tensors asked directly: pyplot's open figures, a running profiler, and TorchScript's
    compilation unit where the cell traced (``traced``: calls of ``torch.jit.trace`` since its previous run)."""
    out = []
    if traced:
        out.append(f"torch.jit.trace ran {traced} time{'s' if traced != 1 else ''} since this cell's previous run, and "
                   "tracing from Python registers each traced graph and module class in TorchScript's global "
                   "compilation unit, which keeps them for as long as the process lives: trace once, outside the "
                   "loop, and reuse the traced module (or torch.jit.save it and torch.jit.load it once)")
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        try:
            n = len(plt.get_fignums())
        except Exception:  # noqa: BLE001
            n = 0
        if n >= 3:
            out.append(f"pyplot keeps {n} figures open: a figure made with plt.figure()/plt.subplots() stays in pyplot's "
                       "list, with its canvas and images, until it is closed (savefig does not close it): "
                       "plt.close(fig) once it is saved or shown, or plt.close('all')")
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            on = bool(torch.autograd.profiler._is_profiler_enabled)
        except Exception:  # noqa: BLE001
            on = False
        if on:
            out.append("a PyTorch profiler is running: it keeps a record of every operator's events in memory until it "
                       "stops: prof.stop() (or run it as `with torch.profiler.profile(...) as prof:`, which stops it)")
    return out


def _outside(process: tuple[int | None, int | None], allocated: int, tensors_grew: bool) -> tuple[int | None, int | None]:
    """The process's bytes outside tensors by one measure: what glibc's malloc handed out where it can be
    read (it counts what a run keeps whether or not the pages were resident already, and not what was
    freed and kept by the allocator), else the RSS, and the RSS only where the tensors did not grow (it
    also grows by how the pages of new tensors are mapped: huge pages, page rounding)."""
    rss, used = process
    if used is not None:
        return None, used - allocated
    return (None if rss is None or tensors_grew else rss - allocated), None


def _growth(before: tuple[int | None, ...], after: tuple[int | None, ...]) -> int | None:
    """The larger growth of the measures both sides have, ``None`` where none has both."""
    got = [a - b for b, a in zip(before, after, strict=True) if a is not None and b is not None]
    return max(got) if got else None


class OutsideGrowth:
    """Per cell source: the runs in a row whose process memory grew beyond their tensors, the level
    outside tensors at the last run's end, and the last type counts."""

    def __init__(self) -> None:
        self._runs: dict[str, int] = {}
        self._counts: dict[str, Counter[str]] = {}
        self._ends: dict[str, tuple[int | None, int | None]] = {}
        self._traced: dict[str, int] = {}  # _tracker_patch.TRACED at the end of each source's last run

    def observe(self, source: str, start: tuple[int | None, int | None], end: tuple[int | None, int | None],
                allocated: tuple[int, int]) -> str | None:
        """The line for this run of ``source``, or ``None``: where it is the third run in a row whose
        process memory grew by :data:`MIN_GROWTH` more than its tensors did.

        ``start`` / ``end``: the process's ``(RSS, bytes glibc's malloc handed out)`` at the run's start and
        end (bytes, ``None`` where unreadable); ``allocated``: tracked tensor bytes at the start and end. A
        run counts where both its own growth and the growth since the previous run's end (outside tensors)
        reach :data:`MIN_GROWTH`: memory that is only alive while the run ends (a scan's buffers) counts in
        the first and cancels in the second."""
        key = hashlib.sha1(source.strip().encode()).hexdigest()
        from .._tracker_patch import TRACED

        traced = TRACED[0] - self._traced.get(key, TRACED[0])
        self._traced[key] = TRACED[0]
        while len(self._traced) > 16:
            del self._traced[next(iter(self._traced))]
        tensors_grew = allocated[1] - allocated[0] >= MIN_GROWTH
        level = _outside(end, allocated[1], tensors_grew)
        within = _growth(_outside(start, allocated[0], tensors_grew), level)
        prev = self._ends.pop(key, None)
        self._ends[key] = level
        while len(self._ends) > 16:
            del self._ends[next(iter(self._ends))]
        since = _growth(prev, level) if prev is not None else within  # where the tensors grew: malloc's only
        if within is None or since is None or min(within, since) < MIN_GROWTH:
            self._runs.pop(key, None)
            self._counts.pop(key, None)
            return None
        grown = min(within, since)
        runs = self._runs[key] = self._runs.get(key, 0) + 1
        if runs < 2:
            return None
        counts = _type_counts()
        before = self._counts.get(key)
        self._counts[key] = counts
        while len(self._counts) > 4:
            del self._counts[next(iter(self._counts))]
        if before is None:
            return None
        # not the notebook's own records of each run (vramnb's reports, IPython's history and outputs)
        grew = sorted(((n - before.get(t, 0), t) for t, n in counts.items()
                       if n > before.get(t, 0) and t.split(".")[0] not in _NOTEBOOK), reverse=True)
        # a library's or the user's own types first (a matplotlib type says more than a dict), then the standard ones
        std = getattr(sys, "stdlib_module_names", frozenset()) | {"builtins"}
        grew = [g for g in grew if g[1].split(".")[0].lstrip("_") not in std][:4] + \
            [g for g in grew if g[1].split(".")[0].lstrip("_") in std]
        shown = ", ".join(f"{t.removeprefix('builtins.')} +{d:,}" for d, t in grew[:5])
        line = (f"each run of this cell grows the process's memory outside tensors ({runs} runs in a row, "
                f"{format_bytes(grown)} beyond its tensors this run): objects that grew "
                f"in number since the last run: {shown or 'none by count'}")
        known = _known_holders(traced)
        return line + ("; " + "; ".join(known) if known else
                       "; %vram lists only tensors: these objects hold memory of their own (arrays, buffers, records)")
