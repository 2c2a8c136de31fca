"""One verdict for an out-of-memory error, from the state at the failure (bytes only).

The verdicts, tried in this order, each from quantities the caching allocator
reports (``c10/cuda/CUDACachingAllocator.cpp``: the allocator has already freed
its unused cached segments and retried before it fails, so memory still
reserved and not allocated sits in segments that also hold live blocks):

* **fragmentation**: free memory (inside reserved segments, plus what the card or
  the cap still allows) would hold the request, but no free block is as large;
* **per-process cap**: the request fits the card but not the cap set by
  ``torch.cuda.set_per_process_memory_fraction``;
* **another process**: the request would fit without the memory other processes
  hold on the device;
* **held out of sight**: the request would fit without what the notebook keeps
  where the user does not look (output history, a kept exception's frames,
  graphs kept alive), which ``%vram free`` releases;
* **capacity**: none of these: the step needs more than the card (or cap) has.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._units import format_bytes

if TYPE_CHECKING:
    from ._postmortem import OOMState

__all__ = ["Fix", "Verdict", "verdict", "KINDS"]

#: the verdicts, in the order they are tried
KINDS = ("fragmentation", "per-process cap", "another process", "held out of sight", "capacity")


@dataclass(frozen=True)
class Fix:
    """A way out: what to do, the code, and the bytes it frees or adds (``None``: not computed)."""

    what: str
    code: str
    saving: int | None = None


@dataclass(frozen=True)
class Verdict:
    """Why the allocation failed.

    Attributes:
        kind: one of :data:`KINDS`.
        reason: one sentence with the numbers.
        short_by: bytes missing for the request (``None`` where it cannot be known).
        fixes: ranked, best first.
    """

    kind: str
    reason: str
    short_by: int | None = None
    fixes: list[Fix] = field(default_factory=list)


def _limit(s: OOMState) -> int | None:
    """What this process may use on the device: the cap if one is set, else the card."""
    return s.cap if s.cap is not None else s.total


def verdict(s: OOMState) -> Verdict:
    """The verdict for the state ``s`` (see the module docstring)."""
    req = s.requested or 0
    fmt = format_bytes
    if s.reserved is None or s.total is None:  # CPU: only capacity and what is held out of sight
        short = None if s.available is None else max(0, req - s.available)
        if s.hidden and req and s.available is not None and s.hidden + s.available >= req:
            return _hidden(s, req, short)
        where = f"{fmt(s.available)} available" if s.available is not None else "the memory the system gives"
        return Verdict("capacity", f"the allocation of {fmt(req)} needs more than {where}, with "
                                   f"{fmt(s.allocated)} of tensors alive at the failure", short, _capacity_fixes(s))
    limit = _limit(s)
    assert limit is not None
    capped = s.cap is not None and s.cap < s.total
    free_segments = max(0, s.reserved - s.allocated)  # in segments that also hold live blocks
    room_new = s.free_device if s.free_device is not None else max(0, s.total - s.reserved - (s.non_pytorch or 0))
    if capped:
        room_new = min(room_new, max(0, limit - s.reserved))
    largest = s.largest_free_block
    if largest is not None and largest < req <= free_segments + room_new:
        return Verdict(
            "fragmentation",
            f"free memory would hold the request ({fmt(free_segments)} free inside reserved segments + "
            f"{fmt(room_new)} the card still allows ≥ {fmt(req)}), but the largest free block is {fmt(largest)}: "
            "fragmentation, not capacity",
            0,
            [Fix(f"free the small live tensors that split the free space, or allocate the large one first "
                 f"(warm up with the longest sequence / largest batch)", "", free_segments),
             Fix("where sizes keep growing (variable lengths), let segments grow in place; it does not close holes "
                 "between live tensors (measured, notebook 09); set before CUDA starts: restart the kernel",
                 'os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"')])
    need = s.allocated + req  # live blocks and the request, were all free space one block
    outside = (s.non_pytorch or 0) + (s.other_processes or 0)  # on the card, not this process's allocator
    if capped and need > limit and need + outside <= s.total:
        return Verdict(
            "per-process cap",
            f"{fmt(s.allocated)} allocated + {fmt(req)} asked > the per-process cap of {fmt(limit)} "
            f"(torch.cuda.set_per_process_memory_fraction) on a {fmt(s.total)} card, which would hold it",
            need - limit,
            [Fix("raise or remove the cap", "torch.cuda.set_per_process_memory_fraction(1.0)", s.total - limit)])
    if s.other_processes and not capped and need + (s.non_pytorch or 0) <= s.total < need + outside:
        return Verdict(
            "another process",
            f"other processes hold {fmt(s.other_processes)} of the card; without them {fmt(req)} would fit",
            need + outside - s.total,
            [Fix("stop the other processes on this GPU (nvidia-smi lists them), or use another GPU",
                 "!nvidia-smi --query-compute-apps=pid,used_memory --format=csv", s.other_processes)])
    short = max(0, need - limit) if capped else max(0, need + outside - s.total)
    if s.hidden and s.hidden >= short > 0:
        return _hidden(s, req, short)
    what = f"the per-process cap ({fmt(limit)})" if capped else f"the card ({fmt(s.total)}, {fmt(outside)} of it " \
        "outside this process's allocator)"
    return Verdict("capacity",
                   f"{fmt(s.allocated)} allocated at the failure + {fmt(req)} asked is {fmt(short)} more than "
                   f"{what} holds", short, _capacity_fixes(s))


def _hidden(s: OOMState, req: int, short: int | None) -> Verdict:
    names = ", ".join(f"{n} {format_bytes(b)}" for n, b in s.hidden_by[:3])
    return Verdict("held out of sight",
                   f"the notebook holds {format_bytes(s.hidden or 0)} out of sight ({names}); without it "
                   f"{format_bytes(req)} would fit", short,
                   [Fix("release what the output history, kept exceptions and graphs hold", "%vram free", s.hidden)]
                   + _capacity_fixes(s))


def _capacity_fixes(s: OOMState) -> list[Fix]:
    fixes = []
    room = s.available if s.reserved is None else _limit(s)
    if s.requested and room is not None and s.requested > room:
        fixes.append(Fix("one request is larger than the whole device: read the shapes on the failing line "
                         "(an unintended broadcast, a batch or sequence far too large)", ""))
    if s.hidden:
        fixes.append(Fix("release what the notebook holds out of sight", "%vram free", s.hidden))
    kind = s.device.split(":")[0]
    fixes += [Fix("find a batch that fits", "vramnb.max_batch_size(model, batch, loss_fn, optimizer)"),
              Fix("train in bf16 autocast", f"with torch.autocast({kind!r}, dtype=torch.bfloat16): loss = ..."),
              Fix("recompute activations in backward", "model.gradient_checkpointing_enable()  # or "
                                                       "torch.utils.checkpoint.checkpoint(block, x)"),
              Fix("see each technique's saving on this model", "vramnb.compare(model, batch, loss_fn, optimizer)")]
    return fixes
