"""Memory of common GPUs, for "what fits on ...". Pure standard library.

Sizes are the memory ``nvidia-smi`` reports as total on the card (MiB), where
known, else the vendor's nominal figure in GiB; what PyTorch can use is that
minus the CUDA context (about 0.5 GiB, more with cuDNN/cuBLAS loaded).
"""

from __future__ import annotations

from ._units import parse_size

__all__ = ["GPUS", "gpu_memory"]

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


def gpu_memory(target: str | int) -> int:
    """Bytes of a target card: a name from :data:`GPUS` (case-insensitive,
    "H100" matches "H100 (80 GB)"), or a size (``"24GiB"``, bytes).

    Raises:
        ValueError: an unknown name (the message lists the known cards) or a
            size that is not positive.
    """
    if isinstance(target, int) and not isinstance(target, bool):
        return parse_size(target)
    text = str(target).strip()
    for name, size in GPUS.items():
        if text.lower() in (name.lower(), name.split(" (")[0].lower()):
            return size
    try:
        return parse_size(text)
    except ValueError:
        raise ValueError(f"unknown GPU {target!r}; known: {', '.join(GPUS)}; or give a size such as '24GiB'") from None
