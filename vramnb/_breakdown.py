"""Report objects for a profiled training step: :class:`Breakdown` and :class:`StepReport`.

Pure data and rendering (no torch). Bytes everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._render import Rendered, Table
from ._sources import SOURCES
from ._units import format_bytes, format_delta, format_seconds

__all__ = ["Breakdown", "StepResult", "StepReport", "ModuleMemory"]

_SHORT = {
    "start": "start",
    "after forward": "+forward",
    "after backward": "+backward",
    "after optimizer step": "+optim. step",
    "after zero_grad": "+zero_grad",
    "at failure": "at failure",
}


#: said after a step time measured on the CPU: vramnb's tracker watches every operator of that step
CPU_TIME = " (with vramnb's CPU tracking on, which watches every operator: longer than the plain step)"


@dataclass
class Breakdown:
    """Allocated bytes by source at one instant.

    Attributes:
        sources: source name → bytes (every name in ``vramnb._sources.SOURCES``).
        allocated: the device's allocated bytes measured at that instant
            (``torch.cuda.memory_allocated``, or the tracker's total on CPU).
        reserved: the caching allocator's reserved bytes (CUDA) or ``None``.
        non_pytorch: device memory outside PyTorch (CUDA) or ``None``.
    """

    sources: dict[str, int]
    allocated: int
    reserved: int | None = None
    non_pytorch: int | None = None

    @property
    def total(self) -> int:
        """Sum of the sources (equals ``allocated`` on CPU; within rounding on CUDA)."""
        return sum(self.sources.values())

    @property
    def unattributed(self) -> int:
        """Measured allocated − sum of sources: shown as its own row, never spread."""
        return self.allocated - self.total

    def __getitem__(self, source: str) -> int:
        return self.sources[source]


@dataclass
class ModuleMemory:
    """Activations saved, and the peak of temporaries, while a module ran.

    Attributes:
        name: the module's qualified name in the model (``""`` is the model).
        activations: bytes of tensors saved for backward during its forward.
        temporaries: the highest bytes of temporaries it had alive at once,
            in its forward or backward.
    """

    name: str
    activations: int = 0
    temporaries: int = 0


@dataclass
class StepResult:
    """One profiled training step.

    Attributes:
        kind: ``"first step"`` (optimizer state created in it) or ``"steady state"``.
        marks: ``(phase mark, Breakdown)`` for start, after forward, after
            backward, after optimizer step, after zero_grad.
        peak: the breakdown at the step's highest allocated memory.
        peak_phase: the phase the peak happened in (forward, backward,
            optimizer step, zero_grad).
        timeline: allocated bytes after each allocation event.
        mark_points: index into ``timeline`` of each mark.
        modules: per-module activations and temporaries.
        step_time: wall seconds of the step (synchronised on CUDA).
        missing_grads: parameters that require grad but got no gradient.
        timeline_by_source: allocated bytes of each source after each event
            (same length as ``timeline``).
        phase_peaks: the breakdown at the highest point of each phase
            (forward, backward, optimizer step, zero_grad): e.g. the
            temporaries the optimizer needs for its own update.
    """

    kind: str
    marks: list[tuple[str, Breakdown]]
    peak: Breakdown
    peak_phase: str
    timeline: list[int] = field(default_factory=list)
    mark_points: dict[str, int] = field(default_factory=dict)
    peak_point: int = 0
    modules: list[ModuleMemory] = field(default_factory=list)
    step_time: float = 0.0
    missing_grads: list[str] = field(default_factory=list)
    timeline_by_source: dict[str, list[int]] = field(default_factory=dict)
    phase_peaks: dict[str, Breakdown] = field(default_factory=dict)

    def mark(self, name: str) -> Breakdown:
        return dict(self.marks)[name]


@dataclass
class StepReport(Rendered):
    """Where a training step's memory goes.

    Attributes:
        device: ``"cpu"`` or ``"cuda:N"``.
        method: ``"CPU storage tracker"`` or ``"CUDA caching allocator trace"``.
        steps: one :class:`StepResult` per profiled step (first, then steady state).
        label: a description of what ran (model class, optimizer, recipe).
        notes: remarks (what was restored, what could not be measured).
        warnings: techniques configured but without effect in the steps, one
            line each (:mod:`vramnb._no_effect`): checkpointing that recomputed
            nothing, autocast that lowered no op, low-bit optimizer state that
            stayed wide. Shown as warnings in the report, ``compare`` and the panel.
        versions: what it was measured with (``torch``, ``cuda``, ``gpu``, ``python``,
            ``ipython``).
        oom: where a step ran out of memory, the post-mortem (:class:`vramnb._report.OOMInfo`):
            the state at the failure, the verdict, and fixes with the saving each would
            bring to this step (estimated once the model was restored), else ``None``.
    """

    device: str
    method: str
    steps: list[StepResult]
    label: str = ""
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    recipe: Any = None
    versions: dict[str, str] = field(default_factory=dict)
    oom: Any = None

    _time_label = "step time"  # what StepResult.step_time is, in the table's notes

    def __repr__(self) -> str:
        return self._table().to_text()

    @property
    def first(self) -> StepResult:
        """The first profiled step (where a lazily built optimizer state and one-time workspaces appear)."""
        return self.steps[0]

    @property
    def steady(self) -> StepResult:
        """The last profiled step: the steady state that every later step repeats."""
        return self.steps[-1]

    @property
    def peak_allocated(self) -> int:
        """The highest allocated bytes over the profiled steps."""
        return self.peak.allocated

    @property
    def peak(self) -> Breakdown:
        """The breakdown at the highest peak over the profiled steps."""
        return max((s.peak for s in self.steps), key=lambda b: b.allocated)

    def to_records(self) -> list[dict[str, Any]]:
        """One flat dict per (step, mark or peak), bytes."""
        recs = []
        for s in self.steps:
            for name, b in s.marks + [("peak", s.peak)]:
                rec: dict[str, Any] = {"step": s.kind, "mark": name, "allocated": b.allocated}
                rec.update(b.sources)
                rec["unattributed"] = b.unattributed
                rec["reserved"] = b.reserved
                rec["non_pytorch"] = b.non_pytorch
                recs.append(rec)
        return recs

    def plot(self, kind: str = "breakdown") -> Any:
        """A figure: ``"breakdown"`` (stacked bars by phase and peak),
        ``"timeline"`` (allocated over the steps, phases and peak marked),
        ``"sources"`` (the steady step's timeline stacked by source).

        Raises:
            ValueError: another ``kind`` (the message lists the valid ones).
            MissingDependencyError: matplotlib is not installed (``pip install "vramnb[plot]"``).
        """
        from . import _plot

        kinds = {"breakdown": _plot.plot_breakdown, "timeline": _plot.plot_timeline, "sources": _plot.plot_sources}
        if kind not in kinds:
            raise ValueError(f"unknown plot kind {kind!r}; valid: {', '.join(repr(k) for k in kinds)}")
        return kinds[kind](self)

    def _table(self) -> Table:
        steady = self.steady
        kinds = [s.kind for s in self.steps]
        names = [k if kinds.count(k) == 1 else f"step {i + 1}" for i, k in enumerate(kinds)]
        heads = [f"peak ({n})" for n in names] + [_SHORT.get(n, n) for n, _ in steady.marks]
        t = Table(f"vram step · {self.device} · {self.label}", ("source", *heads))
        bds = [s.peak for s in self.steps] + [b for _, b in steady.marks]
        for src in SOURCES:
            vals = [b.sources.get(src, 0) for b in bds]
            if any(vals):
                t.rows.append((src, *[format_bytes(v) for v in vals]))
        if any(b.unattributed for b in bds):
            t.rows.append(("unattributed", *[format_delta(b.unattributed) for b in bds]))
            if self.device.startswith("cuda") and all(b.unattributed >= 0 for b in bds):
                t.note("unattributed on CUDA: blocks the caching allocator handed out larger than requested "
                       "(a large block is not split when less than 1 MiB would remain); its trace records requested sizes")
        t.rows.append(("allocated", *[format_bytes(b.allocated) for b in bds]))
        if steady.peak.reserved is not None:
            t.rows.append(("reserved", *[format_bytes(b.reserved or 0) for b in bds]))
            t.rows.append(("non-PyTorch", *[format_bytes(b.non_pytorch or 0) for b in bds]))
        t.note("columns after the peaks: " + steady.kind + ", at each phase mark")
        for n, s in zip(names, self.steps):
            t.note(f"{n}: peak in {s.peak_phase} · {self._time_label} {format_seconds(s.step_time)}"
                   + (CPU_TIME if self._time_label == "step time" and self.device == "cpu" else ""))
            if s.phase_peaks:
                t.note("  phase peaks: " + " · ".join(
                    f"{ph} {format_bytes(b.allocated)} (temporaries {format_bytes(b.sources.get('temporaries', 0))})"
                    for ph, b in s.phase_peaks.items()))
            if s.missing_grads:
                shown = ", ".join(s.missing_grads[:5]) + (" …" if len(s.missing_grads) > 5 else "")
                t.note(f"{len(s.missing_grads)} parameter(s) require grad but received none: {shown}", warn=True)
        if self.error:
            t.note(f"the step raised {self.error}; breakdown at the failure", warn=True)
        if self.oom is not None:
            from ._report import oom_lines

            for line in oom_lines(self.oom):
                t.note(line, warn=line.startswith(("out of memory", "verdict")))
        for w in self.warnings:
            t.note(w, warn=True)
        for n in self.notes:
            t.note(n)
        t.note(f"measured by the {self.method}")
        return t

        return t
