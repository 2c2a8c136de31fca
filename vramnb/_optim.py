"""Rebuild an optimizer of the user's class and settings over other parameters.

``type(opt)(params, **opt.defaults)`` is not enough: ``defaults`` can hold keys
the constructor does not take (torch >= 2.10's ``AdamW`` has
``decoupled_weight_decay`` in its defaults, not in ``__init__``). The settings
are taken from the first parameter group (what the optimizer uses now, after a
scheduler changed ``lr``), kept where the constructor's signature names them
(all of them when it takes ``**kwargs``); tensors are copied, so the new
optimizer never writes into the user's hyper-parameters.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

__all__ = ["rebuild_optimizer"]


def rebuild_optimizer(opt: torch.optim.Optimizer, params: list[Any]) -> torch.optim.Optimizer:
    """A new optimizer of ``type(opt)`` with ``opt``'s settings over ``params``.

    Raises:
        TypeError: the class cannot be built from its settings (the message says which).
    """
    cls: Any = type(opt)  # a subclass of Optimizer: built with its own constructor's arguments
    sig = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.values())
    settings = dict(opt.defaults)
    if opt.param_groups:
        settings.update({k: v for k, v in opt.param_groups[0].items() if k in settings})
    kwargs = {k: (v.detach().clone() if isinstance(v, torch.Tensor) else v) for k, v in settings.items()
              if k != "params" and (takes_any or k in sig)}
    try:
        return cls(params, **kwargs)
    except TypeError as e:
        raise TypeError(f"cannot build a {cls.__name__} from its settings {sorted(kwargs)}: {e}") from e
