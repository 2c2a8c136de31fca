"""Measure a block of code: :func:`vram`, the session history and session peaks.

This is the library form of ``%%vram`` (the magic is a thin layer over it)::

    with vramnb.vram() as m:
        loss = model(x).sum(); loss.backward()
    print(m.report)          # Δ allocated +… · peak … on cuda:0

**Peak counters.** The device's peak counter is one global per device
(PyTorch issue 16266). By default the block's own peak is read by resetting
that counter at the start (``torch.cuda.reset_peak_memory_stats``); the peak it
held before is folded into :func:`session_peak` first, so nothing is lost. With
``reset_peak=False`` the counter is left alone and the block's peak is exact
only if it rose above the older peak; otherwise it is reported as a lower
bound. A measurement nested inside another (``with vram():`` in a ``%%vram``
cell) resets the counter too: the peak it held then is handed to every
measurement running around it, so peaks nest exactly (on CPU and CUDA). A
reset by other code during the block is detected and the peak is
marked as a lower bound.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ._cell_breakdown import CellAttribution
from ._interrupt import held_back
from ._oom import is_oom, message, requested_bytes
from ._versions import versions
from .diagnose import OOMState, install_cuda_observer, reserved_growth, verdict
from .diagnose._autocast_cache import CACHE_ROW, CastCache, CastMode, cache_note
from ._tracker_patch import TRACED, _exit_mode, jit_trace_aside
from .diagnose._one_time import new_workspaces, outside_growth, workspace_note
from .diagnose._postmortem import failing_code, listening, process_limit
from ._process import malloc_used, process_memory, process_rss
from ._probe import CpuProbe, CudaProbe, probe_for, resolve_device
from ._render import Rendered, Table, dataframe
from ._report import CellReport, OOMInfo
from ._units import format_bytes, format_delta, format_seconds, parse_size

__all__ = ["vram", "Measurement", "history", "History", "session_peak", "clear_history"]

_HISTORY: list[CellReport] = []
_SESSION_PEAK: dict[str, int] = {}


def session_peak(device: str | None = None) -> int:
    """The highest allocated bytes seen on ``device`` (default: the default
    device) across every measurement this session, including peaks that were
    in the device's counter before vramnb reset it."""
    dev = str(resolve_device(device))
    return _SESSION_PEAK.get(dev, 0)


def _fold_peak(device: str, value: int) -> None:
    if value > _SESSION_PEAK.get(device, 0):
        _SESSION_PEAK[device] = value


@contextlib.contextmanager
def _reset_watch() -> Iterator[list[int]]:
    """Count calls to the C binding behind ``torch.cuda.reset_peak_memory_stats``
    (and ``reset_max_memory_allocated``, which calls it) while the block runs."""
    calls = [0]
    name = "_cuda_resetPeakMemoryStats"
    original = getattr(torch._C, name, None)
    if original is None:
        yield calls
        return

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    setattr(torch._C, name, counting)
    try:
        yield calls
    finally:
        setattr(torch._C, name, original)


@dataclass
class Measurement:
    """A running or finished measurement; ``report`` is set when the block ends."""

    device: torch.device
    reset_peak: bool = True
    budget: int | None = None
    label: str = ""
    holders: Callable[[], list[tuple[str, int]]] | None = None
    hidden: Callable[[], list[tuple[str, int]]] | None = None
    # the notebook's own names (an error's traceback frames keep only what none of them keeps)
    names: Callable[[], Mapping[str, Any]] | None = None
    report: CellReport | None = field(default=None, init=False)
    # with ``breakdown``: the cell's CellAttribution (its ``backward_runs``, its key)
    attribution: Any = field(default=None, init=False)
    # the state of the latest out-of-memory failure during the block, taken at the failure
    oom_state: Any = field(default=None, init=False)
    # what nested measurements' resets of the peak counter took away from this one
    nested_peak: int = field(default=0, init=False)
    nested_resets: int = field(default=0, init=False)
    # on CPU: the process's RSS at the start (/proc/self/statm), for the report's process view
    rss_start: int | None = field(default=None, init=False)
    malloc_used_start: int | None = field(default=None, init=False)
    # calls of torch.jit.trace made with vramnb's modes stepped aside, at the start (_tracker_patch.TRACED)
    traced_start: int = field(default=0, init=False)


