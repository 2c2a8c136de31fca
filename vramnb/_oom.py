"""Recognise out-of-memory errors and the size they asked for."""

from __future__ import annotations

import re

import torch

from ._units import UNITS

__all__ = ["is_oom", "message", "requested_bytes"]

# "CUDA out of memory. Tried to allocate 20.00 GiB." (c10/cuda/CUDACachingAllocator.cpp)
_CUDA_RE = re.compile(r"Tried to allocate ([0-9.]+) ?(B|KiB|MiB|GiB|TiB)")
# "DefaultCPUAllocator: can't allocate memory: you tried to allocate 1099511627776 bytes." (c10/core/impl/alloc_cpu.cpp)
_CPU_RE = re.compile(r"you tried to allocate (\d+) bytes")
_SCALE = dict(UNITS)


def message(exc: BaseException) -> str:
    """``str(exc)``, or ``""`` when the exception's own ``__str__`` raises (a user's
    exception class): reading the message must never replace the user's error."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001
        return ""


def is_oom(exc: BaseException) -> bool:
    """True for ``torch.OutOfMemoryError`` (CUDA) and the CPU allocator's
    "can't allocate memory" ``RuntimeError``."""
    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(oom_type, type) and isinstance(exc, oom_type):
        return True
    if not isinstance(exc, RuntimeError):
        return False
    msg = message(exc)
    return "out of memory" in msg or "can't allocate memory" in msg


def requested_bytes(exc: BaseException) -> int | None:
    """Bytes the failed allocation asked for, read from the error message.

    Exact for the CPU allocator; for CUDA the message rounds to two decimals of
    its unit (e.g. ``20.00 GiB``). ``None`` if the message does not say.
    """
    msg = message(exc)
    m = _CPU_RE.search(msg)
    if m:
        return int(m.group(1))
    m = _CUDA_RE.search(msg)
    if m:
        return int(float(m.group(1)) * _SCALE[m.group(2)])
    return None
