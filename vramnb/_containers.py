"""Map a function over the tensors of a batch, keeping its containers' types.

One helper for everything that rebuilds a batch (a recipe's resized or split
batch, each profiled step's own copy, an estimate's fake batch): dicts and
other mappings (Hugging Face's ``BatchEncoding``, a ``UserDict``), lists,
tuples, namedtuples and dataclass instances come back as new containers of the
same type; the input's containers are never changed. Anything else is
returned as it is.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import torch

__all__ = ["map_tensors", "step_batch"]


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """A new ``batch`` with ``fn`` applied to every tensor (new containers of the same types)."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, Mapping):
        items = {k: map_tensors(v, fn) for k, v in batch.items()}
        if type(batch) is dict:
            return items
        if isinstance(batch, MutableMapping):
            try:
                new = copy.copy(batch)  # keeps the type and its attributes (BatchEncoding's encodings)
                if new is not batch:
                    for k, v in items.items():
                        new[k] = v
                    return new
            except Exception:  # noqa: BLE001 - a mapping copy cannot make: build it from a dict below
                pass
        mapping_type: Any = type(batch)  # a concrete mapping type: its constructor is its own
        try:
            return mapping_type(items)
        except Exception:  # noqa: BLE001 - a mapping type that cannot be built from a dict
            return items
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(map_tensors(v, fn) for v in batch))
    if isinstance(batch, (tuple, list)):
        vals = [map_tensors(v, fn) for v in batch]
        if type(batch) in (list, tuple):
            return type(batch)(vals)
        try:
            return type(batch)(vals)
        except Exception:  # noqa: BLE001 - a subclass with another constructor
            return list(vals) if isinstance(batch, list) else tuple(vals)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        copied = copy.copy(batch)
        for f in dataclasses.fields(batch):
            if hasattr(batch, f.name):
                object.__setattr__(copied, f.name, map_tensors(getattr(batch, f.name), fn))
        return copied
    return batch


def step_batch(batch: Any) -> Any:
    """One step's own copy of the batch: new containers (a ``loss_fn`` that pops
    ``labels`` from a dict changes the step's dict, not the user's), the same
    tensors, except that a tensor computed by a graph (not a leaf) is detached
    (``requires_grad`` kept): the step's backward stops at the batch and does not
    run or free the user's graph."""
    return map_tensors(batch, lambda t: t.detach().requires_grad_(t.requires_grad) if t.grad_fn is not None else t)
