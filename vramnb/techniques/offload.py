"""Activation offload: ``torch.autograd.graph.save_on_cpu`` keeps the tensors saved
for backward in (pinned) host memory and copies them back when backward needs them."""

from __future__ import annotations

from typing import Any

import torch

from .._plan import StepPlan
from .registry import Technique, register


@register
class ActivationOffload(Technique):
    name = "activation_offload"
    label = "activation offload"
    choices = ("off", "CPU")
    description = "torch.autograd.graph.save_on_cpu(pin_memory=True) around the forward"

    @classmethod
    def unavailable(cls, value: Any, plan: StepPlan) -> str | None:
        """Why offload cannot run: the model is on the CPU, where activations already are in host memory; else ``None``."""
        if plan.device_type == "cpu":
            return "the model is on the CPU: its activations are already in host memory"
        return None

    @classmethod
    def apply(cls, plan: StepPlan, value: Any) -> None:
        """Run the forward under ``torch.autograd.graph.save_on_cpu(pin_memory=True)`` (a model of it in
        estimates), counting what it moved; a step where it moved nothing gets a warning."""
        packed = [0]  # tensors its pack hook moved, over the steps

        def counted(ctx: Any) -> Any:
            pack = ctx.pack_hook  # saved_tensors_hooks keeps its hooks as attributes and pushes them on __enter__

            def pack_hook(t: torch.Tensor) -> Any:
                packed[0] += 1
                return pack(t)

            ctx.pack_hook = pack_hook
            return ctx

        if plan.modelled:
            plan.forward_contexts.append(lambda: counted(_modelled_offload()))
        else:
            plan.forward_contexts.append(lambda: counted(torch.autograd.graph.save_on_cpu(pin_memory=True)))

        def check() -> str | None:
            if packed[0]:
                return None
            why = (f"the step runs forward only (mode={plan.mode!r}), so nothing is saved for backward"
                   if plan.mode != "train" else
                   "autograd saved no tensor under it (nothing in the forward requires grad)")
            return f"activation offload moved nothing to host memory: {why}"

        plan.checks.append(check)

    @classmethod
    def describe(cls, value: Any) -> str:
        """``"activations offloaded to CPU"``."""
        return "activations offloaded to CPU"


def _modelled_offload() -> Any:
    """Offload in an estimate: a saved tensor leaves the device (only its shape is
    kept) and a new one of its size comes back when backward unpacks it."""

    def pack(t: torch.Tensor) -> Any:
        return (tuple(t.shape), tuple(t.stride()), t.dtype)

    def unpack(spec: Any) -> torch.Tensor:
        return torch.empty_strided(spec[0], spec[1], dtype=spec[2])

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)
