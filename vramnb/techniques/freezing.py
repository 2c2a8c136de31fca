"""Freezing parameters, and LoRA adapters (peft).

Frozen parameters (``requires_grad=False``) get no gradient and no optimizer
state. LoRA (Hu et al. 2021) freezes the model and trains low-rank adapters,
with ``peft`` (``target_modules="all-linear"``); both undone after the step.
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

import torch

from .._optim import rebuild_optimizer
from .._plan import StepPlan
from .checkpointing import find_blocks
from .registry import Technique, register


def _frozen_params(model: torch.nn.Module, value: str) -> list[torch.nn.Parameter]:
    if value == "embeddings":
        mods = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
        return [p for m in mods for p in m.parameters()]
    if value == "all but the last block":
        blocks = find_blocks(model)
        keep = {id(p) for p in blocks[-1].parameters()} if blocks else set()
        return [p for p in model.parameters() if id(p) not in keep]
    if value == "first half of blocks":
        blocks = find_blocks(model)
        return [p for b in blocks[: len(blocks) // 2] for p in b.parameters()]
    return []


@register
class Freeze(Technique):
    name = "freeze"
    label = "freeze"
    choices = ("none", "embeddings", "first half of blocks", "all but the last block")
    description = "requires_grad=False on part of the model: no gradients, no optimizer state there"

    @classmethod
    def unavailable(cls, value: Any, plan: StepPlan) -> str | None:
        """Why freezing ``value`` would not run or would change nothing (no such part, already frozen, every
        parameter), or ``None``."""
        frozen = _frozen_params(plan.model, value)
        if not frozen:
            return f"found nothing to freeze for {value!r} in {type(plan.model).__name__}"
        if not any(p.requires_grad for p in frozen):
            return (f"freezing {value!r} would change nothing: its {len({id(p) for p in frozen})} parameter(s) are "
                    "already frozen (requires_grad=False)")
        if len({id(p) for p in frozen}) >= len({id(p) for p in plan.model.parameters()}):
            return f"{value!r} would freeze every parameter of {type(plan.model).__name__}: nothing left to train"
        return None

    @classmethod
    def apply(cls, plan: StepPlan, value: Any) -> None:
        """Set ``requires_grad=False`` on the parameters of that part for the step (no gradients, no optimizer
        state there); the flags are put back afterwards."""
        params = _frozen_params(plan.model, value)
        flags = [(p, p.requires_grad) for p in params]

        def undo() -> None:  # also with restore=False, where no snapshot puts the flags back
            for p, flag in flags:
                p.requires_grad_(flag)

        plan.undo.append(undo)
        for p in params:
            p.requires_grad_(False)

    @classmethod
    def describe(cls, value: Any) -> str:
        """``"frozen: embeddings"``."""
        return f"frozen: {value}"


def _peft_adapters(model: torch.nn.Module) -> str:
    """What peft adapters ``model`` already has (a ``PeftModel``, or tuner layers injected anywhere), or ``""``."""
    try:
        from peft import PeftModel  # type: ignore[import-not-found]
        from peft.tuners.tuners_utils import BaseTunerLayer  # type: ignore[import-not-found]
    except ImportError:
        return ""
    if isinstance(model, PeftModel):
        return f"a PeftModel with adapters {sorted(getattr(model, 'peft_config', {}) or [])}"
    layers = [n for n, m in model.named_modules() if isinstance(m, (PeftModel, BaseTunerLayer))]
    return f"{len(layers)} adapter layers, e.g. {layers[0]}" if layers else ""


@register
class LoRA(Technique):
    name = "lora"
    label = "LoRA adapters"
    choices = ("off", "r=8", "r=16", "r=64")
    description = "peft LoRA on every linear layer (Hu et al. 2021); the model is frozen, adapters train"

    @classmethod
    def unavailable(cls, value: Any, plan: StepPlan) -> str | None:
        """Why LoRA cannot run (peft not installed, or the model already has peft adapters, which the undo would
        unload), or ``None``."""
        if importlib.util.find_spec("peft") is None:
            return "LoRA uses peft: pip install peft"
        has = _peft_adapters(plan.model)
        if has:
            return (f"{type(plan.model).__name__} already has peft adapters ({has}); adding LoRA and taking it off "
                    "again would unload yours. Profile it as it is (without lora=, your adapters train), or "
                    "profile LoRA on the base model without adapters (a fresh load of it)")
        return None

    @classmethod
    def apply(cls, plan: StepPlan, value: Any) -> None:
        """Inject peft LoRA adapters of rank ``r`` (``lora_alpha=2r``) into every linear layer, train only them
        (the optimizer rebuilt over their parameters), and unload them afterwards."""
        from peft import LoraConfig, get_peft_model  # type: ignore[import-not-found]

        r = int(value.split("=")[1])
        with warnings.catch_warnings():
            # peft's notice that it transposes transformers' Conv1D (GPT-2) and a transformers
            # deprecation peft's call triggers: about these two libraries, not the user's code
            warnings.filterwarnings("ignore", message=".*fan_in_fan_out", category=UserWarning)
            warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
            peft_model = get_peft_model(plan.model, LoraConfig(r=r, lora_alpha=2 * r, target_modules="all-linear"))
        plan.undo.append(peft_model.unload)  # removes the injected adapter layers from plan.model
        params = [p for p in plan.model.parameters() if p.requires_grad]
        user = plan.optimizer
        plan.optimizer = rebuild_optimizer(user, params) if user is not None else torch.optim.AdamW(params)

    @classmethod
    def describe(cls, value: Any) -> str:
        """``"LoRA r=8"``."""
        return f"LoRA {value}"
