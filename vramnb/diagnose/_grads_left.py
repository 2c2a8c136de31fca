"""Gradients left from training: the ``.grad`` tensors of a module's parameters.

Evaluation with gradients off needs no ``.grad``; the last training step's gradients stay
allocated until ``optimizer.zero_grad(set_to_none=True)`` (or the module's) drops them.
Read from the modules' ``_parameters``/``_modules`` dicts (no user code runs).
"""

from __future__ import annotations

from typing import Any

import torch



def grad_bytes(module: Any) -> int:
    """Bytes of the ``.grad`` storages of ``module``'s parameters (each storage once; 0 where
    ``module`` is no :class:`torch.nn.Module` or no parameter has a gradient)."""
    if not issubclass(type(module), torch.nn.Module):
        return 0
    from ._failing_module import raw_parameters

    total, seen_storages = 0, set[int]()
    for p in raw_parameters(module):
        g = p.grad if isinstance(p, torch.Tensor) else None
        if isinstance(g, torch.Tensor):
            st = g.untyped_storage()
            if st.data_ptr() not in seen_storages:
                seen_storages.add(st.data_ptr())
                total += st.nbytes()
    return total
