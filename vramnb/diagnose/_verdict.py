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

import importlib.util

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._units import format_bytes
from ._gates import autocast_sentence, smaller_batch

if TYPE_CHECKING:
    from ._postmortem import FailingCode, OOMState

__all__ = ["Fix", "Verdict", "verdict", "KINDS"]

#: the verdicts, in the order they are tried
KINDS = ("fragmentation", "per-process cap", "another process", "held out of sight", "capacity")


@dataclass(frozen=True)
class Fix:
    """A way out: what to do, the code, and the bytes it frees (``None``: not computed).

    ``estimated``: ``saving`` is the estimated drop of this step's peak (from
    :mod:`vramnb.diagnose._savings`), and ``fits`` whether the step would then fit
    (``None``: not known)."""

    what: str
    code: str
    saving: int | None = None
    estimated: bool = False
    fits: bool | None = None


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


def _cpu_room(s: OOMState) -> int | None:
    """What a CPU allocation could still get: the least of what the system has available and
    what the process's own limit allows (``None``: neither known)."""
    known = [x for x in (s.available, s.cap_room) if x is not None]
    return min(known) if known else None


def verdict(s: OOMState, techniques: list[Fix] | None = None) -> Verdict:
    """The verdict for the state ``s`` (see the module docstring). ``techniques``: fixes
    with this step's estimated savings (:func:`vramnb.diagnose._savings.step_fixes`),
    which replace the general ones where memory does not suffice."""
    need = getattr(techniques, "need", None)
    v = _step_verdict(s, need) if need is not None else None
    v = v or _verdict(s)
    whole = any(f.what.startswith("one request is larger") for f in v.fixes)
    if techniques and v.kind != "fragmentation" and not whole:
        general = {f.code for f in _general_fixes(s.device, s.context)}
        v.fixes[:] = [f for f in v.fixes if f.code not in general] + list(techniques)
    return v


def _step_verdict(s: OOMState, need: int) -> Verdict | None:
    """Where the failing step is known and estimated to need ``need`` bytes at its peak (with
    what the notebook held beside it) that this process cannot have: the cap or capacity,
    whatever the failing request met (a fragmented cache at the margin of a step that needs
    more anyway is not the cause). ``None`` where the step would fit."""
    fmt = format_bytes
    if s.reserved is not None and s.total is not None:
        limit = _limit(s)
        assert limit is not None
        capped = s.cap is not None and s.cap < s.total
        outside = 0 if capped else (s.non_pytorch or 0) + (s.other_processes or 0)
        if need + outside <= limit:
            return None
        what = f"the per-process cap of {fmt(limit)} on a {fmt(s.total)} card" if capped else \
            f"the {fmt(s.total)} card ({fmt(outside)} of it outside this process's allocator)"
        kind = "per-process cap" if capped and need + (s.non_pytorch or 0) + (s.other_processes or 0) <= s.total \
            else "capacity"
        fixes = [Fix("raise or remove the cap", "torch.cuda.set_per_process_memory_fraction(1.0)", s.total - limit)] \
            if kind == "per-process cap" else []
        return Verdict(kind, f"the step needs about {fmt(need)} at its peak (estimated), {fmt(need + outside - limit)} "
                             f"more than {what}; it failed asking {fmt(s.requested or 0)} with {fmt(s.allocated)} "
                             "allocated", need + outside - limit, _capacity_fixes(s, fixes))
    room = _cpu_room(s)
    if room is None or need <= room + s.allocated:
        return None
    short = need - room - s.allocated
    if s.cap_room is not None and (s.available is None or need <= s.available + s.allocated):
        return Verdict("per-process cap", f"the step needs about {fmt(need)} at its peak (estimated), {fmt(short)} "
                                          f"more than this process's own limit ({s.cap_name or 'address space or data'}"
                                          f") allows; the system has {fmt(s.available) if s.available is not None else 'more'} "
                                          "available", short, _capacity_fixes(s, [_raise_limit(s)]))
    return Verdict("capacity", f"the step needs about {fmt(need)} at its peak (estimated), {fmt(short)} more than "
                               "this process could have", short, _capacity_fixes(s))


def _raise_limit(s: OOMState) -> Fix:
    name = s.cap_name or "RLIMIT_AS"
    return Fix("raise the process's limit (up to its hard limit)",
               f"import resource; resource.setrlimit(resource.{name}, resource.getrlimit(resource.{name})[1:] * 2)")


