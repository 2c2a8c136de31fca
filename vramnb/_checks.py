"""Checks of profile_step's inputs, before anything runs or is allocated: the
model, batch, optimizer, hooks that act on objects outside the model, the
loss function and the options; and the default loss.

Each raises :class:`InputError` (a ``ValueError``) naming the problem and what to pass instead.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["InputError", "check_inputs", "check_hooks", "check_loss_fn", "check_closure", "check_options", "default_loss"]


class InputError(ValueError):
    """vramnb's own refusal of an input (a model, batch, optimizer, loss or
    option it cannot profile), raised before the step changes anything the
    restore cannot put back. ``compare`` lets it through, where an error of the
    user's step is one recipe's result."""


def refuse_one_shot(batch: Any, what: str = "batch") -> None:
    """Refuse an iterable that is its own iterator (a generator, ``iter(loader)``, a file or
    stream): reading batches from it would consume the user's batches, which cannot be put back.
    Checked by every entry point before anything is read, without calling ``iter``.

    Raises:
        InputError: ``batch``'s type has ``__next__`` (an iterator); the message names what to
            pass instead.
    """
    if isinstance(batch, (torch.Tensor, Mapping, tuple, list, str, bytes)):
        return
    # an iterator's type has __next__ (the iterator protocol); calling iter() to compare would run the
    # user's __iter__: a DataLoader's draws its seed from the loader's generator, or starts its workers
    if hasattr(type(batch), "__next__"):
        raise InputError(
            f"{what} is a {type(batch).__name__}, a one-shot iterator: reading batches from it would consume "
            "them (they cannot be put back). Pass one batch (a tensor, or a tuple, list or dict of tensors, "
            "e.g. next(iter(loader))); vramnb.fit also takes the DataLoader itself (it reads its batches without "
            "changing it), vramnb.estimate more batches as a list (more_batches=[...])"
        )


def _batch_tensors(batch: Any, path: str = "batch") -> list[tuple[str, torch.Tensor]]:
    if path == "batch":
        refuse_one_shot(batch)
    if isinstance(batch, torch.Tensor):
        return [(path, batch)]
    if isinstance(batch, Mapping):
        out = []
        for k, v in batch.items():
            out += _batch_tensors(v, f"{path}[{k!r}]")
        return out
    if isinstance(batch, (tuple, list)):
        out = []
        for i, v in enumerate(batch):
            out += _batch_tensors(v, f"{path}[{i}]")
        return out
    hint = ""
    if path == "batch" and isinstance(batch, torch.utils.data.DataLoader):  # never iterated here
        hint = (" (pass one of its batches, e.g. next(iter(loader)); vramnb.fit also takes the loader itself "
                "and plans for its largest batch)")
    elif path != "batch":  # a setting beside the tensors (return_loss=True, a scale): the loss function passes it
        key = re.fullmatch(r"batch\[(['\"])([A-Za-z_]\w*)\1\]", path)
        call = f"m(**b, {key.group(2)}={batch!r})" if key and len(repr(batch)) < 40 else "m(...)"
        hint = (f"; pass a value that is not a tensor in your loss function instead, which calls the model as your "
                f"loop does: loss_fn=lambda m, b: {call} (its .loss for a Hugging Face model), with the batch's "
                "tensors alone")
    raise InputError(
        f"{path} is a {type(batch).__name__}; a batch must be a tensor, or a tuple, list or dict of tensors{hint}"
    )


def _model_device(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    raise InputError(f"{type(model).__name__} has no parameters: nothing to train")


def check_inputs(model: Any, batch: Any, optimizer: Any) -> torch.device:
    """Validate before anything runs. Returns the model's device.

    Raises:
        ValueError: not a module; no trainable parameters; parameters on
            several devices; a batch that is not tensors; a batch on another
            device than the model; an optimizer that holds parameters the model
            does not have (or none of the model's).
    """
    if not isinstance(model, torch.nn.Module):
        raise InputError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    device = _model_device(model)
    devices = {p.device for p in model.parameters()}
    if any(d.type == "meta" for d in devices):
        raise InputError(
            f"{type(model).__name__} has parameters on the meta device (shapes only, no data): nothing can run. "
            "Materialise it first (model.to_empty(device='cpu'), then load its weights), "
            "or estimate it without data: vramnb.estimate(model, batch, ...)"
        )
    if len(devices) > 1:
        raise InputError(f"the model's parameters are on several devices ({sorted(map(str, devices))}); "
                         "vramnb profiles one device")
    lazy = [n for n, p in model.named_parameters() if isinstance(p, torch.nn.parameter.UninitializedParameter)]
    if lazy:
        raise InputError(
            f"{type(model).__name__} has {len(lazy)} uninitialized parameter(s) of lazy modules ({', '.join(lazy[:3])}): "
            "a profiled step would measure their materialisation, not training. Run one forward first "
            "(with torch.no_grad(): model(batch)), then profile"
        )
    odd = [n for n, p in model.named_parameters() if p.layout != torch.strided]
    if odd:
        raise InputError(f"parameters {', '.join(odd[:3])} are not dense (strided) tensors; vramnb profiles dense parameters")
    if not any(p.requires_grad for p in model.parameters()):
        raise InputError(f"{type(model).__name__} has no trainable parameters (all have requires_grad=False): nothing to train")
    for path, t in _batch_tensors(batch):
        if t.device != device:
            raise InputError(f"{path} is on {t.device} but the model is on {device}; move it with .to({str(device)!r})")
    if optimizer is not None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise InputError(f"optimizer must be a torch.optim.Optimizer, not {type(optimizer).__name__}")
        check_closure(optimizer, "profile_step calls optimizer.step() once per step: profile with another optimizer")
        mine = {id(p) for p in model.parameters()}
        theirs = [p for g in optimizer.param_groups for p in g["params"]]
        foreign = [p for p in theirs if id(p) not in mine]
        if foreign or not theirs:
            raise InputError(
                f"the optimizer holds {len(foreign)} of {len(theirs)} parameters that are not the model's: "
                "build it over this model, e.g. torch.optim.AdamW(model.parameters())"
            )
    check_hooks(model, optimizer)
    return device


def _names(hooks: Any) -> str:
    return ", ".join(getattr(h, "__qualname__", type(h).__name__) for h in list(hooks.values())[:3])


def check_hooks(model: torch.nn.Module, optimizer: Any, any_optimizer: bool = False) -> None:
    """Refuse hooks that act on objects vramnb cannot restore because it cannot
    know them: optimizer step hooks (an EMA ``AveragedModel`` updated after each
    step, a scheduler) and gradient hooks that step something ("optimizer step in
    backward": ``register_post_accumulate_grad_hook``). Global optimizer hooks are
    checked when an optimizer steps (``any_optimizer``: a recipe builds one).

    Raises:
        ValueError: such hooks exist; the message says how to profile instead.
    """
    how = ("vramnb restores the model, the optimizer and the batch, not what these hooks change. "
           "Profile without them: keep their handles, call handle.remove() before profile_step and "
           "register them again after (the hooks' own memory is then not counted), or profile copies "
           "(copy.deepcopy of the model, and a new optimizer over the copy)")
    found = []
    if optimizer is not None:
        for name in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks"):
            d = getattr(optimizer, name, None) or {}
            if d:
                found.append(f"{type(optimizer).__name__} has {len(d)} step {name.split('_')[-2]} hook(s) ({_names(d)})")
    if optimizer is not None or any_optimizer:
        import torch.optim.optimizer as om

        for name in ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks"):
            d = getattr(om, name, None) or {}
            if d:
                found.append(f"{len(d)} global optimizer step hook(s) (torch.optim.optimizer.register_optimizer_step_"
                             f"{name.split('_')[-2]}_hook: {_names(d)})")
    acc = [n for n, p in model.named_parameters() if getattr(p, "_post_accumulate_grad_hooks", None)]
    if acc:
        found.append(f"{len(acc)} parameter(s) have post-accumulate-grad hooks ({', '.join(acc[:3])}), "
                     "which step optimizers during backward")
    if found:
        raise InputError("; ".join(found) + ": they run in the profiled step and change objects outside the model "
                         "(an EMA model, a scheduler, per-parameter optimizers). " + how)


def check_loss_fn(model: torch.nn.Module, batch: Any, loss_fn: Any) -> None:
    """Raises ValueError for a ``loss_fn`` that is not callable, or, without one,
    a batch the model's ``forward`` cannot take the way :func:`default_loss` passes it."""
    if loss_fn is not None:
        if not callable(loss_fn):
            raise InputError(f"loss_fn must be a function (model, batch) -> scalar loss tensor, or None "
                             f"(the model's output or its .loss), not {type(loss_fn).__name__}")
        return
    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return
    args: tuple[Any, ...]
    if isinstance(batch, Mapping):
        args, kwargs, how = (), dict(batch), "model(**batch)"
    elif isinstance(batch, (tuple, list)):
        args, kwargs, how = tuple(batch), {}, "model(*batch)"
    else:
        args, kwargs, how = (batch,), {}, "model(batch)"
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        raise InputError(
            f"without a loss_fn vramnb calls {how}, but {type(model).__name__}.forward{sig} cannot take that ({e}): "
            "pass loss_fn=lambda model, batch: ... returning a scalar, e.g. "
            "lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1])"
        ) from None


def check_closure(optimizer: torch.optim.Optimizer, advice: str) -> None:
    """Raises ValueError for an optimizer whose ``step`` needs a closure (LBFGS), ending with ``advice``."""
    closure = inspect.signature(optimizer.step).parameters.get("closure")
    if closure is not None and closure.default is inspect.Parameter.empty:
        raise InputError(f"{type(optimizer).__name__}.step() needs a closure (it re-evaluates the loss); {advice}")


def check_options(steps: Any, module_depth: Any, set_to_none: Any) -> None:
    """Raises ValueError for step counts, module depths or ``set_to_none`` values
    that are not what :func:`profile_step` and :func:`vramnb.estimate` take."""
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise InputError(f"steps must be an integer (1: the first step only, 2: also a steady-state step), not {steps!r}")
    if steps < 1:
        raise InputError(f"steps must be at least 1, got {steps}")
    if module_depth is not None and (isinstance(module_depth, bool) or not isinstance(module_depth, int) or module_depth < 1):
        raise InputError(f"module_depth must be None (off) or a positive integer (1: the model's children), not {module_depth!r}")
    if not isinstance(set_to_none, bool):
        raise InputError(f"set_to_none must be True or False, not {set_to_none!r}")


def default_loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    """``model(batch)``, ``model(*batch)`` or ``model(**batch)``; the loss is the
    output if it is a scalar tensor, or its ``.loss`` (Hugging Face models)."""
    if isinstance(batch, Mapping):
        out = model(**batch)
    elif isinstance(batch, (tuple, list)):
        out = model(*batch)
    else:
        out = model(batch)
    loss = out if isinstance(out, torch.Tensor) else getattr(out, "loss", None)
    if loss is None:
        raise InputError(
            f"the model returned {type(out).__name__} with no .loss; pass loss_fn=lambda model, batch: ... returning a scalar"
        )
    return loss


def _check_loss(loss: Any, needs_grad: bool = True) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor):
        raise InputError(f"the loss must be a scalar tensor, got {type(loss).__name__}")
    if loss.numel() != 1:
        raise InputError(f"the loss must be a scalar, got a tensor of shape {tuple(loss.shape)}: reduce it (e.g. .mean())")
    if needs_grad and not loss.requires_grad:
        if torch.is_inference_mode_enabled():
            raise InputError("the loss does not require grad: the step runs inside torch.inference_mode() (around the "
                             "call or turned on by your code), where autograd records nothing; call vramnb outside the "
                             "inference_mode block")
        raise InputError("the loss does not require grad: is the forward under torch.no_grad(), or every parameter frozen?")
    return loss
