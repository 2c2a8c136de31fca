"""Why a recipe saved what it saved: one line per technique result, computed
from the per-source deltas of the measured steps (never canned numbers).

Pure standard library: works on :class:`vramnb._breakdown.StepResult` objects.
"""

from __future__ import annotations

from typing import Any

from ._sources import SOURCES
from ._units import format_bytes, format_delta

__all__ = ["reason", "deltas"]


def _after_forward(step: Any) -> int | None:
    b = dict(step.marks).get("after forward")
    return None if b is None else int(b.sources.get("activations", 0))


def deltas(base: Any, other: Any) -> dict[str, int]:
    """Source → bytes at ``other``'s peak minus at ``base``'s peak (positive: more memory)."""
    b, o = base.peak.sources, other.peak.sources
    return {s: o.get(s, 0) - b.get(s, 0) for s in SOURCES if o.get(s, 0) != b.get(s, 0)}


def _checkpointing(a0: int, a1: int, alone: bool) -> str:
    # the change after forward is the recipe's as a whole: it is read as checkpointing's only when no
    # other technique that changes what forward saves is set with it
    if alone and a1 > a0:
        return ("checkpointing keeps each block's input in place of what the block saves for backward: here the "
                "inputs kept are larger than what the blocks saved")
    if alone and a1 == a0:
        return ("checkpointing keeps each block's input in place of what the block saves for backward: here they are "
                "the same bytes (a block whose only saved tensor is its input), so recomputation saves nothing")
    return "blocks recompute their saved tensors in backward instead of keeping them"


def _precision(value: Any, a0: int, a1: int, alone: bool) -> str:
    if value == "fp8":
        # torchao's Float8Linear: the parameters stay as they are; each matmul casts its operands to fp8
        keep = ("torchao's Float8Linear keeps the weights, gradients and optimizer state in their dtype and casts each "
                "linear layer's input and weight to fp8 for its matmuls")
        if a1 == a0:
            return f"{keep}; the tensors saved for backward did not change"
        return f"{keep}; what the layers save for backward changes to those casts"
    keep = "autocast keeps the fp32 weights, gradients and optimizer state"
    if alone and a1 > a0:
        return (f"{keep} and saves low-precision copies of the tensors it casts (weights, inputs) for backward: here the "
                "copies outweigh the low-precision activations' saving")
    if alone and a1 == a0:
        return f"{keep}; the tensors saved for backward did not change"
    return f"{keep}; the tensors saved for backward shrink to low precision"


def _lora(value: Any, d: dict[str, int], a0: int, a1: int) -> str:
    gone = [f"{s} {format_delta(d[s])}" for s in ("gradients", "optimizer state") if d.get(s, 0) < 0]
    line = ("LoRA freezes the base weights, which then need no gradients or optimizer state"
            + (f" ({', '.join(gone)} at the peak)" if gone else ""))
    if d.get("parameters", 0) > 0:
        line += f"; the adapters add {format_bytes(d['parameters'])} of parameters"
    dropout = value.get("lora_dropout", 0.0) if isinstance(value, dict) else 0.0
    if a1 != a0:
        line += ("; frozen layers no longer save their inputs for weight gradients, while the adapters save theirs "
                 "(their low-rank intermediates"
                 + (f"; with dropout {dropout}, a dropped copy of each adapted layer's input, and dropout's mask where "
                    "that input needs a gradient" if dropout else "") + ")")
    return line


def _freeze(d: dict[str, int]) -> str:
    gone = [f"{s} {format_delta(d[s])}" for s in ("gradients", "optimizer state") if d.get(s, 0) < 0]
    return "frozen parameters get no gradient and no optimizer state" + (f" ({', '.join(gone)} at the peak)"
                                                                         if gone else ": none were dropped at the peak")


def reason(recipe: Any, base: Any, other: Any, base_recipe: Any = None, against: str = "the baseline's") -> str:
    """One line: which sources the recipe changed at the peak (from the measured steps ``base`` and
    ``other``, :class:`~vramnb._breakdown.StepResult`), the activations kept after forward, and what
    each technique changes and cannot, as the numbers show it. ``base_recipe``: the recipe ``base`` ran
    under (default: the baseline); only the techniques set differently from it are explained.
    ``against``: how the line names ``base``."""
    d = deltas(base, other)
    a0, a1 = _after_forward(base), _after_forward(other)
    changed = sorted(d.items(), key=lambda kv: -abs(kv[1]))
    head = (f"{recipe.describe()}: at its peak ({other.peak_phase}), against {against}: "
            + (", ".join(f"{s} {format_delta(n)}" for s, n in changed) if changed else "no source changed"))
    if a0 is not None and a1 is not None and a0 != a1:
        head += f"; activations after forward {format_bytes(a0)} → {format_bytes(a1)}"
    why = []
    if a0 is not None and a1 is not None:
        settings = {k: v for k, v in recipe.changed().items() if base_recipe is None or base_recipe[k] != v}
        ckpt = settings.get("checkpointing") not in (None, "off")
        alone = sum((ckpt, "precision" in settings, "lora" in settings, "freeze" in settings)) == 1
        if ckpt:
            why.append(_checkpointing(a0, a1, alone))
        if "precision" in settings:
            why.append(_precision(settings["precision"], a0, a1, alone))
        if "lora" in settings:
            why.append(_lora(settings["lora"], d, a0, a1))
        if "freeze" in settings:
            why.append(_freeze(d))
    return head + "".join(f" — {w}" for w in why)
