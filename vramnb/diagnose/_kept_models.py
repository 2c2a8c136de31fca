"""What a list of kept models keeps beside their weights.

A list that grows by one trained model per run (``nets.append(net)`` after ``net.fit(X, y)``) is
the user's result: emptying it throws the models away. Where each entry keeps far more than its
weights in one attribute (a trainer's reference to its training data, ``net.batch_iterator_train``),
that attribute is what to drop from each kept model. The entry's own attribute dict is read the way
the holders listing reads it (``_graph._instance_dict``: never a ``__dict__`` the class defines)
and only built-in containers are entered: no user code runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .._graph import _instance_dict, container_items

__all__ = ["Payload", "model_payload"]

_MODULE_SLOTS = ("_parameters", "_buffers", "_modules")


@dataclass(frozen=True)
class Payload:
    """``attr`` of each entry keeps ``nbytes`` (the last entry's, each storage once) beside a model."""

    attr: str
    nbytes: int


def _bytes(obj: Any, seen: set[int], depth: int = 3) -> int:
    """Bytes of the distinct storages of the tensors ``obj`` is or holds (built-in containers and
    plain objects' attribute dicts, ``depth`` levels), each storage once across calls (``seen``)."""
    if issubclass(type(obj), torch.Tensor):
        try:
            st = obj.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return 0
        key = st.data_ptr() or id(st)
        if key in seen:
            return 0
        seen.add(key)
        return st.nbytes()
    if depth <= 0 or isinstance(obj, torch.nn.Module):
        return 0
    items = container_items(obj)
    if not items:
        d = _instance_dict(obj)
        items = list(d.values()) if d is not None else []
    return sum(_bytes(v, seen, depth - 1) for v in items[:10_000])


def _has_model(obj: Any, d: dict[str, Any]) -> bool:
    return isinstance(obj, torch.nn.Module) or any(isinstance(v, torch.nn.Module) for v in d.values())


def model_payload(entries: list[Any]) -> Payload | None:
    """For a list whose last entry is a model, or an object holding one (a trainer wrapping its
    module), the one attribute of that entry that keeps the most tensor bytes beside the model's
    own parameters, buffers and submodules, where it keeps more than they do; else ``None``."""
    if not entries:
        return None
    e = entries[-1]
    if issubclass(type(e), torch.Tensor) or container_items(e):
        return None
    d = _instance_dict(e)
    if d is None or not _has_model(e, d):
        return None
    seen: set[int] = set()
    weights = 0
    from ._failing_module import raw_parameters

    models = [e] if isinstance(e, torch.nn.Module) else [v for v in d.values() if isinstance(v, torch.nn.Module)]
    for m in models:  # the models' own weights (their parameters), read without running their code
        for t in raw_parameters(m):
            weights += _bytes(t, seen, 1) if t is not None else 0
    best: Payload | None = None
    for k, v in d.items():
        if type(k) is not str or k in _MODULE_SLOTS or isinstance(v, torch.nn.Module):
            continue
        n = _bytes(v, seen)
        if n and (best is None or n > best.nbytes):
            best = Payload(k, n)
    return best if best is not None and best.nbytes > weights else None