# measurements running now (any thread): a nested one's reset of the device's peak
# counter hands the peak it held to each of them
_ACTIVE: list[Measurement] = []
_ACTIVE_LOCK = threading.Lock()


@contextlib.contextmanager
def vram(
    device: str | int | torch.device | None = None,
    *,
    reset_peak: bool = True,
    budget: str | int | None = None,
    label: str = "",
    record: bool = True,
    holders: Callable[[], list[tuple[str, int]]] | None = None,
    hidden: Callable[[], list[tuple[str, int]]] | None = None,
    warn: bool = True,
    breakdown: Mapping[str, Any] | None = None,
    timed: bool = False,
    names: Callable[[], Mapping[str, Any]] | None = None,
) -> Iterator[Measurement]:
    """Measure the device memory a block of code uses.

    Args:
        device: ``None`` (current CUDA device, else CPU), ``"cpu"``,
            ``"cuda:N"`` or an index.
        reset_peak: reset the device's peak counter at the start to read the
            block's own peak (see the module docstring).
        budget: a card size (``"24GiB"`` or bytes): warn when the block's
            absolute peak (plus non-PyTorch memory, on CUDA) would not fit.
        label: a label stored with the report.
        record: append the report to :func:`history`.
        holders: called on an out-of-memory error to name the largest holders,
            as ``(name, bytes)`` pairs.
        hidden: called on an out-of-memory error: ``(name, bytes)`` of what the
            notebook holds out of sight (output history, kept exceptions).
        warn: also issue report warnings (over budget, peak counter reset) as
            Python ``ResourceWarning``s; the magics show them in the report instead.
        timed: the block times itself (``%timeit``, ``%time``, ``timeit``): on CPU, the
            report says how much the storage tracker's per-operator cost added to it.
        names: the notebook's own names: where the block raises (or is interrupted), the
            report's line on what the error's traceback keeps counts only storages none of
            these names keeps (``%vram free`` releases the traceback, never a name).
        breakdown: a namespace (e.g. ``globals()``): label the block's memory
            by its modules, optimizers and tensors (``report.sources``). Records
            every allocation (CPU tracker, or the CUDA allocator trace) while
            the block runs.

    Yields:
        a :class:`Measurement`; its ``report`` (:class:`CellReport`) is set on
        exit, also when the block raises (the exception propagates unchanged).

    Raises:
        ValueError: bad ``device`` or ``budget``.

    On CPU the block runs under the storage tracker's dispatch mode (tens of
    µs per ATen operator; see ``benchmarks/README.md``), and the process's
    storages are scanned at its start and end, so that what other threads and
    allocations outside the dispatcher (``torch.frombuffer``, storage
    constructors) leave alive counts too, as on CUDA, whose allocator is
    process-wide. (Those made *and freed* inside the block by another thread
    are not in its CPU peak.) The start's scan walks every live object unless
    the magics vouched that nothing ran unseen since the last measured cell
    (``StorageTracker.scan``); the end's looks only at what no garbage
    collection has seen.
    """
    __tracebackhide__ = True
    dev = resolve_device(device)
    m = Measurement(dev, reset_peak, parse_size(budget) if budget is not None else None, label, holders, hidden,
                    names)
    probe = probe_for(dev)
    name = str(dev)
    was_active = probe.active()
    if isinstance(probe, CpuProbe):
        probe.tracker.warm_up()
        probe.tracker.scan(block_starts=True)
        compiles = _dynamo_frames()
    # on CUDA, the memory outside the allocator at the start too (cudaMemGetInfo; only where the
    # context exists): what a cell's first use of a kernel family loads there (lazy module loading)
    start = probe.sample(device_info=isinstance(probe, CudaProbe) and was_active)
    m.rss_start = process_rss() if isinstance(probe, CpuProbe) else None
    m.malloc_used_start = malloc_used() if isinstance(probe, CpuProbe) else None
    _fold_peak(name, start.peak)
    track = contextlib.ExitStack()
    resets: list[int] = [0]
    stop_listening: Callable[[], None] | None = None
    exc: BaseException | None = None
    try:  # vramnb's own start, set up whole (an interrupt held back until it is, then raised here, where
        # the except takes it all down again); if it fails (memory pressure), nothing of it stays behind
        with held_back():
            with _ACTIVE_LOCK:
                if reset_peak:
                    probe.reset_peak()
                    for outer in _ACTIVE:  # peaks nest: the outer blocks keep what the counter held
                        if outer.device == dev:
                            outer.nested_peak = max(outer.nested_peak, start.peak)
                            outer.nested_resets += 1
                _ACTIVE.append(m)
            resets_before = probe.tracker.resets if isinstance(probe, CpuProbe) else 0
            ops_before = probe.tracker.ops if isinstance(probe, CpuProbe) else 0
            track.enter_context(jit_trace_aside())  # (before the modes: it outlives them)
            m.traced_start = TRACED[0]
            if isinstance(probe, CpuProbe):
                track.enter_context(probe.tracker.tracking())
            casts = CastCache()  # autocast's weight-cast cache: seen by the CPU tracker's mode, or on CUDA by
            # a mode of its own under --breakdown (a plain CUDA cell runs no dispatch mode)
            if isinstance(probe, CpuProbe):
                probe.tracker.watches.append(casts)
                track.callback(_unwatch, probe.tracker, casts)
            attribution = None
            if breakdown is not None:
                attribution = CellAttribution(breakdown, dev, casts)
                track.enter_context(attribution.recording(probe.tracker if isinstance(probe, CpuProbe) else None))
                if not isinstance(probe, CpuProbe):
                    track.enter_context(_cast_mode(casts))
            if isinstance(probe, CpuProbe):
                # storages no dispatch mode saw (other threads, torch.frombuffer, storage
                # constructors): found by a scan before the block's end is read
                track.callback(_scan_quietly, probe.tracker)
            if dev.type == "cuda" and torch.cuda.is_initialized():  # attaching earlier would create the context
                install_cuda_observer()
            stop_listening = listening(name, lambda st: _first_oom(m, st))
            resets = track.enter_context(_reset_watch())
    except BaseException:
        try:
            track.close()
        finally:
            if stop_listening is not None:
                stop_listening()
            with _ACTIVE_LOCK:
                if m in _ACTIVE:
                    _ACTIVE.remove(m)
        raise
    t0 = time.perf_counter()
    try:
        yield m
    except BaseException as e:
        exc = e
        raise
    finally:
        # the end, whole: an interrupt here is raised once all is taken down and recorded. One that lands
        # before the hold is in place (making it is the first call here) waits for the end all the same
        late: BaseException | None = None
        try:
            hold = held_back()
            hold.__enter__()
        except KeyboardInterrupt as err:
            late, hold = err, held_back()
            hold.__enter__()
        try:
            try:
                track.__exit__(type(exc) if exc is not None else None, exc,
                               exc.__traceback__ if exc is not None else None)
            finally:
                assert stop_listening is not None  # (set when the start succeeded)
                _end(m, probe, start, was_active, resets[0], resets_before, time.perf_counter() - t0, exc,
                     stop_listening, attribution, casts, timed, ops_before,
                     compiles if isinstance(probe, CpuProbe) else 0, record, warn)
        finally:
            hold.__exit__(None, None, None)
        if late is not None:
            raise late


