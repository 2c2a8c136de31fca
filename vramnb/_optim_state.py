"""What an optimizer's state holds: bytes per parameter, and whether its elementwise
moments are as narrow as the optimizer promised (8-bit AdamW: one byte each).

Each storage is counted once (bitsandbytes shares its quantization maps between
parameters); a tensor subclass (torchao's quantized state) is counted by the
tensors it is made of (``__tensor_flatten__``). Used by :mod:`vramnb._no_effect`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["SMALL", "State", "claimed_state_bits", "per_parameter", "read_state", "state_tensors"]

SMALL = 4096  # bitsandbytes' min_8bit_size and torchao's threshold: smaller tensors keep 32-bit state


def per_parameter(optimizer: Any) -> list[dict[Any, Any]]:
    """The per-parameter dicts of ``optimizer.state``. PyTorch allows other entries there (a custom
    optimizer's ``self.state["global_step"] = 3``; ``state_dict()`` keeps them as they are): those are
    left out, as they are no parameter's state."""
    return [st for st in list(optimizer.state.values()) if isinstance(st, dict)]


def state_tensors(optimizer: Any) -> list[torch.Tensor]:
    """The tensors in ``optimizer.state``'s per-parameter dicts (:func:`per_parameter`)."""
    return [v for st in per_parameter(optimizer) for v in st.values() if isinstance(v, torch.Tensor)]


def claimed_state_bits(optimizer: Any) -> int | None:
    """The bits per state element an optimizer's own class promises: 8 or 4
    (``AdamW8bit``, ``PagedAdamW8bit``, ``AdamW4bit``, bitsandbytes' ``optim_bits``),
    else ``None``."""
    bits = getattr(getattr(optimizer, "args", None), "optim_bits", None)
    if isinstance(bits, int) and bits < 16:
        return bits
    m = re.search(r"(\d+)\s*bit", type(optimizer).__name__, re.IGNORECASE)
    if m and int(m.group(1)) < 16:
        return int(m.group(1))
    if re.search(r"fp8", type(optimizer).__name__, re.IGNORECASE):
        return 8
    return None


def _bytes(t: torch.Tensor, seen: set[Any]) -> int:
    """Bytes a state tensor holds, each storage once; a tensor subclass
    (torchao's quantized state) by the tensors it is made of."""
    flatten = getattr(type(t), "__tensor_flatten__", None)
    if flatten is not None:
        try:
            wrapper: Any = t  # a wrapper subclass (it has __tensor_flatten__, torch.Tensor does not)
            inner, _ = wrapper.__tensor_flatten__()
            return sum(_bytes(getattr(t, n), seen) for n in inner)
        except Exception:  # noqa: BLE001 - an unusual subclass: counted by its apparent size
            return t.numel() * t.element_size()
    try:
        st = t.untyped_storage()
        key = (t.device, st.data_ptr(), st.nbytes()) if st.data_ptr() else id(st)
    except Exception:  # noqa: BLE001
        return t.numel() * t.element_size()
    if key in seen:
        return 0
    seen.add(key)
    return st.nbytes()


@dataclass
class State:
    """One optimizer's state after a step."""

    name: str
    bits: int  # the bits per element promised
    torch_class: bool  # one of torch.optim's own optimizers
    params: int  # parameter elements that have state
    total: int  # bytes of the state, each storage once
    wide: int  # parameter elements whose elementwise moments take 1.5 x the promised bytes or more
    wide_small: int  # of those, in tensors under SMALL elements
    moments: int  # elementwise state tensors per parameter (the most seen)
    dtypes: dict[str, str] = field(default_factory=dict)  # state key -> dtype of its widest elementwise tensor


def read_state(optimizer: Any, bits: int) -> State | None:
    limit = 1.5 * bits / 8  # bytes per element above which a moment is wider than promised (scales add ~2 %)
    seen: set[Any] = set()
    params = total = wide = small = moments = 0
    dtypes: dict[str, str] = {}
    for p, st in list(optimizer.state.items()):
        if not isinstance(p, torch.Tensor) or not isinstance(st, dict):
            continue
        n = p.numel()
        tensors = [(k, v) for k, v in st.items() if isinstance(v, torch.Tensor)]
        if not tensors:
            continue
        params += n
        per_elem = 0.0
        elementwise = 0
        for k, v in tensors:
            b = _bytes(v, seen)
            total += b
            if n > 1 and v.numel() == n:
                elementwise += 1
                per_elem = max(per_elem, b / n)
                if b / n >= limit:
                    dtypes[str(k)] = str(v.dtype).replace("torch.", "")
        moments = max(moments, elementwise)
        if per_elem >= limit:
            wide += n
            small += n if n < SMALL else 0
    if not params:
        return None
    cls = type(optimizer)
    return State(cls.__name__, bits, getattr(torch.optim, cls.__name__, None) is cls, params, total, wide, small, moments, dtypes)
