"""A step's time on a card, predicted from its operators on fake tensors.

Each ATen operator of the fake step has two costs:

* on the device, the longer of its arithmetic and its memory traffic (a roofline,
  Williams et al. 2009): ``max(flops / (rate(dtype) x achieved), bytes / (bandwidth x achieved))``;
  ``flops`` from PyTorch's own formulas (``torch.utils.flop_counter``'s registry: matmuls,
  convolutions, attention, forward and backward); ``bytes`` the tensors the operator reads and
  writes (its tensor arguments and outputs; views move nothing); ``rate`` from
  :mod:`._throughput` (bf16/fp16 on tensor cores, fp32 convolutions on TF32 as cuDNN's default
  allows, fp32 matmuls on TF32 only where ``torch.get_float32_matmul_precision()`` is not
  ``"highest"``), times the fraction of peak a card reaches (:class:`._throughput.Achieved`);
* on the host, the time to issue it (:class:`._throughput.Host`: Python, the dispatcher and the
  kernel launch; views and allocations included), which differs for operators issued from
  Python and those the autograd engine runs.

PyTorch runs the device asynchronously: the host issues operators into a queue and the device
runs each once it is issued and the previous one is done. The step's time replays that queue
(:func:`replay`): a step of small operators is bound by the host (more micro-batches then cost
time in proportion), one of large matmuls by the device. An operator that reads a value on the
host (``item()``) makes the host wait for the device. A checkpointed block's recomputation,
micro-batches' smaller operators and autocast's casts are in the step by construction. Left out:
per-kernel efficiency below the card's achieved rates, overlap of copies with compute, and
the CUDA caching allocator's own time.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ._throughput import ACHIEVED, HOST, Achieved, Host, Throughput

__all__ = ["StepTime", "StepTimeMode", "replay", "count_kernel"]

#: operator namespaces that launch nothing on the device (profiler marks, ``prim.device``)
_NOT_KERNELS = {"prim", "profiler"}
#: operators that make the host wait for the device (a value read on the CPU)
_SYNC = {"_local_scalar_dense", "item", "equal", "is_nonzero", "nonzero"}
_CONV = {"convolution", "convolution_backward", "_convolution", "cudnn_convolution"}


@dataclass
class StepTime:
    """The predicted time of one step (seconds) and what it is made of.

    Attributes:
        seconds: the step's time: the host's and the device's queue replayed (:func:`replay`).
        device: the device's busy time, the sum of every operator's roofline time.
        host: the host's time issuing the operators.
        compute: device seconds of operators bound by arithmetic; ``memory`` of those bound by traffic.
        flops: floating-point operations, by dtype name (``"bfloat16"``).
        bytes: bytes read and written by all operators.
        ops: operators counted.
        backward_ops: of those, the operators the autograd engine ran (backward).
        by_op: predicted seconds per operator name (``"mm"``, ``"add"``), summed.
        forward_by_module: with :meth:`StepTimeMode.watch`, the device seconds of the forward
            operators each watched module ran (recomputation in backward excluded), by name.
        sources: where the host's cost and the achieved rates come from.
        kernels: each operator's predicted seconds on the card, in order, with whether the
            autograd engine ran it and whether it waited for the device (``item()``).
    """

    seconds: float = 0.0
    device: float = 0.0
    host: float = 0.0
    compute: float = 0.0
    memory: float = 0.0
    flops: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    bytes: int = 0
    ops: int = 0
    backward_ops: int = 0
    by_op: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    kernels: list[tuple[float, bool, bool]] = field(default_factory=list, repr=False)
    sources: tuple[str, str] = ("", "")
    forward_by_module: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    @property
    def total_flops(self) -> int:
        return int(sum(self.flops.values()))

    @property
    def bound(self) -> str:
        """``"host"`` where issuing the operators takes longer than running them, else ``"device"``."""
        return "host" if self.host > self.device else "device"


def replay(kernels: list[tuple[float, bool, bool]], host: Host) -> float:
    """Seconds from the first operator issued to the last one done, for operators
    ``(device seconds, run by the autograd engine, waits for the device)`` issued in order.

    The host spends ``host.backward`` (engine) or ``host.forward`` (Python) on each; the device
    starts each when it is issued and the one before it is done.
    """
    h = d = 0.0
    for dev, backward, sync in kernels:
        h += host.backward if backward else host.forward
        if dev:
            d = max(d, h) + dev
        if sync:
            h = max(h, d)
    return max(h, d)


def fp32_matmul_precision() -> str:
    """What CUDA's float32 matmuls run at, in ``torch.get_float32_matmul_precision()``'s words
    (``"highest"``: IEEE fp32; else TF32). That function raises once the per-backend API was used too
    (``torch.backends.cuda.matmul.fp32_precision = "tf32"``): then that setting is read (``"none"``
    takes its parent's: CUDA's, then the generic one)."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        get = torch._C._get_fp32_precision_getter
        for backend, op in (("cuda", "matmul"), ("cuda", "all"), ("generic", "all")):
            found = get(backend, op)
            if found != "none":
                return "high" if found == "tf32" else "highest"
        return "highest"


