"""Profile one training step of a live model: where its memory goes, phase by phase.

:func:`profile_step` runs a real step (forward, backward, optimizer step,
``zero_grad``) on the user's own model and optimizer, twice by default (the
first step, where a lazily-built optimizer state appears, and a steady-state
step), records every allocation (:mod:`vramnb._timeline`), labels each by
source (:mod:`vramnb._sources`), and restores the model and optimizer exactly
(:mod:`vramnb._restore`).

Attribution rules. Each allocation belongs to one source; where several fit,
the first in ``SOURCES`` wins. Parameters, buffers and the batch are the
storages alive at the start that back them; gradients and optimizer state are
those backing ``.grad`` and ``optimizer.state`` at the marks; activations are
the storages autograd saved for backward (``torch.autograd.graph.saved_tensors_hooks``);
on CUDA, *workspace* is memory the caching allocator handed out that backs
no tensor (cuBLAS/cuDNN workspaces); temporaries are everything else the step
allocated; *other* is memory held before the step by anything else (garbage
waiting in reference cycles is collected first: it is not counted).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import pickle
import re
import time
import warnings
from collections.abc import Callable, Collection, Mapping
from typing import Any

import torch

from ._optim_state import per_parameter, state_tensors
from ._breakdown import Breakdown, ModuleMemory, StepReport, StepResult
from ._plan import StepPlan
from .techniques import Recipe
from ._probe import CpuProbe, CudaProbe, probe_for
from ._interrupt import InterruptGuard, interruptible, protected
from ._restore import SetAside, Snapshot, run_all
from ._sources import SOURCES
from ._containers import step_batch
from ._code_state import ours
from ._exclusive import one_at_a_time
from ._no_effect import EffectWatch
from ._reach import Reach
from ._attribution import SavedTensors, key_fn, keys_of, label_intervals, sum_by_label, tensor_keys, viewed_bytes_of
from ._timeline import CpuRecorder, CudaRecorder, Timeline, block_size, history_enabled
from ._tracker import cpu_tracker
from ._compiled import compiled_note
from ._units import format_bytes
from ._versions import versions
from ._measure import oom_info
from ._oom import is_oom
from .diagnose import OOMState, install_cuda_observer
from .diagnose._postmortem import held_outside, listening, oom_device_name

__all__ = ["profile_step", "MARKS", "PHASES"]

MARKS = ("start", "after forward", "after backward", "after optimizer step", "after zero_grad")
PHASES = ("forward", "backward", "optimizer step", "zero_grad")


from ._checks import (  # noqa: E402,F401 - the checks live in _checks; imported here by other modules too
    InputError, _batch_tensors, _check_loss, check_closure, check_hooks, check_inputs, check_loss_fn, check_options, default_loss,
)


def _state_tensors(optimizer: torch.optim.Optimizer | None) -> list[torch.Tensor]:
    if optimizer is None:
        return []
    return state_tensors(optimizer)


# -- one step ---------------------------------------------------------------------
class _StepRun:
    """State of one profiled step: recorder, mark keys, saved activations, modules."""

    recorder: CudaRecorder | CpuRecorder  # made when the step starts, for the device

    def __init__(self, plan: StepPlan, module_depth: int | None, reach: Reach | None = None,
                 effects: EffectWatch | None = None) -> None:
        self.plan = plan
        self.reach = reach
        self.effects = effects
        self.model, self.optimizer, self.device = plan.model, plan.optimizer, plan.device
        self.module_depth = module_depth
        self.key = key_fn(plan.device, plan.tracker.device_type if plan.tracker is not None else None)
        self.cuda = plan.device.type == "cuda"
        self.probe = probe_for(plan.device)
        self.mark_keys: dict[str, dict[str, set[int]]] = {}
        self.samples: dict[str, Any] = {}
        self.phase = "forward"
        self.got_grad: set[int] = set()
        self.loss_keys: set[int] = set()
        self.module_events: list[tuple[str, str, Any]] = []  # (name, "enter"/"exit", position)

    def position(self) -> Any:
        if isinstance(self.recorder, CudaRecorder):  # on CUDA (self.cuda)
            return self.recorder.position()
        return self.recorder.timeline.n_events

    def mark(self, name: str) -> None:
        params = list(self.model.parameters())
        keys = {  # first, so that a mark is all there or not at all
            "gradients": keys_of((p.grad for p in params), self.key),
            "optimizer state": keys_of(_state_tensors(self.optimizer), self.key),
        }
        self.recorder.mark(name)
        self.mark_keys[name] = keys
        # no synchronisation inside the step: the allocator's counters are host-side;
        # device-wide figures (cudaMemGetInfo) only at the end
        if self.plan.tracker is not None:  # an estimate: the timeline's own sums are the figures
            self.samples[name] = None
            return
        self.samples[name] = self.probe.sample(device_info=self.cuda and name in ("after zero_grad", "at failure"), sync=False)

    @contextlib.contextmanager
    def module_tracking(self) -> Any:
        if self.module_depth is None or self.module_depth < 1:
            yield
            return
        try:
            from torch.distributed._tools.mod_tracker import ModTracker
        except Exception:  # torch without distributed, or an older layout
            yield
            return
        chosen = {id(m): n for n, m in self.model.named_modules() if n and n.count(".") == self.module_depth - 1}
        events = self.module_events

        def edge(what: str) -> Callable[..., None]:
            def hook(mod: Any, *args: Any) -> None:
                name = chosen.get(id(mod))
                if name is not None:
                    events.append((name, what, self.position()))

            return hook

        mt = ModTracker()
        ours(mt)  # its process-wide module hooks are vramnb's, not the user's code (vramnb._code_state)
        _root_name_apart(mt)
        mt.register_user_hooks(edge("fw enter"), edge("fw exit"), edge("bw enter"), edge("bw exit"))
        # ModTracker registers multi-grad hooks on module inputs and outputs and drops their
        # handles: on leaf inputs (parametrized weights, a batch that requires grad) they would
        # outlive the step, and their closures hold the graph's nodes in a cycle through C++
        # that keeps a failed step's activations alive. Collect the handles and remove them.
        import torch.distributed._tools.mod_tracker as mt_module

        original = getattr(mt_module, "register_multi_grad_hook", None)
        handles: list[Any] = []

        def collecting(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            # not on leaves (a batch that requires grad): PyTorch refuses a multi-grad hook on a
            # leaf under autograd.grad ("A leaf node was passed to _will_engine_execute_node"),
            # which a gradient penalty calls; a module whose inputs are all leaves is then not
            # seen leaving its backward, nothing else changes
            tensors = [t for t in tensors if t.grad_fn is not None]
            if not tensors:
                return _NoHook()
            h = original(tensors, *args, **kwargs)  # type: ignore[misc]
            handles.append(h)
            return h

        if original is not None:
            mt_module.register_multi_grad_hook = collecting
        # ModTracker warns "The module hierarchy tracking maybe be messed up. Please file a bug to PyTorch"
        # where a module's forward is left other than it was entered (a Hugging Face decoder layer): about
        # vramnb's own tracking, not the user's code. Only that message is ignored, and only this entry of
        # the filters is taken out after (the user's code may change the filters in the step)
        quiet = ("ignore", re.compile(re.escape("The module hierarchy tracking maybe be messed up"), re.I),
                 UserWarning, re.compile(re.escape(mt_module.__name__) + r"\Z"), 0)
        warnings.filters.insert(0, quiet)  # type: ignore[attr-defined]  # a list at run time (typeshed says Sequence)
        try:
            with mt:
                yield
        finally:
            warnings.filters[:] = [f for f in warnings.filters if f is not quiet]  # type: ignore[index]
            _remove_tracking(mt, mt_module, original, handles)

    def _saved_so_far(self, e: BaseException) -> None:
        """A forward cut short by an error: the graphs its frames' tensors still hold (their
        saved tensors are activations, as a backward would have found them)."""
        from ._graph import exception_locals

        roots = []
        for v in exception_locals(e, machinery=True):  # the runner's own frames hold the step's outputs
            if type(v) in (torch.Tensor, torch.nn.Parameter) and v.grad_fn is not None:
                roots.append(v.grad_fn)
        if roots:
            self.saved.observe(roots)

    @protected
    def run(self) -> tuple[Timeline, float, BaseException | None]:
        if self.cuda:
            self.recorder = CudaRecorder(self.device.index or 0)
            self.saved = SavedTensors(self.key, None, self.recorder)
            ctx: Any = contextlib.nullcontext()
        else:
            tracker = self.plan.tracker
            if tracker is None:  # an estimate registers its fake tensors itself
                tracker = cpu_tracker()
                tracker.scan(block_starts=True)
            self.recorder = CpuRecorder(tracker, self.plan.block_size)
            self.saved = SavedTensors(self.key, self.recorder.interval_of)
            ctx = contextlib.ExitStack()
        handles = []
        try:  # set up whole or not at all: an interrupt here (an estimate holds none back) leaves no
            # tracker mode on the stack, no resize_ patch and no hook on the parameters
            if not self.cuda:
                ctx.enter_context(tracker.tracking())
                ctx.enter_context(tracker.listening(self.recorder))
            for p in self.model.parameters():
                if p.requires_grad and hasattr(p, "register_post_accumulate_grad_hook"):
                    handles.append(p.register_post_accumulate_grad_hook(lambda q: self.got_grad.add(id(q))))
        except BaseException:
            for h in handles:
                h.remove()
            ctx.__exit__(None, None, None)
            raise
        err: BaseException | None = None
        t0 = time.perf_counter()
        try:
            with ctx:
                self._body()
        except BaseException as e:  # noqa: BLE001 - re-raised by the caller after restoring
            err = e
            if self.phase == "forward":  # what the forward saved so far: no backward will walk it
                with contextlib.suppress(Exception):
                    self._saved_so_far(e)
            _clear_own_frames(e.__traceback__)
            with contextlib.suppress(Exception):
                self.mark("at failure")
        finally:
            if self.cuda:
                torch.cuda.synchronize(self.device)
            elapsed = time.perf_counter() - t0
            for h in handles:
                h.remove()
            timeline = self.recorder.finish()
        return timeline, elapsed, err

    @interruptible
    def _body(self) -> None:
        """The user's step; an interrupt here is raised at once (and restored after)."""
        plan = self.plan
        self.mark("start")
        with self.module_tracking(), (self.reach.watching() if self.reach is not None else contextlib.nullcontext()):
            n = len(plan.batches)
            for i, micro in enumerate(plan.batches):
                micro = step_batch(micro)
                self.phase = self.saved.phase = "forward" if i == 0 else "backward"
                with contextlib.ExitStack() as fw:
                    fw.enter_context(self.saved.hooks())  # outermost: a technique's own hooks take precedence
                    if plan.mode == "no_grad":
                        fw.enter_context(torch.no_grad())
                    elif plan.mode == "inference_mode":
                        fw.enter_context(torch.inference_mode())
                    for make in plan.forward_contexts:
                        fw.enter_context(make())
                    loss = _check_loss(plan.loss_fn(self.model, micro), needs_grad=plan.mode == "train")
                    if n > 1:
                        loss = loss / n
                    k = self.key(loss)
                    if k is not None:
                        self.loss_keys.add(k)
                if i == 0:
                    self.mark("after forward")
                self.phase = self.saved.phase = "backward"
                if plan.mode == "train":
                    if self.reach is not None:
                        self.reach.before_backward(loss)
                    with self.saved.hooks(), (self.effects.backward() if self.effects is not None
                                              else contextlib.nullcontext()):
                        (plan.scaler.scale(loss) if plan.scaler is not None else loss).backward()
                del loss
            self.mark("after backward")
        self.phase = "optimizer step"
        if plan.mode == "train" and self.optimizer is not None:
            if plan.scaler is not None:
                plan.scaler.step(self.optimizer)
                plan.scaler.update()
            else:
                self.optimizer.step()
        self.mark("after optimizer step")
        self.phase = "zero_grad"
        if plan.mode == "train":
            if self.optimizer is not None:
                self.optimizer.zero_grad(set_to_none=plan.set_to_none)
            else:
                self.model.zero_grad(set_to_none=plan.set_to_none)
            if self.reach is not None:  # gradients only the snapshot still holds: freed, as in the loop
                self.reach.snap.release_dropped_grads()
        self.mark("after zero_grad")


