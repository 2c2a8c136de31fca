"""A zoo of models nobody here chose to fit: the benchmark of the predictions issue (12).

Every case is a model, a batch and a loss as their own libraries document them:
every classification, segmentation, detection and video model that
``torchvision.models.list_models()`` returns, Hugging Face architecture families
built from their configs at a small size (``zoo/hf.py``), PyTorch's own
modules (``zoo/native.py``), and single operators with the flags that decide their CUDA
kernels (``zoo/ops.py``: the op-level conformance). Recipes are written as users write them (their own
``torch.autocast`` and ``GradScaler``, the model's own checkpointing), not as
vramnb's recipes.

A third of the cases is the *validation* set, chosen by a hash of the case's name
(:func:`is_validation`) before anything was fixed against the zoo; figures are
reported for it apart.

    from zoo import cases, RECIPES
    for case in cases():
        model = case.build()                      # CPU, fp32, train mode
        batch = case.batch(case.batch_size, "cuda")
        loss = case.loss(model, batch, "bf16")    # forward + loss under the recipe's autocast
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

#: recipes, as users write them: (autocast dtype or None, GradScaler?, the model's own checkpointing?, optimizer)
RECIPES: dict[str, dict[str, Any]] = {
    "fp32": {"autocast": None, "scaler": False, "checkpointing": False, "optimizer": "adamw"},
    "bf16": {"autocast": torch.bfloat16, "scaler": False, "checkpointing": False, "optimizer": "adamw"},
    "fp16-scaler": {"autocast": torch.float16, "scaler": True, "checkpointing": False, "optimizer": "adamw"},
    "checkpointing": {"autocast": torch.bfloat16, "scaler": False, "checkpointing": True, "optimizer": "adamw"},
    "sgd": {"autocast": None, "scaler": False, "checkpointing": False, "optimizer": "sgd"},
}


def is_validation(name: str) -> bool:
    """The validation third: fixed by the name's SHA-1, never by results."""
    return int(hashlib.sha1(name.encode()).hexdigest(), 16) % 3 == 0


@dataclass
class Case:
    """One model of the zoo.

    Attributes:
        name: ``"<source>/<model>"``, e.g. ``"torchvision/resnet50"``, ``"hf/t5"``, ``"nn/lstm"``.
        family: kind of model: ``cnn``, ``vit``, ``encoder``, ``decoder``, ``encoder-decoder``,
            ``moe``, ``speech``, ``segmentation``, ``detection``, ``video``, ``rnn``, ``conv3d``.
        build: () -> the model on the CPU, fp32, in train mode (random weights).
        make_batch: (batch size, device) -> the batch (tensors, or a dict/tuple/list of them).
        forward_loss: (model, batch) -> scalar loss, *without* autocast (added per recipe by :meth:`loss`).
        batch_size: the GPU batch size (activations dominate, a few GiB on an H200).
        cpu_batch_size: the batch for the CPU byte-exactness check.
        enable_checkpointing: (model) -> None: the model's own checkpointing
            (``gradient_checkpointing_enable()``, ``memory_efficient=True``), or None if it has none.
        values_change_shapes: the forward reads tensor values that decide shapes (detection): an
            estimate must refuse it, naming the op.
    """

    name: str
    family: str
    build: Callable[[], torch.nn.Module]
    make_batch: Callable[[int, str], Any]
    forward_loss: Callable[[torch.nn.Module, Any], torch.Tensor]
    batch_size: int = 8
    cpu_batch_size: int = 2
    enable_checkpointing: Callable[[torch.nn.Module], None] | None = None
    values_change_shapes: bool = False
    notes: list[str] = field(default_factory=list)
    recipe_list: list[str] | None = None  # the recipes to run (default: every recipe that applies)

    @property
    def validation(self) -> bool:
        return is_validation(self.name)

    def recipes(self) -> list[str]:
        """The recipes that apply (checkpointing only where the model has its own)."""
        if self.recipe_list is not None:
            return list(self.recipe_list)
        return [r for r in RECIPES if r != "checkpointing" or self.enable_checkpointing is not None]

    def loss(self, model: torch.nn.Module, batch: Any, recipe: str, device_type: str = "cuda") -> torch.Tensor:
        """The forward and loss as the user writes them for ``recipe``."""
        dtype = RECIPES[recipe]["autocast"]
        ctx = torch.autocast(device_type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
        with ctx:
            return self.forward_loss(model, batch)

    def optimizer(self, params: Any, recipe: str) -> torch.optim.Optimizer:
        if RECIPES[recipe]["optimizer"] == "sgd":
            return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
        return torch.optim.AdamW(params, lr=1e-4)


def cases(source: str | None = None) -> list[Case]:
    """Every case of the zoo (``source``: ``"nn"``, ``"torchvision"``, ``"hf"`` or ``"op"`` for one
    part). A part whose library (torchvision, transformers) is not installed is left out."""
    import importlib
    import importlib.util
    import os

    parts = {"nn": ("native", None), "torchvision": ("tv", "torchvision"), "hf": ("hf", "transformers"),
             "op": ("ops", None)}
    if source is not None and source not in parts:
        raise ValueError(f"unknown zoo part {source!r}; valid: {', '.join(parts)}")
    out: list[Case] = []
    for name, (module, library) in parts.items():
        if source not in (None, name):
            continue
        if not os.path.exists(os.path.join(os.path.dirname(__file__), f"{module}.py")):
            continue
        if library is not None and importlib.util.find_spec(library) is None:
            continue
        out += importlib.import_module(f"{__name__}.{module}").cases()
    return out
