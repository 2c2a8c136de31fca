"""Gradients left from training: the ``.grad`` tensors of a module's parameters.

Evaluation with gradients off needs no ``.grad``; the last training step's gradients stay
allocated until ``optimizer.zero_grad(set_to_none=True)`` (or the module's) drops them.
Read from the modules' ``_parameters``/``_modules`` dicts (no user code runs).
"""

from __future__ import annotations

from typing import Any

import torch

_BUDGET = 100_000  # modules walked at most


def grad_bytes(module: Any) -> int:
    """Bytes of the ``.grad`` storages of ``module``'s parameters (each storage once; 0 where
    ``module`` is no :class:`torch.nn.Module` or no parameter has a gradient)."""
    if not issubclass(type(module), torch.nn.Module):
        return 0
    total, seen_storages, seen, todo = 0, set[int](), set[int](), [module]
    while todo and len(seen) < _BUDGET:
        m = todo.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        d = object.__getattribute__(m, "__dict__")
        ps, ms = dict.get(d, "_parameters"), dict.get(d, "_modules")
        if type(ps) is dict:
            for p in dict.values(ps):
                g = p.grad if isinstance(p, torch.Tensor) else None
                if isinstance(g, torch.Tensor):
                    st = g.untyped_storage()
                    if st.data_ptr() not in seen_storages:
                        seen_storages.add(st.data_ptr())
                        total += st.nbytes()
        if type(ms) is dict:
            todo += [c for c in dict.values(ms) if issubclass(type(c), torch.nn.Module)]
    return total
