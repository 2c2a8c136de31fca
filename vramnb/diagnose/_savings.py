"""What each fix would save on *this* step, from estimates (fake tensors, nothing allocated).

Where an out-of-memory error comes from :func:`vramnb.profile_step`, the model, batch,
loss and optimizer are known. After the restore, each candidate technique is estimated
on the same step (:func:`vramnb.estimate`, one steady-state step each) and its fix
carries the estimated change of the step's peak and whether the step would then fit
the memory this process had. "Would fit" compares the estimate's peak reserved memory
(allocated on CPU), plus what the notebook held before the step outside the model,
optimizer and batch, with the memory the failure left this process: the cap or the
card less what other processes and non-PyTorch memory held (CUDA), or what the system
had available plus what tensors held (CPU).

The largest batch that fits comes from two estimates (the batch and half of it): a
step's peak grows linearly with the batch size (parameters, gradients and optimizer
state fixed, activations in proportion), to within the allocator's rounding.
:func:`vramnb.max_batch_size` searches it exactly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


from ._verdict import Fix

__all__ = ["CANDIDATES", "StepFixes", "step_fixes"]


class StepFixes(list):  # type: ignore[type-arg]
    """The fixes (a list, best first), and ``need``: the step's estimated peak plus what the
    notebook held outside it (bytes; ``None`` where the step could not be estimated)."""

    need: int | None = None

#: the techniques tried, cheapest in step time first (ties broken by the saving): autocast
#: speeds a step up; an optimizer swap changes the training; micro-batches and checkpointing
#: add time (a forward recomputed per checkpointed block); offload adds transfers
CANDIDATES: tuple[tuple[str, Any], ...] = (
    ("precision", "bf16"),
    ("optimizer", "Adafactor"),
    ("micro_batches", 2),
    ("checkpointing", "every block"),
    ("micro_batches", 4),
    ("activation_offload", "CPU"),
)


def step_fixes(
    run: Callable[[dict[str, Any], int | None], Any],
    settings: dict[str, Any],
    batch_size: int | None,
    room: int | None,
    other: int,
    device_type: str,
    progress: Callable[[str], None] | None = None,
    code: Callable[[dict[str, Any]], str] | None = None,
    deadline: float | None = None,
) -> StepFixes:
    """The techniques' fixes for one step, best first.

    Args:
        run: ``run(settings, batch_size) -> Estimate`` (raises where a setting does not apply).
        settings: the recipe the step ran with (``Recipe.changed()``).
        batch_size: the batch's first dimension, or ``None`` (no batch-size fix).
        room: bytes this process could use for the step and what it held before (``None``: unknown).
        other: bytes held before the step outside the model, optimizer and batch.
        device_type: ``"cuda"`` or ``"cpu"`` (the code lines' autocast device).
        progress: called with the name of each estimate before it runs.
        code: ``code(settings) -> str``, the step's code with those settings (default: each
            technique's own line).
        deadline: a ``time.perf_counter()`` after which no further estimate starts.

    Returns:
        fixes with ``saving`` (bytes the step's peak drops, estimated) and ``fits``; those
        that would fit first (in :data:`CANDIDATES` order), then the rest by saving, as a
        :class:`StepFixes` whose ``need`` is the step's estimated peak plus ``other``.
        Empty where the step itself cannot be estimated.
    """
    from ..techniques import REGISTRY

    def peak(e: Any) -> int:
        return int(e.peak_reserved if e.peak_reserved is not None else e.peak_allocated)

    def fits(e: Any) -> bool | None:
        return None if room is None else peak(e) + other <= room

    try:
        _say(progress, "this step")
        base = run(settings, None)
    except Exception:  # noqa: BLE001 - no savings where the step cannot be estimated
        return StepFixes()
    found: list[tuple[int, Fix]] = []
    for rank, (name, value) in enumerate(CANDIDATES):
        if name in settings:  # already part of the step's recipe
            continue
        if deadline is not None and time.perf_counter() > deadline:
            break
        tech = REGISTRY[name]
        try:
            _say(progress, tech.describe(value))
            e = run({**settings, name: value}, None)
        except Exception:  # noqa: BLE001 - a technique that does not apply to this step
            continue
        saving = peak(base) - peak(e)
        if saving <= 0:
            continue
        text = code({**settings, name: value}) if code is not None else tech.code(value, device_type)
        found.append((rank, Fix(tech.describe(value), text, saving, estimated=True,
                                fits=fits(e))))
    late = deadline is not None and time.perf_counter() > deadline
    bs = None if late else _largest_batch(run, settings, batch_size, base, room, other, peak, progress)
    if bs is not None:
        n, e = bs
        found.append((len(CANDIDATES), Fix(f"batch size {n} (from {batch_size})",
                                          f"batch = batch[:{n}]  # or DataLoader(..., batch_size={n}): about the "
                                          "largest that fits (two estimates; vramnb.max_batch_size searches it)",
                                          peak(base) - e, estimated=True, fits=True)))
    ok = [f for _, f in sorted((r, f) for r, f in found if f.fits)]  # type: ignore[type-var]
    rest = sorted((f for _, f in found if not f.fits), key=lambda f: -(f.saving or 0))
    out = StepFixes(ok + rest)
    out.need = peak(base) + other
    return out


def _largest_batch(run: Any, settings: dict[str, Any], n: int | None, base: Any, room: int | None, other: int,
                   peak: Callable[[Any], int], progress: Any) -> tuple[int, int] | None:
    """``(batch size, its estimated peak)`` of the largest batch below ``n`` that fits, from the
    peaks at ``n`` and ``n // 2``; ``None`` where none is found or the step fits already."""
    if n is None or n < 2 or room is None or peak(base) + other <= room:
        return None
    try:
        _say(progress, f"batch size {n // 2}")
        half = run(settings, n // 2)
    except Exception:  # noqa: BLE001
        return None
    per = (peak(base) - peak(half)) / (n - n // 2)
    if per <= 0:
        return None
    fixed = peak(half) - per * (n // 2)
    k = int((room - other - fixed) // per)
    if k < 1 or k >= n:
        return None
    return k, int(fixed + per * k)


def _say(progress: Callable[[str], None] | None, what: str) -> None:
    if progress is not None:
        progress(what)