def _verdict(s: OOMState) -> Verdict:
    req = s.requested or 0
    fmt = format_bytes
    if s.reserved is None or s.total is None:  # CPU: out of sight, the process's own limit, capacity
        return _cpu_verdict(s, req)
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
            [Fix("free the small live tensors that split the free space, or allocate the large one first "
                 "(warm up with the longest sequence / largest batch)", "", free_segments),
             Fix("where sizes keep growing (variable lengths), let segments grow in place; it does not close holes "
                 "between live tensors (measured, notebook 09); set before CUDA starts: restart the kernel",
                 'os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"')])
    need = s.allocated + req  # live blocks and the request, were all free space one block
    outside = (s.non_pytorch or 0) + (s.other_processes or 0)  # on the card, not this process's allocator
    short = max(0, need - limit) if capped else max(0, need + outside - s.total)
    if s.hidden and s.hidden >= short > 0:  # freeing it is the fix, whatever the cap or other processes hold
        return _hidden(s, req, short)
    if capped and need > limit and need + outside <= s.total:
        return Verdict(
            "per-process cap",
            f"{fmt(s.allocated)} allocated + {fmt(req)} asked > the per-process cap of {fmt(limit)} "
            f"(torch.cuda.set_per_process_memory_fraction) on a {fmt(s.total)} card, which would hold it",
            need - limit,
            _capacity_fixes(s, [Fix("raise or remove the cap", "torch.cuda.set_per_process_memory_fraction(1.0)",
                                    s.total - limit)]))
    if s.other_processes and not capped and need + (s.non_pytorch or 0) <= s.total < need + outside:
        return Verdict(
            "another process",
            f"other processes hold {fmt(s.other_processes)} of the card; without them {fmt(req)} would fit",
            need + outside - s.total,
            [Fix("stop the other processes on this GPU (nvidia-smi lists them), or use another GPU",
                 "!nvidia-smi --query-compute-apps=pid,used_memory --format=csv", s.other_processes)])
    what = f"the per-process cap ({fmt(limit)})" if capped else f"the card ({fmt(s.total)}, {fmt(outside)} of it " \
        "outside this process's allocator)"
    return Verdict("capacity",
                   f"{fmt(s.allocated)} allocated at the failure + {fmt(req)} asked is {fmt(short)} more than "
                   f"{what} holds", short, _capacity_fixes(s))


def _cpu_verdict(s: OOMState, req: int) -> Verdict:
    """The CPU verdict. The room is read where the tracker's dispatch mode sees the operator fail,
    after that operator's C++ code has unwound (its other results and workspace freed), or later,
    after the whole error unwound: where the request is no more than the room read, less than it
    was free at the failure, and the sentence says so instead of "needs more than" the room."""
    fmt = format_bytes
    room = _cpu_room(s)
    short = _short(s)
    if s.hidden and short is not None and s.hidden >= short > 0:  # freeing it is the fix, whatever the limit
        return _hidden(s, req, short)
    when = "at the failure" if s.at_failure else "after the error unwound"
    # which bound is the tighter: the process's own limit, else the memory the system has available
    capped = s.cap_room is not None and (s.available is None or s.cap_room <= s.available)
    system = f"the system has {fmt(s.available) if s.available is not None else 'more'} available"
    freed = ("after the failing operation's own allocations (its other results or workspace, which the tracker "
             "does not see until it returns) were freed as it unwound" if s.at_failure else
             "after what the failing code held was freed as the error unwound")
    limit = f"this process's own limit ({s.cap_name or 'address space or data'}: ulimit, resource.setrlimit)"
    if s.cap_room is not None and s.available is not None and req > max(s.available, s.cap_room):
        # more than the system has too: raising the limit is no way out
        return Verdict("capacity", f"the allocation of {fmt(req)} is more than the {fmt(s.available)} the system has "
                                   f"available and the {fmt(s.cap_room)} {limit} still allows, with "
                                   f"{fmt(s.allocated)} of tensors alive {when}", req - max(s.available, s.cap_room),
                       _capacity_fixes(s))
    if capped and s.cap_room is not None:
        if req > s.cap_room:
            return Verdict("per-process cap",
                           f"the allocation of {fmt(req)} is more than the {fmt(s.cap_room)} {limit} still allows, "
                           f"of {fmt(s.cap or 0)}; {system}", req - s.cap_room,
                           _capacity_fixes(s, [_raise_limit(s)]))
        return Verdict("per-process cap",
                       f"the allocation of {fmt(req)} found less than that free under {limit} of "
                       f"{fmt(s.cap or 0)}: {fmt(s.cap_room)} is free under it now, {freed} (more than "
                       f"{fmt(s.cap_room - req)} of it); {system}", None, _capacity_fixes(s, [_raise_limit(s)]))
    if room is None:
        return Verdict("capacity", f"the allocation of {fmt(req)} failed, with {fmt(s.allocated)} of tensors alive "
                                   f"{when} (the memory the system has available is not known)", None,
                       _capacity_fixes(s))
    if req > room:
        return Verdict("capacity", f"the allocation of {fmt(req)} is more than the {fmt(room)} the system has "
                                   f"available, with {fmt(s.allocated)} of tensors alive {when}", req - room,
                       _capacity_fixes(s))
    return Verdict("capacity", f"the allocation of {fmt(req)} found less than that available on the system: "
                               f"{fmt(room)} is available now, {freed} (other processes may have freed memory "
                               f"since, too), with {fmt(s.allocated)} of tensors alive {when}", None,
                   _capacity_fixes(s))


