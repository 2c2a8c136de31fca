"""IPython glue: ``%%vram``, ``%vram`` and the cell events behind ``%vram on``.

Thin by design: parse arguments (:mod:`vramnb._magic_args`), call
:mod:`vramnb._measure`, :mod:`vramnb._holders` and :mod:`vramnb._free`,
display the result. The cell body runs through IPython's own
``run_ast_nodes`` (:mod:`vramnb._cell_run`), so its value, ``Out[n]``,
namespace, top-level ``await``, exception and traceback are exactly what
IPython alone would have produced; only the body's statements are measured,
and the report is displayed after the cell's own outputs.
"""

from __future__ import annotations

import ast
import inspect
import keyword
import re
import sys
from typing import TYPE_CHECKING, Any

import torch
from IPython.core.error import InputRejected, UsageError
from IPython.core.displayhook import DisplayHook
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from ._errors import MissingDependencyError
from ._interrupt import held_back
from ._cell_run import Outcome, await_vram_cells, body_is_async, clean_tracebacks, prepare, run_nodes, run_sync
from ._free import free_hidden, hidden_holders, names_bound
from .diagnose import Regrowth
from .diagnose._kept_graphs import grad_graph_note, kept_graph_note, regrowth_advice
from .diagnose._leftovers import leftover_notes, reassigned_peak_note
from . import _magic_args as opts
from ._holders import HoldersReport, find_holders
from ._measure import _HISTORY, history, vram
from ._probe import CpuProbe, probe_for, resolve_device
from ._storages import ScanTable
from ._versions import versions

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

__all__ = ["InterruptedCellGate", "VramMagics"]


class CellInterrupted(InputRejected, KeyboardInterrupt):
    """Ctrl-C arrived while ``%vram on`` opened the cell's measurement, before the cell ran: the cell was
    not run. A ``KeyboardInterrupt`` (the kernel reports it as one); also IPython's ``InputRejected``, the one
    way an AST transformer stops a cell before it runs in every execution path (IPython records it as the
    cell's error before execution, and ipykernel's reply says so)."""