def _rate(rates: Throughput, dtype: torch.dtype, conv: bool, matmul_fp32: str) -> float:
    if dtype == torch.bfloat16:
        return rates.bf16
    if dtype == torch.float16:
        return rates.fp16
    if dtype == torch.float32 and (conv or matmul_fp32 != "highest"):
        return rates.tf32
    return rates.fp32


class StepTimeMode(TorchDispatchMode):
    """Counts each operator's times into :attr:`time` while active (on fake tensors); the
    step's :attr:`StepTime.seconds` are replayed when the mode exits.

    Args:
        rates: the card's peak rates.
        host: the host's cost per operator; ``achieved``: the fraction of peak the card reaches.
    """

    def __init__(self, rates: Throughput, host: Host = HOST, achieved: Achieved = ACHIEVED) -> None:
        super().__init__()
        from torch.utils.flop_counter import flop_registry

        self.rates, self.host, self.achieved = rates, host, achieved
        self._running: list[str] = []
        self.time = StepTime(sources=(host.source, achieved.source))
        self.registry = flop_registry
        self.matmul_fp32 = fp32_matmul_precision()

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def watch(self, modules: dict[int, str]) -> None:
        """Also count the forward's device time per module (``id(module) -> name``) while active."""
        self._watched = modules

    def __enter__(self) -> StepTimeMode:
        _active().append(self)
        self._running = []
        self._hooks: list[Any] = []
        watched = getattr(self, "_watched", None)
        if watched:
            from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

            running = self._running

            def pre(mod: Any, args: Any) -> None:
                name = watched.get(id(mod))
                if name is not None:
                    running.append(name)

            def post(mod: Any, args: Any, out: Any) -> None:
                name = watched.get(id(mod))
                if name is not None and running and running[-1] == name:
                    running.pop()

            self._hooks = [register_module_forward_pre_hook(pre), register_module_forward_hook(post)]
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        _active().remove(self)
        for h in self._hooks:
            h.remove()
        super().__exit__(*exc)
        st = self.time
        st.seconds = replay(st.kernels, self.host)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self._count(func, args, kwargs, out)
        return out

    def _count(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        if getattr(func, "namespace", "aten") in _NOT_KERNELS:
            return
        backward = torch._C._current_autograd_node() is not None
        if getattr(func, "is_view", False):  # issued by the host, nothing for the device
            self._add(0.0, 0.0, 0, None, backward, False, func._overloadpacket.__name__)
            return
        packet = func._overloadpacket
        formula = self.registry.get(packet)
        try:
            flops = int(formula(*args, **kwargs, out_val=out)) if formula is not None else 0
        except Exception:  # noqa: BLE001 - a formula that does not take these arguments: traffic only
            flops = 0
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        dtype = next((t.dtype for t in tensors if t.is_floating_point()), torch.float32)
        self.add(flops, nbytes, dtype, packet.__name__ in _CONV, backward, packet.__name__ in _SYNC, packet.__name__)

    def add(self, flops: int, nbytes: int, dtype: torch.dtype, conv: bool = False, backward: bool = False,
            sync: bool = False, name: str = "kernel") -> None:
        """Count one operator: ``flops`` of arithmetic in ``dtype`` and ``nbytes`` of traffic."""
        mem = nbytes / (self.rates.memory * self.achieved.memory)
        rate = _rate(self.rates, dtype, conv, self.matmul_fp32)
        share = self.achieved.cuda_cores if rate == self.rates.fp32 and dtype == torch.float32 else \
            self.achieved.tensor_cores
        comp = flops / (rate * share) if flops else 0.0
        self._add(comp, mem, flops, dtype, backward, sync, name, nbytes)

    def _add(self, comp: float, mem: float, flops: int, dtype: torch.dtype | None, backward: bool, sync: bool,
             name: str, nbytes: int = 0) -> None:
        st = self.time
        st.ops += 1
        st.backward_ops += backward
        st.bytes += nbytes
        st.host += self.host.backward if backward else self.host.forward
        if flops and dtype is not None:
            st.flops[str(dtype).replace("torch.", "")] += flops
        if comp >= mem:
            st.compute += comp
        else:
            st.memory += mem
        dev = max(comp, mem)
        st.device += dev
        st.by_op[name] += dev
        if self._running and not backward:
            st.forward_by_module[self._running[-1]] += dev
        st.kernels.append((dev, backward, sync))


_LOCAL = threading.local()


def _active() -> list[StepTimeMode]:
    """This thread's active modes (dispatch modes are per thread: so are they)."""
    if not hasattr(_LOCAL, "modes"):
        _LOCAL.modes = []
    return _LOCAL.modes


def count_kernel(flops: int, nbytes: int, dtype: torch.dtype, name: str) -> None:
    """Count a kernel that vramnb models without an ATen operator of its own (cuDNN's fused
    attention in estimates of CUDA) in every active :class:`StepTimeMode`."""
    backward = torch._C._current_autograd_node() is not None
    for mode in _active():
        mode.add(flops, nbytes, dtype, backward=backward, name=name)