def _hidden(s: OOMState, req: int, short: int | None) -> Verdict:
    names = ", ".join(f"{n} {format_bytes(b)}" for n, b in s.hidden_by[:3])
    return Verdict("held out of sight",
                   f"the notebook holds {format_bytes(s.hidden or 0)} out of sight ({names}); without it "
                   f"{format_bytes(req)} would fit", short, _capacity_fixes(s))


def _capacity_fixes(s: OOMState, first: list[Fix] | None = None) -> list[Fix]:
    """The fixes for memory that does not suffice, best first: what the notebook holds out of
    sight, the variables whose deletion would close the gap, the training techniques (only
    where a model ran, and not those the failing code already uses), then variables whose
    deletion helps but does not close it alone. None of the training ones for a single
    request larger than the whole device (a shape to read, not memory to save). Variables
    the failing code refers to (its model, its optimizer) are never offered for deletion."""
    ctx = s.context
    fixes = []
    if s.hidden:
        parts = ", ".join(f"{k} {format_bytes(b)}" for k, b in s.hidden_by[:3])
        fixes.append(Fix(f"release what the notebook holds out of sight ({parts or format_bytes(s.hidden)}): the "
                         "output history, and a previous error's traceback, whose frames keep cycles that only "
                         "gc.collect() frees (%vram free does both)", "%vram free", s.hidden))
    # the whole device: the limit (CUDA: the cap or the card; CPU: the process's limit, else what is
    # available plus what tensors hold)
    if s.reserved is not None:
        whole = _limit(s)
    elif s.cap is not None:
        whole = s.cap
    else:
        whole = None if s.available is None else s.available + s.allocated
    line = [Fix(*ctx.transient)] if ctx is not None and ctx.transient else []  # the failing line's own copy
    line += [Fix(*f) for f in ctx.built] if ctx is not None else []  # a constructor's: the old model, a buffer
    if s.requested and whole is not None and s.requested > whole:
        return line + [Fix("one request is larger than the whole device: read the shapes on the failing line "
                           "(an unintended broadcast, a batch or sequence far too large)", "")] + fixes
    enough, partial = _holder_fixes(s)
    short = _short(s)
    room = _cpu_room(s) if s.reserved is None else None
    if s.requested and room is not None and s.at_failure and not line and s.requested > s.allocated + room \
            and s.requested > 4 * s.allocated:
        # one request far larger than every tensor alive together, and more than they could get: a shape to read
        # (under a process limit the whole address space is mostly the interpreter's own, no measure of this;
        # after the error unwound, what tensors hold now is not what they held at the failure: not said;
        # where the failing line's own operation is named above, its shapes are read there already)
        first = (first or []) + [Fix(
            f"one request of {format_bytes(s.requested)} is more than the {format_bytes(s.allocated)} all tensors "
            f"hold and the {format_bytes(room)} still free together: read the shapes on the failing line "
            "(an unintended broadcast, a batch or sequence far too large)", "")]
    first = line + (first or [])  # the failing line's own copy: a shape of code to change, first
    first = _default_dtype_fixes(ctx) + first
    first = _local_growth_fixes(s) + first
    joined = _join_fixes(s)
    kept = _kept_containers(s)
    gap = None
    if short is not None and short > 0 and s.frames_graph is not None and s.requested and s.at_failure \
            and ctx is not None and ctx.phase == "":
        gap = (short, s.frames_graph, s.requested)
    general = _general_fixes(s.device, ctx, _limit(s) if s.reserved is not None else None, keeps=bool(kept), gap=gap)
    if joined and ctx is not None and ctx.grows <= set(ctx.joins):
        # each grown name has its own line, with its bytes: the general one about what the loop keeps is said there
        general = [f for f in general if not f.what.startswith(_ABOUT_KEPT[1:])]
    first = joined + first
    held = sum(f[2] for f in s.handled)
    if held and ((short is not None and held >= short > 0) or (short is None and held >= (s.requested or 0))):
        # the exception being handled keeps the failed attempt's tensors: leaving the except block frees them
        first = [Fix(f"the failing code runs inside an except block: the exception being handled keeps "
                     f"{format_bytes(held)} of the failed attempt alive until the block ends (its traceback's "
                     "frames); note the failure in the block and retry after it",
                     "failed = False\ntry:\n    ...  # the first attempt\nexcept RuntimeError:\n    failed = True\n"
                     "if failed:\n    ...  # the retry, after the except block", held)] + first
    if kept & {f.code for f in enough}:
        # what runs out is what the failing code keeps adding to: techniques that shrink a step's activations or
        # precision cannot help (the kept tensors stay), so none is offered; what the loop keeps and the graphs
        # kept where no backward runs stay
        general = [f for f in general if f.what.startswith(_ABOUT_KEPT)]
    return fixes + enough + (first or []) + general + partial


