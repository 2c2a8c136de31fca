"""Predict a training step's memory on a GPU you do not have, without allocating it.

:func:`estimate` runs the step — the same runner, recipes and attribution as
:func:`vramnb.profile_step` — on a fake copy of the model, batch and optimizer
(``FakeTensorMode``: shapes, dtypes and storages, no data), counting the fake
storages with the exact storage tracker. For a CUDA target it then:

1. makes CUDA's kernel choices on the fake CPU tensors (attention backend,
   CUDA autocast policy, cuBLAS workspaces, ``foreach`` optimizers:
   :mod:`vramnb.predict._cuda_model`);
2. replays every allocation and free through a model of the CUDA caching
   allocator (:mod:`vramnb.predict._allocator`): block rounding, segments, unsplit
   blocks, ``expandable_segments``, and the card's capacity (the allocator
   frees its cache and retries before it gives up);
3. adds the CUDA context and library memory outside PyTorch
   (:data:`vramnb.predict._cuda_model.CUDA_CONTEXT`) for what ``nvidia-smi`` shows.

With ``device="cpu"`` it predicts a CPU step, which the CPU tracker measures
identically (same dispatch, same storages): the test of the machinery.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .._optim_state import state_tensors
from .._compiled import compiled_note
from .._interrupt import outside_dispatch
from .._versions import versions

from ._accuracy import META_SHORT, ExpectedError, StepOps, classify, expected_error
from ._allocator import replay, round_size
from ._ambient_hooks import set_aside
from ._batch_values import BatchValues
from ._library_hooks import untraced_where_known
from .._breakdown import StepReport
from ._cuda_model import CudaPolicy, outside_pytorch
from ._kernels import Workspaces
from ._estimate_inputs import as_recipe, build_model, build_optimizer, check_arguments, explain
from ._fake import HostDevicesOnly, KernelFixes, check_batch, fake_batch, new_mode, resize_batch
from ._fake_model import fakes_convert_in_place
from ._fake_guard import RealTensorGuard, UserState, owned_tensors
from ._user_hooks import drop_user_hooks, without_user_global_hooks
from ._gpus import Target, resolve_target
from .._plan import StepPlan
from .._render import Table
from .._step import _batch_tensors, _one_step, check_loss_fn, check_options, default_loss
from .._tracker import StorageTracker
from .._units import format_bytes
from ..techniques import Recipe
from ..techniques.registry import REGISTRY
from .._global_state import kept_as_found
from .._code_state import CodeState
from .._interrupt import held_back

__all__ = ["estimate", "Estimate", "Target", "resolve_target"]


@dataclass(repr=False)
class Estimate(StepReport):
    """A predicted :class:`~vramnb.StepReport` plus what the card would hold.

    Attributes (beyond :class:`StepReport`'s):
        target: the :class:`Target` (``None`` for a CPU estimate).
        peak_allocated: predicted ``torch.cuda.max_memory_allocated`` over the steps (bytes).
        peak_reserved: predicted ``torch.cuda.max_memory_reserved`` (bytes).
        device_memory: peak reserved + CUDA context: the most ``nvidia-smi``
            would show for the process (bytes). On a card near full, the
            allocator releases cached segments before it gives up; the
            figures are then those under that pressure, on the whole card:
            they do not depend on ``margin``.
        fits: the steps run on the target without running out of memory, with
            ``margin`` of the card to spare (``None`` without a capacity).
        margin: the fraction of the card asked to stay free.
        runtime: seconds the estimate took.
        demand: device memory the steps would take on a card without limit
            (bytes): the caching allocator keeps what it has cached.
        outside_pytorch: device memory outside PyTorch's allocator (bytes): the CUDA
            context plus the libraries the step uses (cuBLAS per thread, cuDNN;
            :data:`vramnb.predict._cuda_model.LIBRARY_MEMORY`).
        expected_error: how far estimates of steps of this kind were from the real
            steps in the zoo benchmark (:class:`vramnb.predict._accuracy.ExpectedError`:
            ``kinds``, ``median``, ``worst_under`` as fractions); ``None`` for a CPU estimate.
        time: with ``step_time=True``, the steady step's predicted time on the target
            (:class:`vramnb.predict._step_time.StepTime`: a roofline over its operators).
    """

    target: Target | None = None
    peak_allocated: int = 0
    peak_reserved: int | None = None
    device_memory: int | None = None
    fits: bool | None = None
    margin: float = 0.0
    runtime: float = 0.0
    demand: int | None = None
    outside_pytorch: int | None = None
    backends: dict[str, int] = field(default_factory=dict)
    expected_error: ExpectedError | None = None
    time: Any = None

    _time_label = "time to trace on this machine"  # fake tensors on this CPU, not the GPU's step time

    def __repr__(self) -> str:
        return self._table().to_text()

    @property
    def headroom(self) -> int | None:
        """Card memory left at the predicted peak (bytes; negative: short by that much)."""
        if self.target is None or self.target.memory is None or self.device_memory is None:
            return None
        return self.target.memory - self.device_memory

    def _table(self) -> Table:
        t = super()._table()
        t.title = t.title.replace("vram step", "vram estimate", 1)
        if self.target is not None and self.device_memory is not None:
            card = self.target
            verdict = "" if self.fits is None else ("fits" if self.fits else "does NOT fit")
            line = (f"{card.name}: predicted peak allocated {format_bytes(self.peak_allocated)}, reserved "
                    f"{format_bytes(self.peak_reserved or 0)}, device memory (nvidia-smi) {format_bytes(self.device_memory)}")
            if card.memory is not None:
                line += f" of {format_bytes(card.memory)}: {verdict}"
                if self.headroom is not None:
                    line += f" ({format_bytes(abs(self.headroom))} {'free' if self.headroom >= 0 else 'short'})"
            t.notes.insert(0, (line, self.fits is False))
            for a in card.assumed:
                t.note(f"assumed: {a}")
        return t

    def to_records(self) -> list[dict[str, Any]]:
        """As :meth:`StepReport.to_records` (one flat dict per step and mark, bytes), each marked ``estimated``."""
        recs = super().to_records()
        for r in recs:
            r["estimated"] = True
        return recs


def _cuda_defaults(opt: torch.optim.Optimizer | None) -> None:
    """PyTorch picks ``foreach=True`` for CUDA parameters when left unset
    (``torch/optim/optimizer.py: _default_to_fused_or_foreach``); fake CPU
    parameters would get the per-parameter loop and miss foreach's temporaries."""
    if opt is None:
        return
    for g in opt.param_groups:
        if ("foreach" in g and g.get("foreach") is None and not g.get("fused") and not g.get("differentiable")
                and not (isinstance(g.get("lr"), torch.Tensor) and not g.get("capturable"))):
            g["foreach"] = True  # (PyTorch falls back to the loop for a tensor lr without capturable)


def _scalar_reads_in_step(opt: torch.optim.Optimizer, fixes: KernelFixes) -> None:
    """Let the (fake) optimizer's step read scalars of fake tensors (see KernelFixes)."""
    step = opt.step

    def stepped(*args: Any, **kwargs: Any) -> Any:
        fixes.scalar_reads = True
        try:
            return step(*args, **kwargs)
        finally:
            fixes.scalar_reads = False

    opt.step = stepped  # type: ignore[method-assign]


def _create_state(opt: torch.optim.Optimizer) -> None:
    """Let the optimizer build its state: a step on zero gradients (fake tensors)."""
    params = [p for g in opt.param_groups for p in g["params"] if p.requires_grad]
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    for p in params:
        p.grad = None


def _start_tensors(fmodel: torch.nn.Module, fbatch: Any, fopt: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for p in fmodel.parameters():
        out.append(p)
        if p.grad is not None:
            out.append(p.grad)
    out += list(fmodel.buffers())
    out += [t for _, t in _batch_tensors(fbatch)]
    if fopt is not None:
        out += state_tensors(fopt)
    return out


def _shard_plan(plan: StepPlan, parallel: str, world_size: int, optimizer: Any) -> None:
    """Shard the plan's fake model for rank 0 of ``world_size`` (after a recipe changed it: LoRA's adapters
    are parameters, which ``fully_shard`` shards as it shards every parameter), and rebuild the
    optimizers over the sharded trainable parameters."""
    from ..techniques.checkpointing import find_blocks
    from ._parallel import rebuild_optimizer, shard

    model = plan.model
    try:
        blocks = find_blocks(model)
    except ValueError:
        blocks = []
    _, blocks, tied = shard(model, parallel, world_size, blocks)
    trainable = [p for p in model.parameters() if p.requires_grad]
    user = optimizer(trainable) if callable(optimizer) and not isinstance(optimizer, torch.optim.Optimizer) \
        else rebuild_optimizer(plan.user_optimizer, model)
    plan.optimizer = user if plan.optimizer is plan.user_optimizer else rebuild_optimizer(plan.optimizer, model)
    plan.user_optimizer = user
    plan.notes.append(f"rank 0 of {world_size} GPUs, {parallel} (PyTorch's FSDP2 against a fake process group; "
                      f"{len(blocks)} blocks sharded one by one)")
    if tied:
        plan.notes.append(f"tied weights ({'; '.join(tied[:3])}): the blocks holding them are sharded "
                          "with the root, which holds both ends of the tie")


# -- the estimate ----------------------------------------------------------------------
#: what GPU run 21 measured for checkpointed steps, which the zoo benchmark's kinds do not cover
CHECKPOINTED_ON_CUDA = ("activation checkpointing on CUDA: GPU run 21 (H200, torch 2.11, 10 models) measured peak "
                        "allocated within 0.6 % of the estimate, but reserved memory from -15 % to +11 % of it (the "
                        "caching allocator's segments under recomputation are not modelled as closely): keep a margin "
                        "of 15 % on a tight card (benchmarks/results/2026-12-02-h200-run21-fit-memory)")


@kept_as_found
def estimate(
    model: torch.nn.Module | Callable[[], torch.nn.Module],
    batch: Any,
    loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor] | None = None,
    optimizer: torch.optim.Optimizer | Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer] | None = None,
    *,
    recipe: Recipe | Mapping[str, Any] | None = None,
    target: str | int | None = None,
    device: str = "cuda",
    batch_size: int | None = None,
    expandable_segments: bool = False,
    margin: float = 0.0,
    steps: int = 2,
    warm_optimizer: bool = False,
    set_to_none: bool = True,
    module_depth: int | None = None,
    label: str = "",
    world_size: int = 1,
    parallel: str | None = None,
    step_time: bool = False,
    more_batches: Sequence[Any] = (),
) -> Estimate:
    """Predict the memory of training steps without running them on the device.

    Args:
        model: an ``nn.Module`` (on any device, or ``meta``), or a function
            building one (called under ``torch.device("meta")``: no memory).
        batch: a tensor, or a tuple/list/dict of tensors (real or ``meta``).
            Shapes and dtypes make the fake batch; where the step reads values
            (``.item()``, ``if torch.any(labels == -100):``, ``labels[labels != -100]``,
            CTC lengths) they are taken from a real batch's values, and the notes
            say which (:mod:`vramnb.predict._batch_values`; a copy of the batch in
            CPU memory while the estimate runs).
        loss_fn: ``loss_fn(model, batch) -> scalar``; default as in :func:`vramnb.profile_step`.
        optimizer: the user's optimizer over ``model`` (its settings and
            state are copied), a function ``params -> optimizer``, or ``None``.
        recipe: techniques to apply, as in :func:`vramnb.profile_step`.
        target: a GPU name (``"A100"``, ``"RTX 4090"``; see ``vramnb.GPUS``),
            a size (``"24GiB"``, bytes), or ``None`` (the GPU present, else an H100).
        device: ``"cuda"`` (model a CUDA card) or ``"cpu"`` (predict a CPU step).
        batch_size: resize the first dimension of every batch tensor to this.
        expandable_segments: model ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``.
        margin: fraction of the card that must stay free for ``fits`` (0 to <1).
        steps: 2: the first step and a steady-state step (as profile_step).
        world_size, parallel: predict one GPU of ``world_size`` under
            ``parallel``: ``"ddp"``, ``"fsdp"``/``"zero3"`` (everything sharded)
            or ``"zero2"`` (gradients and optimizer state sharded); PyTorch's
            FSDP2 runs against a fake process group (:mod:`vramnb.predict._parallel`).
            The batch is the per-GPU batch.
        step_time: also predict the last step's time on the target (``Estimate.time``):
            each operator's arithmetic at the card's peak rate for its dtype or its memory
            traffic at the card's bandwidth, the longer (:mod:`vramnb.predict._step_time`);
            used by :func:`vramnb.fit` to rank plans. CUDA targets only.
        more_batches: batches for more steps, one each, after the ``steps`` on ``batch``: a
            loader's batches of varying shapes (each a tensor or a tuple/list/dict of them). Each
            arrives as its step begins and the one before it is freed; the allocator model replays
            them all, so that reserved memory includes the fragmentation that varying shapes
            leave (the cached blocks one shape left that the next cannot use).
        warm_optimizer: create the optimizer's state before the profiled
            steps (one ``optimizer.step()`` on zero gradients), so that even
            ``steps=1`` predicts a steady-state step (faster; used by
            :func:`vramnb.max_batch_size` while it searches).

    Returns:
        an :class:`Estimate`: the breakdown by source per phase and at the
        peak (block-rounded bytes on CUDA), predicted peak allocated, reserved
        and device memory, whether it fits the target.

    Raises:
        ValueError: bad model, batch, optimizer, recipe, target, device or
            margin, a factory that does not take the arguments it is given
            (the message names the valid choices); the step makes tensors on
            a device itself (``device="cuda"``, ``.cuda()``, ``.to("cuda")``:
            refused before they reach autograd, which would abort a PyTorch
            built without CUDA); or the step needs tensor *values* (``.item()``,
            data-dependent shapes) that do not come from the batch (they depend
            on the weights or activations) or of a batch on ``meta``: the message
            names the operator and the line of the user's code that reads it.
    """
    with _ONE_AT_A_TIME, torch.enable_grad(), _autocast_off(), _host_default_device(), outside_dispatch():
        # one estimate at a time (its dispatcher kernels are process-wide); the
        # caller's grad mode, autocast regions and default device do not leak into the predicted step;
        # a Ctrl-C is raised between operators, never inside a dispatch mode (where it aborts the process)
        return _estimate(model, batch, loss_fn, optimizer, recipe=recipe, target=target, device=device,
                         batch_size=batch_size, expandable_segments=expandable_segments, margin=margin, steps=steps,
                         warm_optimizer=warm_optimizer, set_to_none=set_to_none, module_depth=module_depth,
                         label=label, world_size=world_size, parallel=parallel, step_time=step_time,
                         more_batches=more_batches)


