"""How one profiled training step runs: the :class:`StepPlan` techniques edit.

A plan starts as a plain step (one forward over the whole batch, backward,
``optimizer.step()``, ``zero_grad``). Each technique of a recipe changes it:
adds a context around the forward (autocast, activation offload), swaps the
optimizer, splits the batch into micro-batches, adds a gradient scaler, or
changes the model for the step (activation checkpointing, freezing) and
registers how to undo that. The runner in :mod:`vramnb._step` follows the plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["StepPlan"]


@dataclass
class StepPlan:
    """One step, as the runner will execute it.

    Attributes:
        model: the user's model (changed only through ``undo``-registered edits).
        batches: the micro-batches, run one after another before one optimizer step.
        loss_fn: ``loss_fn(model, batch) -> scalar loss``.
        optimizer: the optimizer that steps (the user's, or one a technique built).
        forward_contexts: context-manager factories entered around each forward.
        scaler: a ``torch.amp.GradScaler`` (fp16) or ``None``.
        mode: ``"train"``, or ``"no_grad"``/``"inference_mode"`` (forward only).
        set_to_none: ``zero_grad(set_to_none=...)``.
        undo: callables that reverse the technique's edits, run last-first.
        notes: what the techniques did, in words (shown in the report).
        device: the model's device.
        modelled: ``"cuda"`` when the step runs on fake CPU tensors to estimate a
            CUDA step (techniques then make CUDA's choices), else ``None``.
        autocast: ``autocast(dtype)`` -> context manager for mixed precision
            (default ``torch.autocast`` on the model's device; estimates model CUDA's policy).
        tracker: a ``StorageTracker`` to record with instead of the process-wide
            CPU tracker (estimates count fake storages with their own).
        block_size: maps a storage's bytes to what the device's allocator hands
            out (estimates of CUDA round to 512-byte blocks), or ``None``.
        workspace: tensors standing for library workspaces (estimates of CUDA).
        checkpointed: the blocks a technique wrapped with activation checkpointing
            (:class:`vramnb._no_effect.Wrapped`, counting their calls and runs).
        optimizer_state_bits: the bits per optimizer-state element a technique's
            optimizer promises (8 for 8-bit AdamW), checked after the step.
        checks: callables a technique registers, asked after the steps whether it
            had an effect: each returns one line saying it did nothing, or ``None``
            (shown in ``StepReport.warnings``, see :mod:`vramnb._no_effect`).
    """

    model: torch.nn.Module
    batches: list[Any]
    loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor]
    optimizer: torch.optim.Optimizer | None
    device: torch.device
    forward_contexts: list[Callable[[], Any]] = field(default_factory=list)
    scaler: Any = None
    mode: str = "train"
    set_to_none: bool = True
    undo: list[Callable[[], object]] = field(default_factory=list)  # what they return is not used
    notes: list[str] = field(default_factory=list)
    user_optimizer: torch.optim.Optimizer | None = None
    modelled: str | None = None
    autocast: Callable[[torch.dtype], Any] | None = None
    tracker: Any = None
    block_size: Callable[[int], int] | None = None
    workspace: list[torch.Tensor] = field(default_factory=list)
    checkpointed: list[Any] = field(default_factory=list)
    optimizer_state_bits: int | None = None
    checks: list[Callable[[], str | None]] = field(default_factory=list)

    @property
    def device_type(self) -> str:
        """The device type the step is for: ``"cuda"`` in an estimate of a CUDA step."""
        return self.modelled or self.device.type

    def autocast_context(self, dtype: torch.dtype) -> Any:
        """A mixed-precision region for ``dtype`` on this plan's device (or its model)."""
        if self.autocast is not None:
            return self.autocast(dtype)
        return torch.autocast(self.device.type, dtype=dtype)

    def release(self) -> None:
        """Drop what the plan holds once its steps are done: the techniques' closures
        refer back to the plan (``lambda: plan.autocast_context(...)``), a cycle that kept
        a recipe's optimizer and its state alive until the next ``gc.collect()``."""
        self.forward_contexts.clear()
        self.undo.clear()
        self.checks.clear()
        self.batches.clear()
        self.workspace.clear()
        self.optimizer = self.user_optimizer = self.scaler = None
        self.autocast = self.block_size = self.tracker = None

    def run_undo(self) -> None:
        """Run every undo, last-first, even when one raises; then raise the first error."""
        from ._restore import run_all

        fns = self.undo[::-1]
        self.undo.clear()
        run_all(fns)
