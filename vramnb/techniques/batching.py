"""Batch size and gradient accumulation.

``batch_size`` resizes the given batch along its first dimension (a slice, or
the batch repeated). ``micro_batches`` splits it into k micro-batches run one
after another (each loss divided by k) before one optimizer step: the same
effective batch with about 1/k of the activations (Goyal et al. 2017 use the same
arithmetic for large-batch SGD).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .._containers import map_tensors
from .._plan import StepPlan
from .registry import Technique, register


def batch_len(batch: Any) -> int:
    """The first dimension shared by the batch's tensors.

    Raises:
        ValueError: the tensors disagree on it, or there is none.
    """
    sizes: set[int] = set()
    map_tensors(batch, lambda t: sizes.add(t.shape[0]) if t.dim() else None)
    if len(sizes) != 1:
        raise ValueError(f"the batch's tensors have first dimensions {sorted(sizes)}; batch_size and micro_batches need one")
    return sizes.pop()


def resize(batch: Any, n: int) -> Any:
    """The batch with ``n`` rows: its first ``n``, or repeated to ``n``."""
    def one(t: torch.Tensor) -> torch.Tensor:
        if not t.dim():
            return t
        if n <= t.shape[0]:
            return t[:n].clone()
        reps = -(-n // t.shape[0])
        return t.repeat(reps, *([1] * (t.dim() - 1)))[:n].clone()
    return map_tensors(batch, one)


def _rows(lo: int, hi: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Rows ``lo:hi`` of a tensor (a scalar as it is): one micro-batch's part."""
    return lambda t: t[lo:hi] if t.dim() else t


class _PositiveInt(Technique):
    @classmethod
    def validate(cls, value: Any) -> Any:
        """``value`` if it is a positive ``int`` (or ``None`` where the baseline is ``None``: as given).

        Raises:
            ValueError: anything else (a bool, a float, zero, a negative number); the message gives examples.
        """
        if value is None and cls.choices[0] is None:
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{cls.name}={value!r}: give a positive integer, e.g. {', '.join(str(c) for c in cls.choices[1:])}")
        return value


@register
class BatchSize(_PositiveInt):
    name = "batch_size"
    label = "batch size"
    choices = (None, 1, 2, 4, 8, 16, 32, 64, 128, 256)
    description = "resize the batch along its first dimension (None: as given)"

    @classmethod
    def unavailable(cls, value: Any, plan: StepPlan) -> str | None:
        """Why the batch cannot be resized (no tensor with a first dimension to resize), or ``None``."""
        try:
            batch_len(plan.batches[0])
        except ValueError as e:
            return str(e)
        return None

    @classmethod
    def apply(cls, plan: StepPlan, value: Any) -> None:
        """Resize every tensor of the batch along its first dimension to ``value`` rows: its first
        ``value`` rows, or its rows repeated to ``value``."""
        plan.batches = [resize(b, value) for b in plan.batches]

    @classmethod
    def describe(cls, value: Any) -> str:
        """``"batch 32"``."""
        return f"batch {value}"


@register
class MicroBatches(_PositiveInt):
    name = "micro_batches"
    label = "gradient accumulation (micro-batches)"
    choices = (1, 2, 4, 8, 16)
    description = "split the batch into k micro-batches, accumulate gradients, one optimizer step"

    @classmethod
    def unavailable(cls, value: Any, plan: StepPlan) -> str | None:
        """Why the batch does not split into ``value`` equal micro-batches (its length is not a multiple), or ``None``."""
        try:
            n = batch_len(plan.batches[0])
        except ValueError as e:
            return str(e)
        if n % value:
            return f"a batch of {n} does not split into {value} equal micro-batches"
        return None

    @classmethod
    def apply(cls, plan: StepPlan, value: Any) -> None:
        """Split the batch into ``value`` equal micro-batches along its first dimension; the step accumulates
        their gradients before one optimizer step."""
        (batch,) = plan.batches
        n = batch_len(batch) // value
        plan.batches = [map_tensors(batch, _rows(i * n, (i + 1) * n)) for i in range(value)]

    @classmethod
    def describe(cls, value: Any) -> str:
        """``"4 micro-batches"``."""
        return f"{value} micro-batches"