class InterruptedCellGate(ast.NodeTransformer):
    """An entry of ``shell.ast_transformers``. IPython runs the ``pre_run_cell`` callbacks, then parses and
    transforms the cell, then runs it; an exception a callback raises is printed and the cell runs anyway.
    ``%vram on`` opens the cell's measurement in ``pre_run_cell`` (a scan of live tensors, seconds at a
    million tensors): when Ctrl-C lands there, the callback sets :attr:`interrupted`, and this gate, the
    next step IPython takes, stops the cell with :class:`CellInterrupted`."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupted = False

    def visit(self, node: Any) -> Any:
        __tracebackhide__ = True  # noqa: F841 - IPython shows the message, not this frame
        if self.interrupted:
            self.interrupted = False
            raise CellInterrupted("the cell was interrupted before it ran (Ctrl-C while %vram on opened its "
                                  "measurement): none of it ran")
        return node

def _loop_running() -> bool:
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


_TIMING = re.compile(r"(^|[\s;(])%{1,2}(timeit|time)\b|\btimeit\.|\bperf_counter\(")


def times_itself(cell: str) -> bool:
    """Whether a cell times its own code (``%timeit``, ``%%time``, the ``timeit`` module,
    ``perf_counter``): its report then says what the CPU tracker's cost added.

    >>> times_itself("%timeit m(x)"), times_itself("y = m(x)")
    (True, False)
    """
    return bool(_TIMING.search(cell))


def _warn_unmeasured(what: str, e: BaseException, measured: bool = False) -> None:
    """One line on stderr where vramnb's own work failed around a cell that ran; ``measured``: the
    report was made before the failure (it is shown, without what came after)."""
    try:
        why = f"{type(e).__name__}: {e}"[:200]
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises
        why = type(e).__name__
    then = ("the report shown was made before it, without the notes that come after" if measured
            else "the cell ran unmeasured")
    print(f"vramnb: could not {what} ({why}); {then}", file=sys.stderr)


def _handled_frames() -> list[Any]:
    """The local variables' values of the user's function frames in the traceback of the
    exception being handled now (a failing cell's, read in the measurement's ``finally``),
    leaving no reference on the frames (:func:`vramnb._graph.frame_locals`)."""
    from ._graph import frame_locals as _frame_locals
    from .diagnose._postmortem import _user_frame

    tb = sys.exc_info()[2]
    out: list[Any] = []
    while tb is not None:
        f = tb.tb_frame
        if _user_frame(f) and f.f_code.co_flags & inspect.CO_OPTIMIZED:
            out.extend(v for _, v in _frame_locals(f))
        tb = tb.tb_next
    return out


@magics_class
class VramMagics(Magics):
    """``%%vram`` / ``%vram``; one instance per loaded extension."""

    shell: InteractiveShell  # always given: the extension is loaded into a shell (Magics allows None)

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self._pending: list[Any] = []
        self._depth = 0
        self._auto: dict[str, Any] | None = None
        self._auto_cm: Any = None
        self._auto_m: Any = None
        self._regrowth = Regrowth()
        self._auto_cell: int | None = None
        self._defaults: list[Any] = []
        self._auto_tb: Any = None
        self._auto_gauge: Any = None  # %vram on --live: the running cell's gauge
        self._bound: dict[str, int] = {}  # output-history names user code bound -> last cell
        # awaits the %%vram call of a cell with top-level await (see _cell_run)
        self.transformer = await_vram_cells(shell)
        self.gate = InterruptedCellGate()  # in shell.ast_transformers: stops a cell interrupted in pre_run_cell
        self._cpu_cell = False  # the running cell is measured on CPU from its first line to its last
        self._magic_only = False  # the running cell is one %vram line

    def _count(self) -> int:
        """The number of the cell being run, as IPython shows it (In[n]/Out[n]);
        IPython 9 increments ``execution_count`` before running a cell, 8 after."""
        return int(self.shell.displayhook.prompt_count)

    # -- events -------------------------------------------------------------
    def pre_run_cell(self, info: Any) -> None:
        self._depth += 1
        if self._depth > 1:  # a cell run from inside a cell: the outer measurement covers it
            return
        raw = (getattr(info, "raw_cell", "") or "").strip()
        self._cpu_cell = False
        # a cell of one %vram line runs none of the user's code: it leaves the tracker as it was
        self._magic_only = raw.startswith("%vram") and "\n" not in raw
        if self._auto is not None and not raw.startswith(("%vram", "%%vram", "%unload_ext", "%reload_ext")):
            try:
                self._start_auto(raw)
            except KeyboardInterrupt:
                # Ctrl-C during the start-of-cell scan: IPython's event manager would print it as an
                # "Error in callback" and run the cell anyway; the gate stops the cell instead
                self._abandon_auto()
                self.gate.interrupted = True

    def _start_auto(self, raw: str) -> None:
        """``%vram on``: open the cell's measurement (the scan of live tensors may take seconds and may be
        interrupted; what comes after it is set up whole, an interrupt there raised once it is)."""
        label = raw.splitlines()[0][:80] if raw else ""
        a = self._auto
        assert a is not None  # pre_run_cell checked
        cm = vram(a["device"], label=label, holders=self._holders_fn(a["device"], explain=True), names=self._users_names,
                  hidden=self._hidden_fn(a["device"]),
                  budget=a["budget"], reset_peak=a["reset_peak"], warn=False, timed=times_itself(raw))
        # an interrupt in its scan: the next scan walks everything again (StorageTracker.scan). The block is
        # kept before it opens and its measurement as it returns (no interrupt can land in between), so that
        # an interrupt right after it opened finds it to close (_abandon_auto)
        self._auto_cm, self._auto_m = cm, None
        self._auto_m = cm.__enter__()
        with held_back():
            self._auto_cell = self._count()
            self._cpu_cell = torch.device(a["device"]).type == "cpu"
            self._auto_tb = clean_tracebacks(self.shell)
            self._auto_tb.__enter__()
            self._auto_gauge = self._start_gauge(a["device"]) if a.get("live") and not a["quiet"] else None

    def _abandon_auto(self) -> None:
        """Close a cell's measurement without recording it (the cell was interrupted before it ran)."""
        with held_back():
            gauge, self._auto_gauge = self._auto_gauge, None
            if gauge is not None:
                gauge.stop()
            tb, self._auto_tb = self._auto_tb, None
            if tb is not None:
                tb.__exit__(None, None, None)
            cm, self._auto_cm = self._auto_cm, None
            m, self._auto_m = self._auto_m, None
            if cm is not None and m is not None:  # (a block whose start was interrupted took itself down)
                cm.__exit__(None, None, None)
                if m is not None and _HISTORY and _HISTORY[-1] is m.report:
                    _HISTORY.pop()
            self._auto_cell = None
            self._cpu_cell = False

    def _note_bound(self, code: Any, count: int | None) -> None:
        """Remember the output-history names user code binds (``%vram free`` leaves them)."""
        if count is None:
            return
        for name in names_bound(code):
            self._bound[name] = max(count, self._bound.get(name, -1))

    def post_run_cell(self, result: Any) -> None:
        info = getattr(result, "info", None)
        self._note_bound(getattr(info, "transformed_cell", None) or getattr(info, "raw_cell", "") or "",
                         getattr(result, "execution_count", None))
        self._depth = max(0, self._depth - 1)
        if self._depth > 0:
            return
        if result is not None and not result.success:
            # a %%vram body's error is recorded on the cell after run_cell_async
            # has set this from the magic's own (successful) return
            self.shell.last_execution_succeeded = False
        self.gate.interrupted = False  # a cell that never reached its AST transformers (a syntax error)
        cm, self._auto_cm = self._auto_cm, None
        m, self._auto_m = self._auto_m, None
        if cm is not None and m is not None:
            try:
                self._finish_auto(cm, m, result, info)
            except KeyboardInterrupt:  # Ctrl-C during the end-of-cell measurement: the cell itself has run
                with held_back():
                    tb, self._auto_tb = self._auto_tb, None
                    if tb is not None:
                        tb.__exit__(None, None, None)
                    gauge, self._auto_gauge = self._auto_gauge, None
                    if gauge is not None:
                        gauge.stop()
                    self._cpu_cell = False  # the next measured cell scans every live tensor
                print("vram: interrupted while measuring the end of the cell, after it ran: no report for this cell",
                      file=sys.stderr)
        self._vouch()
        pending, self._pending = self._pending, []
        for obj in pending:
            display(obj)

    def _finish_auto(self, cm: Any, m: Any, result: Any, info: Any) -> None:
        """``%vram on``: close the cell's measurement and show (or queue) its report."""
        tb, self._auto_tb = self._auto_tb, None
        if tb is not None:
            tb.__exit__(None, None, None)
        err = getattr(result, "error_in_exec", None)
        if err is not None:
            cm.__exit__(type(err), err, err.__traceback__)
        else:
            cm.__exit__(None, None, None)
        report = m.report
        report.cell = self._auto_cell
        self._note_between(report, self._auto["device"] if self._auto else None)
        self._note_regrowth(report, getattr(info, "raw_cell", "") or "", self._auto["device"] if self._auto else None)
        before = getattr(result, "error_before_exec", None)
        if before is not None and report.exception is None:
            report.exception = type(before).__name__
        gauge, self._auto_gauge = self._auto_gauge, None
        if gauge is not None:
            gauge.stop(report)  # the report replaces the gauge's line
        elif self._auto is not None and not self._auto["quiet"]:
            self._pending.append(report)

    def _vouch(self) -> None:
        """After a top-level cell: if it ran measured on CPU from its first line to its
        last, the CPU tracker saw everything it did, and the next measured cell scans
        only what is new (``StorageTracker.vouch``); after any other cell it scans
        every live tensor, since unmeasured code may have resized what existed."""
        from . import _tracker

        tracker = _tracker._CPU_TRACKER
        if tracker is None:
            return
        if self._cpu_cell:
            tracker.vouch()
        elif not self._magic_only:
            tracker.stale = True
        self._cpu_cell = self._magic_only = False

    def close(self) -> dict[str, Any] | None:
        """Stop an open automatic measurement without recording it (unload);
        return the ``%vram on`` settings (None when off) for a reload to keep."""
        auto = self._auto
        gauge, self._auto_gauge = self._auto_gauge, None
        if gauge is not None:
            gauge.stop()
        cm, self._auto_cm = self._auto_cm, None
        if cm is not None:
            tb, self._auto_tb = self._auto_tb, None
            if tb is not None:
                tb.__exit__(None, None, None)
            cm.__exit__(None, None, None)
            if self._auto_m is not None and _HISTORY and _HISTORY[-1] is self._auto_m.report:
                _HISTORY.pop()
        self._auto = None
        return auto

    def _show(self, obj: Any) -> None:
        """Display after the cell's own output (at post_run_cell) when inside a cell."""
        if self._depth > 0:
            self._pending.append(obj)
        else:
            display(obj)

    def _holders_fn(self, device: Any, limit: int = 3, hidden_too: bool = False, explain: bool = False,
                    entries: bool = False) -> Any:
        """A function giving ``(name, bytes it keeps, bytes deleting it frees, kind)`` of the ``limit``
        names of the notebook that hold the most on ``device``, then of up to ``limit`` others whose
        deletion alone frees the most (at least 1 MiB) (kind: ``Tensor``, ``Module``, ``list``...;
        ``hidden_too``: the out-of-sight holders as well, e.g. ``("(Out, _ __ ___)", …, "output history")``).
        ``explain``: the largest one's tuple has a fifth item, how it holds its bytes and the fix
        (:func:`vramnb.diagnose._holding.holding_note`; ``""`` where none applies). ``entries``: the
        listed names' entries follow as rows of their own, named by their path (``trainer.history``)."""
        def top() -> list[tuple[str, int, int, str]]:
            dev = resolve_device(device)
            # what deleting a name frees: not what the output history, a kept exception's frames
            # or the failing frames (an error being handled) also keep
            hidden = dict(hidden_holders(self.shell, dev))
            frames = _handled_frames()
            if frames:
                hidden["(the failing frames)"] = ("traceback frames", frames)
            rows = find_holders(self._users_names(), dev, hidden=hidden, limit=None, entries=entries)
            visible = [h for h in rows if hidden_too or not h.hidden]
            shown = visible[:limit]
            # then those whose deletion alone frees the most (an idle copy of a model beside the model in
            # use, which holds more but shares it with the optimizer and the loss): the fixes need them
            alone = sorted((h for h in visible[limit:] if h.unique >= 1 << 20), key=lambda h: -h.unique)[:limit]
            out: list[tuple[Any, ...]] = [(h.name, h.nbytes, h.unique, h.kind) for h in shown + alone]
            if entries:
                todo = [e for h in shown for e in h.entries]
                while todo:
                    e = todo.pop(0)
                    out.append((e.name, e.nbytes, e.unique, e.kind))
                    todo.extend(e.entries)
            if explain and shown and shown[0].nbytes >= 1 << 20:
                from .diagnose._holding import holding_note

                names = self._users_names()
                top = shown[0]
                note = holding_note(top.name, names[top.name], dev, names, top.nbytes) if top.name in names else None
                out[0] = (*out[0], note or "")
            return out

        return top

    def _note_regrowth(self, report: Any, source: str, device: Any) -> None:
        """The "grows on every re-run" verdict, with the variable that grew (scanned only
        once the same cell has left the same bytes twice); on CPU also the process's memory that
        grows outside tensors (:mod:`.diagnose._outside_growth`)."""
        if report.exception is not None or not source:
            return
        try:
            from .diagnose._outside_growth import OutsideGrowth

            self._outside = getattr(self, "_outside", None) or OutsideGrowth()
            # what glibc's malloc handed out shows growth that RSS hides where freed memory is reused
            line = self._outside.observe(source, (report.rss_start, report.malloc_used_start),
                                         (report.rss, report.malloc_used),
                                         (report.start_allocated, report.end_allocated))
            if line:
                report.notes.append(line)
        except Exception:  # noqa: BLE001 - a note must never break the cell
            pass
        try:
            names = self._users_names()

            def advise(name: str, kind: str) -> str | None:
                from .diagnose._hook_owners import hook_advice

                if name not in names:  # an entry (dataset.cache): what its name's object says of it, if anything
                    # (not by calling advise again: a closure naming itself is a cycle that keeps `names`, the
                    # notebook's variables, alive until gc runs)
                    name = re.split(r"[.\[]", name, maxsplit=1)[0]
                    if name not in names:
                        return None
                return hook_advice(name, names[name], names) or regrowth_advice(name, names[name], source,
                                                                                resolve_device(device), names)

            from .diagnose._referrer_paths import GrowthTrace

            self._growth_trace = getattr(self, "_growth_trace", None) or GrowthTrace()

            def trace(key: str, final: bool) -> Any:
                dev = resolve_device(device)
                hidden = [obj for _kind, obj in hidden_holders(self.shell, dev).values()]
                return self._growth_trace.step(key, final, names, hidden, dev, ignore=[self.shell.user_ns])

            note = self._regrowth.observe(source, report.delta_allocated,
                                          self._holders_fn(device, limit=50, hidden_too=True, entries=True),
                                          advise, trace)
        except Exception:  # noqa: BLE001 - a verdict must never break the cell
            note = None
        if note:
            report.notes.append(note)

    def _note_between(self, report: Any, device: Any) -> None:
        """Memory allocated after the last measured cell ended and before this one started (no cell's
        change shows it), with the live threads that keep what no name reaches
        (:mod:`.diagnose._between_cells`; the threads are walked only where it grew)."""
        last = getattr(self, "_last_end", None)
        cell = report.cell if type(report.cell) is int else None
        self._last_end = (report.device, report.end_allocated, cell)
        if last is None or last[0] != report.device or cell is None or last[2] is None:
            return
        try:
            from .diagnose._between_cells import MIN_GROWTH, between_cells_note, thread_holdings
            from ._holders import storages_held

            grew = report.start_allocated - last[1]
            if grew < MIN_GROWTH:
                return
            dev = resolve_device(device)
            holdings = thread_holdings(dev, set())
            if holdings:  # what the notebook's names reach is not the threads' to keep
                reached: set[int] = set()
                names = self._users_names()
                hidden = [obj for _kind, obj in hidden_holders(self.shell, dev).values()]
                for o in [*names.values(), *hidden]:
                    if type(o) in (type(sys), type(lambda: 0), type):
                        continue
                    try:
                        reached.update(storages_held(o, dev))
                    except Exception:  # noqa: BLE001 - an object the walk cannot read
                        continue
                holdings = thread_holdings(dev, reached)
            note = between_cells_note(grew, cell == last[2] + 1, last[2], holdings)
        except Exception:  # noqa: BLE001 - a verdict must never break the cell
            note = None
        if note:
            report.notes.append(note)

    def _note_kept_graphs(self, m: Any, cell: str) -> None:
        """With --breakdown: the names that keep an autograd graph after the cell, and the fix."""
        att = getattr(m, "attribution", None)
        if att is None:
            return
        try:
            note = kept_graph_note(self._users_names(), cell, att.key, att.backward_runs)
        except Exception:  # noqa: BLE001 - a verdict must never break the cell
            note = None
        if note:
            m.report.notes.append(note)
        try:
            from .diagnose._cell_code import summed_parts_note

            acts = sum(r[3] for r in m.report.sources or [] if r[0] == "activations")
            note = summed_parts_note(self._users_names(), cell, acts, att.backward_runs)
        except Exception:  # noqa: BLE001 - a verdict must never break the cell
            note = None
        if note:
            m.report.notes.append(note)
        try:
            temps = sum(r[3] for r in m.report.sources or [] if r[0] == "temporaries")
            note = reassigned_peak_note(getattr(att, "old_at_peak", {}), temps, cell)
        except Exception:  # noqa: BLE001 - a verdict must never break the cell
            note = None
        if note:
            m.report.notes.append(note)

    def _note_leftovers(self, m: Any, cell: str, device: Any) -> None:
        """With --breakdown, after a cell that raised nothing: what it left alive that its code may not
        need (a loop's names, a checkpoint's second copy of parameters, an optimizer whose model was
        deleted, a small view of a large storage), with the ``del`` that frees it."""
        if getattr(m, "attribution", None) is None or m.report.exception is not None:
            return
        names = self._users_names()

        def frees() -> dict[str, int]:
            dev = resolve_device(device)
            rows = find_holders(names, dev, hidden=dict(hidden_holders(self.shell, dev)), limit=None)
            out: dict[str, int] = {}
            todo = [h for h in rows if not h.hidden]
            while todo:  # each name, and each entry beneath it (`d['k']`: what deleting that entry alone frees)
                h = todo.pop()
                out[h.name] = h.unique
                todo += h.entries
            return out

        try:
            from .diagnose._referrer_paths import kept_elsewhere

            notes = leftover_notes(names, cell, frees, str(resolve_device(device).type),
                                   lambda asked: kept_elsewhere(names, asked, ignore=[self.shell.user_ns]))
        except Exception:  # noqa: BLE001 - a verdict must never break the cell
            notes = []
        m.report.notes.extend(notes)

    def _users_names(self) -> dict[str, Any]:
        """The notebook's own names: ``user_ns`` less what IPython put there (``Out``, ``_``, ``_3``,
        ``In``...: their memory is the out-of-sight output history, :func:`hidden_holders`)."""
        hid = self.shell.user_ns_hidden
        return {n: v for n, v in list(self.shell.user_ns.items()) if not (n in hid and hid[n] is v)}

    def _hidden_fn(self, device: Any) -> Any:
        def hidden() -> list[tuple[str, int]]:
            """What ``%vram free`` would release, by kind (output history, a kept exception's
            frames): each kind's objects together, against every name of the notebook (a tensor
            a variable also holds is not freed); the first row is ``("total", bytes)`` of all kinds
            together (a tensor two kinds hold counts once)."""
            dev = resolve_device(device)
            kinds: dict[str, list[Any]] = {}
            for name, (kind, obj) in hidden_holders(self.shell, dev).items():
                kinds.setdefault("last exception" if name == "last exception" else kind, []).append(obj)
            if not kinds:
                return []
            names = self._users_names()

            def unique(groups: dict[str, tuple[str, Any]]) -> dict[str, int]:
                hits = find_holders(names, dev, hidden=groups, entries=False)
                return {k: next((h.unique for h in hits if h.hidden and h.name == f"({k})"), 0) for k in groups}

            # each kind against the notebook's names and the other kinds (one walk); then all kinds as one
            rows = unique({k: (k, objs) for k, objs in kinds.items()})
            total = unique({"total": ("total", [o for objs in kinds.values() for o in objs])})["total"]
            if not total:
                return []
            by_kind = sorted(((k, b) for k, b in rows.items() if b), key=lambda r: -r[1])
            return [("total", total)] + by_kind

        return hidden

    # -- the magic ----------------------------------------------------------
    @no_var_expand
    @magic_arguments()
    @argument("command", nargs="?", help="line magic only: free | on | off | history | panel | estimate | fit "
              "(none: what holds the memory now)")
    @argument("names", nargs="*", help="%%vram panel|estimate|fit MODEL BATCH [LOSS_FN] [OPTIMIZER]: names of notebook variables")
    @argument("--target", default=None, metavar="GPU", help="estimate, fit: a card (H100, 'RTX 4090') or a size (24GiB); "
              "default: the GPU present, else H100")
    @argument("--recipe", default=None, action="append", metavar="SETTINGS",
              help="estimate: techniques (fit: what your loop does now), "
                   "e.g. --recipe \"precision=bf16,checkpointing=every block\" (repeatable)")
    @argument("--batch-size", default=None, type=int, metavar="N", help="estimate, fit: for batch size N")
    @argument("--max-batch", action="store_true", help="estimate: the largest batch size that fits the target")
    @argument("--margin", default=None, type=float, metavar="FRACTION", help="estimate, fit: fraction of the card to keep free")
    @argument("-d", "--device", default=None, help="cpu, cuda or cuda:N (default: the current CUDA device, else cpu)")
    @argument("-q", "--quiet", action="store_true", help="record (or return) the report but display nothing")
    @argument("--budget", default=None, metavar="SIZE", help="warn when the peak would not fit a card of SIZE, e.g. 24GiB")
    @argument(
        "--no-reset",
        action="store_true",
        help="leave the device's global peak counter alone (by default it is reset at the cell's start "
        "to read the cell's own peak; the older peak is kept in vramnb.session_peak())",
    )
    @argument("-o", "--out", default=None, metavar="VAR", help="store the report in variable VAR")
    @argument(
        "--breakdown",
        action="store_true",
        help="label the cell's memory by source: parameters, buffers and gradients of each nn.Module "
        "variable, state of each optimizer, activations, temporaries",
    )
    @argument("--live", action="store_true", help="%%%%vram, %%vram on: a one-line gauge (allocated, reserved, peak so far, "
              "a sparkline) updated while the cell runs, replaced by the report (Jupyter front-ends; a terminal "
              "gets the report only)")
    @argument("-h", "--help", action="store_true", help="show this help")
    @line_cell_magic
    def vram(self, line: str = "", cell: str | None = None) -> Any:
        """Measure the device memory a cell uses, or show what holds it.

        Cell magic: run the cell as IPython would (top-level await, `;`,
        Out[n], its traceback) and report, after its output, Δ allocated
        (end − start), the cell's peak above its start, reserved memory and
        its change, reserved − allocated, non-PyTorch memory (CUDA context and
        library workspaces) and wall time. On CPU (no CUDA, or -d cpu) the
        exact storage tracker measures. By default the device's peak counter
        is reset at the cell's start to read the cell's own peak (--no-reset
        keeps it; the older peak is kept in vramnb.session_peak()). --budget
        needs a unit (24GiB, "24 GiB", 512MB, 100B).

            %%vram --budget 24GiB
            loss = model(x).sum(); loss.backward()

        Line magic:

            %vram            what holds the memory now: device state and the
                             variables, largest first (shared storage counted once)
            %vram free       release output history and the last exception's
                             frames, gc.collect(), empty the CUDA cache; report
                             what came back per source
            %vram on         measure every cell from now on (-d, -q, --budget,
                             --no-reset apply); %vram off stops
            %vram history    every measured cell as a table (vramnb.history())
            %vram panel model batch [loss_fn] [optimizer]
                             the widget panel on notebook variables (vramnb.panel)
            %vram estimate model batch [loss_fn] [optimizer] --target A100 --recipe precision=bf16
                             predict the step on a card you do not have
                             (vramnb.estimate; --max-batch: vramnb.max_batch_size)
            %vram fit model batch [loss_fn] [optimizer] --target "RTX 4090" --batch-size 32
                             the fastest combination of techniques that fits the card,
                             with the code to apply it (vramnb.fit; --recipe: what
                             your loop does now)
        """
        __tracebackhide__ = True
        silenced = cell is None and line.rstrip().endswith(";")  # `%vram;`, as IPython silences a value
        if silenced:
            line = line.rstrip()[:-1]
        args = opts.parse(self.vram.parser, line, cell, self._defaults)
        if args.help:
            print(self.vram.__doc__)
            return None
        if args.out is not None and (not args.out.isidentifier() or keyword.iskeyword(args.out)
                                     or args.out in self.shell.user_ns_hidden):
            raise UsageError(f"-o {args.out!r}: give a valid variable name that is not one of IPython's own")
        if cell is None:
            result = self._line(args)
            return None if silenced else result
        if args.command is not None or args.names:
            extra = " ".join([args.command or "", *args.names]).strip()
            ok = ", ".join(opts.FLAGS[k] for k in sorted(opts.OPTIONS["cell"]))
            raise UsageError(f"%%vram takes options only ({ok}), not {extra!r}: put the statement in the cell body")
        opts.check_options(args, "cell")
        return self._cell(args, cell)

    def _cell(self, args: Any, cell: str) -> Any:
        """Run the body as IPython runs a cell (see :mod:`vramnb._cell_run`),
        measuring only its statements; a coroutine when the body has top-level
        ``await`` (the cell's transformed code awaits it)."""
        __tracebackhide__ = True
        dev = opts.device(args.device)
        budget = opts.budget(args.budget)
        shell = self.shell
        count = self._count()
        outcome = Outcome()
        prepared = prepare(shell, cell, count, outcome)
        if prepared is None:  # not run: IPython has shown why, as for a plain cell
            self._record(outcome)
            return None
        name, nodes = prepared
        self._note_bound(nodes, count)
        info = getattr(getattr(shell.displayhook, "exec_result", None), "info", None)
        if getattr(info, "silent", False) or DisplayHook.semicolon_at_end_of_expression(cell):
            interactivity = "none"  # what the displayhook's `;` check does for a plain cell
        else:
            interactivity = shell.ast_node_interactivity
        label = next((ln.strip() for ln in cell.splitlines() if ln.strip()), "")[:80]
        if self._depth == 1 and dev.type == "cpu":
            self._cpu_cell = True
        cm = vram(dev, reset_peak=not args.no_reset, budget=budget, label=label, holders=self._holders_fn(dev, explain=True),
                  names=self._users_names,
                  hidden=self._hidden_fn(dev), warn=False,
                  breakdown=shell.user_ns if args.breakdown else None, timed=times_itself(cell))

        async def body() -> None:
            __tracebackhide__ = True
            m: Any = None
            try:
                m = cm.__enter__()
            except Exception as e:  # noqa: BLE001 - vramnb's own start failed (memory pressure): the cell
                _warn_unmeasured("start measuring", e)  # runs all the same, unmeasured
                self._cpu_cell = False
            err: BaseException | None = None
            shown: list[Any] = []
            gauge = self._start_gauge(dev) if args.live and m is not None and not args.quiet else None
            try:
                with clean_tracebacks(shell):
                    await run_nodes(shell, nodes, name, interactivity, outcome, shown)
            except BaseException as e:  # run_ast_nodes shows and records the body's own errors
                err = e
                raise
            finally:
                err = err if err is not None else outcome.error
                if m is not None:
                    try:
                        cm.__exit__(type(err) if err is not None else None, err,
                                    err.__traceback__ if err is not None else None)
                    except Exception as e:  # noqa: BLE001 - the cell's result and error stay the user's
                        if e is not err:
                            _warn_unmeasured("finish the report", e, measured=m.report is not None)
                for value in shown:  # the final value, displayed outside the measurement
                    sys.displayhook(value)
                self._record(outcome)
                if m is not None and m.report is not None:
                    m.report.cell = count
                    self._note_between(m.report, dev)
                    self._note_regrowth(m.report, cell, dev)
                    self._note_kept_graphs(m, cell)
                    self._note_leftovers(m, cell, dev)
                    if args.out:
                        shell.user_ns[args.out] = m.report
                    if gauge is not None:
                        gauge.stop(m.report)  # the report replaces the gauge's line
                    elif not args.quiet:
                        self._show(m.report)
                elif gauge is not None:
                    gauge.stop()

        if not body_is_async(shell, cell):
            return run_sync(body())
        if getattr(shell, "trio_runner", None) is not None or _loop_running():
            return body()  # awaited by the cell (see await_vram_cells), or by whoever called the magic
        return shell.loop_runner(body())  # called from code that does not await: run it as IPython would

    def _start_gauge(self, device: Any) -> Any:
        """A started :class:`vramnb._live.LiveGauge` for ``device``, or ``None`` where no front-end
        updates an output in place (a terminal, a script) or it could not start."""
        from ._live import LiveGauge, can_update_in_place

        if not can_update_in_place(self.shell):
            return None
        probe = probe_for(resolve_device(device))

        def read() -> tuple[int, int | None, int]:
            s = probe.sample(device_info=False, sync=False)
            return s.allocated, s.reserved, s.peak

        gauge = LiveGauge(str(device), read)
        try:
            gauge.start()
        except Exception as e:  # noqa: BLE001 - the cell runs all the same, with its report at the end
            _warn_unmeasured("start the live gauge", e)
            return None
        return gauge

    def _record(self, outcome: Outcome) -> None:
        """The body's error is the cell's: on the cell's ExecutionResult (what
        ipykernel replies, what post_run_cell sees), as run_cell_async records it."""
        result = getattr(self.shell.displayhook, "exec_result", None)
        if result is None or outcome.error is None:
            return
        if outcome.error_in_exec is not None and result.error_in_exec is None:
            result.error_in_exec = outcome.error_in_exec
        if outcome.error_before_exec is not None and result.error_before_exec is None:
            result.error_before_exec = outcome.error_before_exec
            store = getattr(self.shell, "_format_exception_for_storage", None)
            exceptions = getattr(self.shell.history_manager, "exceptions", None)
            if store is not None and isinstance(exceptions, dict) and getattr(result.info, "store_history", False):
                exceptions[result.execution_count] = store(outcome.error_before_exec)

    def _line(self, args: Any) -> Any:
        cmd = args.command
        if cmd is not None and cmd not in opts.COMMANDS:
            raise UsageError(f"unknown %vram command {cmd!r}; valid: {', '.join(opts.COMMANDS)} (or none)")
        opts.check_options(args, cmd)
        if cmd == "off":
            self._auto = None
            print("vram: automatic per-cell reports off")
            return None
        if cmd == "on":
            dev = opts.device(args.device)
            self._auto = {"device": str(dev), "quiet": args.quiet, "budget": opts.budget(args.budget),
                          "reset_peak": not args.no_reset, "live": args.live}
            print(f"vram: reporting every cell on {dev} (%vram off to stop)")
            return None
        if args.names and cmd not in ("panel", "estimate", "fit"):
            raise UsageError(f"unexpected {' '.join(args.names)!r} after %vram {cmd or ''}".rstrip())
        if cmd == "panel":
            return self._panel(args)
        if cmd == "estimate":
            return self._estimate(args)
        if cmd == "fit":
            return self._fit(args)
        if cmd == "history":
            result: Any = history()
        elif cmd == "free":
            result = free_hidden(self.shell, opts.device(args.device), self._bound)
        else:
            try:
                result = self.state(opts.device(args.device))
            except MemoryError:  # right after running out of memory, under a process limit
                raise UsageError("not enough memory left to walk the notebook's objects (MemoryError): run "
                                 "%vram free first (it needs none), then %vram again") from None
        if args.out:
            self.shell.user_ns[args.out] = result
        return None if args.quiet else result

    def _step_args(self, args: Any) -> tuple[Any, Any, Any, Any]:
        """MODEL BATCH [LOSS_FN] [OPTIMIZER] from notebook variable names."""
        if not 2 <= len(args.names) <= 4:
            raise UsageError(f"usage: %vram {args.command} MODEL BATCH [LOSS_FN] [OPTIMIZER] (names of notebook variables)")
        ns = self.shell.user_ns
        omit = ("leave it out: %vram {cmd} MODEL BATCH [OPTIMIZER] runs the model's own loss (the output if it is "
                "a scalar, else its .loss, as Hugging Face models return)")
        for n in args.names[2:]:
            if n == "None" or (n in ns and ns[n] is None):
                raise UsageError(f"{'None' if n == 'None' else n + ' is None'}: no loss function or optimizer to "
                                 f"pass; for no loss function, " + omit.format(cmd=args.command))
        missing = [n for n in args.names if n not in ns]
        if missing:
            raise UsageError(f"no variable named {missing[0]!r} in the notebook")
        objs = [ns[n] for n in args.names]
        model, batch = objs[0], objs[1]
        loss_fn = optimizer = None
        for name, extra in zip(args.names[2:], objs[2:]):
            if isinstance(extra, torch.optim.Optimizer) or (callable(extra) and opts.positional(extra) == 1):
                kind = "optimizer"  # an optimizer, or a function params -> optimizer
            elif callable(extra):
                kind = "loss function"
            else:
                raise UsageError(f"{name} ({type(extra).__name__}) is neither a loss function nor an optimizer")
            if (optimizer if kind == "optimizer" else loss_fn) is not None:
                raise UsageError(f"two {kind}s given ({name} is the second): pass one")
            if kind == "optimizer":
                optimizer = extra
            else:
                loss_fn = extra
        return model, batch, loss_fn, optimizer

    def _step_names(self, args: Any, loss_fn: Any, optimizer: Any) -> dict[str, str]:
        """The notebook's names for the step's objects, for the code a plan prints."""
        names = {"model": args.names[0], "batch": args.names[1]}
        for name in args.names[2:]:
            obj = self.shell.user_ns[name]
            names["optimizer" if obj is optimizer else "loss_fn"] = name
        return names

    def _estimate(self, args: Any) -> Any:
        model, batch, loss_fn, optimizer = self._step_args(args)
        from .predict._batch_search import max_batch_size
        from .predict._estimate import estimate

        if args.max_batch and args.batch_size is not None:
            raise UsageError("--max-batch searches the batch size: leave out --batch-size")
        kw: dict[str, Any] = {"recipe": opts.recipe(args.recipe), "target": opts.unquote(args.target)}
        if args.margin is not None:
            kw["margin"] = args.margin
        try:
            if args.max_batch:
                result: Any = max_batch_size(model, batch, loss_fn, optimizer, **kw)
            else:
                result = estimate(model, batch, loss_fn, optimizer, batch_size=args.batch_size, **kw)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if args.out:
            self.shell.user_ns[args.out] = result
        return None if args.quiet else result

    def _fit(self, args: Any) -> Any:
        model, batch, loss_fn, optimizer = self._step_args(args)
        from .planner._fit import fit

        recipes = opts.recipe(args.recipe)
        kw: dict[str, Any] = {"target": opts.unquote(args.target), "batch_size": args.batch_size,
                              "recipe": recipes, "progress": not args.quiet}
        if args.margin is not None:
            kw["margin"] = args.margin
        kw["names"] = self._step_names(args, loss_fn, optimizer)
        try:
            result = fit(model, batch, loss_fn, optimizer, **kw)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if args.out:
            self.shell.user_ns[args.out] = result
        return None if args.quiet else result

    def _panel(self, args: Any) -> Any:
        model, batch, loss_fn, optimizer = self._step_args(args)
        from ._panel import panel

        try:
            p = panel(model, batch, loss_fn, optimizer)
        except (ValueError, MissingDependencyError) as e:  # a missing extra: what to install, no traceback
            raise UsageError(str(e)) from None
        if args.out:
            self.shell.user_ns[args.out] = p
        return None

    def state(self, dev: torch.device) -> HoldersReport:
        """What holds memory on ``dev`` now."""
        probe = probe_for(dev)
        # what the scan read of the plain tensors it found unchanged, for the listing (it holds
        # those tensors: emptied right after, also when the listing raises)
        known = ScanTable(probe.tracker.device_type) if isinstance(probe, CpuProbe) else None
        try:
            if isinstance(probe, CpuProbe):
                probe.tracker.scan(table=known)
            sample = probe.sample(device_info=probe.active())
            # the user's own names; IPython's (Out, _, _3) are the out-of-sight output history holder
            hidden = hidden_holders(self.shell, dev)
            rows = find_holders(self._users_names(), dev, hidden=hidden, known=known)
        finally:
            if known is not None:
                known.clear()
        notes = []
        try:
            note = grad_graph_note(self._users_names(), dev)
            if note:
                notes.append(note)
        except Exception:  # noqa: BLE001 - a verdict must never break %vram
            pass
        try:
            from .diagnose._state_graphs import state_graph_notes

            notes += state_graph_notes(self._users_names())
        except Exception:  # noqa: BLE001 - a verdict must never break %vram
            pass
        try:
            from .diagnose._holding import holding_notes

            notes += holding_notes(self._users_names(), dev, list(rows))
        except Exception:  # noqa: BLE001 - a verdict must never break %vram
            pass
        if sample.allocated is not None and sample.allocated > rows.total:  # held by no name: a leaf .grad cycle?
            try:
                from .diagnose._grad_cycles import leaf_cycle_note

                note = leaf_cycle_note(self._users_names(), dev, hidden)
                if note:
                    notes.append(note)
            except Exception:  # noqa: BLE001 - a verdict must never break %vram
                pass
            try:
                from .diagnose._caches import cache_note

                note = cache_note(self._users_names(), dev)
                if note:
                    notes.append(note)
            except Exception:  # noqa: BLE001 - a verdict must never break %vram
                pass
        workspaces = 0
        if dev.type == "cuda" and probe.active():
            from .diagnose._one_time import cublas_workspaces

            try:
                workspaces = sum(cublas_workspaces(dev.index or 0))
            except Exception:  # noqa: BLE001 - a reading of the allocator must never break %vram
                workspaces = 0
        return HoldersReport(
            workspaces=workspaces,
            rounding=max(0, rows.blocks - rows.total),
            notes=notes,
            versions=versions(dev),
            device=str(dev),
            holders=rows,
            total=rows.total,
            out_of_sight=rows.out_of_sight,
            allocated=sample.allocated,
            reserved=sample.reserved,
            total_memory=sample.total,
            free=sample.free,
            non_pytorch=sample.non_pytorch,
            method=probe.method,
        )