_ONE_AT_A_TIME = threading.RLock()


@contextlib.contextmanager
def _autocast_off() -> Any:
    """Switch off the caller's autocast regions for the estimate, without opening
    one of ours (an enclosing region, even a disabled one, would keep the
    estimate's own autocast from clearing its weight-cast cache at its end)."""
    devices = [d for d in ("cpu", "cuda") if d == "cpu" or torch.cuda.is_available()]
    was = {d: torch.is_autocast_enabled(d) for d in devices}
    for d in devices:
        torch.set_autocast_enabled(d, False)
    try:
        yield
    finally:
        for d, on in was.items():
            torch.set_autocast_enabled(d, on)


@contextlib.contextmanager
def _host_default_device() -> Any:
    """Tensors made without a device go on the CPU during the estimate, where the caller has set
    ``torch.set_default_device("cuda")``: the fake CPU tensors stand for the card's (a fake ``cuda``
    tensor is refused, see :class:`vramnb.predict._fake.HostDevicesOnly`)."""
    from torch.utils import _device

    # DeviceContext (torch.device(...) / set_default_device) records its device here on entry;
    # torch.get_default_device() would initialise CUDA to find the index
    current = getattr(_device, "CURRENT_DEVICE", None)
    if current is None or torch.device(current).type == "cpu":
        yield
        return
    with torch.device("cpu"):
        yield