def _clear_own_frames(tb: Any) -> None:
    """Drop the locals of vramnb's own finished frames in a traceback and in the
    callers (``f_back``) those frames keep alive (the failed step's loss and
    graph, the plan with its optimizer and batches); the user's frames keep
    theirs, as without vramnb."""
    seen: set[int] = set()
    while tb is not None:
        f = tb.tb_frame
        while f is not None and id(f) not in seen:
            seen.add(id(f))
            name = f.f_globals.get("__name__", "")
            if name == "vramnb" or name.startswith("vramnb."):
                with contextlib.suppress(RuntimeError):  # a frame still running cannot be cleared
                    f.clear()
            f = f.f_back
        tb = tb.tb_next


class _NoHook:
    """The handle of a hook that was not registered."""

    def remove(self) -> None:
        pass


@protected
def _remove_tracking(mt: Any, mt_module: Any, original: Any, handles: list[Any]) -> None:
    if original is not None:
        mt_module.register_multi_grad_hook = original
    run_all([mt.clear_user_hooks] + [h.remove for h in handles])
    handles.clear()


def _listed(items: list[str]) -> str:
    return "; ".join(items[:6]) + (f" and {len(items) - 6} more" if len(items) > 6 else "")


def _breakdown(tl: Timeline, labels: list[str], point: int, sample: Any) -> Breakdown:
    sources = sum_by_label(tl, labels, point, SOURCES)
    if sample is None:
        return Breakdown(sources, sum(sources.values()))
    return Breakdown(sources, sample.allocated, sample.reserved, sample.non_pytorch)


