"""What :func:`vramnb.estimate` is given, checked and made fake; and the errors
that fake tensors raise, turned into sentences.

Bad input is refused with a :class:`ValueError` naming what was found and what
is expected, before anything runs: arguments, recipes, factories that cannot
take the arguments the estimate calls them with, a model factory that puts
tensors on CUDA.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Mapping
from typing import Any

import torch

from ._fake import HostDevicesOnly, fake_optimizer
from ._fake_model import FakeModel, fake_model
from .._step import check_closure
from ..techniques import Recipe

__all__ = ["as_recipe", "build_model", "build_optimizer", "check_arguments", "explain"]


def check_arguments(*, device: Any, margin: Any, loss_fn: Any, batch_size: Any, world_size: Any, parallel: Any,
                    expandable_segments: Any, label: Any) -> None:
    """The estimate's plain arguments (see :func:`vramnb.estimate`).

    Raises:
        ValueError: one of them is not what it must be (the message says what).
    """
    from ._parallel import PARALLEL

    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' (model a CUDA card) or 'cpu', not {device!r}")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 1:
        raise ValueError(f"margin must be a fraction of the card from 0 to below 1 (e.g. 0.05), not {margin!r}")
    if loss_fn is not None and not callable(loss_fn):
        raise ValueError(f"loss_fn must be a function (model, batch) -> scalar loss, not {type(loss_fn).__name__}")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer, not {batch_size!r}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive integer (the number of GPUs), not {world_size!r}")
    if parallel is not None and parallel not in PARALLEL:
        raise ValueError(f"unknown parallel={parallel!r}; valid: {', '.join(PARALLEL)} (or None for one GPU)")
    if world_size > 1 and parallel is None:
        raise ValueError(f"world_size={world_size} needs parallel=: one of {', '.join(PARALLEL)}")
    if not isinstance(expandable_segments, bool):
        raise ValueError(f"expandable_segments must be True or False, not {expandable_segments!r}")
    if not isinstance(label, str):
        raise ValueError(f"label must be a string (the report's title), not {type(label).__name__}")


def as_recipe(recipe: Any) -> Recipe | None:
    """``recipe`` as a :class:`Recipe` (``None`` stays ``None``).

    Raises:
        ValueError: not a Recipe or a dict; an unknown technique or setting.
    """
    if recipe is None or isinstance(recipe, Recipe):
        return recipe
    if not isinstance(recipe, Mapping):
        raise ValueError(f"recipe must be a vramnb.Recipe or a dict of technique settings such as "
                         f"{{'precision': 'bf16'}}, not {type(recipe).__name__}")
    return Recipe(**recipe)


def _check_factory(fn: Any, n_args: int, what: str, example: str) -> None:
    """A factory the estimate calls with ``n_args`` positional arguments must accept them."""
    try:
        inspect.signature(fn).bind(*range(n_args))
    except TypeError as e:
        takes = "no arguments" if not n_args else "the list of trainable parameters"
        raise ValueError(f"{what} is called with {takes} ({e}); e.g. {example}") from None
    except ValueError:
        pass  # no signature to read (a builtin): let the call say


def _uses_cuda(err: BaseException) -> bool:
    """``err`` is PyTorch saying that CUDA (or another accelerator) is missing, or a device
    mismatch with it: "not compiled with CUDA", "not linked with support for cuda devices",
    "Cannot initialize CUDA", "requires CUDA support", "Cannot access accelerator device"."""
    text = str(err).lower()
    if isinstance(err, TypeError):  # legacy types: "type torch.cuda.FloatTensor not available. Torch not compiled ..."
        return "compiled with cuda" in text
    return isinstance(err, (RuntimeError, AssertionError)) and ("cuda" in text or "accelerator" in text)


def build_model(model: Any, mode: Any) -> FakeModel:
    """The fake copy of ``model`` (a module, or a factory called under ``torch.device("meta")``),
    the map from the original tensors to the fakes, and what was shared rather than copied
    (:func:`vramnb.predict._fake_model.fake_model`).

    Raises:
        ValueError: not a module or a factory of one; a TorchScript or lazy module; a factory
            that puts tensors on CUDA or returns something else, or a sharded DTensor parameter.
    """
    if isinstance(model, torch.jit.ScriptModule):
        raise ValueError(f"{type(model).__name__} is a TorchScript module (torch.jit.script or trace), whose weights "
                         "live in the compiled graph and cannot be copied onto fake tensors: estimate the Python "
                         "module it was made from")
    if isinstance(model, torch.nn.Module):
        from torch.distributed.tensor import DTensor, Replicate

        sharded = next((n for n, p in model.named_parameters() if isinstance(p, DTensor)
                        and not all(isinstance(pl, Replicate) for pl in p.placements)), None)
        if sharded is not None:
            raise ValueError(f"parameter {sharded!r} is a sharded DTensor (the model is already sharded, by "
                             "FSDP2 or tensor parallelism), which estimate cannot copy onto fake tensors: estimate the "
                             "unsharded model with estimate(..., world_size=N, parallel='fsdp')")
        return fake_model(model, mode)
    if callable(model):
        _check_factory(model, 0, "the model factory", "model=lambda: MyModel(config)")
        try:
            with torch.device("meta"):
                built = model()
        except (RuntimeError, AssertionError) as e:
            if not _uses_cuda(e):
                raise
            raise ValueError(f"the model factory puts tensors on CUDA ({str(e).splitlines()[0]}); it is called under "
                             "torch.device('meta') to build the model without memory: build it without naming a "
                             "device") from None
        if not isinstance(built, torch.nn.Module):
            raise ValueError(f"the model factory returned {type(built).__name__}, not a torch.nn.Module")
        return build_model(built, mode)
    raise ValueError(f"model must be a torch.nn.Module or a function building one, not {type(model).__name__}")


def build_optimizer(optimizer: Any, fmodel: torch.nn.Module, fakes: dict[int, torch.Tensor], mode: Any,
                    guard: Any = None, dropped: list[str] | None = None) -> Any:
    """The fake optimizer: a copy of the user's over the fake parameters, or the factory's
    (run under ``guard``, a :class:`vramnb.predict._fake_guard.RealTensorGuard`, where given); the user's
    step hooks it leaves out are named in ``dropped``.

    Raises:
        ValueError: not an optimizer or a factory of one; the user's optimizer holds
            parameters that are not the model's; the factory's optimizer holds real
            parameters (it used the notebook's model, not its argument).
    """
    if optimizer is None:
        return None
    if isinstance(optimizer, torch.optim.Optimizer):
        check_closure(optimizer, "estimate with another optimizer")
        theirs = [p for g in optimizer.param_groups for p in g["params"]]
        foreign = [p for p in theirs if id(p) not in fakes]
        if foreign or not theirs:
            raise ValueError(f"the optimizer holds {len(foreign)} of {len(theirs)} parameters that are not the model's: "
                             "build it over this model, or pass a function: optimizer=lambda params: torch.optim.AdamW(params)")
        return fake_optimizer(optimizer, fakes, mode, dropped)
    if callable(optimizer):
        _check_factory(optimizer, 1, "the optimizer factory", "optimizer=lambda params: torch.optim.AdamW(params)")
        with mode, HostDevicesOnly(), (guard if guard is not None else contextlib.nullcontext()):
            opt = optimizer([p for p in fmodel.parameters() if p.requires_grad])
        if not isinstance(opt, torch.optim.Optimizer):
            raise ValueError(f"the optimizer factory returned {type(opt).__name__}, not a torch.optim.Optimizer")
        from torch._subclasses.fake_tensor import FakeTensor

        real = [p for g in opt.param_groups for p in g["params"] if not isinstance(p, FakeTensor)]
        if real:
            raise ValueError(f"the optimizer factory's optimizer holds {len(real)} real parameters, not the fake copies "
                             "it is given: write optimizer=lambda params: torch.optim.AdamW(params), not "
                             "model.parameters() of the notebook's model")
        return opt
    raise ValueError(f"optimizer must be a torch.optim.Optimizer, a function params -> optimizer, or None; "
                     f"not {type(optimizer).__name__}")


def explain(err: BaseException) -> BaseException:
    """A clear error for what fake tensors cannot do; other errors pass unchanged."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

    if _uses_cuda(err):
        # CUDA used by the step outside the dispatcher (.cuda() and legacy torch.cuda types on a build without
        # CUDA; a device mismatch): the dispatcher's own case is HostDevicesOnly's refusal
        return ValueError(f"the step uses CUDA itself ({str(err).splitlines()[0]}); an estimate runs the step on fake "
                          "CPU tensors and models the card on top. Create tensors on the device of the model or batch "
                          "instead (e.g. torch.zeros(..., device=x.device)), and leave torch.cuda calls out of the step")
    if isinstance(err, RuntimeError) and "data is not allocated yet" in str(err):
        # a C++ kernel reading a fake tensor's data below the dispatcher (an RNN's PackedSequence batch_sizes),
        # where no dispatch mode can give it the batch's values
        from ._value_reads import line_of, whose

        where, source = line_of(err)
        return ValueError(f"the step reads tensor data inside a PyTorch function at {where} of {whose(where)}"
                          + (f" (`{source}`)" if source else "") + " (e.g. an RNN on a PackedSequence reads its batch_sizes "
                          "in C++, below the dispatcher), which fake tensors cannot give it: measure the step with "
                          "vramnb.profile_step, or estimate it on padded batches without packing")
    if isinstance(err, (DataDependentOutputException, DynamicOutputShapeException)):
        return ValueError(f"the step needs tensor values ({err}): fake tensors have shapes but no data. "
                          "Make the step not depend on values (e.g. no .item() or boolean indexing in the "
                          "forward), or measure it with vramnb.profile_step")
    return err
