"""What one measured cell (or ``with vram():`` block) used: :class:`CellReport`.

Pure data plus rendering; no torch import. All sizes are bytes (``int``),
absolute values on the device, times in seconds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from typing import TYPE_CHECKING

from ._render import Rendered, Table
from ._units import format_bytes, format_delta, format_seconds

if TYPE_CHECKING:
    from .diagnose import OOMState, Verdict

__all__ = ["CellReport", "OOMInfo", "oom_lines"]


@dataclass
class OOMInfo:
    """An out-of-memory error seen during a measured block.

    Attributes:
        requested: bytes the failed allocation asked for (``None`` if the
            message did not say).
        live: bytes allocated on the device at the failure (when the post-mortem caught
            it, else when the error was caught, after unwinding).
        holders: ``(variable, bytes it keeps alive, bytes deleting it alone frees[, kind])`` of the
            variables holding the most (the report shows three), then of those whose deletion alone
            frees the most (for the fixes).
        message: the first line of the error message.
        state: the device's state at the failure (:class:`vramnb.diagnose.OOMState`).
        verdict: why it failed and what to do (:class:`vramnb.diagnose.Verdict`).
    """

    requested: int | None
    live: int
    holders: list[tuple[Any, ...]] = field(default_factory=list)
    message: str = ""
    state: OOMState | None = None
    verdict: Verdict | None = None


@dataclass
class CellReport(Rendered):
    """Memory used by one measured cell or block.

    Attributes:
        device: ``"cuda:0"``, ``"cpu"``, ...
        method: how it was measured: ``"CUDA caching allocator"`` or
            ``"CPU storage tracker"``.
        start_allocated / end_allocated: bytes allocated to tensors at the
            start and end (``torch.cuda.memory_allocated`` on CUDA; live storage
            bytes on CPU).
        peak_allocated: the highest allocated bytes during the block (absolute).
        peak_is_lower_bound: True when the true peak may have been higher (the
            device's peak counter was reset by other code during the block, or
            ``--no-reset`` left an older, higher peak in the counter).
        start_reserved / end_reserved: bytes held by the caching allocator
            (``torch.cuda.memory_reserved``); ``None`` on CPU.
        non_pytorch: device memory in use that PyTorch's allocator does not hold
            (``torch.cuda.mem_get_info`` used − reserved: CUDA context, cuBLAS/cuDNN
            workspaces, other processes); ``None`` where it cannot be read
            without creating a CUDA context, and on CPU.
        total: device capacity in bytes (``None`` if unknown).
        rss_start / rss: on CPU (Linux), the process's resident set size at the
            start and end (``/proc/self/statm``); ``None`` elsewhere.
        malloc_free: on CPU with glibc, bytes free inside the C allocator's
            arenas at the end (``mallinfo2().fordblks``): freed but kept by
            glibc; ``None`` elsewhere.
        malloc_used_start / malloc_used: on CPU with glibc, bytes the C allocator
            had handed out at the start and end (``mallinfo2().uordblks + hblkhd``);
            ``None`` elsewhere.
        children / children_private: on CPU (Linux), the number of live child
            processes (DataLoader workers, ...) and their private memory summed
            (``Private_Clean + Private_Dirty`` of each ``/proc/<pid>/smaps_rollup``)
            at the end; ``0`` / ``None`` when there are none.
        wall_time: seconds the block took.
        exception: the type name of the exception the block raised, else ``None``.
        oom: details of an out-of-memory error, else ``None``.
        budget: the ``--budget`` size in bytes, if one was given.
        notes: extra remarks (warnings shown in red).
        cell: the IPython execution count, when run as a magic.
        label: a short label (first line of the cell).
        sources: with ``--breakdown``: ``(source, bytes at start, at end, at
            the peak)`` per source (``parameters of model``, ``state of opt``,
            ``activations``, ...).
        versions: what it was measured with (``vramnb``, ``torch``, ``cuda``, ``gpu``,
            ``python``, ``ipython``), so that two machines' numbers compare.
    """

    device: str
    method: str
    start_allocated: int
    end_allocated: int
    peak_allocated: int
    wall_time: float
    peak_is_lower_bound: bool = False
    start_reserved: int | None = None
    end_reserved: int | None = None
    non_pytorch: int | None = None
    total: int | None = None
    rss_start: int | None = None
    rss: int | None = None
    malloc_free: int | None = None
    malloc_used_start: int | None = None
    malloc_used: int | None = None
    children: int = 0
    children_private: int | None = None
    exception: str | None = None
    oom: OOMInfo | None = None
    budget: int | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    cell: int | None = None
    label: str = ""
    sources: list[tuple[str, int, int, int]] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)

    # -- derived ------------------------------------------------------------
    @property
    def delta_allocated(self) -> int:
        """End − start allocated bytes (what the block left behind)."""
        return self.end_allocated - self.start_allocated

    @property
    def peak_delta(self) -> int:
        """The block's own peak above its start, in bytes."""
        return self.peak_allocated - self.start_allocated

    @property
    def delta_reserved(self) -> int | None:
        """Bytes the caching allocator's reservation grew (negative: shrank) over the cell; ``None`` on CPU,
        where nothing is reserved beyond what is allocated."""
        if self.start_reserved is None or self.end_reserved is None:
            return None
        return self.end_reserved - self.start_reserved

    @property
    def cached(self) -> int | None:
        """Reserved − allocated at the end: cached by the allocator, unusable
        by other processes; includes fragmentation."""
        if self.end_reserved is None:
            return None
        return self.end_reserved - self.end_allocated

    def to_record(self) -> dict[str, Any]:
        """A flat dict of the fields and derived values (bytes, seconds)."""
        rec = asdict(self)
        rec.pop("oom")
        rec["oom_requested"] = self.oom.requested if self.oom else None
        rec["delta_allocated"] = self.delta_allocated
        rec["peak_delta"] = self.peak_delta
        rec["delta_reserved"] = self.delta_reserved
        rec["cached"] = self.cached
        rec["notes"] = "; ".join(self.notes + self.warnings)
        rec.pop("sources")
        versions = rec.pop("versions")
        for k in ("vramnb", "torch", "cuda", "gpu", "python", "ipython"):
            rec[k] = versions.get(k)
        if self.oom is not None and self.oom.verdict is not None:
            rec["oom_verdict"] = self.oom.verdict.kind
        for name, _, end, peak in self.sources:
            rec[f"{name} (end)"] = end
            rec[f"{name} (peak)"] = peak
        return rec

    # -- display ------------------------------------------------------------
    def __str__(self) -> str:
        bound = "≥" if self.peak_is_lower_bound else ""
        exc = f" · raised {self.exception}" if self.exception else ""
        exc += "".join(f" · ⚠ {w}" for w in self.warnings)
        return (
            f"Δ allocated {format_delta(self.delta_allocated)} · peak {bound}{format_bytes(self.peak_allocated)} "
            f"({bound}{format_delta(self.peak_delta)}) · on {self.device} · {format_seconds(self.wall_time)}{exc}"
        )

    def _table(self) -> Table:
        title = f"vram · {self.device} · {format_seconds(self.wall_time)}"
        if self.cell is not None:
            title = f"vram [{self.cell}] · {self.device} · {format_seconds(self.wall_time)}"
        if self.exception:
            title += f" · raised {self.exception}"
        t = Table(title, ("", "now", "change"))
        t.rows.append(("allocated", format_bytes(self.end_allocated), format_delta(self.delta_allocated)))
        bound = "≥ " if self.peak_is_lower_bound else ""
        t.rows.append(("peak", bound + format_bytes(self.peak_allocated), bound + format_delta(self.peak_delta)))
        if self.end_reserved is not None:
            dr = self.delta_reserved
            t.rows.append(("reserved", format_bytes(self.end_reserved), format_delta(dr) if dr is not None else ""))
            t.rows.append(("reserved − allocated", format_bytes(self.cached or 0), ""))
        if self.non_pytorch is not None:
            t.rows.append(("non-PyTorch", format_bytes(self.non_pytorch), ""))
        if self.rss is not None:
            t.rows.append(("process RSS", format_bytes(self.rss),
                           format_delta(self.rss - self.rss_start) if self.rss_start is not None else ""))
        if self.children_private is not None:
            t.rows.append((f"{self.children} child process{'es' if self.children != 1 else ''} (private)",
                           format_bytes(self.children_private), ""))
        line = process_line(self)
        if line:
            t.note(line)
        if self.oom is not None:
            for line in oom_lines(self.oom):
                t.note(line, warn=line.startswith(("out of memory", "verdict")))
        for w in self.warnings:
            t.note(w, warn=True)
        for n in self.notes:
            t.note(n)
        t.note(f"measured by the {self.method}")
        if self.sources:
            sec = Table("by source", ("", "start", "end", "change", "at peak"))
            for name, a, b, p in self.sources:
                sec.rows.append((name, format_bytes(a), format_bytes(b), format_delta(b - a), format_bytes(p)))
            t.sections.append(sec)
        return t