def _module_memory(run: _StepRun, tl: Timeline, labels: list[str], positions: Any) -> list[ModuleMemory]:
    if not run.module_events:
        return []
    out: dict[str, ModuleMemory] = {}
    opened: dict[tuple[str, str], int] = {}
    windows: list[tuple[str, str, int, int]] = []
    for name, what, pos in run.module_events:
        kind, edge = what.split()
        point = positions(pos)
        if edge == "enter":
            opened[(name, kind)] = point
        elif (name, kind) in opened:
            windows.append((name, kind, opened.pop((name, kind)), point))
    for name, kind, a, b in windows:
        mm = out.setdefault(name, ModuleMemory(name))
        delta: dict[int, int] = {}
        for i, iv in enumerate(tl.intervals):
            if not (a <= iv.start + 1 <= b):
                continue
            if kind == "fw" and labels[i] == "activations":
                mm.activations += iv.size
            if labels[i] in ("temporaries", "workspace"):
                delta[iv.start + 1] = delta.get(iv.start + 1, 0) + iv.size
                if iv.end is not None and iv.end + 1 <= b:
                    delta[iv.end + 1] = delta.get(iv.end + 1, 0) - iv.size
        cur = best = 0
        for p in sorted(delta):
            cur += delta[p]
            best = max(best, cur)
        mm.temporaries = max(mm.temporaries, best)
    return list(out.values())


