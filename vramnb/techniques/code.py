"""The training step a recipe stands for, as code to write in the user's own loop.

Read by :func:`vramnb.fit` (the best plan's code) and the out-of-memory post-mortem (each
fix's code): one composer, so that techniques combine (autocast inside the micro-batch
loop, fp16's scaler around the backward) and the step takes the batch as it is (a tensor,
a tuple, a dict) and the loss as the user computes it.
"""

from __future__ import annotations

import io
import keyword
import sys
import tokenize
import types
from collections.abc import Mapping
from typing import Any

from .registry import REGISTRY, Recipe

__all__ = ["step_code"]

#: the micro-batches' split, as vramnb's technique does it (vramnb.techniques.batching)
_SPLIT = '''import collections.abc
import copy


def micro_batches(batch, k):  # k equal parts along the first dimension; 0-d tensors and other values as they are
    if isinstance(batch, torch.Tensor):
        return list(batch.chunk(k)) if batch.dim() else [batch] * k
    if isinstance(batch, collections.abc.Mapping):  # a dict, a BatchEncoding (UserDict), any mapping: its type kept
        parts = {key: micro_batches(v, k) for key, v in batch.items()}
        out = []
        for i in range(k):
            if type(batch) is not dict and isinstance(batch, collections.abc.MutableMapping):
                new = copy.copy(batch)
                for key, p in parts.items():
                    new[key] = p[i]
            else:
                new = {key: p[i] for key, p in parts.items()}
                if type(batch) is not dict:
                    new = type(batch)(new)
            out.append(new)
        return out
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        parts = [micro_batches(v, k) for v in batch]
        return [type(batch)(*(p[i] for p in parts)) for i in range(k)]
    if isinstance(batch, (tuple, list)):
        parts = [micro_batches(v, k) for v in batch]
        return [type(batch)(p[i] for p in parts) for i in range(k)]
    return [batch] * k'''


def _off(name: str, was: Any, model: Any) -> str:
    """The line that turns ``name`` off where the current recipe has it on (``was``)."""
    if name == "checkpointing":
        from .checkpointing import hf_method

        if hf_method(model) is not None:
            return "model.gradient_checkpointing_disable()  # checkpointing off"
        return "# checkpointing off: call the blocks without torch.utils.checkpoint (as before the wrap)"
    return f"# {REGISTRY[name].label}: back to the baseline (not {REGISTRY[name].describe(was)})"


#: the names the step's code gives the user's objects; ``step_code(names=...)`` renames them
NAMES = ("model", "batch", "optimizer", "loss_fn")