def process_line(r: CellReport) -> str:
    """One true line on where the process's RSS sits beside the tracked tensor storage (CPU), or ``""``."""
    if r.rss is None:
        return ""
    tensors = r.end_allocated
    head = f"process RSS {format_bytes(r.rss)} beside {format_bytes(tensors)} of tracked tensor storage"
    if tensors > r.rss:
        return (f"{head}: the storage exceeds RSS by {format_bytes(tensors - r.rss)}, so part of it is not resident "
                "(never written, or mapped from a file)")
    rest = r.rss - tensors
    parts = [f"{format_bytes(rest)} of RSS is outside tensors"]
    if r.malloc_free:
        parts.append(f"up to {format_bytes(min(r.malloc_free, rest))} of it freed but kept by the C allocator "
                     "(`%vram free` runs malloc_trim(0), which returns what spans whole pages)")
    parts.append("the rest is the interpreter, Python objects, libraries and other buffers")
    line = f"{head}: " + "; ".join(parts)
    if r.children_private:
        line += (f"; {r.children} child process{'es' if r.children != 1 else ''} hold "
                 f"{format_bytes(r.children_private)} of private memory besides (not in this RSS)")
    return line


def oom_lines(oom: OOMInfo) -> list[str]:
    """The post-mortem as report lines: the state at the failure, the verdict, the fixes
    (best first, with what each frees where known) and what held the memory."""
    fmt = format_bytes
    st = oom.state
    req = fmt(oom.requested) if oom.requested is not None else "an unknown size"
    when = "at the failure" if st is not None and st.at_failure else "after the error unwound"
    head = f"out of memory: asked for {req} with {fmt(oom.live)} allocated {when}"
    if st is not None and st.reserved is not None:
        head += f", {fmt(st.reserved)} reserved"
        if st.largest_free_block is not None:
            head += f" (largest free block {fmt(st.largest_free_block)})"
        if st.cap is not None and st.total is not None:
            head += f", of a {fmt(st.cap)} per-process cap on a {fmt(st.total)} card"
        elif st.total is not None:
            head += f", of a {fmt(st.total)} card"
        if st.free_device is not None:
            head += f"; {fmt(st.free_device)} free on the device"
        if st.other_processes:
            head += f", {fmt(st.other_processes)} held by other processes"
    elif st is not None and st.available is not None:
        head += f"; {fmt(st.available)} available to the system"
    lines = [head]
    call = getattr(getattr(st, "context", None), "call", None)
    if call:  # what the one call on the failing line asked for, against its inputs (diagnose._op_call)
        lines.append(f"failing call: {call}")
    if oom.verdict is not None:
        v = oom.verdict
        lines.append(f"verdict: {v.kind}: {v.reason}")
        for i, f in enumerate(v.fixes[:5], 1):
            code = f.code.splitlines()
            if len(code) <= 1:
                lines.append(f"fix {i}: {f.what}{fix_gain(f)}" + (f": {f.code}" if f.code else ""))
            else:  # a few lines of code: each on its own line, as it would be typed
                lines.append(f"fix {i}: {f.what}{fix_gain(f)}:")
                lines += [f"    {c}" for c in code]
        if len(v.fixes) > 5:
            lines.append(f"… and {len(v.fixes) - 5} more fix(es) in report.oom.verdict.fixes")
    if st is not None and st.frames:
        top = ", ".join(_frame_text(f) for f in st.frames[:4])
        shared = " (a storage two of them share counts for the first)" if st.frames_share else ""
        lines.append(f"held by the failing frames: {top}{shared}")
        lines += _generator_lines(st)
    if st is not None and getattr(st, "handled", None):
        kept = ", ".join(_frame_text(f) for f in st.handled[:4])
        total = sum(f[2] for f in st.handled)
        lines.append(f"held by the exception being handled: the failing code ran inside an except block, and that "
                     f"exception's traceback keeps the finished frames it was raised through alive until the block "
                     f"ends ({format_bytes(total)}): {kept}; run the retry (or whatever the block runs) after the "
                     "except block ends: note the failure in it, act on it outside")
    if oom.holders:
        largest = sorted(oom.holders, key=lambda h: -h[1])
        lines.append("largest holders: " + ", ".join(_holder_text(h) for h in largest[:3]))
        how = next((h[4] for h in largest[:3] if len(h) > 4 and h[4]), "")
        if how:  # how the largest one holds its memory, and the fix (diagnose._holding)
            lines.append(str(how))
    return lines