def _estimate(model: Any, batch: Any, loss_fn: Any, optimizer: Any, *, recipe: Any, target: Any, device: str,
              batch_size: int | None, expandable_segments: bool, margin: float, steps: int, warm_optimizer: bool,
              set_to_none: bool, module_depth: int | None, label: str, world_size: int, parallel: str | None,
              step_time: bool = False, more_batches: Sequence[Any] = ()) -> Estimate:
    t0 = time.perf_counter()
    if not isinstance(step_time, bool):
        raise ValueError(f"step_time must be True or False, not {step_time!r}")
    check_arguments(device=device, margin=margin, loss_fn=loss_fn, batch_size=batch_size, world_size=world_size,
                    parallel=parallel, expandable_segments=expandable_segments, label=label)
    check_options(steps, module_depth, set_to_none)
    tgt = resolve_target(target) if device == "cuda" else None
    if tgt is None and target is not None:
        raise ValueError("target= is for device='cuda'; a CPU estimate has no card")
    recipe = as_recipe(recipe)
    named = check_batch(batch)  # ValueError on a batch that is not (dense) tensors
    if isinstance(more_batches, (torch.Tensor, Mapping)) or not isinstance(more_batches, Sequence):
        raise ValueError(f"more_batches must be a list of batches (one per step), not {type(more_batches).__name__}")
    more = list(more_batches)
    for b in more:
        named = named + check_batch(b)
    if batch_size is not None:
        for b in [batch, *more]:
            resize_batch(b)
    # what the fake step must not reach, and the last line behind that: see _fake_guard
    user_model = model if isinstance(model, torch.nn.Module) else None
    guard = RealTensorGuard(owned_tensors(user_model, named, optimizer))
    state = UserState(user_model, optimizer)
    # what the user's code (forwards, loss_fn, factories) reaches by name: put back after the fake step
    code = CodeState.take(user_model, [model if user_model is None else None, loss_fn,
                                       None if isinstance(optimizer, torch.optim.Optimizer) else optimizer], optimizer)
    ambient: list[str] = []
    try:
        # anomaly detection's NaN check reads every gradient's values (``isnan().any()``), which fake tensors do not
        # have: it stays on as the user set it (its forward tracebacks too), without that check, for the fake step
        # the user's saved-tensor hooks around the call stay off the fake step (save_on_cpu: the estimate's model)
        with state.watching(), torch.autograd.set_detect_anomaly(torch.is_anomaly_enabled(), check_nan=False), \
                set_aside(ambient):
            est = _predict(model, batch, loss_fn, optimizer, guard, code, recipe=recipe, tgt=tgt, device=device,
                           batch_size=batch_size, expandable_segments=expandable_segments, margin=margin,
                           steps=steps, warm_optimizer=warm_optimizer, set_to_none=set_to_none,
                           module_depth=module_depth, label=label, world_size=world_size, parallel=parallel,
                           step_time=step_time, more=more)
    except BaseException:
        with held_back():  # an interrupt waits until the user's objects are back
            try:
                code.restore()
            finally:
                with contextlib.suppress(ValueError):  # put back what was swapped; the step's own error is the one to see
                    state.check_and_restore()
        raise
    est.notes.extend(ambient)
    left = state.check_and_restore()
    if left:  # a change vramnb cannot attribute: "nothing of yours was changed" would not be known
        est.notes[:] = [n.replace(_UNCHANGED, _UNCHANGED[:-len(" or changed")], 1) for n in est.notes] + left
    est.runtime = time.perf_counter() - t0
    return est


