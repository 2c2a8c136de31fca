"""The report of :func:`vramnb.profile_distributed`: one column per rank.

Pure data and rendering (no torch), like :mod:`vramnb._breakdown`. Bytes everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._breakdown import Breakdown, StepReport
from .._render import Rendered, Table
from .._sources import SOURCES
from .._units import format_bytes, format_delta, format_seconds

__all__ = ["RankReport", "DistributedReport", "STATUSES"]

#: what became of a rank: ``ok``; ``raised`` (its step raised; ``out of memory`` when that was an
#: out-of-memory error); ``stopped`` (vramnb terminated it after another rank failed or the time ran
#: out, and it reported what it had); ``killed`` (it did not answer the termination and was killed);
#: ``exited`` (it ended without a report: a crash, ``os._exit``, the kernel's OOM killer)
STATUSES = ("ok", "raised", "out of memory", "stopped", "killed", "exited")


@dataclass
class RankReport:
    """One rank's result.

    Attributes:
        rank: the process's rank in the group.
        status: one of :data:`STATUSES`.
        step: its :class:`~vramnb.StepReport` (partial where the step failed: the breakdown
            at the failure), or ``None`` where it had none (it failed before or outside the
            step, or was killed).
        error: ``"TypeName: message"`` of what it raised, else ``None``.
        traceback: the formatted traceback of that error (text), else ``None``.
        exitcode: the process's exit code (negative: the signal that ended it), once joined.
        rss: the process's resident set size in bytes when it reported (``VmRSS``), else ``None``.
        peak_rss: its highest resident set size in bytes (``VmHWM``), else ``None``.
        tensor_bytes: bytes of CPU tensor storages alive when it reported, counted by
            vramnb's storage tracker (the same counter as the CPU breakdown).
        device: the step's device (``"cpu"``, ``"cuda:N"``), or ``""`` without a step.
        pid: the process's id (it has been joined when the report is returned).
        ddp_buckets: bytes of the gradient buckets of the DDP modules in the rank's model
            (the reducer's ``bucket_sizes``, summed over the model's DDP modules), else ``None``.
            The reducer holds them outside the step's sources: its buckets are made in C++, and
            the ones it rebuilds after the first backward are counted among the step's
            temporaries (first step), then activations or other (later steps).
    """

    rank: int
    status: str
    step: StepReport | None = None
    error: str | None = None
    traceback: str | None = None
    exitcode: int | None = None
    rss: int | None = None
    peak_rss: int | None = None
    tensor_bytes: int | None = None
    device: str = ""
    pid: int | None = None
    ddp_buckets: int | None = None

    @property
    def non_pytorch(self) -> int | None:
        """Host memory of the process outside CPU tensor storages, bytes: ``rss`` minus
        ``tensor_bytes`` (the interpreter, PyTorch's and the backend's libraries and their
        buffers, the C allocator's free heap, and pages the process still shares with the
        notebook's after a fork). ``None`` where either is unknown."""
        if self.rss is None or self.tensor_bytes is None:
            return None
        return self.rss - self.tensor_bytes

    @property
    def peak(self) -> Breakdown | None:
        """The breakdown at the step's highest allocated bytes, or ``None`` without a step."""
        return self.step.peak if self.step is not None and self.step.steps else None


@dataclass
class DistributedReport(Rendered):
    """Per-rank reports of one distributed step, shown side by side.

    Attributes:
        ranks: one :class:`RankReport` per rank, in rank order.
        backend: the process group's backend (``"gloo"``, ``"nccl"``).
        start_method: how the processes were started (``"fork"``, ``"spawn"``).
        wall: seconds from the start of the processes to the last one joined.
        first_failure: the rank whose failure came first (the others' errors may follow
            from it: a peer gone from a collective), else ``None``.
        notes: remarks (why ranks were stopped).
    """

    ranks: list[RankReport]
    backend: str
    start_method: str
    wall: float = 0.0
    first_failure: int | None = None
    notes: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return self._table().to_text()

    def __getitem__(self, rank: int) -> RankReport:
        return self.ranks[rank]

    def __len__(self) -> int:
        return len(self.ranks)

    @property
    def ok(self) -> bool:
        """Whether every rank finished its step."""
        return all(r.status == "ok" for r in self.ranks)

    def to_records(self) -> list[dict[str, Any]]:
        """One flat dict per rank: its status and its peak breakdown (bytes), host memory."""
        recs = []
        for r in self.ranks:
            rec: dict[str, Any] = {"rank": r.rank, "status": r.status, "error": r.error}
            peak = r.peak
            rec["allocated"] = peak.allocated if peak is not None else None
            for src in SOURCES:
                rec[src] = peak.sources.get(src, 0) if peak is not None else None
            rec["reserved"] = peak.reserved if peak is not None else None
            rec["device non_pytorch"] = peak.non_pytorch if peak is not None else None
            rec.update(ddp_buckets=r.ddp_buckets, rss=r.rss, peak_rss=r.peak_rss, tensor_bytes=r.tensor_bytes,
                       non_pytorch=r.non_pytorch)
            recs.append(rec)
        return recs

    def plot(self) -> Any:
        """Each rank's breakdown at its peak, as stacked bars (``vramnb.plot_compare``);
        ranks without a step are left out. Needs matplotlib.

        Raises:
            ValueError: no rank has a step to draw.
        """
        from .._plot import plot_compare

        with_step = [r for r in self.ranks if r.peak is not None]
        if not with_step:
            raise ValueError("no rank has a step to plot: " + ", ".join(f"rank {r.rank} {r.status}" for r in self.ranks))
        return plot_compare([r.step for r in with_step if r.step is not None], [f"rank {r.rank}" for r in with_step])

    def _table(self) -> Table:
        ranks = self.ranks
        t = Table(f"vram distributed · {len(ranks)} ranks · {self.backend} · {self.start_method}",
                  ("", *[f"rank {r.rank}" for r in ranks]))
        t.rows.append(("status", *[r.status for r in ranks]))
        t.rows.append(("device", *[r.device or "-" for r in ranks]))
        peaks = [r.peak for r in ranks]

        def row(name: str, values: list[int | None], fmt: Any = format_bytes) -> None:
            if any(v for v in values):
                t.rows.append((name, *["-" if v is None else fmt(v) for v in values]))

        for src in SOURCES:
            row(src, [None if b is None else b.sources.get(src, 0) for b in peaks])
        row("unattributed", [None if b is None else b.unattributed for b in peaks], format_delta)
        row("peak allocated", [None if b is None else b.allocated for b in peaks])
        row("reserved", [None if b is None else b.reserved for b in peaks])
        row("device non-PyTorch", [None if b is None else b.non_pytorch for b in peaks])
        row("DDP buckets", [r.ddp_buckets for r in ranks])
        row("host RSS", [r.rss for r in ranks])
        row("host peak RSS", [r.peak_rss for r in ranks])
        row("host non-PyTorch", [r.non_pytorch for r in ranks])
        t.note("rows by source: each rank's breakdown at its peak (the highest over its profiled steps)")
        t.note("host non-PyTorch: the process's RSS minus the CPU tensor storages vramnb's tracker counts "
               "(interpreter, libraries, the backend's buffers, free heap, pages shared with the notebook after a fork)")
        if any(r.ddp_buckets for r in ranks):
            t.note("DDP buckets: the reducer's gradient buckets; the one it rebuilds after the first backward is "
                   "counted in the sources above (temporaries in the first step, activations or other after it)")
        if self.backend == "gloo":
            t.note("gloo's own buffers are outside PyTorch's allocator: they are in host non-PyTorch, not in the sources")
        for r in ranks:
            if r.step is not None and r.step.steps:
                s = r.step.steady
                t.note(f"rank {r.rank}: {r.step.label} · peak in {s.peak_phase} · step time {format_seconds(s.step_time)}")
        if self.first_failure is not None:
            t.note(f"rank {self.first_failure} failed first", warn=True)
        for r in ranks:
            if r.error:
                t.note(f"rank {r.rank} {r.status}: {r.error}", warn=True)
            elif r.status not in ("ok", "stopped"):
                t.note(f"rank {r.rank} {r.status} (exit code {r.exitcode})", warn=True)
        for n in self.notes:
            t.note(n)
        t.note(f"wall time {format_seconds(self.wall)} (start to last process joined)")
        return t