def _local_growth_fixes(s: OOMState) -> list[Fix]:
    """A line for each list or dict a failing function of the user's adds to that holds at least a quarter of what is
    allocated (:attr:`FailingCode.local_grows`, with the bytes the failing frames' variable keeps): it grows with
    every step, whatever the batch; where it is used only under a flag, adding to it only then is the fix."""
    ctx = s.context
    if ctx is None or not ctx.local_grows:
        return []
    out = []
    for where, var, held, _graph in s.frames:
        if var not in ctx.local_grows or held * 4 < max(s.allocated, 1):
            continue
        fn, flag = ctx.local_grows[var]
        if not where.startswith(fn.split(".")[-1]) and not where.startswith(fn):
            continue
        text = (f"{var}, which {fn} adds to at every step, keeps {format_bytes(held)} ({held * 100 // max(s.allocated, 1)} % of "
                f"what is allocated): it grows with the number of steps, whatever the batch")
        if flag:
            text += (f"; it is used only where {flag} is set: add to it only then (`if {flag}: {var}.append(...)`), "
                     f"and with {flag} off it keeps nothing")
        else:
            text += "; keep less in it per step (reduced values, or each step's tensor on the CPU), or fewer steps"
        out.append(Fix(text, ""))
    return out[:2]


#: joins that concatenate along an existing dimension (the list of parts joins the same way once)
_CONCATS = ("cat", "concat", "concatenate", "vstack", "hstack", "row_stack", "column_stack", "dstack")


