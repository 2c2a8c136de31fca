"""Gradient hygiene and forward-only modes for comparison.

``zero_grad``: ``set_to_none=True`` frees gradients between steps;
``"zeros"`` keeps them allocated (``set_to_none=False``). ``mode``: run the
forward only, under ``torch.no_grad`` or ``torch.inference_mode``: no
activations are saved, no gradients, no optimizer step.
"""

from __future__ import annotations

from typing import Any

from .._plan import StepPlan
from .registry import Technique, register


@register
class ZeroGrad(Technique):
    name = "zero_grad"
    label = "zero_grad"
    choices = ("set_to_none", "zeros")
    description = "optimizer.zero_grad(set_to_none=True) frees gradients; set_to_none=False keeps them"

    @classmethod
    def apply(cls, plan: StepPlan, value: Any) -> None:
        """Make the step's ``optimizer.zero_grad`` use ``set_to_none=True`` (``"set_to_none"``: gradients freed)
        or ``False`` (``"zeros"``: kept, zero-filled)."""
        plan.set_to_none = value == "set_to_none"

    @classmethod
    def describe(cls, value: Any) -> str:
        """``"zero_grad(set_to_none=True)"`` or ``"zero_grad(set_to_none=False)"``."""
        return "zero_grad(set_to_none=False)" if value == "zeros" else "zero_grad(set_to_none=True)"


@register
class GradMode(Technique):
    name = "mode"
    label = "mode"
    choices = ("train", "no_grad", "inference_mode")
    description = "forward only under torch.no_grad or torch.inference_mode, for comparison"

    @classmethod
    def apply(cls, plan: StepPlan, value: Any) -> None:
        """Run the step as ``value``: ``"train"`` (forward, backward, optimizer step) or forward only under
        ``torch.no_grad`` / ``torch.inference_mode``."""
        plan.mode = value

    @classmethod
    def describe(cls, value: Any) -> str:
        """``"forward only (no_grad)"``."""
        return f"forward only ({value})"