def _leave_out(run: _StepRun, tl: Timeline, apart: Collection[torch.Tensor]) -> None:
    """Take ``apart``'s storages (the batch as given, which a recipe's resized batch replaced) out of the
    step's figures: on CPU their intervals held from before the step count 0 bytes; the counters read at
    the marks (CUDA's: the caching allocator's blocks, 512-byte multiples) count that much less. A loop
    that runs the resized batch does not hold the given one."""
    nbytes = 0
    if run.cuda:  # the trace starts at the step: the counters read at the marks hold the batch's blocks
        nbytes = sum(block_size(n) for n in {t.untyped_storage()._cdata: t.untyped_storage().nbytes()
                                             for t in apart}.values() if n)
    else:
        gone = keys_of(apart, run.key)
        for iv in tl.intervals:
            if iv.start < 0 and iv.key in gone:
                nbytes += iv.size
                iv.size = 0
    if nbytes:
        run.samples = {m: s if s is None else dataclasses.replace(s, allocated=s.allocated - nbytes, peak=s.peak - nbytes)
                       for m, s in run.samples.items()}


def _storage_bytes(tensors: Collection[torch.Tensor]) -> int:
    """The bytes of the storages behind ``tensors``, each once."""
    return sum({t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in tensors}.values())


def _batch_apart(plan: StepPlan, given: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors of the batch as given whose storages the plan's (resized) batches, the model and the
    optimizer do not use and the batch covers whole: a recipe replaced them (``batch_size``), so a loop
    that runs it would not hold them."""
    used = {t.untyped_storage()._cdata for b in plan.batches for _, t in _batch_tensors(b)}
    if not given or {t.untyped_storage()._cdata for t in given} <= used:
        return []
    used |= {t.untyped_storage()._cdata for t in [*plan.model.parameters(), *plan.model.buffers()]}
    if plan.optimizer is not None:
        used |= {t.untyped_storage()._cdata for t in _state_tensors(plan.optimizer)}
    # only storages the batch covers whole: a batch sliced from a dataset held in one tensor views part of
    # it, and a loop that runs another batch size slices the same dataset, which stays
    viewed = viewed_bytes_of(given, lambda t: t.untyped_storage()._cdata)
    return [t for t in given if t.untyped_storage()._cdata not in used
            and viewed.get(t.untyped_storage()._cdata, 0) >= t.untyped_storage().nbytes()]  # whole: _WHOLE


def _one_step(plan: StepPlan, module_depth: int | None, trace: str | None = None, index: int = 0,
              reach: Reach | None = None, effects: EffectWatch | None = None,
              apart: Collection[torch.Tensor] = ()) -> tuple[StepResult, BaseException | None]:
    model, optimizer, device = plan.model, plan.optimizer, plan.device
    run = _StepRun(plan, module_depth, reach, effects)
    fresh = optimizer is None or not any(len(s) for s in per_parameter(optimizer))
    kind = "first step" if index == 0 and fresh else "steady state"
    key = run.key
    start_claims = [
        ("parameters", keys_of(model.parameters(), key)),
        ("buffers", keys_of(model.buffers(), key)),
        ("input batch", viewed_bytes_of((t for b in plan.batches for _, t in _batch_tensors(b)), key)),
    ]
    keys_start = tensor_keys(device) if run.cuda else None
    with effects.watching() if effects is not None else contextlib.nullcontext():
        tl, elapsed, err = run.run()
    if apart:
        _leave_out(run, tl, apart)
    if effects is not None and err is None:
        effects.after_step(plan.optimizer if plan.mode == "train" else None)
    keys_end = tensor_keys(device) if run.cuda else None
    start = tl.marks.get("start", 0)
    claims: list[tuple[str, list[tuple[int, Collection[int]]] | set[int]]] = [
        (src, [(start, ks)]) for src, ks in start_claims]
    for src in ("gradients", "optimizer state"):
        claims.append((src, [(tl.marks[m], ks[src]) for m, ks in run.mark_keys.items() if m in tl.marks]))
    if plan.workspace:
        ws = keys_of(plan.workspace, key)
        claims.append(("workspace", [(p, ws) for p in tl.marks.values()]))
    claims.append(("activations", run.saved.claim(tl)))
    if plan.mode == "train" and "after forward" in tl.marks:
        # what the forward made and still holds at its end is kept for backward, also
        # when a technique's own saved-tensor hooks (activation checkpointing) hid it from ours
        fw = tl.marks["after forward"]
        claims.append(("temporaries", [(fw, run.loss_keys)]))  # the loss is the forward's result, not saved for backward
        claims.append(("activations", {i for i in tl.live_at(fw) if tl.intervals[i].start >= start}))
    labels = label_intervals(tl, claims, cuda=run.cuda,
                             tensor_keys_start=keys_start, tensor_keys_end=keys_end)
    totals = tl.totals()
    marks = [(m, _breakdown(tl, labels, tl.marks[m], run.samples.get(m))) for m in (*MARKS, "at failure") if m in tl.marks]

    def breakdown_at(point: int) -> Breakdown:
        """The breakdown at any point; on CUDA its allocated bytes are the replayed
        total, offset by the drift between the trace and the counter at the start."""
        if not run.cuda:
            return _breakdown(tl, labels, point, None)
        first = run.samples["start"]
        bd = _breakdown(tl, labels, point, None)
        bd.allocated = totals[point] + (first.allocated - totals[start])
        if tl.reserved_delta is not None and first.reserved is not None:
            bd.reserved = first.reserved + tl.reserved_delta[min(point, len(tl.reserved_delta) - 1)]
        bd.non_pytorch = run.samples[marks[-1][0]].non_pytorch
        return bd

    peak_point = max(range(start, len(totals)), key=lambda i: totals[i]) if len(totals) > start else start
    peak = breakdown_at(peak_point)
    # the phase is the one after the last mark the peak comes after
    passed = sum(1 for m in MARKS[1:] if m in tl.marks and peak_point > tl.marks[m])
    phase = run.phase if "at failure" in tl.marks else PHASES[min(passed, len(PHASES) - 1)]
    missing = []
    # a forward-only step (mode no_grad / inference_mode) computes no gradient by design
    if err is None and plan.mode == "train" and hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
        missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in run.got_grad]

    def positions(pos: Any) -> int:
        if not isinstance(run.recorder, CudaRecorder):  # not on CUDA (run.cuda)
            return pos
        # events whose cumulative counts do not exceed the recorded counts
        n_alloc, n_free = pos
        a0, f0 = run.recorder.start_counts
        return min(tl.n_events, (n_alloc - a0) + (n_free - f0))

    modules = _module_memory(run, tl, labels, positions)
    phase_peaks = {}
    for (m0, m1), ph in zip(zip(MARKS, MARKS[1:]), PHASES):
        if m0 in tl.marks and m1 in tl.marks and tl.marks[m1] >= tl.marks[m0]:
            a, b = tl.marks[m0], tl.marks[m1]
            phase_peaks[ph] = breakdown_at(max(range(a, b + 1), key=lambda i: totals[i]))
    result = StepResult(kind, marks, peak, phase, totals, dict(tl.marks), peak_point, modules, elapsed, missing,
                        _by_source(tl, labels), phase_peaks)
    if trace is not None and isinstance(run.recorder, CudaRecorder) and run.recorder.snapshot is not None:
        with open(trace, "wb") as f:
            pickle.dump(run.recorder.snapshot, f)
    return result, err


def _set_aside(plan: StepPlan, user: Any, batch: list[torch.Tensor]) -> SetAside | None:
    """When a technique replaced the user's optimizer, move the user's optimizer
    state out of device memory for the steps: a run with that optimizer would not
    hold it (the state of tensors the model or batch shares stays)."""
    if user is None or plan.optimizer is user or not any(len(s) for s in per_parameter(user)):
        return None
    mine = {t.untyped_storage()._cdata for t in [*plan.model.parameters(), *plan.model.buffers(), *batch]}
    mine |= {p.grad.untyped_storage()._cdata for p in plan.model.parameters()
             if p.grad is not None and p.grad.layout == torch.strided}
    tensors = [t for t in _state_tensors(user) if t.untyped_storage()._cdata not in mine]
    return SetAside(tensors) if tensors else None


def _by_source(tl: Timeline, labels: list[str]) -> dict[str, list[int]]:
    """Allocated bytes of each source after each event."""
    deltas = {src: [0] * (tl.n_events + 1) for src in SOURCES}
    for iv, label in zip(tl.intervals, labels):
        d = deltas[label]
        d[max(0, iv.start + 1)] += iv.size
        if iv.end is not None:
            d[iv.end + 1] -= iv.size
    out = {}
    for src, d in deltas.items():
        cur, series = 0, []
        for v in d:
            cur += v
            series.append(cur)
        out[src] = series
    return out


def profile_step(
    model: torch.nn.Module,
    batch: Any,
    loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    steps: int = 2,
    set_to_none: bool = True,
    module_depth: int | None = 1,
    restore: bool = True,
    label: str = "",
    trace: str | None = None,
    recipe: Any = None,
) -> StepReport:
    """Profile training steps of a live model and say where the memory goes.

    Args:
        model: the ``nn.Module`` to train (its parameters on one device).
        batch: a tensor, or a tuple/list/dict of tensors, on the model's device.
        loss_fn: ``loss_fn(model, batch) -> scalar loss``. Default: the model's
            output if it is a scalar, or its ``.loss`` (Hugging Face models).
        optimizer: the user's optimizer over ``model``'s parameters; ``None``
            profiles forward and backward only.
        steps: how many steps to run (2: the first step, where the optimizer's
            state is created, and a steady-state step).
        set_to_none: ``zero_grad(set_to_none=...)``.
        module_depth: attribute activations and temporaries to the modules at
            this depth (1: the model's children); ``None`` turns it off.
        restore: put the model, optimizer and RNG state back exactly afterwards.
        label: a title for the report.
        recipe: a :class:`vramnb.Recipe` (or a dict of its settings): the
            techniques to apply for the profiled steps (mixed precision,
            activation checkpointing, another optimizer, micro-batches, ...);
            all undone afterwards.
        diagnose: (``vramnb.profile_step``) on an out-of-memory error, estimate each
            fix's saving on this step (a few estimates on fake tensors, up to a minute;
            the post-mortem is ``report.oom`` of the report attached to the error, and
            its verdict and fixes are added to the error's notes). The estimates run
            the model's forward on a fake copy and the loss again: ``None`` (default)
            does so only with vramnb's own loss (no ``loss_fn``: a ``loss_fn`` of yours
            may keep what it computes), ``True`` always, ``False`` never. Skipped where
            the verdict would not use them (fragmentation, one request larger than the
            device).
        trace: CUDA only: write the last step's allocation trace to this file
            (a pickle of ``torch.cuda.memory._snapshot()``, which PyTorch's
            memory viewer opens); ``report.plot("sources")`` draws it offline.

    Returns:
        a :class:`StepReport`: per step, the breakdown by source at each phase
        mark and at the peak, the peak's phase, the allocation timeline and the
        per-module memory. On CPU the sources sum exactly to the storage
        tracker's total; on CUDA to the allocator's trace (any difference from
        ``torch.cuda.memory_allocated`` is shown as *unattributed*).
        ``report.warnings`` holds one line per technique that was configured but
        had no effect in the steps (checkpointing that recomputed nothing,
        autocast that lowered no op, 8-bit optimizer state that stayed 32-bit,
        offload that moved nothing: see :mod:`vramnb._no_effect`).

    Raises:
        ValueError: bad model, batch, optimizer or loss (see :func:`check_inputs`),
            before anything runs or is allocated: a meta or lazy (uninitialized)
            model, a ``loss_fn`` that is not callable, a batch the model's
            ``forward`` cannot take without one, optimizer step hooks or
            post-accumulate-grad hooks (they change objects vramnb cannot
            restore: the message says how to profile instead). The loss is
            checked after the forward (the model is restored).
            Also, before the first backward, a loss whose graph reaches one built
            before the step (a non-leaf tensor computed outside ``loss_fn``: detach
            it), whose backward would free what that graph saved.
        VramnbError: another thread is running a profile_step (also compare or a
            panel run), before anything runs.
        Unavailable: a recipe setting this machine or model cannot run (LoRA on
            a model that already has peft adapters), before the model is touched.
        Any exception of the user's step, or of an undo, is re-raised after
        restoring (every undo and the whole restore run first), with the partial
        report attached as ``exc.vramnb_report``; vramnb's own frames in its
        traceback hold nothing of the step. A ``KeyboardInterrupt`` during the
        step stops it at once; one during the restore is held back until the
        restore is done, then raised.

    Each step gets its own copy of the batch's containers (a ``loss_fn`` that
    pops ``labels`` changes that copy); tensors of the batch computed by your
    autograd graph are used detached (their backward stops at the batch).
    Modules outside ``model`` that the step runs, optimizers it steps and leaves
    its backward accumulates into are restored too (see :mod:`vramnb._reach`).

    A recipe that trains with another optimizer than yours (``optimizer=``,
    ``lora=``) runs with your optimizer's state moved to host memory for the
    steps (its step would not hold it); it is back, bit for bit, afterwards.
    """
    with one_at_a_time(), InterruptGuard() as guard:
        try:
            return _profile(guard, model, batch, loss_fn, optimizer, steps, set_to_none, module_depth, restore, label,
                            trace, recipe)
        except BaseException as e:
            # the traceback keeps vramnb's frames, whose locals hold the snapshot's host copies,
            # the recipe's optimizer and resized batches: drop them (the user's frames keep theirs)
            _clear_own_frames(e.__traceback__)
            raise


@protected
def _profile(guard: InterruptGuard, model: Any, batch: Any, loss_fn: Any, optimizer: Any, steps: Any, set_to_none: Any,
             module_depth: Any, restore: bool, label: str, trace: str | None, recipe: Any) -> StepReport:
    """profile_step's work: every check first, then the steps, then undo and restore
    (which an interrupt does not cut, see :class:`InterruptGuard`)."""
    device = check_inputs(model, batch, optimizer)
    check_options(steps, module_depth, set_to_none)
    check_loss_fn(model, batch, loss_fn)
    if not isinstance(restore, bool):
        raise InputError(f"restore must be True or False, not {restore!r}")
    if trace is not None and device.type != "cuda":
        raise InputError(
            f"trace= needs a CUDA model (it saves the CUDA caching allocator's trace); this model is on {device}. "
            "On CPU, report.plot('sources') draws the recorded timeline by source."
        )
    if recipe is not None and not isinstance(recipe, Recipe):
        recipe = Recipe(**recipe) if isinstance(recipe, Mapping) else recipe
        if not isinstance(recipe, Recipe):
            raise InputError(f"recipe must be a vramnb.Recipe or a dict of technique settings, not {type(recipe).__name__}")
    if recipe is not None and optimizer is None:
        check_hooks(model, None, any_optimizer=True)
    batch_tensors = [t for _, t in _batch_tensors(batch)]
    # garbage in reference cycles (a torch optimizer makes one that keeps its caller's frame) would count as
    # "other" until the collector happened to run: collected first, "other" is what something still holds
    gc.collect()
    # what the notebook holds beside the step (before the snapshot's host copies), for the post-mortem
    other = held_outside(probe_for(device).sample(device_info=False).allocated, device, model, optimizer, batch_tensors)
    users_history = device.type == "cuda" and history_enabled()
    snap = Snapshot.take(model, optimizer, batch_tensors, [loss_fn] if loss_fn is not None else []) if restore else None
    results: list[StepResult] = []
    err: BaseException | None = None
    plan = StepPlan(model, [batch], loss_fn or default_loss, optimizer, device, set_to_none=set_to_none,
                    user_optimizer=optimizer)
    aside: SetAside | None = None
    apart: list[torch.Tensor] = []  # the batch as given, where a recipe replaced it
    reach: Reach | None = None
    effects = EffectWatch()
    failures: list[OOMState] = []  # the state at an out-of-memory failure in the steps, taken there
    if device.type == "cuda" and torch.cuda.is_initialized():
        install_cuda_observer()
    stop_listening = listening(oom_device_name(device), failures.append)
    try:
        if recipe is not None:
            recipe.apply(plan)  # may raise ValueError (not available here); restored below
        effects.scan(plan)
        aside = _set_aside(plan, optimizer, batch_tensors)
        apart = _batch_apart(plan, batch_tensors)
        reach = None
        if snap is not None:  # the recipe's own modules and optimizer are its to undo
            mine = {id(m) for m in plan.model.modules()} - snap.module_ids
            adapters = {id(p) for p in plan.model.parameters() if not snap.has(p)}
            reach = Reach(snap, [plan.optimizer] if plan.optimizer is not optimizer else [], mine, adapters)
        for i in range(steps):
            guard.check()  # an interrupt held back in vramnb's own bookkeeping stops here
            res, err = _one_step(plan, module_depth, trace, i, reach, effects, apart)
            results.append(res)
            if err is not None:
                break
    finally:
        # every undo runs, then the optimizer state set aside comes back, then the
        # snapshot is restored, whatever any of them raises; the first error is raised
        # after all ran (attached as a note when the step itself failed)
        try:
            run_all([plan.run_undo] + ([aside.put_back] if aside is not None else [])
                    + ([snap.restore] if snap is not None else []))
        except BaseException as undo_err:
            if err is None:
                raise
            if hasattr(err, "add_note"):
                err.add_note(f"restoring after the failure also raised {type(undo_err).__name__}: {undo_err}")
        finally:
            stop_listening()
            plan.release()  # also when vramnb's own bookkeeping raised: a recipe's optimizer must not outlive it
    probe = probe_for(device)
    method = "CUDA caching allocator trace" if isinstance(probe, CudaProbe) else CpuProbe.method
    name = label or f"{type(model).__name__}" + (f" · {type(optimizer).__name__}" if optimizer is not None else "")
    if recipe is not None:
        name = f"{name} · {recipe.describe()}" if not label else name
    report = StepReport(str(device), method, results, name, versions=versions(device))
    report.warnings.extend(effects.warnings())  # techniques that had no effect in the steps
    del effects  # it refers to the model's modules
    report.notes.extend(plan.notes)
    compiled = compiled_note(model, "the profiled steps")
    if compiled is not None:
        report.notes.append(compiled)
    if apart:
        report.notes.append(f"the batch as given ({format_bytes(_storage_bytes(apart))}) is left out of these steps' "
                            "figures: they ran the recipe's resized batch, and a loop that runs that batch does not "
                            "hold the given one")
    if aside is not None:
        report.notes.append(f"your optimizer's state ({format_bytes(aside.nbytes)}) was moved to host memory for "
                            "these steps, which train with the recipe's optimizer instead")
    if recipe is not None:
        report.recipe = recipe
    if users_history:
        report.notes.append("your CUDA memory-history recording was left on as it was; the steps' allocations were "
                            "read from its trace")
    if any(t.grad_fn is not None for t in batch_tensors):
        report.notes.append("the batch holds tensors computed by your autograd graph: each step used them detached "
                            "(requires_grad kept), so its backward stopped at the batch and left your graph as it was")
    if restore and snap is not None:
        extra = reach.foreign if reach is not None else 0
        report.notes.append("model, optimizer and RNG state restored exactly")
        if extra > 0:
            report.notes.append(f"also restored: {extra} module(s) outside the model that the step ran")
        changed = snap.code_changed
        if changed:  # what the user's code changed by name outside the model (vramnb._code_state)
            report.notes.append("also put back as found, changed by your code outside the model in these steps: "
                                + _listed(changed))
        unchecked = snap.code.unchecked if snap.code is not None else []
        if unchecked:
            report.notes.append("not checked for changes (your code reaches them by name; vramnb cannot record them): "
                                + _listed(unchecked))
    if err is not None and is_oom(err):  # after the restore: the fixes' savings are estimated on the user's step
        # the verdict from the state at the failure; vramnb.profile_step (vramnb._profile_step) adds
        # each fix's saving, estimated on this step, and puts the verdict into the error's notes
        report.oom = oom_info(failures[-1] if failures else None, err, device, probe.sample(device_info=True))
        if report.oom.state is not None:
            report.oom.state.beside = other
    failures.clear()
    if err is not None:
        report.error = type(err).__name__
        try:
            err.vramnb_report = report  # type: ignore[attr-defined]
        except Exception:
            pass
        raise err
    return report


def _root_name_apart(mt: Any) -> None:
    """ModTracker names its outermost level ``"Global"`` and a module it first meets by its class name: a model
    whose class is named ``Global`` made its pre-forward hook raise ``KeyError: 'Global'`` (the step failed).
    vramnb knows modules by identity, not by these names: such a module is named apart."""
    get, known = getattr(mt, "_get_mod_name", None), getattr(mt, "_known_modules", None)
    if get is None or known is None:
        return

    def named(mod: Any) -> Any:
        if mod not in known and type(mod).__name__ == "Global":
            known[mod] = "Global (a module)"
        return get(mod)

    mt._get_mod_name = named
