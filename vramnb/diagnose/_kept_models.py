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


def _has_model(obj: Any, d: dict[str, Any]) -> bool:
    return isinstance(obj, torch.nn.Module) or any(isinstance(v, torch.nn.Module) for v in d.values())


def model_payload(entries: list[Any]) -> Payload | None:
    """For a list whose last entry is a model, or an object holding one (a trainer wrapping its
    module), the one attribute of that entry that keeps the most tensor bytes beside the model's
    own parameters, buffers and submodules, where it keeps more than they do; else ``None``. An
    attribute's bytes are those the holders listing counts for it (``_holders.storages_held``, on
    the models' device), but the weights' storages."""
    if not entries:
        return None
    e = entries[-1]
    if issubclass(type(e), torch.Tensor) or container_items(e):
        return None
    d = _instance_dict(e)
    if d is None or not _has_model(e, d):
        return None
    from .._holders import storages_held
    from .._storages import storages_of_tensor
    from ._failing_module import raw_parameters

    models = [e] if isinstance(e, torch.nn.Module) else [v for v in d.values() if isinstance(v, torch.nn.Module)]
    params = [t for m in models for t in raw_parameters(m) if t is not None]
    device = params[0].device if params else torch.device("cpu")
    # the models' own weights (their parameters' storages), read without running their code
    weights = {key: st.nbytes() for t in params for key, st in storages_of_tensor(t)}
    best: Payload | None = None
    for k, v in d.items():
        if type(k) is not str or k in _MODULE_SLOTS or isinstance(v, torch.nn.Module):
            continue
        n = sum(b for key, b in storages_held(v, device).items() if key not in weights)
        if n and (best is None or n > best.nbytes):
            best = Payload(k, n)
    return best if best is not None and best.nbytes > sum(weights.values()) else None
