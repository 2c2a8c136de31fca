"""Mixed precision: ``torch.autocast`` (bf16, fp16 with ``torch.amp.GradScaler``), fp8 via torchao.

Literature: Micikevicius et al., "Mixed Precision Training" (ICLR 2018): activations
and most math in 16 bits, fp32 master weights and optimizer state; about half the
activation memory. PyTorch: https://pytorch.org/docs/stable/amp.html
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

from .._plan import StepPlan
from .registry import Technique, register


def _grad_scaler(device_type: str) -> Any:
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        return amp.GradScaler(device_type)
    return torch.cuda.amp.GradScaler()  # torch < 2.3


@register
class MixedPrecision(Technique):
    name = "precision"
    label = "mixed precision"
    choices = ("fp32", "bf16", "fp16", "fp8")
    description = ("torch.autocast around the forward; fp16 adds torch.amp.GradScaler; fp8 converts nn.Linear "
                   "layers with torchao.float8 (Micikevicius et al. 2018)")

    @classmethod
    def unavailable(cls, value: Any, plan: StepPlan) -> str | None:
        """Why ``value`` cannot run on this device and installation (fp16 without CUDA, bf16 on a card without
        it, fp8 without compute capability 8.9, torchao, or eligible layers; fp8 in an estimate), or ``None``."""
        dev = plan.device
        if value == "fp8" and plan.modelled:
            return "estimates do not model fp8 (torchao's Float8Linear); measure it on the GPU"
        if value == "fp8":
            linears = [m for m in plan.model.modules() if isinstance(m, torch.nn.Linear)]
            if not any(_fp8_eligible(m) for m in linears):
                return (f"fp8 would change nothing: none of the {len(linears)} nn.Linear layer(s) of "
                        f"{type(plan.model).__name__} has both dimensions divisible by 16, which torchao's "
                        "Float8Linear needs")
        if plan.modelled == "cuda":
            return None  # an estimate for a CUDA card: bf16 and fp16 are modelled
        if value == "fp16" and dev.type != "cuda":
            return "fp16 training with a GradScaler needs a CUDA GPU; on CPU use precision='bf16'"
        if value == "bf16" and dev.type == "cuda" and not torch.cuda.is_bf16_supported():
            return f"{torch.cuda.get_device_name(dev)} has no bf16 support; use precision='fp16'"
        if value == "fp8":
            if dev.type != "cuda":
                return "fp8 training needs an NVIDIA GPU of compute capability 8.9 or newer (Ada, Hopper)"
            if torch.cuda.get_device_capability(dev) < (8, 9):
                return (f"{torch.cuda.get_device_name(dev)} (compute capability {torch.cuda.get_device_capability(dev)}) "
                        "has no fp8 tensor cores; 8.9 or newer is needed")
            if importlib.util.find_spec("torchao") is None:
                return "fp8 training needs torchao: pip install torchao"
        return None

    @classmethod
    def apply(cls, plan: StepPlan, value: Any) -> None:
        """Run the forward under ``torch.autocast`` in bf16 or fp16 (fp16 with a ``GradScaler``), or swap
        eligible ``nn.Linear`` layers for torchao's Float8Linear (fp8), undone afterwards."""
        if value == "bf16":
            plan.forward_contexts.append(lambda: plan.autocast_context(torch.bfloat16))
        elif value == "fp16":
            plan.forward_contexts.append(lambda: plan.autocast_context(torch.float16))
            if plan.modelled:
                # its scale and found-inf flags are a few bytes; its unscale is in place
                plan.notes.append("fp16: the GradScaler's loss scaling is not modelled (a few bytes, in place)")
            else:
                plan.scaler = _grad_scaler(plan.device.type)
        elif value == "fp8":
            _convert_fp8(plan)

    @classmethod
    def code(cls, value: Any, device_type: str = "cuda", model: Any = None, name: str = "model") -> str:
        """fp8's set-up line; bf16/fp16 are the autocast region and scaler that
        :func:`vramnb.techniques.code.step_code` writes around the step."""
        if value == "fp8":
            return f"from torchao.float8 import convert_to_float8_training; convert_to_float8_training({name})"
        return super().code(value, device_type, model, name)

    @classmethod
    def describe(cls, value: Any) -> str:
        """``"bf16 autocast"``, ``"fp16 autocast + GradScaler"``, ``"fp8 (torchao)"`` (``"fp32"`` as is)."""
        return {"bf16": "bf16 autocast", "fp16": "fp16 autocast + GradScaler", "fp8": "fp8 (torchao)"}.get(value, value)


def _fp8_eligible(m: torch.nn.Linear) -> bool:
    """A linear layer torchao's fp8 matmuls take: both dimensions multiples of 16."""
    return m.in_features % 16 == 0 and m.out_features % 16 == 0


def _convert_fp8(plan: StepPlan) -> None:
    """Swap eligible ``nn.Linear`` layers for torchao's Float8Linear (sharing the
    same parameters) for the step, and swap the originals back afterwards."""
    from torchao.float8 import convert_to_float8_training

    originals = [(parent, name, child) for parent in plan.model.modules() for name, child in parent.named_children()
                 if isinstance(child, torch.nn.Linear)]

    def undo() -> None:
        for parent, name, child in originals:
            setattr(parent, name, child)

    plan.undo.append(undo)  # before converting: a conversion that fails half-way is undone too
    convert_to_float8_training(plan.model, module_filter_fn=lambda m, fqn: _fp8_eligible(m))
    eligible = sum(1 for _, _, child in originals if _fp8_eligible(child))
    if eligible < len(originals):
        plan.notes.append(f"fp8: {eligible} of the {len(originals)} nn.Linear layers converted; the others' dimensions "
                          "are not multiples of 16 and stay in their dtype")