def _join_fixes(s: OOMState) -> list[Fix]:
    """A line for each tensor the failing cell's loop rebinds to a join of its old value
    (``preds = torch.cat([preds, logits])``, :attr:`FailingCode.joins`) that holds at least a
    quarter of the request on the failing device and that the loop only collects (reads nowhere
    else): it grows at every pass, whatever the batch, and each join holds the old and the new
    tensor at once. The code keeps each pass's
    part in a list (on the CPU where the device is another) and joins once after the loop."""
    ctx = s.context
    if ctx is None:
        return []
    kind = s.device.split(":")[0]
    out = []
    for name, (join, held, dev) in ctx.joins.items():
        if not join.tensor or join.read or dev != kind or held < max(1 << 20, (s.requested or 0) // 4):
            # (a tensor the loop also computes with, a cache, is not only collected: joining once after is no fix)
            continue
        where = ("keep each pass's part on the CPU and join once after the loop" if kind != "cpu" else
                 "collect each pass's part in a list and join once after the loop (no old-and-new copy at every pass)")
        what = (f"`{join.statement}` rebinds {name} to a new, longer tensor at every pass of the loop ({name} holds "
                f"{format_bytes(held)} now): it grows at every pass, whatever the batch, and each join "
                f"holds the old and the new {name} at once; {where}")
        if ctx.trains:  # a model's outputs (no plain tensor computation): predictions or a metric may be all it needs
            what += (", or, where only predictions or a metric are needed, keep only those, not whole outputs"
                     + (f" (`{join.part}.argmax(-1)` for class predictions)" if join.part is not None else ""))
        code = ""
        # code only for a concatenation of the name itself and one part (a stack of a growing tensor, or of its
        # unpacked rows, is another shape); the value bound before the loop, if any, is the first part
        if join.part is not None and join.func.rsplit(".", 1)[-1] in _CONCATS and not join.starred:
            moved = join.part + (".detach()" if ctx.grad else "") + (".cpu()" if kind != "cpu" else "")
            kws = f", {join.keywords}" if join.keywords else ""
            code = (f"{name}_parts = [] if {name} is None else [{name}]  # before the loop\n"
                    f"{name}_parts.append({moved})  # in the loop, instead of `{join.statement}`\n"
                    f"{name} = {join.func}({name}_parts{kws})  # once, after the loop")
        out.append(Fix(what, code))
    return out


#: why nothing is saved for backward where gradients are on (:func:`_no_grad_fixes`'s ``why``)
_FROZEN = "with no parameter of the model requiring grad (and no input that does)"
_NO_GRAPH = "with no autograd graph behind anything the failing code holds"


#: the general fixes about what a loop keeps (not capacity techniques)
_ABOUT_KEPT = ("no backward runs in the failing code", "with gradients off nothing is kept for backward",
               f"{_FROZEN} nothing is kept for backward", f"{_NO_GRAPH} nothing is kept for backward")


def _kept_containers(s: OOMState) -> set[str]:
    """The codes (``name.clear()``) of the containers that hold bytes and that the failing
    code adds to (``ctx.mutated``)."""
    ctx = s.context
    if ctx is None:
        return set()
    out = set()
    for h in s.holders:
        if len(h) > 3 and h[3] in _CONTAINER_KINDS and h[1] > 0 and h[0].split("[")[0].split(".")[0] in ctx.mutated:
            out.add(f"{h[0]}.clear()")
    return out


#: holder kinds that are the training itself where the failing code uses them: never deleted
_TRAINING_KINDS = ("Module", "Optimizer")
_CONTAINER_KINDS = ("list", "dict", "deque", "set", "tuple")


def _holder_fixes(s: OOMState) -> tuple[list[Fix], list[Fix]]:
    """``(closing the gap, helping)``: a holder the failing code does not use is deleted; a
    list or dict it adds to (a history of losses kept with their graphs: ``ctx.mutated``) is
    emptied; one it only reads (its data), the model and optimizer it trains are left alone."""
    ctx = s.context
    short = _short(s)
    enough, partial = [], []
    for h in s.holders:  # (name, holds, frees[, kind])
        if len(h) < 3 or h[2] <= 0:
            continue
        name, holds, frees = h[:3]
        kind = h[3] if len(h) > 3 else ""
        root = name.split("[")[0].split(".")[0]
        used = ctx is not None and root in ctx.in_use
        if not used and ctx is not None and root in ctx.reads:
            continue  # the failing cell reads it (after the failing line, or again when run again): no `del`
        if used and (kind not in _CONTAINER_KINDS or ctx is None or root not in ctx.mutated):
            continue  # the training itself, or data the failing code only reads: emptying it is no fix
        if used and ctx is not None and root in ctx.joined:
            continue  # the parts the failing line joins: the join needs them (its own line says what instead)
        if used:
            instead = ctx.stores.get(root) if ctx is not None else None
            keep = f"keep less in it ({instead})" if instead else "keep numbers or reduced values, not whole tensors"
            if ctx is not None and root in ctx.results:
                # what the code builds (torch.stack(rows) after the loop): emptying it destroys the result
                if not instead:
                    continue
                partial.append(Fix(f"{name} ({kind}), which the failing code adds to and then uses as its result, "
                                   f"keeps {format_bytes(holds)}: {keep}", ""))
                continue
            f = Fix(f"{name} ({kind}), which the failing code adds to, keeps {format_bytes(holds)}: {keep}, or empty "
                    f"it; that frees {format_bytes(frees)}", f"{name}.clear()", frees)
        elif kind == "Module" and "[" not in name and "." not in name:
            # an idle model (a deep copy kept beside the one that trains): kept somewhere else, or deleted
            if s.device.split(":")[0] != "cpu":
                f = Fix(f"{name}, a model the failing code does not name, keeps {format_bytes(holds)} on the device: "
                        f"move it to the CPU (`{name}.to('cpu')`) where it is still needed, else delete it; either "
                        f"frees up to {format_bytes(frees)}", f"{name}.to('cpu')  # or: del {name}", frees)
            else:
                f = Fix(f"{name}, a model the failing code does not name, keeps {format_bytes(holds)}: save it to disk "
                        f"where it is still needed (`torch.save({name}.state_dict(), '{name}.pt')`) and delete it "
                        f"(on a GPU: `{name}.to('cpu')`); deleting it frees {format_bytes(frees)}",
                        f"torch.save({name}.state_dict(), '{name}.pt')  # where it is still needed\ndel {name}",
                        frees)
        else:
            f = Fix(f"{name} keeps {format_bytes(holds)}; deleting it frees {format_bytes(frees)}", f"del {name}", frees)
        if short is not None and frees >= short:
            enough.append(f)
        elif frees >= max(s.requested or 0, 1) // 4:
            partial.append(f)
    return enough, partial


def _short(s: OOMState) -> int | None:
    """Bytes missing for the request (``None``: not known)."""
    req = s.requested or 0
    if s.reserved is None or s.total is None:
        room = _cpu_room(s)
        # no more than the room read: less was free at the failure, by an amount not known
        return None if room is None or req <= room else req - room
    limit = _limit(s)
    if limit is None:
        return None
    outside = 0 if s.cap is not None and s.cap < s.total else (s.non_pytorch or 0) + (s.other_processes or 0)
    return max(0, s.allocated + req + outside - limit)


def _default_dtype_fixes(ctx: FailingCode | None) -> list[Fix]:
    """Where the default dtype is float64 (``torch.set_default_dtype``, often in a module imported for
    something else) and the failing operator makes float64: every tensor and layer made without a dtype
    is double, twice the bytes of float32 (pytorch#4588)."""
    import torch

    if ctx is None or ctx.op is None or torch.get_default_dtype() is not torch.float64:
        return []
    try:
        outs = ctx.op.outputs or ()
    except Exception:  # noqa: BLE001 - no replay of the operator: nothing said
        return []
    double = [o for o in outs if str(o[1]).removeprefix("torch.") == "float64"]
    if not double:
        return []
    return [Fix(f"the default dtype is float64 (torch.get_default_dtype(); set by torch.set_default_dtype, here or in "
                f"a module imported before), so every tensor and layer made without a dtype is double precision, "
                f"twice the bytes of float32, and the failing operation makes a float64 result "
                f"({format_bytes(sum(o[2] for o in double))}): set float32 back before the model and the data are made, "
                "and ask for float64 by name only where a computation needs it",
                "torch.set_default_dtype(torch.float32)  # then re-create the model and inputs (or .float() them)")]


def _general_fixes(device: str, ctx: FailingCode | None = None, limit: int | None = None,
                   keeps: bool = False, gap: tuple[int, int, int] | None = None) -> list[Fix]:
    """The training techniques, without savings (the step is not known): none where no model
    ran in the failing code; not those it already uses (autocast, checkpointing), no
    checkpointing where gradients were off; with the notebook's own names. On CUDA the last is
    :func:`vramnb.fit` for this card (``limit``: the cap or the card, bytes), which estimates
    every combination and gives the code. ``keeps``: the failing code adds tensors to a
    container that holds bytes (what a loop keeps grows).

    ``gap``: ``(bytes short, bytes the failing frames hold through autograd graphs, bytes
    requested)`` where all three are known, for a failure outside backward and the optimizer:
    recomputation frees at most what the graphs saved for backward (:func:`_recompute_can_close`),
    bf16 autocast at most half of that and, where the failing operator runs in bf16 under
    autocast, half the request (:func:`_autocast_can_close`); a technique that cannot close the
    gap is not offered, and one line says why."""
    if ctx is not None and ctx.phase == "optimizer step":
        return _optimizer_fixes(ctx)
    if ctx is not None and ctx.phase == "constructor":  # no forward or backward ran: no step technique applies
        return []  # what it builds is said first (ctx.built)
    if ctx is not None and ctx.dense_grad:  # the request is an embedding table's dense gradient, not activations
        return []
    if ctx is not None and not ctx.trains:
        return []
    if ctx is not None and not ctx.grad:
        return _no_grad_fixes(device, ctx, keeps)
    if ctx is not None and ctx.backward is False and not ctx.phase and ctx.model_grad is False:
        # gradients on, but no parameter of the model requires grad: its forward saves nothing for backward
        return _no_grad_fixes(device, ctx, keeps, why=_FROZEN)
    if ctx is not None and ctx.backward is False and not ctx.phase and ctx.graphs is False:
        # gradients on, but nothing the failing code holds has a graph (outputs made under no_grad, joined after it)
        return _no_grad_fixes(device, ctx, keeps, why=_NO_GRAPH)
    if ctx is not None and ctx.backward is False and not ctx.phase:
        return _forward_only_fixes(device, ctx, keeps)
    if ctx is not None and ctx.forward is None and not ctx.phase and ctx.graphs is False:
        # outside any forward and backward, and nothing held has a graph (a batch copied before the first
        # forward): no activations exist for autocast or recomputation to shrink
        return []
    if ctx is not None and ctx.model is None:  # no notebook name for the model: no code with invented names
        return []
    kind = device.split(":")[0]
    model = (ctx.model if ctx is not None else None) or "model"
    # no optimizer in use: none is named (the step is then profiled without one), never a name the notebook lacks
    opt = ctx.optimizer if ctx is not None else "optimizer"
    args = f"{model}, batch, loss_fn" + (f", {opt}" if opt else "")
    yours = "  # batch and loss_fn: yours"
    out = []
    if ctx is not None and ctx.summed is not None:
        total, stmt, part, keep = ctx.summed
        each = "loss_part" if not total.isidentifier() else f"{total}_part"
        out.append(Fix(f"`{stmt}` keeps every part's autograd graph (its activations) alive until the one "
                       f"`{total}.backward()`: call backward on each part as it is computed instead; the gradients "
                       "accumulate in .grad to the same sum, and each part's graph is freed at once (pass "
                       "retain_graph=True where the parts share a graph made before the loop)",
                       f"{each} = {part}  # in the loop, instead of `{stmt}`\n{each}.backward()\n"
                       f"{keep.format(part=each)}  # and no {total}.backward() after the loop"))
    if kind == "cuda":  # the search models a CUDA card
        out.append(Fix("find a batch that fits", f"vramnb.max_batch_size({args}){yours}"))
    autocast = (ctx is None or not ctx.autocast) and (ctx is None or ctx.model_fp32 is not False)
    recompute = (ctx is None or not ctx.checkpointing) and (ctx is None or ctx.grad)
    cannot: list[str] = []  # the techniques that would apply but cannot close the gap
    if autocast and gap is not None and ctx is not None and not _autocast_can_close(gap, ctx.lowered):
        autocast, cannot = False, cannot + ["bf16 autocast"]
    if recompute and gap is not None and not _recompute_can_close(gap):
        recompute, cannot = False, cannot + ["recomputing activations (checkpointing)"]
    if autocast:
        out.append(Fix("bf16 autocast around the forward and the loss",
                       f"with torch.autocast({kind!r}, dtype=torch.bfloat16):\n    loss = loss_fn({model}, batch)"
                       f"{yours}"))
    if recompute:
        method = ctx.checkpoint_method if ctx is not None else None
        out.append(Fix("recompute activations in backward",
                       f"{model}.{method}()" if method else
                       "x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)  # around each block, "
                       "in the forward"))
    if cannot and gap is not None:
        out.append(Fix(_cannot_close(cannot, gap, ctx), ""))
    if kind == "cuda":
        target = f", target={limit}" if limit else ""
        out.append(Fix("the fastest combination of techniques that fits, with its code",
                       f"vramnb.fit({args}{target}){yours}"))
    elif autocast or recompute or not cannot:  # where one cannot close the gap, only the other is compared
        toggles = (['"precision": ["fp32", "bf16"]'] if autocast or not cannot else []) + \
                  (['"checkpointing": ["off", "every block"]'] if recompute or not cannot else [])
        out.append(Fix("each technique's saving on this model",
                       f"vramnb.compare({args}, toggles={{{', '.join(toggles)}}}){yours}"))
    return out


def _recompute_can_close(gap: tuple[int, int, int]) -> bool:
    """Whether recomputing activations in backward could free the bytes missing: it frees at most
    what the graphs the failing frames hold saved for backward (``gap``: short, saved, requested)."""
    short, saved, _ = gap
    return saved >= short


def _autocast_can_close(gap: tuple[int, int, int], lowered: bool | None) -> bool:
    """Whether bf16 autocast could free the bytes missing: it halves at most the activations saved
    for backward and, unless the failing operator is known to run in float32 under autocast
    (``lowered`` False), the request (``gap``: short, saved, requested)."""
    short, saved, req = gap
    return saved // 2 + (0 if lowered is False else req // 2) >= short


def _cannot_close(names: list[str], gap: tuple[int, int, int], ctx: FailingCode | None) -> str:
    """One line: why the named training techniques are not offered (true for the numbers in ``gap``)."""
    short, saved, req = gap
    op = f"`{ctx.op_name}` " if ctx is not None and ctx.op_name else "the failing operator "
    why = [f"the failing code holds {format_bytes(saved)} saved for backward, all that recomputation could free"
           if "recomputing activations (checkpointing)" in names else ""]
    if "bf16 autocast" in names:
        keeps = (f"{op}stays float32 under autocast, and " if ctx is not None and ctx.lowered is False else "")
        why.append(f"{keeps}autocast halves at most the saved activations"
                   + ("" if ctx is not None and ctx.lowered is False else " and the request"))
    return (f"{' and '.join(names)} cannot close this gap: the request of {format_bytes(req)} is "
            f"{format_bytes(short)} more than the room left; " + "; ".join(w for w in why if w)
            + ": change the failing line's shapes instead")


def _optimizer_fixes(ctx: FailingCode) -> list[Fix]:
    """The fixes for a failure inside ``optimizer.step()``: its state (created at the first
    step: Adam's two tensors per parameter) and the step's temporaries. Autocast and
    checkpointing act on activations, which are freed by then: not offered. Code only with
    the notebook's own names."""
    opt, model, facts = ctx.optimizer, ctx.model, ctx.optim
    out = []
    state = ""
    if opt and facts is not None and facts.per_param:
        names = "exp_avg, exp_avg_sq" + (", max_exp_avg_sq" if facts.per_param == 3 else "")
        words = {2: "two", 3: "three"}[facts.per_param]
        state = (f"{facts.kind} keeps {words} state tensors ({names}) per trainable parameter, each of the parameter's "
                 f"shape and dtype, made at its first step(): {opt}'s {facts.numel:,} trainable parameters "
                 f"({format_bytes(facts.nbytes)}) take {format_bytes(facts.per_param * facts.nbytes)} of state; ")
    if opt and (facts is None or facts.foreach):
        out.append(Fix("the step's temporaries: this step runs the multi-tensor (foreach) kernels, which work on all "
                       "of a group's tensors at once; one tensor at a time needs less",
                       f'for g in {opt}.param_groups:\n    g["foreach"] = False'))
    if opt:  # the swap takes exactly what the optimizer steps: model.parameters() only where that is all of it
        from ._optim_target import swap_arguments

        args = swap_arguments(opt, model, ctx.optim_is_model)
        if importlib.util.find_spec("bitsandbytes") is not None:
            out.append(Fix("8-bit Adam: its two state tensors in 1 byte per value instead of 4 (bitsandbytes)",
                           f"import bitsandbytes as bnb\n{opt} = bnb.optim.AdamW8bit({args})"))
        out.insert(0, Fix(f"an optimizer with less state: {state}Adafactor keeps factored second moments (rows + "
                          "columns), SGD one momentum tensor per parameter or none",
                          f"{opt} = torch.optim.Adafactor({args})"))
    elif state:
        out.insert(0, Fix(f"an optimizer with less state: {state}Adafactor keeps factored second moments (rows + "
                          "columns), SGD one momentum tensor per parameter or none", ""))
    out.append(Fix("train fewer parameters (freeze layers, LoRA): the optimizer keeps state only for those that "
                   "require grad", ""))
    return out


def _forward_only_fixes(device: str, ctx: FailingCode, keeps: bool = False) -> list[Fix]:
    """The fixes for a failure with gradients on in notebook code that calls no backward and
    no optimizer step (an evaluation or a generation loop written without ``no_grad``): each
    forward keeps its activations for a backward that the code never runs. Training
    techniques (checkpointing, autocast for a loss) are not offered."""
    first = Fix("no backward runs in the failing code, yet gradients are on: each forward keeps its activations "
                "for a backward; if none will run on these outputs, turn gradients off around the failing code",
                "with torch.no_grad():  # or torch.inference_mode()\n    ...  # the failing code")
    return [first] + _no_grad_fixes(device, ctx, keeps)


def _no_grad_fixes(device: str, ctx: FailingCode, keeps: bool = False,
                   why: str = "with gradients off") -> list[Fix]:
    """The fixes for a failure with gradients off (evaluation, inference): nothing is saved
    for backward, so recomputing in backward is no fix. Gradients left from training
    (``ctx.grads``) first; the outputs a loop keeps only where the failing code adds to a
    container that holds bytes (``keeps``) or grows one with every step's results
    (``ctx.grows``); then each step's own activations (a smaller batch, bf16 autocast: only where
    nothing grows with the samples seen)."""
    out = []
    if ctx.grads:
        model, held = ctx.grads
        opt = ctx.optimizer
        out.append(Fix(f"the gradients left from training on {model}'s parameters hold {format_bytes(held)} while "
                       "gradients are off; evaluation needs none: drop them before evaluating",
                       f"{opt}.zero_grad(set_to_none=True)" if opt else f"{model}.zero_grad(set_to_none=True)",
                       held))
    if keeps or ctx.grows:
        grown = f" ({', '.join(sorted(ctx.grows))})" if ctx.grows else ""
        # on the CPU the outputs are on the CPU already: moving them there frees nothing
        where = "on the CPU (.cpu()) or " if device.split(":")[0] != "cpu" else ""
        if not (ctx.grows and ctx.grows <= ctx.results):  # what the loop builds as its result: not to be reduced
            out.append(Fix(f"{why} nothing is kept for backward: what grows is what the loop keeps{grown}; keep "
                           f"each step's outputs {where}reduced (predictions, metrics), not whole output tensors"
                           + (" on the device" if where else ""), ""))
    if not ctx.grows:  # a container of every step's results grows with the samples seen, whatever the batch
        out += [Fix(w, "") for w in [smaller_batch(ctx)] if w]
    # a half-precision model: nothing to halve; what grows with the samples seen: halving a step is no fix
    if not ctx.autocast and ctx.model and ctx.model_fp32 is not False and not ctx.grows:
        what = autocast_sentence(ctx)
        if what:
            kind = device.split(":")[0]
            out.append(Fix(what, f"with torch.autocast({kind!r}, dtype=torch.bfloat16):\n    out = {ctx.model}(batch)"
                                 "  # batch: yours"))
    return out