def _end(m: Measurement, probe: Any, start: Any, was_active: bool, cuda_resets: int, resets_before: int, wall: float,
         exc: BaseException | None, stop_listening: Callable[[], None], attribution: CellAttribution | None,
         casts: CastCache, timed: bool, ops_before: int, compiles: int, record: bool, warn: bool) -> None:
    """The end of a :func:`vram` block: stop listening, make the report (:func:`_finish`), record it."""
    stop_listening()
    with _ACTIVE_LOCK:
        _ACTIVE.remove(m)
    m.report = _finish(m, probe, start, was_active, cuda_resets, resets_before, wall, exc)
    if attribution is not None:
        m.report.sources = attribution.rows
        m.attribution = attribution
        if attribution.failed:
            m.report.notes.append(attribution.failed)
    _cache_verdict(m.report, casts, attribution)
    casts.release()
    if timed and isinstance(probe, CpuProbe):
        note = _tracking_cost_note(probe.tracker, probe.tracker.ops - ops_before, wall)
        if note:
            m.report.notes.append(note)
    if TRACED[0] != m.traced_start:  # (it counts only where one of vramnb's modes was on the stack)
        m.report.peak_is_lower_bound = True
        m.report.notes.append(
            "torch.jit.trace ran here (PyTorch's tracer: also torch.onnx.export): it cannot trace under a dispatch "
            "mode, so vramnb's tracking stepped aside while it ran; what tracing allocated and freed is not in the peak (a "
            "lower bound), what it left is counted")
    if isinstance(probe, CpuProbe) and _dynamo_frames() != compiles:
        m.report.peak_is_lower_bound = True
        m.report.notes.append(
            "torch.compile compiled code here: what compiling allocates the CPU tracker does not see "
            "(PyTorch turns its dispatch mode off meanwhile), so the peak is a lower bound; the "
            "compiled code's own buffers count"
        )
    elif isinstance(probe, CpuProbe) and _dynamo_frames() and _cpp_wrapper():
        m.report.peak_is_lower_bound = True
        m.report.notes.append(
            "inductor's cpp_wrapper is on: code it compiled allocates its buffers in C++, where "
            "the CPU tracker sees only what returns to Python, so the peak is a lower bound"
        )
    if record:
        _HISTORY.append(m.report)
    if warn:
        for w in m.report.warnings:
            warnings.warn(f"vramnb: {w}", ResourceWarning, stacklevel=4)  # the block's with line