def caller_names(objects: Mapping[str, Any]) -> dict[str, str]:
    """The names the calling code gives ``objects`` (``{"model": net, "batch": x, ...}``, keys from
    :data:`NAMES`): for each object, a variable of the first frame outside vramnb (its locals, then its
    globals: a notebook cell's globals are the notebook's namespace) bound to that very object. An object
    that no public name binds, or that a name of its :data:`NAMES` key already binds, keeps that key; the
    result maps only what differs, as ``names=`` does (``{"model": "net"}``)."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] == "vramnb":
        frame = frame.f_back
    if frame is None:
        return {}
    spaces = [frame.f_locals] + ([frame.f_globals] if frame.f_globals is not frame.f_locals else [])
    out: dict[str, str] = {}
    taken: set[str] = set()
    for key, obj in objects.items():
        if obj is None:
            continue
        found = [n for space in spaces for n, v in list(space.items())
                 if v is obj and isinstance(n, str) and n.isidentifier() and not n.startswith("_")
                 and not keyword.iskeyword(n)]
        if not found or key in found:
            continue
        name = next((n for n in found if n not in taken and n not in NAMES), None)
        if name is not None:
            out[key] = name
            taken.add(name)
    return out


def safe_names(names: Mapping[str, str], code: str) -> dict[str, str]:
    """``names`` less those whose new name the code (as :func:`step_code` writes it, with the
    default names) already uses for something else (``loss``, ``scaler``, ``torch``, ``micro``):
    renaming into it would change what the code does."""
    used = {tok.string for tok in tokenize.generate_tokens(io.StringIO(code).readline) if tok.type == tokenize.NAME}
    return {k: v for k, v in names.items() if v not in used or v in names}


def rename(code: str, names: Mapping[str, str] | None) -> str:
    """``code`` with the identifiers of :data:`NAMES` renamed as ``names`` says (e.g.
    ``{"model": "net", "optimizer": "opt"}``): names only, by Python's tokenizer (never inside a
    string or a comment, nor an attribute such as ``out.loss``), and not inside the
    ``micro_batches`` helper, whose parameter is called ``batch``.

    Raises:
        ValueError: a key outside :data:`NAMES` or a value that is not a Python identifier.
    """
    if not names:
        return code
    bad = [k for k in names if k not in NAMES]
    if bad:
        raise ValueError(f"names: {bad[0]!r} is not one of {', '.join(NAMES)}")
    wrong = [v for v in names.values() if not (isinstance(v, str) and v.isidentifier())]
    if wrong:
        raise ValueError(f"names: {wrong[0]!r} is not a Python identifier")
    helper = code.find(_SPLIT)
    skip = range(code[:helper].count("\n") + 1, code[:helper].count("\n") + _SPLIT.count("\n") + 2) if helper >= 0 else range(0)
    lines = code.split("\n")
    edits: list[tuple[int, int, int, str]] = []
    prev = None
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if (tok.type == tokenize.NAME and tok.string in names and tok.start[0] not in skip
                and not (prev is not None and prev.type == tokenize.OP and prev.string == ".")):
            edits.append((tok.start[0], tok.start[1], tok.end[1], names[tok.string]))
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            prev = tok
    for row, a, b, new in sorted(edits, reverse=True):
        line = lines[row - 1]
        lines[row - 1] = line[:a] + new + line[b:]
    return "\n".join(lines)


def step_code(r: Recipe, current: Recipe, model: Any = None, batch: Any = None, loss_fn: Any = None,
              device_type: str = "cuda", names: Mapping[str, str] | None = None) -> str:
    """The user's training step with ``r``'s techniques, as code: the model and optimizer set up
    once (checkpointing, an optimizer swap, freezing, LoRA: each technique's own line), then
    one step, its forward under autocast, split into micro-batches (a dict batch value by
    value), with fp16's scaler; the loss as ``loss_fn(model, batch)``, or without one as
    :func:`vramnb.profile_step`'s default takes it (``model(**batch).loss`` for a dict batch).
    ``""`` where ``r`` is the current recipe. A setting ``r`` turns back off (the current
    recipe checkpoints, the plan does not) gets its line too; the step is always ``r``'s whole step.
    ``names`` renames the objects to the user's own variables (:func:`rename`)."""
    changed = {n: r[n] for n in REGISTRY if current[n] != r[n]}
    if not changed:
        return ""
    mod = model if hasattr(model, "modules") else None
    setup = [_off(n, current[n], mod) if v == REGISTRY[n].default() else REGISTRY[n].code(v, device_type, mod)
             for n, v in changed.items() if n not in ("precision", "micro_batches", "activation_offload")]
    k = int(r["micro_batches"] or 1)
    prec = r["precision"]
    step: list[str] = []
    ctx = []
    if prec in ("bf16", "fp16"):
        dt = "bfloat16" if prec == "bf16" else "float16"
        ctx.append(f"torch.autocast({device_type!r}, dtype=torch.{dt})")
    if r["activation_offload"] == "CPU":
        ctx.append("torch.autograd.graph.save_on_cpu(pin_memory=True)")
    if prec == "fp8":
        setup.append(REGISTRY["precision"].code("fp8"))
    scaler = prec == "fp16"
    if scaler:
        setup.append(f"scaler = torch.amp.GradScaler({device_type!r})")
    backward = "scaler.scale(loss).backward()" if scaler else "loss.backward()"
    b = "part" if k > 1 else "batch"
    # the batch as it is: the default loss's call (profile_step's: the output if it is a tensor, else
    # its .loss; a Hugging Face model's .loss)
    args = f"**{b}" if isinstance(batch, Mapping) else f"*{b}" if isinstance(batch, (tuple, list)) else b
    hf = mod is not None and hasattr(type(mod), "supports_gradient_checkpointing")
    scale = f" / {k}" if k > 1 else ""
    if loss_fn is not None:
        body = [f"loss = loss_fn(model, {b}){scale}"]
    elif hf:
        body = [f"loss = model({args}).loss{scale}"]
    else:
        body = [f"out = model({args})", f"loss = (out if isinstance(out, torch.Tensor) else out.loss){scale}"]
    inner = ([f"with {', '.join(ctx)}:", *(f"    {x}" for x in body)] if ctx else body) + [backward]
    if k > 1:
        setup.append(_SPLIT)
        step.append(f"for part in micro_batches(batch, {k}):  # {k} micro-batches, one optimizer step")
        step.append(f"    # loss / {k} weighs the parts equally: with padded labels (-100), weigh each by its "
                    "count of labels != -100 instead")
        step += [f"    {line}" for line in inner]
    else:
        step += inner
    step.append("scaler.step(optimizer); scaler.update()" if scaler else "optimizer.step()")
    step.append("optimizer.zero_grad()")
    return rename("\n".join([*setup, "# each step:", *step]), names)
