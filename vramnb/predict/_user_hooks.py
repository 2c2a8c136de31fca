"""Which hooks of the user's run on an estimate's fake copy.

Hooks on the copy (:func:`drop_user_hooks`): a forward or backward hook is the
user's code acting on the user's objects (an activation recorder storing
outputs in a dict of a helper module). Run on the fake copy it would store
fake tensors in them. Only hooks defined by PyTorch and the model libraries
(:data:`LIBRARIES`: weight norm, pruning, PEFT's and transformers' own) stay on
the copy; every other hook is dropped and named in the estimate's notes (the
memory it keeps is not counted). Optimizer step hooks follow the same rule.
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["LIBRARIES", "drop_user_hooks", "user_hook_filter", "without_user_global_hooks"]

LIBRARIES = frozenset({"torch", "torchvision", "torchao", "transformers", "peft", "accelerate", "bitsandbytes",
                       "diffusers", "timm", "optimum", "deepspeed", "vramnb"})
"""Top-level packages whose module and optimizer hooks run on the fake copy: hooks that are part of
the model's computation (weight norm, pruning masks, adapters, input gradients for checkpointing)."""

_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_HOOK_FLAGS = ("_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs")


def _owner(fn: Any) -> str:
    """The module that defines the hook ``fn`` (a function, bound method, partial or callable object)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    if not isinstance(fn, (types.FunctionType, types.BuiltinFunctionType)):
        fn = type(fn)
    return getattr(fn, "__module__", None) or "?"


def user_hook_filter(hooks: dict[Any, Any], where: str, dropped: list[str]) -> dict[Any, Any]:
    """``hooks`` (a copy of the same type) without the user's: those not defined in :data:`LIBRARIES`."""
    keep = type(hooks)()
    for k, fn in hooks.items():
        owner = _owner(fn)
        if owner.split(".")[0] in LIBRARIES:
            keep[k] = fn
        else:
            name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
            dropped.append(f"{where}: {name} ({owner})")
    return keep


def drop_user_hooks(model: torch.nn.Module) -> list[str]:
    """Remove from the fake copy the module hooks that are not PyTorch's or a model library's
    (see the module docstring). Returns what went, ``"module: hook (where it is defined)"``."""
    dropped: list[str] = []
    for name, m in model.named_modules():
        for attr in _HOOK_DICTS:
            hooks = getattr(m, attr, None)
            if isinstance(hooks, dict) and hooks:
                kept = user_hook_filter(hooks, name or type(m).__name__, dropped)
                if len(kept) != len(hooks):
                    setattr(m, attr, kept)
                    for flag in _HOOK_FLAGS:  # the per-hook flags of the dropped ones
                        flags = getattr(m, flag, None)
                        if isinstance(flags, dict):
                            setattr(m, flag, type(flags)((k, v) for k, v in flags.items()
                                                         if k not in hooks or k in kept))
    return dropped


_GLOBAL_HOOKS = (("torch.nn.modules.module", "_global_forward_pre_hooks"), ("torch.nn.modules.module", "_global_forward_hooks"),
                 ("torch.nn.modules.module", "_global_backward_pre_hooks"), ("torch.nn.modules.module", "_global_backward_hooks"),
                 ("torch.optim.optimizer", "_global_optimizer_pre_hooks"),
                 ("torch.optim.optimizer", "_global_optimizer_post_hooks"))


@contextlib.contextmanager
def without_user_global_hooks(dropped: list[str]) -> Iterator[None]:
    """Set aside, for the estimate's step, the user's global hooks (``register_module_forward_hook``,
    ``register_optimizer_step_post_hook``: they run on every module and optimizer, the fake ones
    too), by the rule of :func:`user_hook_filter`.

    PyTorch's dicts are the process's, and the user's other threads keep running their modules
    while the estimate runs: so each such hook stays where it is (its key, its place in the order),
    wrapped to do nothing in the estimate's thread and to run as ever in any other; after, each
    wrapper still there is replaced by its hook. A hook the user removes meanwhile (its handle's
    ``remove()``) stays removed; one registered meanwhile stays."""
    import importlib
    import threading

    me = threading.get_ident()
    wrapped: list[tuple[dict[Any, Any], Any, Any, Any]] = []  # (dict, key, hook, wrapper)
    for modname, name in _GLOBAL_HOOKS:
        d = getattr(importlib.import_module(modname), name, None)
        if not isinstance(d, dict) or not d:
            continue
        kept = user_hook_filter(d, f"global {name[8:].replace('_', ' ')}", dropped)
        for k, fn in list(d.items()):
            if k not in kept:
                w = _elsewhere(fn, me)
                d[k] = w
                wrapped.append((d, k, fn, w))
    try:
        yield
    finally:
        for d, k, fn, w in wrapped:
            if d.get(k) is w:
                d[k] = fn


def _elsewhere(fn: Any, thread: int) -> Any:
    """``fn``, but doing nothing (returning None: no change) when called in ``thread``."""
    import threading

    @functools.wraps(fn)
    def hook(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == thread:
            return None
        return fn(*args, **kwargs)
    return hook
