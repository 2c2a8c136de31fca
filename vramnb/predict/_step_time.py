"""A step's time on a card, predicted from its operators on fake tensors (a roofline).

Each ATen operator of the fake step costs the longer of its arithmetic at the card's peak
rate for its dtype and its memory traffic at the card's bandwidth:

    t(op) = max(flops(op) / rate(dtype, kind), bytes(op) / memory bandwidth)

``flops`` from PyTorch's own formulas (``torch.utils.flop_counter``'s registry: matmuls,
convolutions, attention, forward and backward); ``bytes`` the tensors the operator reads
and writes (its tensor arguments and outputs; views move nothing); ``rate`` from
:mod:`._throughput` (bf16/fp16 on tensor cores, fp32 convolutions on TF32 as cuDNN's
default allows, fp32 matmuls on TF32 only where ``torch.get_float32_matmul_precision()``
is not ``"highest"``). A checkpointed block's recomputation, micro-batches' smaller
operators and autocast's casts are in the step by construction. The model leaves out
launch overheads, kernel efficiency and overlap: the planner compares plans on one card
by the ratio of their times, where those mostly cancel (Williams et al. 2009, "Roofline").
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ._throughput import Throughput

__all__ = ["StepTime", "StepTimeMode"]

_CONV = {"convolution", "convolution_backward", "_convolution", "cudnn_convolution"}


@dataclass
class StepTime:
    """The predicted time of one step (seconds) and what it is made of.

    Attributes:
        seconds: the sum of every operator's roofline time.
        compute: seconds of operators bound by arithmetic; ``memory`` of those bound by traffic.
        flops: floating-point operations, by dtype name (``"bfloat16"``).
        bytes: bytes read and written by all operators.
        ops: operators counted.
    """

    seconds: float = 0.0
    compute: float = 0.0
    memory: float = 0.0
    flops: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    bytes: int = 0
    ops: int = 0

    @property
    def total_flops(self) -> int:
        return int(sum(self.flops.values()))


def _rate(rates: Throughput, dtype: torch.dtype, conv: bool, matmul_fp32: str) -> float:
    if dtype == torch.bfloat16:
        return rates.bf16
    if dtype == torch.float16:
        return rates.fp16
    if dtype == torch.float32 and (conv or matmul_fp32 != "highest"):
        return rates.tf32
    return rates.fp32


class StepTimeMode(TorchDispatchMode):
    """Counts each operator's roofline time into :attr:`time` while active (on fake tensors)."""

    def __init__(self, rates: Throughput) -> None:
        super().__init__()
        from torch.utils.flop_counter import flop_registry

        self.rates = rates
        self.registry = flop_registry
        self.time = StepTime()
        self.matmul_fp32 = torch.get_float32_matmul_precision()

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        try:
            self._count(func, args, kwargs, out)
        except Exception:  # noqa: BLE001 - a formula that does not take these arguments: counted as traffic only
            pass
        return out

    def _count(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        if getattr(func, "is_view", False):
            return
        packet = func._overloadpacket
        formula = self.registry.get(packet)
        flops = int(formula(*args, **kwargs, out_val=out)) if formula is not None else 0
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        st = self.time
        st.ops += 1
        st.bytes += nbytes
        mem = nbytes / self.rates.memory
        comp = 0.0
        if flops:
            dtype = next((t.dtype for t in tensors if t.is_floating_point()), torch.float32)
            st.flops[str(dtype).replace("torch.", "")] += flops
            comp = flops / _rate(self.rates, dtype, packet.__name__ in _CONV, self.matmul_fp32)
        if comp >= mem:
            st.compute += comp
        else:
            st.memory += mem
        st.seconds += max(comp, mem)