def _generator_lines(st: Any) -> list[str]:
    """For each failing frame that is a generator's (``context.suspended``) and holds device memory in
    its variables: that a generator's frame keeps them bound between ``yield`` statements, and the ``del``."""
    out = []
    for where, gen, assigned in getattr(getattr(st, "context", None), "suspended", None) or []:
        held = [(f[1], f[2]) for f in st.frames if f[0] == where and f[2] >= 1 << 20]
        if not held:
            continue
        var, n = held[0]
        if var in assigned:
            out.append(f"{gen} is a generator: its frame keeps its local variables between `yield`s, so the previous "
                       f"{var} ({format_bytes(n)}) was still bound while this line built its replacement: `del {var}` "
                       f"once it is used, before the `yield` (yield only what the caller needs), so that the next "
                       f"one is not built beside it")
        else:
            out.append(f"{gen} is a generator: its frame keeps its local variables between `yield`s ({var} "
                       f"{format_bytes(n)} was bound at the failure): `del {var}` before the `yield` once it is "
                       f"no longer needed")
    return out


def _frame_text(f: tuple) -> str:
    """``logits 31.2 MiB + its graph 529.4 MiB (lossf:31)``."""
    where, var, n = f[:3]
    graph = f[3] if len(f) > 3 else 0
    own = f"{var} {format_bytes(n - graph)} + its graph {format_bytes(graph)}" if graph else f"{var} {format_bytes(n)}"
    return f"{own} ({where})"


def fix_gain(f: Any) -> str:
    """`` (frees up to X)``, or for an estimated saving on this step `` (this step's peak −X,
    estimated; then fits)``; empty where the saving is unknown."""
    if not f.saving:
        return ""
    if not getattr(f, "estimated", False):
        if "frees" in f.what or "freed" in f.what or "held" in f.what:  # the bytes are in its words already
            return ""
        return f" (frees up to {format_bytes(f.saving)})"
    thens: dict[bool | None, str] = {True: "; the step then fits", False: "; not enough alone"}
    then = thens.get(getattr(f, "fits", None), "")
    return f" (this step's peak −{format_bytes(f.saving)}, estimated{then})"


def _holder_text(h: tuple) -> str:
    """``name holds X (deleting it frees Y)``; a pair ``(name, bytes)`` reads as before."""
    if len(h) == 2:
        return f"{h[0]} {format_bytes(h[1])}"
    name, holds, frees = h[:3]
    return f"{name} {format_bytes(holds)}" + (f" (deleting it frees {format_bytes(frees)})" if frees != holds else "")
