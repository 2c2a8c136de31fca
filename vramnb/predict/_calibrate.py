"""The host's cost per operator and the card's achieved rates, measured on the GPU present.

The step-time model (:mod:`._step_time`) needs two figures beyond a card's datasheet: what the
host spends issuing one operator (:class:`._throughput.Host`) and the fraction of the peak rates
PyTorch's kernels reach (:class:`._throughput.Achieved`). With a CUDA device in the process,
both are measured here once per process, on micro-benchmarks that are no user's model:

* host, forward: a 200-layer ``nn.Sequential`` of ``Linear(16, 16)``, ``GELU``, ``LayerNorm(16)``
  on a 4 x 16 input (the device idles: the host bounds it), host seconds per ATen operator;
* host, backward: the autograd engine through a 1 000-step chain of ``mul`` and ``add`` on
  256 elements, host seconds per operator it runs;
* tensor cores: ``mm`` of 8192 x 4096 by 4096 x 4096 in bf16; CUDA cores: 4096 x 2048 by
  2048 x 2048 in fp32 at matmul precision ``"highest"``; memory: a copy of 256 MiB (512 MiB
  of traffic); each timed with CUDA events, the best of 5 after a warm-up, over the card's peak
  from :mod:`._throughput`.

The host figures hold for any card planned on this machine; the achieved rates only for the
card present (another card takes :data:`._throughput.ACHIEVED`). They are measured only where this
process has already initialised CUDA itself (a model on the GPU, any CUDA tensor): planning never
creates a CUDA context, nor runs anything on a GPU the process has not used. The measurements'
allocations go to a private memory pool (``torch.cuda.MemPool``), released at the end, so that the
blocks the process's caching allocator keeps are neither added to nor emptied; what stays is the
cuBLAS workspaces of a process that had run no matmul yet (on an H200 with torch 2.11: 33 MiB
allocated, 34 MiB reserved, where a 1 GiB pool went back), and the allocator's peak statistics count
the measurements (up to 512 MiB at once). Otherwise, the defaults (:data:`._throughput.HOST`,
:data:`._throughput.ACHIEVED`) are used, as measured on the machine named in their ``source``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ._throughput import ACHIEVED, HOST, Achieved, Host, throughput

__all__ = ["calibration", "measure_host", "measure_achieved"]

_CACHE: dict[str, Any] = {}


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if getattr(func, "namespace", "aten") not in ("prim", "profiler"):
            self.n += 1
        return func(*args, **(kwargs or {}))


def _host_seconds(fn: Any, runs: int = 7) -> float:
    times = []
    for _ in range(runs):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return sorted(times)[runs // 2]


def measure_host(device: torch.device) -> Host:
    """The host's seconds per ATen operator on this machine, forward and backward (see the module)."""
    layers: list[torch.nn.Module] = []
    for _ in range(200):
        layers += [torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.LayerNorm(16)]
    seq = torch.nn.Sequential(*layers).to(device)
    x = torch.randn(4, 16, device=device)
    with torch.no_grad():
        count = _Count()
        with count:
            seq(x)
        forward = _host_seconds(lambda: seq(x)) / count.n  # noqa: F821 - pyflakes reads the lambda after the del below
    a = torch.randn(256, device=device, requires_grad=True)
    y = a
    for _ in range(1000):
        y = y * 1.0001 + 0.001
    loss = y.sum()
    count = _Count()
    with count:
        loss.backward(retain_graph=True)
    backward = _host_seconds(lambda: loss.backward(retain_graph=True)) / count.n  # noqa: F821 - pyflakes reads the lambda after the del below
    del seq, x, a, y, loss
    name = torch.cuda.get_device_name(device)
    return Host(forward, backward, f"measured on this machine ({name}, torch {torch.__version__})")


def _best_seconds(fn: Any, runs: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return best


def measure_achieved(device: torch.device) -> Achieved:
    """The fractions of this card's peak that a large bf16 matmul, fp32 matmul and copy reach."""
    name = torch.cuda.get_device_name(device)
    peak, _ = throughput(name)
    a, b = torch.randn(8192, 4096, device=device, dtype=torch.bfloat16), torch.randn(4096, 4096, device=device,
                                                                                 dtype=torch.bfloat16)
    tensor = 2 * 8192 * 4096 * 4096 / _best_seconds(lambda: a @ b) / peak.bf16  # noqa: F821 - pyflakes reads the lambda after the del below
    del a, b
    # CUDA's own fp32 matmul switch (PyTorch >= 2.9), not the legacy one: that raises once the user mixed both
    get = getattr(torch._C, "_get_fp32_precision_getter", None)
    set_ = getattr(torch._C, "_set_fp32_precision_setter", None)
    precision = get("cuda", "matmul") if get is not None else torch.get_float32_matmul_precision()
    if set_ is not None:
        set_("cuda", "matmul", "ieee")
    else:
        torch.set_float32_matmul_precision("highest")
    try:
        a, b = torch.randn(4096, 2048, device=device), torch.randn(2048, 2048, device=device)
        cuda = 2 * 4096 * 2048 * 2048 / _best_seconds(lambda: a @ b) / peak.fp32  # noqa: F821 - pyflakes reads the lambda after the del below
    finally:
        if set_ is not None:
            set_("cuda", "matmul", precision)
        else:
            torch.set_float32_matmul_precision(precision)
    del a, b
    src = torch.empty(64 * 2**20, device=device)
    dst = torch.empty_like(src)
    memory = 2 * src.numel() * 4 / _best_seconds(lambda: dst.copy_(src)) / peak.memory  # noqa: F821 - pyflakes reads the lambda after the del below
    del src, dst
    return Achieved(min(tensor, 1.0), min(cuda, 1.0), min(memory, 1.0),
                    f"measured on this {name} (torch {torch.__version__})")


@contextlib.contextmanager
def _private_pool(device: torch.device) -> Iterator[None]:
    """Route this thread's CUDA allocations to a pool of their own, whose memory goes back to the
    driver at the end (the process's own cached blocks are not emptied)."""
    pool_type = getattr(torch.cuda, "MemPool", None)
    if pool_type is None:  # an older PyTorch: the measurements' blocks stay cached
        yield
        return
    pool = pool_type()
    try:
        with torch.cuda.use_mem_pool(pool, device):
            yield
    finally:
        del pool  # its last reference: PyTorch frees the pool's segments


def calibration(card: str) -> tuple[Host, Achieved]:
    """The host cost and achieved rates for planning on ``card`` (a name as :func:`throughput` reads
    it): measured here where this process has already initialised CUDA (the rates only where the GPU
    is that card), else the recorded defaults; never creates a CUDA context. Measured once per process."""
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return HOST, ACHIEVED
    device = torch.device("cuda", torch.cuda.current_device())
    here = torch.cuda.get_device_name(device)
    if "host" not in _CACHE:
        with _private_pool(device):
            _CACHE["host"] = measure_host(device)
    same = throughput(card)[0] == throughput(here)[0] and throughput(here)[1] is None
    if not same:
        return _CACHE["host"], ACHIEVED
    if "achieved" not in _CACHE:
        with _private_pool(device):
            _CACHE["achieved"] = measure_achieved(device)
    return _CACHE["host"], _CACHE["achieved"]
