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


_LORA_KEYS = ("r", "lora_alpha", "lora_dropout", "target_modules", "bias", "use_rslora", "use_dora",
              "modules_to_save", "layers_to_transform", "init_lora_weights", "exclude_modules")


def _lora_dict(value: Any) -> dict[str, Any] | None:
    """The settings of a LoRA value as a dict (``"r=8"`` → rank 8, alpha 16, all linear layers; a dict or a
    peft ``LoraConfig`` → its own settings), or ``None`` for ``"off"``."""
    if isinstance(value, str):
        if value == "off":
            return None
        r = int(value.split("=")[1])
        return {"r": r, "lora_alpha": 2 * r, "target_modules": "all-linear"}
    return dict(value)


def _lora_text(d: dict[str, Any]) -> str:
    t = d.get("target_modules", "all-linear")
    if isinstance(t, (list, tuple, set, frozenset)):
        t = ",".join(sorted(map(str, t)))
    return (f"r={d.get('r', 8)} alpha={d.get('lora_alpha', 8)} dropout={d.get('lora_dropout', 0.0)} on {t}"
            + "".join(f" {k}={d[k]!r}" for k in sorted(d) if k not in ("r", "lora_alpha", "lora_dropout",
                                                                        "target_modules")))


def _own_config(model: torch.nn.Module) -> str:
    cfgs = getattr(model, "peft_config", None)
    if not isinstance(cfgs, dict):
        return ""
    out = []
    for name, c in cfgs.items():
        if hasattr(c, "r") and hasattr(c, "lora_alpha"):
            out.append(f"{name!r}: " + _lora_text({k: getattr(c, k) for k in ("r", "lora_alpha", "lora_dropout",
                                                                               "target_modules")}))
    return "; ".join(out)


@register
class LoRA(Technique):
    name = "lora"
    label = "LoRA adapters"
    choices = ("off", "r=8", "r=16", "r=64")
    description = ("peft LoRA (Hu et al. 2021): \"r=N\" on every linear layer (alpha 2N, no dropout), or your own "
                   "settings as a peft LoraConfig or a dict of its fields; the model is frozen, adapters train")

    @classmethod
    def validate(cls, value: Any) -> Any:
        """``value`` if valid: one of ``choices``, a peft ``LoraConfig``, or a dict of LoraConfig fields
        (``r``, ``lora_alpha``, ``lora_dropout``, ``target_modules``, ...). A LoraConfig or dict is stored as a
        new dict of its settings (the user's own object is never changed).

        Raises:
            ValueError: anything else, an unknown key, or a rank/dropout out of range; the message lists the
                valid choices.
        """
        if isinstance(value, str) or value is None:
            return super().validate(value)
        valid = (f"valid: {', '.join(repr(c) for c in cls.choices)}, a peft LoraConfig, or a dict with keys "
                 f"{', '.join(_LORA_KEYS)}")
        if type(value).__name__ == "LoraConfig" and hasattr(value, "r"):
            import dataclasses

            fields = [f.name for f in dataclasses.fields(value)]
            default = type(value)()
            d = {k: getattr(value, k) for k in fields if k in _LORA_KEYS and getattr(value, k) != getattr(default, k)}
            d.setdefault("r", value.r)
            d["target_modules"] = value.target_modules if value.target_modules is not None else "all-linear"
        elif isinstance(value, dict):
            bad = [k for k in value if k not in _LORA_KEYS]
            if bad:
                raise ValueError(f"lora={{{bad[0]!r}: ...}} is not a LoRA setting vramnb passes on; {valid}")
            d = dict(value)
            d.setdefault("target_modules", "all-linear")
        else:
            raise ValueError(f"lora={value!r} is not a valid setting; {valid}")
        for k, v in list(d.items()):
            if isinstance(v, (list, set, frozenset)):
                # module-name lists are sets to peft: one order, so equal settings make one recipe
                d[k] = tuple(sorted(v, key=str)) if k.endswith("modules") or k == "modules_to_save" else tuple(v)
        r = d.get("r", 8)
        if not isinstance(r, int) or isinstance(r, bool) or r < 1:
            raise ValueError(f"lora rank r={r!r} must be a positive int; {valid}")
        p = d.get("lora_dropout", 0.0)
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p < 1:
            raise ValueError(f"lora_dropout={p!r} must be a float in [0, 1); {valid}")
        return d

    @classmethod
    def unavailable(cls, value: Any, plan: StepPlan) -> str | None:
        """Why LoRA cannot run (peft not installed, or the model already has peft adapters, which the undo would
        unload), or ``None``."""
        if importlib.util.find_spec("peft") is None:
            return "LoRA uses peft: pip install peft"
        has = _peft_adapters(plan.model)
        if has:
            own = _own_config(plan.model)
            return (f"{type(plan.model).__name__} already has peft adapters ({has}"
                    + (f"; its LoRA config {own}" if own else "") + "); adding LoRA and taking it off "
                    "again would unload yours. Profile it as it is (without lora=, your adapters train), or "
                    "profile LoRA on the base model without adapters (a fresh load of it) with "
                    "lora=your_model.peft_config['default'] to compare these same settings")
        return None

    @classmethod
    def apply(cls, plan: StepPlan, value: Any) -> None:
        """Inject peft LoRA adapters (``"r=N"``: rank N, ``lora_alpha=2N``, every linear layer; a dict: those
        LoraConfig settings) , train only them (the optimizer rebuilt over their parameters), and unload them
        afterwards."""
        from peft import LoraConfig, get_peft_model  # type: ignore[import-not-found]

        d = _lora_dict(value) or {}
        kwargs: dict[str, Any] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}
        cfg = LoraConfig(**kwargs)
        with warnings.catch_warnings():
            # peft's notice that it transposes transformers' Conv1D (GPT-2) and a transformers
            # deprecation peft's call triggers: about these two libraries, not the user's code
            warnings.filterwarnings("ignore", message=".*fan_in_fan_out", category=UserWarning)
            warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
            peft_model = get_peft_model(plan.model, cfg)
        plan.undo.append(peft_model.unload)  # removes the injected adapter layers from plan.model
        params = [p for p in plan.model.parameters() if p.requires_grad]
        user = plan.optimizer
        plan.optimizer = rebuild_optimizer(user, params) if user is not None else torch.optim.AdamW(params)

    @classmethod
    def describe(cls, value: Any) -> str:
        """``"LoRA r=8"``; with your own settings ``"LoRA r=4 alpha=8 dropout=0.1 on q,v"``."""
        return f"LoRA {value}" if isinstance(value, str) else f"LoRA {_lora_text(value)}"