def _predict(model: Any, batch: Any, loss_fn: Any, optimizer: Any, guard: RealTensorGuard, code: CodeState, *,
             recipe: Any,
             tgt: Target | None, device: str, batch_size: int | None, expandable_segments: bool, margin: float,
             steps: int, warm_optimizer: bool, set_to_none: bool, module_depth: int | None, label: str,
             world_size: int, parallel: str | None, step_time: bool = False, more: Sequence[Any] = ()) -> Estimate:
    from ._parallel import fake_world, shard

    calibrated = None
    if step_time and tgt is not None:  # measured on the GPU present: real CUDA work, before any fake mode
        from ._calibrate import calibration

        calibrated = calibration(tgt.name)
    mode = new_mode()
    fmodel, fakes, shared = build_model(model, mode)
    model_name = type(fmodel).__name__  # before fully_shard swaps in its subclass FSDP<the model's class>
    check_loss_fn(fmodel, batch, loss_fn)  # a tuple batch with no loss_fn that forward cannot take
    if not isinstance(model, torch.nn.Module):  # built by the user's function: its code is known now
        code.add_model(fmodel)
    dropped = drop_user_hooks(fmodel)
    if not any(p.requires_grad for p in fmodel.parameters()):
        raise ValueError(f"{type(fmodel).__name__} has no trainable parameters: nothing to train")
    fbatch = fake_batch(batch, mode, batch_size)
    values = BatchValues()  # values the step reads, from the user's batch (real CPU shadows: _batch_values)
    values.add_batch([t for _, t in _batch_tensors(batch)], [t for _, t in _batch_tensors(fbatch)])
    values.add_counters(model, fakes)  # BatchNorm's num_batches_tracked, read by momentum=None
    fopt = build_optimizer(optimizer, fmodel, fakes, mode, guard, dropped)
    tracker = StorageTracker("meta")
    events: list[tuple[int, int, int]] = []
    keep: list[torch.Tensor] = []
    workspaces: Workspaces | None = None
    kernels: CudaPolicy | None = None
    if tgt is not None:
        workspaces = Workspaces(tgt.capability, keep, tracker.add_tensor, tgt.multiprocessors)
        kernels = CudaPolicy(tgt.capability, workspaces)
    plan = StepPlan(fmodel, [fbatch], loss_fn or default_loss, fopt, torch.device("cpu"), set_to_none=set_to_none,
                    user_optimizer=fopt, modelled=device if device == "cuda" else None, tracker=tracker,
                    autocast=kernels.autocast if kernels is not None else None,
                    block_size=round_size if kernels is not None else None, workspace=keep)
    results = []
    offsets = []
    err: BaseException | None = None
    sharded = parallel is not None and parallel != "ddp"
    fixes = KernelFixes()
    ops = StepOps(kernels)  # what decides the step's kinds
    with fakes_convert_in_place(), without_user_global_hooks(dropped), \
            (fake_world(world_size) if sharded else contextlib.nullcontext()), mode, \
            values, untraced_where_known(values.known), HostDevicesOnly(), guard, fixes, \
            (workspaces if workspaces is not None else contextlib.nullcontext()), \
            (kernels if kernels is not None else contextlib.nullcontext()), \
            tracker.listening(lambda k, o, n: events.append((k, o, n))):
        if parallel == "ddp":
            plan.notes.append(f"one of {world_size} GPUs under DDP: the whole model plus its gradient buckets "
                              "(counted as workspace); NCCL's own buffers are not modelled")
        # the model and optimizer of a sharded step are its rank's shards, there once it is sharded (below)
        for t in (_start_tensors(fmodel, fbatch, fopt) + list(keep) if not sharded
                  else [t for _, t in _batch_tensors(fbatch)]):
            tracker.add_tensor(t)
        del fbatch, t  # the plan holds the batch: a later one replaces it, and the allocator sees it freed
        checkpointed = False
        try:
            if recipe is not None and sharded:
                # before sharding, as FSDP users apply peft and checkpointing before fully_shard: what the
                # recipe makes (LoRA's adapters) is a parameter of the model that fully_shard then shards
                recipe.apply(plan)
            elif recipe is not None:
                # what a technique makes (LoRA's adapters, a copy of the weights in another dtype) is there at
                # the step's start: its allocations are events the allocator replays, and its tensors are the
                # parameters, buffers and state they are, not tensors first seen inside the forward
                with tracker.tracking():
                    recipe.apply(plan)
            if parallel == "ddp":  # DDP's buckets hold the gradients of the parameters that train once the
                # recipe is applied (LoRA's adapters, the blocks left unfrozen), in their dtypes
                extra, _, _ = shard(plan.model, parallel, world_size, [])
                keep.extend(extra)
                for t in extra:
                    tracker.add_tensor(t)
            if sharded:
                assert parallel is not None  # sharded says so
                _shard_plan(plan, parallel, world_size, optimizer)
                for t in _start_tensors(plan.model, (), plan.optimizer):
                    tracker.add_tensor(t)
            elif recipe is not None:
                for t in _start_tensors(plan.model, (), plan.optimizer):
                    tracker.add_tensor(t)
            if kernels is not None:
                _cuda_defaults(plan.optimizer)
            if plan.optimizer is not None:
                _scalar_reads_in_step(plan.optimizer, fixes)
            if warm_optimizer and plan.optimizer is not None:
                with tracker.tracking():  # its allocations are events the allocator replays
                    _create_state(plan.optimizer)
            checkpointed = bool(plan.checkpointed) or any(
                getattr(m, "gradient_checkpointing", None) is True for m in fmodel.modules())
            timer = None
            for i in range(steps):
                timed = step_time and tgt is not None and i == steps - 1  # the steady step's time on the card
                if timed:
                    from ._step_time import StepTimeMode
                    from ._throughput import throughput

                    assert tgt is not None  # timed needs it
                    rates, _ = throughput(tgt.name)
                    timer = StepTimeMode(rates, *calibrated)  # type: ignore[misc]
                    if module_depth:
                        timer.watch({id(m): n for n, m in plan.model.named_modules()
                                     if n and n.count(".") == module_depth - 1})
                with ops if i == 0 else contextlib.nullcontext(), \
                        timer if timed and timer is not None else contextlib.nullcontext():  # kinds: the first step's
                    res, err = _one_step(plan, module_depth, None, i)
                results.append(res)
                offsets.append(len(events) - (len(res.timeline) - 1))
                if err is not None:
                    break
            for b in more if err is None else ():  # a loader's next batches: one step each, the allocator replaying
                _next_batch(plan, fake_batch(b, mode, batch_size), recipe, values, b, tracker)
                res, err = _one_step(plan, module_depth, None, len(results))
                results.append(res)
                offsets.append(len(events) - (len(res.timeline) - 1))
                if err is not None:
                    break
        finally:
            plan.run_undo()
            values.close()
    with held_back():  # an interrupt waits until the user's objects are back
        put_back = code.restore()  # before any note: the last one says what the step changed of the user's
    if err is not None:
        raise explain(err) from err
    name = label or model_name + (f" · {type(plan.optimizer).__name__}" if plan.optimizer is not None else "")
    if recipe is not None and not label:
        name += f" · {recipe.describe()}"
    where = "CPU" if tgt is None else tgt.name
    short = [f"aten.{n} ×{k}: {META_SHORT[n]}" for n, k in ops.meta_short.items()] if tgt is None else []
    how = ("CUDA allocator model" if tgt is not None else "exact storage sizes" if not short
           else "exact storage sizes except what the notes name")
    est = Estimate(f"{device} (estimate)", f"estimate: fake tensors, {how}",
                   results, name, target=tgt, margin=float(margin), recipe=recipe)
    # made on this machine (its torch decides the fake step) for the target card
    est.versions = {**versions("cpu"), **({"target": tgt.name} if tgt is not None else {})}
    if timer is not None:
        est.time = timer.time
    est.notes.extend(plan.notes)
    est.notes.extend(f"not exact: {why}" for why in short)
    compiled = compiled_note(model, "the fake step")
    if compiled is not None:
        est.notes.append(compiled)
    est.notes.extend(values.notes())
    plan.release()
    if dropped:
        est.notes.append(f"{len(dropped)} hook(s) of your own were not run on the fake copy (they would store fake "
                         f"tensors in your objects; memory they keep is not counted): {'; '.join(dropped[:4])}"
                         + (f" and {len(dropped) - 4} more" if len(dropped) > 4 else ""))
    if shared:
        est.notes.append(f"shared with your model, not copied (the fake step reads them; the bytes of arrays it wrote "
                         f"into were put back, other objects are not checked): {'; '.join(shared[:4])}"
                         + (f" and {len(shared) - 4} more" if len(shared) > 4 else ""))
    est.notes.append(_untouched(where, put_back, code.unchecked, [s for s in shared if not _is_array(s)]))
    if kernels is not None:
        assert tgt is not None and workspaces is not None  # kernels is made with them
        est.backends = dict(kernels.backends)
        if kernels.backends:
            est.notes.append("CUDA kernels chosen: " + ", ".join(f"{k} ×{v}" for k, v in kernels.backends.items()))
        if kernels.user_autocast:
            est.notes.append(f"the step's own torch.autocast('cuda') ({kernels.user_autocast} region(s)) modelled with "
                             "CUDA's autocast policy")
        _apply_allocator(est, events, offsets, tgt, expandable_segments, margin,
                         outside_pytorch(tgt.context, workspaces.libraries))
        est.expected_error = expected_error(classify(fmodel, ops))
        est.notes.append(est.expected_error.note())
        if checkpointed:
            est.notes.append(CHECKPOINTED_ON_CUDA)
    else:
        est.peak_allocated = max(s.peak.allocated for s in results)
    return est


