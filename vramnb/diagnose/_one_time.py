"""One-time costs in a CUDA cell: cuBLAS's workspaces, and what CUDA loads outside PyTorch.

The first matrix multiply on a thread and stream takes a workspace from the caching
allocator and keeps it for the process (``aten/src/ATen/cuda/CublasHandlePool.cpp``):
``CUBLAS_WORKSPACE_CONFIG`` bytes (default ``:4096:8``, 32 MiB, on compute capability
9.0 and newer; ``:4096:2:16:8`` before), and cuBLASLt's (``CUBLASLT_WORKSPACE_SIZE`` KiB,
default 1 MiB). In a cell's report that shows as allocated memory no variable holds.

Found from the allocator's segments at the end of a cell that allocated at least that
much: active blocks of exactly those requested sizes, new since the last look, that
back no live tensor (checked only when such a block appeared).

Outside the allocator, CUDA loads a kernel's module onto the device the first time the
process uses it (``CUDA_MODULE_LOADING=LAZY``, PyTorch's default since CUDA 11.7; the
CUDA C++ Programming Guide, "Lazy Loading"), and libraries create their handles (cuFFT
plans, cuSOLVER, cuDNN) at their first call: device memory that is neither tensors nor
the allocator's cache, kept for the process. It shows as the growth of
``total − free − reserved`` (``cudaMemGetInfo``) across the cell, which another process
on the same GPU changes too.
"""

from __future__ import annotations

import os
import re

import torch

from .._storages import live_tensors, storages_of_tensor
from .._units import format_bytes

__all__ = ["cublas_workspace_sizes", "cublas_workspaces", "new_workspaces", "workspace_note", "outside_growth", "OUTSIDE_MIN"]

#: the least growth of memory outside the allocator worth a line (bytes)
OUTSIDE_MIN = 2 << 20

_SEEN: dict[int, set[int]] = {}  # device -> addresses already counted as a workspace


def cublas_workspace_sizes(capability: tuple[int, int]) -> set[int]:
    """Requested sizes (bytes) of cuBLAS's and cuBLASLt's workspaces on a device of ``capability``."""
    cfg = os.environ.get("CUBLAS_WORKSPACE_CONFIG") or (":4096:8" if capability >= (9, 0) else ":4096:2:16:8")
    pairs = re.findall(r":(\d+):(\d+)", cfg)
    main = sum(int(kib) * 1024 * int(n) for kib, n in pairs) if pairs else 0
    lt = int(os.environ.get("CUBLASLT_WORKSPACE_SIZE", "1024")) * 1024
    return {s for s in (main, lt) if s > 0}


def _workspace_blocks(device: int) -> dict[int, int]:
    """Active blocks on ``device`` of a cuBLAS workspace's requested size: address -> bytes."""
    sizes = cublas_workspace_sizes(torch.cuda.get_device_capability(device))
    found = {}
    for seg in torch.cuda.memory._snapshot(device)["segments"]:
        if seg.get("device", device) != device:
            continue
        for b in seg.get("blocks", ()):
            if b.get("state") == "active_allocated" and b.get("requested_size") in sizes:
                found[int(b["address"])] = int(b["requested_size"])
    return found


def cublas_workspaces(device: int) -> list[int]:
    """Sizes (bytes) of the cuBLAS and cuBLASLt workspaces alive on ``device`` now: active blocks of
    their sizes that back no live tensor (what ``%vram`` would otherwise call held by no name)."""
    found = _workspace_blocks(device)
    if not found:
        return []
    tensors = _tensor_addresses()
    return [s for a, s in found.items() if a not in tensors]


def _tensor_addresses() -> set[int]:
    tensors = set()  # the data of every live tensor
    for t in live_tensors():
        for _, st in storages_of_tensor(t):
            try:
                tensors.add(st.data_ptr())
            except Exception:  # noqa: BLE001 - meta and fake storages
                continue
    return tensors


def new_workspaces(device: int) -> list[int]:
    """Sizes of cuBLAS workspaces that appeared on ``device`` since the last call."""
    found = _workspace_blocks(device)
    seen = _SEEN.setdefault(device, set())
    fresh = {a: s for a, s in found.items() if a not in seen}
    if not fresh:
        return []
    tensors = _tensor_addresses()  # only when a block of a workspace's size appeared
    out = [s for a, s in fresh.items() if a not in tensors]
    seen.update(a for a in fresh if a not in tensors)
    return out


def workspace_note(sizes: list[int]) -> str | None:
    """The report line for the workspaces in ``sizes`` (bytes), else ``None``."""
    if not sizes:
        return None
    parts = " + ".join(format_bytes(s) for s in sorted(sizes, reverse=True))
    return (f"{format_bytes(sum(sizes))} of this is cuBLAS's workspace"
            + (f" ({parts})" if len(sizes) > 1 else "")
            + ": taken by the first matrix multiply on a thread and kept for the process, a one-time cost, "
              "not this cell's leak")


def outside_growth(before: int | None, after: int | None) -> str | None:
    """The report line for device memory outside PyTorch's allocator that grew from
    ``before`` to ``after`` bytes during a cell (by at least :data:`OUTSIDE_MIN`), else ``None``."""
    if before is None or after is None or after - before < OUTSIDE_MIN:
        return None
    return (f"device memory outside PyTorch grew by {format_bytes(after - before)}: CUDA loaded the kernels and "
            "library handles this cell used for the first time (lazy module loading, cuFFT/cuSOLVER/cuDNN "
            "handles), a one-time cost kept for the process, not this cell's leak (or another process on this "
            "GPU allocated meanwhile: nvidia-smi shows)")