def _unwatch(tracker: Any, casts: CastCache) -> None:
    if casts in tracker.watches:
        tracker.watches.remove(casts)


@contextlib.contextmanager
def _cast_mode(casts: CastCache) -> Iterator[None]:
    mode = CastMode(casts)
    mode.__enter__()
    try:
        yield
    finally:
        _exit_mode(mode)  # also when the user's code left a mode of its own on the stack


def _cache_verdict(report: CellReport, casts: CastCache, attribution: CellAttribution | None) -> None:
    """The autocast weight-cast cache line: its bytes at the peak from the breakdown's row
    where one was recorded, else from the CPU tracker's peak (CUDA without --breakdown: not seen)."""
    if not casts.copies:
        return
    at_peak = casts.at_peak
    if attribution is not None:
        at_peak = next((r[3] for r in attribution.rows if r[0] == CACHE_ROW), 0)
    elif report.device != "cpu":
        return
    try:
        note = cache_note(casts, at_peak, max(0, report.peak_allocated - report.start_allocated))
    except Exception:  # noqa: BLE001 - a verdict must never break the report
        note = None
    if note:
        report.notes.append(note)


_OP_COST: list[float] = []  # seconds the dispatch mode adds per ATen operator, measured once


def op_overhead(tracker: Any) -> float:
    """Seconds the CPU tracker's dispatch mode adds to one small ATen operator
    on this machine (measured once: 2000 ``add`` calls plain and tracked)."""
    if not _OP_COST:
        a = torch.zeros(4)
        n = 2000

        def run() -> float:
            t0 = time.perf_counter()
            for _ in range(n):
                torch.add(a, 1)
            return time.perf_counter() - t0

        plain = min(run() for _ in range(2))
        with tracker.tracking():
            tracked = min(run() for _ in range(2))
        tracker.ops -= 2 * n
        _OP_COST.append(max(0.0, (tracked - plain) / n))
    return _OP_COST[0]


def _tracking_cost_note(tracker: Any, ops: int, wall: float) -> str:
    """The note for a block that times itself: times measured inside it (``%timeit``,
    ``%time``) include the tracker's per-operator cost."""
    if ops <= 0 or wall <= 0:
        return ""
    cost = op_overhead(tracker)
    added = ops * cost
    return (f"the CPU tracker saw {ops:,} ATen operators here, each slowed by about {cost * 1e6:.1f} µs "
            f"(≈{format_seconds(added)} of {format_seconds(wall)}): times measured inside "
            "(%timeit, %time) include that; time the code outside %%vram / %vram on")