def _listed(items: list[str]) -> str:
    return "; ".join(items[:6]) + (f" and {len(items) - 6} more" if len(items) > 6 else "")


def _is_array(shared: str) -> bool:
    """A line of the fake copy's shared objects that is array data (its bytes are recorded and put back)."""
    return shared.rsplit(", ", 1)[-1].endswith("B") and "(cannot be copied" not in shared


_UNCHANGED = ": nothing of yours was allocated or changed"


def _untouched(where: str, put_back: list[str], unchecked: list[str], services: list[str]) -> str:
    """The estimate's last word on the user's objects: only what was checked is claimed."""
    head = f"predicted for {where} without running on it{_UNCHANGED[:-len(' or changed')]}"
    if not put_back and not unchecked and not services:
        return head + " or changed"
    parts = [head]
    if put_back:
        parts.append(f"what your code changed outside the model in the fake step was put back as found: "
                     f"{_listed(put_back)}")
    if unchecked or services:
        parts.append(f"not checked for changes (vramnb cannot record them): {_listed(unchecked + services)}")
    return "; ".join(parts)


def _next_batch(plan: StepPlan, fb: Any, recipe: Recipe | None, values: BatchValues, real: Any,
                tracker: StorageTracker) -> None:
    """Make ``fb`` (the fake of the user's batch ``real``) the plan's batch for the next step, as a
    loader's next batch arrives: allocated now (the previous one is freed when the plan lets it
    go), then cut as the recipe cuts a batch (its batch size, its micro-batches)."""
    values.add_batch([t for _, t in _batch_tensors(real)], [t for _, t in _batch_tensors(fb)])
    for _, t in _batch_tensors(fb):
        tracker.add_tensor(t)
    plan.batches = [fb]
    for name in ("batch_size", "micro_batches"):
        value = recipe[name] if recipe is not None else None
        if value is not None and value != REGISTRY[name].default():
            REGISTRY[name].apply(plan, value)


