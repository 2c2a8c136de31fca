"""The training step a recipe stands for, as code to write in the user's own loop.

Read by :func:`vramnb.fit` (the best plan's code) and the out-of-memory post-mortem (each
fix's code): one composer, so that techniques combine (autocast inside the micro-batch
loop, fp16's scaler around the backward) and the step takes the batch as it is (a tensor,
a tuple, a dict) and the loss as the user computes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .registry import REGISTRY, Recipe

__all__ = ["step_code"]


def step_code(r: Recipe, current: Recipe, model: Any = None, batch: Any = None, loss_fn: Any = None,
              device_type: str = "cuda") -> str:
    """The user's training step with ``r``'s techniques, as code: the model and optimizer set up
    once (checkpointing, an optimizer swap, freezing, LoRA: each technique's own line), then
    one step, its forward under autocast, split into micro-batches (a dict batch value by
    value), with fp16's scaler; the loss as ``loss_fn(model, batch)``, or without one as
    :func:`vramnb.profile_step`'s default takes it (``model(**batch).loss`` for a dict batch).
    ``""`` where ``r`` is the current recipe."""
    changed = {n: v for n, v in r.changed().items() if current[n] != v}
    if not changed:
        return ""
    mod = model if hasattr(model, "modules") else None
    setup = [REGISTRY[n].code(v, device_type, mod) for n, v in changed.items()
             if n not in ("precision", "micro_batches", "activation_offload")]
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
    # the batch as it is: (the default loss's call, the split into micro-batches)
    if isinstance(batch, Mapping):
        call, split = f"model(**{b}).loss", f"({{key: v.chunk({k})[i] for key, v in batch.items()}} for i in range({k}))"
    elif isinstance(batch, (tuple, list)):
        call, split = f"model(*{b})", f"zip(*(t.chunk({k}) for t in batch))"
    else:
        call, split = f"model({b})", f"batch.chunk({k})"
    loss = f"loss_fn(model, {b})" if loss_fn is not None else call
    body = f"loss = {loss}" + (f" / {k}" if k > 1 else "")
    inner = ([f"with {', '.join(ctx)}:", f"    {body}"] if ctx else [body]) + [backward]
    if k > 1:
        step.append(f"for part in {split}:  # {k} micro-batches, one optimizer step")
        step += [f"    {line}" for line in inner]
    else:
        step += inner
    step.append("scaler.step(optimizer); scaler.update()" if scaler else "optimizer.step()")
    step.append("optimizer.zero_grad()")
    return "\n".join([*setup, "# each step:", *step])