def _scan_quietly(tracker: Any) -> None:
    try:
        tracker.scan(full=False)  # the block's start was scanned; what it ran, the tracker saw
    except Exception:  # a scan must never replace the user's result or error
        pass


def _cpp_wrapper() -> bool:
    """Whether inductor's ``cpp_wrapper`` is on (its generated C++ allocates buffers unseen)."""
    config = sys.modules.get("torch._inductor.config")
    return bool(getattr(config, "cpp_wrapper", False))


def _dynamo_frames() -> int:
    """How many frames torch.compile has compiled so far (0 if never imported)."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    if dynamo is None:
        return 0
    try:
        return int(sum(dynamo.counters["frames"].values()))
    except Exception:
        return 0


def _finish(
    m: Measurement,
    probe: CudaProbe | CpuProbe,
    start: Any,
    was_active: bool,
    cuda_resets: int,
    resets_before: int,
    wall: float,
    exc: BaseException | None,
) -> CellReport:
    end = probe.sample(device_info=True)
    name = str(m.device)
    _fold_peak(name, end.peak)
    notes: list[str] = []
    warns: list[str] = []
    start_alloc, start_res = start.allocated, start.reserved
    if not was_active and probe.active():
        notes.append("CUDA was initialised in this block; its context is part of non-PyTorch memory")
    peak = max(end.peak, start_alloc, end.allocated)
    lower = False
    other_resets = cuda_resets + (probe.tracker.resets - resets_before if isinstance(probe, CpuProbe) else 0)
    if m.reset_peak and m.nested_resets:  # a `with vram()` inside this block reset the counter
        peak = max(peak, m.nested_peak)
        other_resets = max(0, other_resets - m.nested_resets)
    if other_resets or end.peak < start_alloc:
        lower = True
        warns.append("the device's peak counter was reset during this block: the peak shown is a lower bound")
    elif not m.reset_peak and end.peak <= start.peak and start.peak > 0:
        lower = True
        peak = max(start_alloc, end.allocated)
        notes.append(
            f"--no-reset: the peak counter already held {format_bytes(start.peak)} from before; "
            "this block's peak is somewhere between the value shown and that"
        )
    report = CellReport(
        device=name,
        method=probe.method,
        start_allocated=start_alloc,
        end_allocated=end.allocated,
        peak_allocated=peak,
        peak_is_lower_bound=lower,
        start_reserved=start_res,
        end_reserved=end.reserved,
        non_pytorch=end.non_pytorch,
        total=end.total,
        wall_time=wall,
        exception=type(exc).__name__ if exc is not None else None,
        budget=m.budget,
        notes=notes,
        warnings=warns,
        label=m.label,
        versions=versions(m.device),
    )
    if isinstance(probe, CpuProbe):
        proc = process_memory()
        if proc is None:
            notes.append("process RSS not shown: /proc is not readable here (Linux only)")
        else:
            report.rss, report.malloc_free = proc.rss, proc.malloc_free
            report.rss_start = m.rss_start
            report.malloc_used_start, report.malloc_used = m.malloc_used_start, proc.malloc_used
            report.children, report.children_private = proc.children, proc.children_private
    note = reserved_growth(report)
    if note:
        report.notes.append(note)
    note = outside_growth(start.non_pytorch, end.non_pytorch)
    if note and was_active:
        report.notes.append(note)
    if m.device.type == "cuda" and report.delta_allocated >= 1 << 20:
        try:
            note = workspace_note(new_workspaces(m.device.index or 0))
        except Exception:  # noqa: BLE001 - a label must never break the report
            note = None
        if note:
            report.notes.append(note)
    if exc is not None and is_oom(exc):
        report.oom = _post_mortem(m, exc, end)
    elif isinstance(exc, MemoryError):  # Python's or NumPy's own allocation: no tensor asked
        from .diagnose._op_call import python_memory_note

        try:
            line = python_memory_note(exc)
        except Exception:  # noqa: BLE001 - a line, never in the way of the user's error
            line = None
        if line:
            report.notes.insert(0, line)
    if exc is not None:
        note = _error_holds(exc, m.device, m.names)
        if note:
            report.notes.append(note)
    if m.budget is not None:
        need = peak + (end.non_pytorch or 0)
        if need > m.budget:
            what = f"peak {format_bytes(peak)}"
            if end.non_pytorch:
                what += f" + {format_bytes(end.non_pytorch)} non-PyTorch = {format_bytes(need)}"
            warns.append(
                f"over budget: {what} does not fit {format_bytes(m.budget)} (short by {format_bytes(need - m.budget)})"
            )
    return report


def _first_oom(m: Measurement, state: OOMState) -> None:
    """At the failure: keep the latest state, with what the notebook held out of sight then
    (later the failing cell's own exception would count as out of sight). A block that
    catches a failure and goes on (a batch search trying a smaller size) ends, if it fails,
    with a later failure: the report describes the one that ended it."""
    hidden = _safe_call(m.hidden)  # ("total", bytes) first, then by kind
    if hidden and hidden[0][0] == "total":
        state.hidden, state.hidden_by = hidden[0][1], hidden[1:]
    elif hidden:
        state.hidden, state.hidden_by = sum(b for _, b in hidden), hidden
    m.oom_state = state


def _safe_call(fn: Callable[[], list[tuple[str, int]]] | None) -> list[tuple[str, int]]:
    try:
        return list(fn()) if fn is not None else []
    except Exception:  # naming holders must never replace the user's error
        return []


def _same_request(captured: int | None, asked: int | None) -> bool:
    """Whether a captured failure can be the one whose message asked for ``asked`` bytes (the
    CUDA message rounds to two decimals of its unit: within 1 %; unknown on either side: yes)."""
    if captured is None or asked is None:
        return True
    return abs(captured - asked) <= max(captured, asked) // 100


def _error_holds(exc: BaseException, device: torch.device,
                 names: Callable[[], Mapping[str, Any]] | None = None) -> str | None:
    """The line for memory the cell's error (or interruption) keeps through its traceback's
    frames (their variables: IPython keeps the error as the last exception), where it is
    1 MiB or more: only storages none of ``names()`` (the notebook's names) keeps, which
    ``%vram free`` releases."""
    from ._graph import exception_locals
    from ._holders import storages_held
    from .diagnose._postmortem import _tensor_bytes, _Walk

    try:
        walk = _Walk(device)
        if names is not None:  # what a name keeps stays when the traceback goes: not counted
            walk.seen.update(storages_held(dict(names()), device))
            walk.leaves = True  # a leaf no name keeps goes with the graph that keeps it
        held = sum(_tensor_bytes(v, walk) for v in exception_locals(exc))
        walk.nodes.clear()
    except Exception:  # noqa: BLE001 - a line, never in the way of the user's error
        return None
    if held < 1 << 20:
        return None
    what = "interruption's" if isinstance(exc, KeyboardInterrupt) else "error's"
    if names is None:  # the notebook's names unknown: some of it may be a name's too
        return (f"the {what} traceback reaches {format_bytes(held)} (the variables of the frames that raised; "
                "IPython keeps it as the last exception): %vram free releases what no name also keeps")
    return (f"the {what} traceback keeps {format_bytes(held)} alive (the variables of the frames that raised; "
            "IPython keeps it as the last exception): %vram free releases it")


def _tb_frames(exc: BaseException) -> list[Any]:
    """The frames of ``exc``'s traceback, innermost first."""
    out = []
    tb = exc.__traceback__
    while tb is not None:
        out.append(tb.tb_frame)
        tb = tb.tb_next
    return out[::-1]


def _post_mortem(m: Measurement, exc: BaseException, end: Any) -> OOMInfo:
    """The out-of-memory post-mortem of a measured block (see :func:`oom_info`), with the
    notebook's holders."""
    return oom_info(m.oom_state, exc, m.device, end, lambda: _safe_call(m.holders)[:6])


def oom_info(state: OOMState | None, exc: BaseException, device: torch.device, end: Any,
             holders: Callable[[], list[tuple[Any, ...]]] | None = None,
             techniques: Callable[[OOMState], list[Any]] | None = None) -> OOMInfo:
    """The out-of-memory post-mortem: the state at the failure if it was caught there (else
    read from ``end``, a probe's sample after unwinding), the holders, and the verdict.
    ``techniques(state)`` gives fixes with this step's estimated savings (profile_step)."""
    asked = requested_bytes(exc)
    if state is not None and not _same_request(state.requested, asked):
        state = None  # taken at another failure (one the block caught); this one was not seen where it failed
    if state is None and device.type == "cpu":
        cap, room, which = process_limit()
        state = OOMState("cpu", False, asked, end.allocated, cap=cap, available=end.free, cap_room=room,
                         cap_name=which)
    elif state is None:
        state = OOMState(str(device), False, asked, end.allocated, end.reserved, end.total, None, end.free,
                         None, end.non_pytorch)
    elif state.requested is None:
        state.requested = asked
    if state.context is None:  # read after unwinding: the traceback's frames still say what ran
        try:
            state.context = failing_code(_tb_frames(exc), state.requested)
        except Exception:  # noqa: BLE001
            pass
    ctx = state.context
    if ctx is not None and ctx.op is not None and not ctx.op_name:  # the failing operator, replayed on fake tensors
        try:
            from .diagnose._failing_op import read_op

            ctx.op_name, ctx.request_shape, ctx.lowered, ctx.lowered_how = read_op(ctx.op, state.requested,
                                                                                  state.device, ctx.given)
        except Exception:  # noqa: BLE001 - extra: never in the way of the verdict
            pass
    if holders is not None:
        state.holders = holders()
    try:
        fixes = techniques(state) if techniques is not None else None  # a StepFixes: also the step's need
    except Exception:  # noqa: BLE001 - savings are extra: never in the way of the verdict
        fixes = None
    try:
        v = verdict(state, fixes)
    except Exception:  # noqa: BLE001 - a verdict must never replace the user's error
        v = None
    return OOMInfo(state.requested, state.allocated, state.holders, (message(exc).splitlines() or [''])[0][:200], state, v)


class History(Rendered, list):  # type: ignore[misc]
    """The measured cells of this session, oldest first (a list of
    :class:`CellReport`), with :meth:`to_records` and :meth:`to_dataframe`."""

    def to_records(self) -> list[dict[str, Any]]:
        """One flat dict per report (bytes and seconds)."""
        return [r.to_record() for r in self]

    def to_dataframe(self) -> Any:
        """A ``pandas.DataFrame`` of :meth:`to_records`.

        Raises:
            MissingDependencyError: pandas is not installed (the message says ``pip install "vramnb[pandas]"``).
        """
        return dataframe(self.to_records(), "History.to_dataframe")

    def _table(self) -> Table:
        cuda = any(r.end_reserved is not None for r in self)
        heads = ["cell", "device", "Δ allocated", "peak", "Δ peak"] + (["reserved"] if cuda else []) + ["time", "label"]
        t = Table("vram · history", heads, align="rlrrr" + ("r" if cuda else "") + "rl")
        for r in self:
            label = r.label if len(r.label) <= 40 else r.label[:39] + "…"
            row = [
                "" if r.cell is None else str(r.cell),
                r.device,
                format_delta(r.delta_allocated),
                ("≥ " if r.peak_is_lower_bound else "") + format_bytes(r.peak_allocated),
                format_delta(r.peak_delta),
            ]
            if cuda:
                row.append("" if r.end_reserved is None else format_bytes(r.end_reserved))
            row += [format_seconds(r.wall_time), label + (f" ({r.exception})" if r.exception else "")]
            t.rows.append(row)
        if not self:
            t.note("no cells measured yet: use %%vram on a cell, or %vram on")
        return t


def history() -> History:
    """Every measurement recorded this session (``%%vram`` cells, ``%vram on``
    cells and ``with vram():`` blocks), oldest first."""
    return History(_HISTORY)


def clear_history() -> None:
    """Forget the recorded measurements (session peaks are kept)."""
    _HISTORY.clear()