def _fill_steps(est: Estimate, rp: Any, offsets: list[int], outside: int) -> None:
    """Each step's peak and marks: allocated and reserved bytes from the allocator's replay ``rp``."""

    def at(i: int, series: list[int]) -> int:
        return series[i] if i >= 0 else 0

    for res, off in zip(est.steps, offsets):
        n = len(res.timeline) - 1
        rng = range(off - 1, off + n)
        res.peak.allocated = max(at(i, rp.allocated) for i in rng)
        res.peak.reserved = max(at(i, rp.reserved) for i in rng)
        res.peak.non_pytorch = outside
        for mark, bd in res.marks:
            p = res.mark_points.get(mark, 0)
            bd.allocated = at(off + p - 1, rp.allocated)
            bd.reserved = at(off + p - 1, rp.reserved)
            bd.non_pytorch = outside
        for bd in res.phase_peaks.values():
            bd.non_pytorch = outside


def _apply_allocator(est: Estimate, events: list[tuple[int, int, int]], offsets: list[int], tgt: Target,
                     expandable: bool, margin: float, outside: int) -> None:
    """Replace the tracker's sums by what the caching allocator would read."""
    blocks = [(k, round_size(o) if o else 0, round_size(n) if n else 0) for k, o, n in events]
    rp = replay(blocks, expandable=expandable)
    _fill_steps(est, rp, offsets, outside)
    est.peak_allocated = max(s.peak.allocated for s in est.steps)
    est.peak_reserved = max(rp.reserved) if rp.reserved else 0
    est.outside_pytorch = outside
    est.device_memory = est.demand = est.peak_reserved + outside
    if tgt.memory is not None:
        # fits: within the card less the margin; what the card holds: on the whole card, whatever the margin
        # (the allocator gives back cached segments when the card is full, not at the margin), so that the
        # same step gives the same reserved bytes for every margin (fit's 5 % and estimate's 0 differed)
        budget = int(tgt.memory * (1 - margin)) - outside
        fitted = replay(blocks, capacity=max(budget, 0), expandable=expandable)
        est.fits = fitted.oom_at is None
        card = tgt.memory - outside
        on_card = fitted if card == budget else replay(blocks, capacity=max(card, 0), expandable=expandable)
        if on_card.oom_at is None:
            est.peak_reserved = max(on_card.reserved) if on_card.reserved else 0
            est.device_memory = est.peak_reserved + outside
            if on_card is not rp:  # the steps' table too: on the card, not on one without limit
                _fill_steps(est, on_card, offsets, outside)
        if expandable:
            est.notes.append("allocator modelled with expandable_segments:True")
