"""Memory of common GPUs, for "what fits on ...". Pure standard library.

Sizes are the memory ``nvidia-smi`` reports as total on the card (MiB), where
known, else the vendor's nominal figure in GiB; what PyTorch can use is that
minus the CUDA context (about 0.5 GiB, more with cuDNN/cuBLAS loaded).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .._units import parse_size

__all__ = ["GPUS", "CAPABILITY", "MULTIPROCESSORS", "gpu_memory", "gpu_name", "Target", "resolve_target"]

MiB, GiB = 1 << 20, 1 << 30

#: name -> total device memory in bytes
GPUS: dict[str, int] = {
    "T4 (16 GB)": 15360 * MiB,
    "RTX 3060 (12 GB)": 12288 * MiB,
    "RTX 3090 (24 GB)": 24576 * MiB,
    "RTX 4090 (24 GB)": 24564 * MiB,
    "A10 (24 GB)": 23028 * MiB,
    "L4 (24 GB)": 23034 * MiB,
    "V100 (16 GB)": 16384 * MiB,
    "V100 (32 GB)": 32768 * MiB,
    "A100 (40 GB)": 40960 * MiB,
    "A100 (80 GB)": 81920 * MiB,
    "L40S (48 GB)": 46068 * MiB,
    "RTX A6000 (48 GB)": 49140 * MiB,
    "H100 (80 GB)": 81559 * MiB,
    "H200 (141 GB)": 143771 * MiB,
}


#: name -> CUDA compute capability (NVIDIA's CUDA GPUs table)
CAPABILITY: dict[str, tuple[int, int]] = {
    "T4 (16 GB)": (7, 5), "RTX 3060 (12 GB)": (8, 6), "RTX 3090 (24 GB)": (8, 6), "RTX 4090 (24 GB)": (8, 9),
    "A10 (24 GB)": (8, 6), "L4 (24 GB)": (8, 9), "V100 (16 GB)": (7, 0), "V100 (32 GB)": (7, 0),
    "A100 (40 GB)": (8, 0), "A100 (80 GB)": (8, 0), "L40S (48 GB)": (8, 9), "RTX A6000 (48 GB)": (8, 6),
    "H100 (80 GB)": (9, 0), "H200 (141 GB)": (9, 0),
}


#: name -> (streaming multiprocessors, resident threads per multiprocessor), from NVIDIA's
#: specifications (what ``torch.cuda.get_device_properties`` reports as
#: ``multi_processor_count`` and ``max_threads_per_multi_processor``); they size the
#: staging buffers of PyTorch's CUDA reductions (``Reduce.cuh``)
MULTIPROCESSORS: dict[str, tuple[int, int]] = {
    "T4 (16 GB)": (40, 1024), "RTX 3060 (12 GB)": (28, 1536), "RTX 3090 (24 GB)": (82, 1536),
    "RTX 4090 (24 GB)": (128, 1536), "A10 (24 GB)": (72, 1536), "L4 (24 GB)": (58, 1536),
    "V100 (16 GB)": (80, 2048), "V100 (32 GB)": (80, 2048), "A100 (40 GB)": (108, 2048),
    "A100 (80 GB)": (108, 2048), "L40S (48 GB)": (142, 1536), "RTX A6000 (48 GB)": (84, 1536),
    "H100 (80 GB)": (132, 2048), "H200 (141 GB)": (132, 2048),
}


def gpu_name(target: str | int) -> str | None:
    """The :data:`GPUS` name ``target`` refers to, or ``None`` (a size, or unknown)."""
    if isinstance(target, int):
        return None
    text = str(target).strip().lower()
    for name in GPUS:
        if text in (name.lower(), name.split(" (")[0].lower()):
            return name
    if any(c.isdigit() for c in text):
        for name in GPUS:  # "4090" for "RTX 4090 (24 GB)": a word of the card's name that has a number
            if text in name.split(" (")[0].lower().split():
                return name
    return None


def _plausible(size: int, given: object) -> int:
    if size < 64 * MiB:
        raise ValueError(f"{given!r} is {size} bytes, too small for a GPU: give units (e.g. '24GB', '24GiB') "
                         f"or a card name ({', '.join(dict.fromkeys(n.split(' (')[0] for n in GPUS))})")
    return size


def gpu_memory(target: str | int) -> int:
    """Bytes of a target card: a name from :data:`GPUS` (case-insensitive,
    "H100" matches "H100 (80 GB)", "4090" matches "RTX 4090 (24 GB)"; "A100"
    and "V100" are their first, smaller, entries), or a size (``"24GiB"``;
    an ``int`` is bytes).

    Raises:
        ValueError: an unknown name (the message lists the known cards) or a
            size that is not positive.
    """
    if isinstance(target, (int, float)) and not isinstance(target, bool):
        if target != target or target in (float("inf"), float("-inf")):
            raise ValueError(f"invalid card size {target!r}")
        if target <= 0:
            raise ValueError(f"invalid card size {target!r}: a memory size must be positive")
        return _plausible(int(target), target)
    text = str(target).strip()
    name = gpu_name(text)
    if name is not None:
        return GPUS[name]
    try:
        return _plausible(parse_size(text), target)
    except ValueError:
        if text[:1].isdigit() or text[:1] in "-+.":
            raise  # a size, but not a valid one: parse_size says why
        raise ValueError(f"unknown GPU {target!r}; known: {', '.join(GPUS)}; or give a size such as '24GiB'") from None


@dataclass(frozen=True)
class Target:
    """A card to predict for.

    Attributes:
        name: a name from :data:`vramnb.predict._gpus.GPUS`, ``"this GPU"``, or a size as typed.
        memory: total device memory in bytes (what ``nvidia-smi`` shows as total).
        capability: CUDA compute capability (decides attention kernels, workspaces).
        context: bytes outside PyTorch's allocator (CUDA context, libraries).
        assumed: what was assumed rather than known (shown in the report).
        multiprocessors: streaming multiprocessors and resident threads per
            multiprocessor (size the staging buffers of CUDA reductions).
    """

    name: str
    memory: int | None
    capability: tuple[int, int]
    context: int
    assumed: tuple[str, ...] = ()
    multiprocessors: tuple[int, int] = (132, 2048)


def resolve_target(target: Any = None) -> Target:
    """A :class:`Target` from a GPU name, a size (``"24GiB"``, bytes), or ``None``
    (the GPU present, read without creating a CUDA context, else an H100 80 GB).

    Raises:
        ValueError: an unknown GPU name or a size that is not positive (the
            message lists the known cards).
    """
    import torch

    from ._cuda_model import CUDA_CONTEXT

    if target is None:
        here = _present() if torch.cuda.is_available() else None
        if here is not None:
            return here
        target = "H100"
    name = gpu_name(target)
    if name is not None:
        assumed: tuple[str, ...] = () if name.startswith("H200") else ("CUDA context size as measured on an H200",)
        same = [n for n in GPUS if n.split(" (")[0] == name.split(" (")[0]]
        if len(same) > 1 and str(target).strip().lower() != name.lower():
            assumed += (f"{target!r} taken as the {name}; also: {', '.join(n for n in same if n != name)}",)
        return Target(name, GPUS[name], CAPABILITY[name], _context(name), assumed, MULTIPROCESSORS[name])
    memory = gpu_memory(target)  # raises ValueError listing the cards
    return Target(str(target), memory, (9, 0), CUDA_CONTEXT["default"],
                  ("compute capability 9.0 and an H200's 132 multiprocessors (give a card's name to choose "
                   "its kernels)", "CUDA context size as measured on an H200"))


def _nvml() -> tuple[str, int, tuple[int, int]] | None:
    """CUDA device 0's name, total memory (bytes, as ``nvidia-smi`` and :data:`GPUS` give it) and
    compute capability, read through NVML, which creates no CUDA context; ``None`` where NVML
    cannot say."""
    import ctypes

    import torch

    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if lib.nvmlInit_v2() != 0:
        return None
    try:
        index = torch.cuda._get_nvml_device_index(0)  # CUDA_VISIBLE_DEVICES's order (indices or UUIDs)

        class Memory(ctypes.Structure):
            _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

        handle, name, mem = ctypes.c_void_p(), ctypes.create_string_buffer(96), Memory()
        major, minor = ctypes.c_int(), ctypes.c_int()
        if (lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle))
                or lib.nvmlDeviceGetName(handle, name, ctypes.c_uint(96))
                or lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem))
                or lib.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor))):
            return None
        return name.value.decode(), int(mem.total), (major.value, minor.value)
    except Exception:  # noqa: BLE001 - no NVML answer: the caller says what it assumed
        return None
    finally:
        lib.nvmlShutdown()


def _present() -> Target | None:
    """The GPU present (CUDA device 0) as a target, without creating a CUDA context: where this
    process has initialised CUDA, PyTorch's properties of it; else its name, total memory (as
    ``nvidia-smi`` gives it, like :data:`GPUS`; PyTorch's total is a little less, 615 MiB on an
    H200) and capability from NVML, its multiprocessors from :data:`MULTIPROCESSORS`. ``None``
    where neither can say."""
    import torch

    props = torch.cuda.get_device_properties(0) if torch.cuda.is_initialized() else None
    read = _nvml() if props is None else (props.name, props.total_memory, (props.major, props.minor))
    if read is None:
        return None
    name, memory, capability = read
    # "NVIDIA H200", "NVIDIA A100-SXM4-80GB": the first word with a digit that names a card of GPUS
    known = next((k for w in re.split(r"[\s_-]+", name) if any(c.isdigit() for c in w)
                  for k in [gpu_name(w)] if k is not None), None)
    assumed: tuple[str, ...] = ()
    if props is not None:
        multiprocessors = (props.multi_processor_count, props.max_threads_per_multi_processor)
    elif known is not None:
        multiprocessors = MULTIPROCESSORS[known]
    else:
        multiprocessors = (132, 2048)
        assumed = (f"an H200's 132 multiprocessors for the {name} (this process has not initialised CUDA to "
                   "read them)",)
    return Target(f"this GPU ({name})", memory, capability, _context(name), assumed, multiprocessors)


def _context(name: str) -> int:
    from ._cuda_model import CUDA_CONTEXT

    for key, val in CUDA_CONTEXT.items():
        if key.lower() in name.lower():
            return val
    return CUDA_CONTEXT["default"]
