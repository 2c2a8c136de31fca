"""Activation checkpointing with ``torch.utils.checkpoint`` (non-reentrant).

Chen et al., "Training Deep Nets with Sublinear Memory Cost" (2016): keep only
block inputs, recompute the rest in backward; checkpointing every sqrt(N)-th of N
layers gives O(sqrt(N)) activation memory for about one extra forward.
Selective checkpointing (save matmul outputs, recompute the cheap rest) follows
Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
(2022), with ``torch.utils.checkpoint.create_selective_checkpoint_contexts``.

The blocks are found automatically: the entries of each ``nn.ModuleList`` or
``nn.Sequential`` whose children are mostly of one type (transformer layers,
an encoder's and a decoder's layers, residual stages) that is not inside a block
of another and at least half as long as the longest, else the model's children;
or named with ``Recipe(..., blocks="transformer.h")``.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils import checkpoint as ckpt

from .._checks import InputError
from .._no_effect import Wrapped
from .._plan import StepPlan
from .registry import Technique, register

_MATMULS = ("mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product_flash_attention",
            "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
            "_scaled_dot_product_flash_attention_for_cpu", "linear", "matmul")


def find_blocks(model: torch.nn.Module, path: str = "auto") -> list[torch.nn.Module]:
    """The repeated blocks of ``model``: see the module docstring.

    Raises:
        ValueError: ``path`` names no submodule, or no blocks are found.
    """
    if path != "auto":
        try:
            target = model.get_submodule(path)
        except AttributeError:
            names = [n for n, m in model.named_modules() if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)) and n]
            raise InputError(f"blocks={path!r} names no submodule of {type(model).__name__}; "
                             f"module lists here: {', '.join(names) or 'none'}") from None
        return list(target.children())
    # stacks: the nn.ModuleList / nn.Sequential whose children are mostly of one type (transformer layers,
    # residual stages, the layers of an nn.Sequential encoder). A stack inside a block of another is a part of
    # that block (a MoE layer's experts, attention heads): left out; of a stack of stacks and its stacks, the
    # level with more entries. Every stack left at least half as long as the longest: an encoder's and a
    # decoder's layers, a ResNet's four stages (not two heads beside 12 layers)
    stacks: dict[int, list[torch.nn.Module]] = {}
    for m in model.modules():
        if not isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)) or len(m) < 2:
            continue
        calls = list(m)  # one entry per position: a block shared by several (ModuleList([blk] * 8)) counts each time
        kinds = [type(k) for k in calls]
        common = max(kinds.count(k) for k in set(kinds))
        if common >= 2 and common >= 0.75 * len(calls):
            stacks[id(m)] = calls
    drop = {id(x) for calls in stacks.values() for b in calls for x in b.modules() if x is not b}
    for key, calls in stacks.items():
        inner = [id(b) for b in calls if id(b) in stacks]
        if inner and len(calls) >= max(len(stacks[i]) for i in inner):
            drop.update(inner)  # 8 blocks that are each Sequential(Linear, Linear): the 8 blocks
        elif inner:
            drop.add(key)  # 2 stages of 6 blocks each: the 12 blocks
    kept = [calls for key, calls in stacks.items() if key not in drop]
    if kept:
        longest = max(len(calls) for calls in kept)
        best = [b for calls in kept if 2 * len(calls) >= longest for b in calls]
        # each module once (children() order): a shared block is wrapped once, and so is checkpointed at every call
        return list({id(b): b for b in best}.values())
    return list(model.children())


def _policy() -> Any:
    names = set(_MATMULS)

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        base = getattr(getattr(op, "overloadpacket", op), "__name__", str(op)).split(".")[-1]
        return ckpt.CheckpointPolicy.MUST_SAVE if base in names else ckpt.CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _wrap(block: torch.nn.Module, selective: bool, record: Wrapped) -> Any:
    """Checkpoint ``block``'s forward; ``record`` counts its calls and the runs of
    its original forward (a run beyond the calls is a recompute in backward)."""
    had = "forward" in block.__dict__
    previous: Any = block.__dict__.get("forward")  # the instance's own forward, put back where it had one
    original = block.forward
    extra: dict[str, Any] = {}
    if selective:
        extra["context_fn"] = functools.partial(ckpt.create_selective_checkpoint_contexts, _policy())

    def run(*args: Any, **kwargs: Any) -> Any:
        record.runs += 1
        return original(*args, **kwargs)

    def forward(*args: Any, **kwargs: Any) -> Any:
        record.calls += 1
        return ckpt.checkpoint(run, *args, use_reentrant=False, **extra, **kwargs)

    block.forward = forward

    def undo() -> None:
        if had:
            block.forward = previous
        else:
            del block.__dict__["forward"]

    return undo



def _wrap_loop(chosen: str) -> str:
    """The printed loop that wraps each block's forward in ``torch.utils.checkpoint.checkpoint``;
    a block already wrapped is left as it is, so that running the code twice wraps once."""
    return (f"for block in {chosen}:  # recompute each block's forward in backward\n"
            "    if getattr(block.forward, 'func', None) is not torch.utils.checkpoint.checkpoint:  # once, if run twice\n"
            "        block.forward = functools.partial(torch.utils.checkpoint.checkpoint, block.forward, "
            "use_reentrant=False)")

@register
class Blocks(Technique):
    """Which blocks checkpointing wraps: ``"auto"`` or a submodule path."""

    name = "blocks"
    label = "checkpointed blocks"
    choices = ("auto",)
    description = ("the submodule whose children are checkpointed ('auto': the repeated blocks of each stack, "
                   "an encoder's and a decoder's layers)")

    @classmethod
    def validate(cls, value: Any) -> Any:
        """``value`` if it is a non-empty ``str`` (``"auto"`` or a submodule's dotted path).

        Raises:
            InputError: (a ``ValueError``) anything else, with an example path.
        """
        if not isinstance(value, str) or not value:
            raise InputError(f"blocks={value!r}: give 'auto' or the dotted path of a submodule, e.g. 'transformer.h'")
        return value

    @classmethod
    def apply(cls, plan: StepPlan, value: Any) -> None:
        """Record on ``plan`` which blocks the checkpointing technique wraps (it runs after this one)."""
        plan.blocks = value  # type: ignore[attr-defined]

    @classmethod
    def describe(cls, value: Any) -> str:
        """``"blocks transformer.h"``."""
        return f"blocks {value}"


def _block_names(model: Any) -> tuple[Any, int] | None:
    """The blocks vramnb checkpoints, named: ``(container name, count)`` where they are all the
    entries of one ``ModuleList``/``Sequential``, else ``(list of their names, 0)``; ``None`` if none."""
    try:
        blocks = find_blocks(model, "auto")
    except Exception:  # noqa: BLE001
        return None
    if not blocks:
        return None
    names = {id(m): n for n, m in model.named_modules()}
    found = [names.get(id(b)) for b in blocks]
    full = [n for n in found if n is not None]
    if len(full) != len(found):
        return None
    parents = {n.rpartition(".")[0] for n in full}
    if len(parents) == 1:
        parent = parents.pop()
        container = model.get_submodule(parent) if parent else model
        if list(container.children()) == list(blocks) and parent:
            return parent, len(blocks)
    return full, 0


def hf_method(model: Any) -> str | None:
    """The Hugging Face checkpointing method ``model``'s class has, else ``None`` (read on the
    class: no user code runs)."""
    if model is None:
        return None
    for m in ("activation_checkpointing_enable", "gradient_checkpointing_enable"):
        if callable(getattr(type(model), m, None)):
            return m
    return None


def _hf_route(model: Any, every: int) -> str | None:
    """The Hugging Face method that checkpoints every ``every`` layers of ``model``, where its class
    has one, says it supports checkpointing (``supports_gradient_checkpointing``; ConvNeXt does
    not) and the method can say ``every``; else ``None``."""
    method = hf_method(model)
    if method is None or not getattr(type(model), "supports_gradient_checkpointing", False):
        return None
    if every > 1 and method != "activation_checkpointing_enable":
        return None
    if method == "activation_checkpointing_enable" and not _takes_every(model):
        return None  # a class of its own overrides the old method: HF would pass it arguments it refuses
    return method


def _takes_every(model: Any) -> bool:
    """Whether ``model``'s ``gradient_checkpointing_enable``, where its class overrides Hugging Face's
    (transformers >= 5.24 then calls it with ``every_n_layers`` and ``offload``), takes them."""
    import inspect

    own = getattr(type(model), "gradient_checkpointing_enable", None)
    base = next((getattr(c, "gradient_checkpointing_enable") for c in type(model).__mro__
                 if c.__name__ == "PreTrainedModel" and "gradient_checkpointing_enable" in vars(c)), None)
    if own is None or base is None or own is base:
        return True
    try:
        params = inspect.signature(own).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is p.VAR_KEYWORD for p in params) or {"every_n_layers", "offload"} <= {p.name for p in params}


def _hf_enable(model: Any, every: int) -> Any:
    """Turn on ``model``'s Hugging Face checkpointing every ``every`` layers, as
    :meth:`Checkpointing.code` prints it; returns the undo (every module's attributes and hook
    dicts put back as they were), or ``None`` where :func:`_hf_route` finds no method."""
    method = _hf_route(model, every)
    if method is None:
        return None
    # already on (the user's own call): the method is called all the same, as the printed line will be
    # (every_n_layers=2 turns every other layer's off); the undo puts the user's settings back
    saved = [(m, dict(m.__dict__), {k: dict(v) for k, v in m.__dict__.items()
                                    if isinstance(v, dict) and k.endswith("hooks")}) for m in model.modules()]

    def undo() -> None:
        for m, attrs, hooks in saved:
            live = m.__dict__
            for k in [k for k in live if k not in attrs]:
                del live[k]
            for k, v in attrs.items():
                if live.get(k, undo) is not v:
                    live[k] = v
            for k, h in hooks.items():
                live[k].clear()
                live[k].update(h)

    try:
        if method == "activation_checkpointing_enable":
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False},
                                                  every_n_layers=every)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    except BaseException:
        undo()
        raise
    return undo


@register
class Checkpointing(Technique):
    name = "checkpointing"
    label = "activation checkpointing"
    choices = ("off", "every block", "every 2nd block", "every 4th block", "selective")
    description = ("torch.utils.checkpoint (use_reentrant=False) around blocks; 'selective' saves matmul and "
                   "attention outputs and recomputes the rest (Chen et al. 2016; Korthikanti et al. 2022)")

    @classmethod
    def validate(cls, value: Any) -> Any:
        """One of :attr:`choices`, or a tuple of the blocks' qualified names (checkpoint those)."""
        if isinstance(value, tuple) and value and all(isinstance(n, str) and n for n in value):
            return value
        try:
            return super().validate(value)
        except ValueError as e:
            raise InputError(f"{e}; or a tuple of blocks' qualified names, e.g. ('transformer.h.0', "
                             "'transformer.h.2')") from None

    @classmethod
    def unavailable(cls, value: Any, plan: StepPlan) -> str | None:
        """Why ``value`` cannot checkpoint this model (named blocks that are no submodule, no blocks found,
        selective on torch < 2.4), or ``None``."""
        if isinstance(value, tuple):
            names = dict(plan.model.named_modules())
            missing = [n for n in value if n not in names]
            return f"checkpointing: {', '.join(missing)} name no submodule of the model" if missing else None
        if value == "selective" and not hasattr(ckpt, "create_selective_checkpoint_contexts"):
            return f"selective checkpointing needs torch >= 2.4 (this is {torch.__version__})"
        try:
            blocks = find_blocks(plan.model, getattr(plan, "blocks", "auto"))
        except ValueError as e:
            return str(e)
        if not blocks:
            return f"{type(plan.model).__name__} has no submodules to checkpoint; name them with blocks='...'"
        return None

    @classmethod
    def apply(cls, plan: StepPlan, value: Any) -> None:
        """Where the model has Hugging Face's method and it can express ``value`` (and no blocks
        were named), that method, as the printed code calls it: the step measured is the step the
        user will run (HF's layers also turn off the key/value cache and make the embeddings'
        output require grad); else vramnb's wrap of the blocks' ``forward``."""
        if isinstance(value, tuple):  # the blocks named (the planner's choice per block)
            for name in value:
                record = Wrapped(name)
                plan.checkpointed.append(record)
                plan.undo.append(_wrap(plan.model.get_submodule(name), selective=False, record=record))
            return
        every = {"every block": 1, "every 2nd block": 2, "every 4th block": 4, "selective": 1}[value]
        if value != "selective" and getattr(plan, "blocks", "auto") == "auto":
            undo = _hf_enable(plan.model, every)
            if undo is not None:
                plan.undo.append(undo)
                plan.notes.append(f"checkpointing {value}: {type(plan.model).__name__}'s own "
                                  f"{hf_method(plan.model)}()")
                return
        blocks = find_blocks(plan.model, getattr(plan, "blocks", "auto"))
        names = {id(m): n for n, m in plan.model.named_modules()}
        for i, block in enumerate(blocks):
            if i % every == 0:
                record = Wrapped(names.get(id(block), f"block {i}"))
                plan.checkpointed.append(record)
                plan.undo.append(_wrap(block, selective=value == "selective", record=record))

    @classmethod
    def code(cls, value: Any, device_type: str = "cuda", model: Any = None, name: str = "model") -> str:
        """The Hugging Face method the model has (``activation_checkpointing_enable`` in transformers
        >= 5.24, ``gradient_checkpointing_enable`` before), else the ``checkpoint`` call around the
        blocks vramnb would wrap (named where ``model`` is given)."""
        if isinstance(value, tuple):
            chosen = "[" + ", ".join(f"{name}.get_submodule({n!r})" for n in value) + "]"
            return "import functools, torch.utils.checkpoint\n" + _wrap_loop(chosen)
        every = {"every block": 1, "every 2nd block": 2, "every 4th block": 4}.get(value)
        if every is None:
            return ("from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts\n"
                    "# in each block's caller: checkpoint(block, x, use_reentrant=False, context_fn=...)  # "
                    "saving matmul/attention outputs")
        method = _hf_route(model, every) if model is not None else None
        if method == "activation_checkpointing_enable":
            return (f'{name}.activation_checkpointing_enable(activation_checkpointing_kwargs={{"use_reentrant": False}}'
                    + (f", every_n_layers={every})" if every > 1 else ")"))
        if method is not None and every == 1:
            return f'{name}.gradient_checkpointing_enable(gradient_checkpointing_kwargs={{"use_reentrant": False}})'
        blocks = _block_names(model) if model is not None else None
        if not blocks:
            step = "" if every == 1 else f" (every {every}th)"
            return (f"# in the forward, around each block{step}:\n"
                    "x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)")
        parent, count = blocks
        chosen = f"{name}.get_submodule({parent!r})" + (f"[::{every}]" if every > 1 else "") if count else \
            "[" + ", ".join(f"{name}.get_submodule({n!r})" for n in parent[::every]) + "]"
        return ("import functools, torch.utils.checkpoint\n"
                + _wrap_loop(chosen))

    @classmethod
    def describe(cls, value: Any) -> str:
        """``"checkpointing every block"``, ``"selective checkpointing"``, or the named blocks (the first three
        and their count)."""
        if isinstance(value, tuple):
            shown = ", ".join(value[:3]) + (f", … ({len(value)})" if len(value) > 3 else "")
            return f"checkpointing {len(value)} block{'s' if len(value) > 1 else ''} ({shown})"
        return f"checkpointing {value}" if value != "selective" else "selective checkpointing"
