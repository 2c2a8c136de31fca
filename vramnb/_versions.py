"""The versions a measurement was made with, so that numbers from two machines compare.

Read once per device and cached: torch, its CUDA build, the GPU's name (only for a
CUDA device being measured, whose context already exists), Python, IPython (if loaded).
"""

from __future__ import annotations

import platform
import sys
from typing import Any

import torch

__all__ = ["versions"]

_CACHE: dict[str, dict[str, str]] = {}


def versions(device: Any = "cpu") -> dict[str, str]:
    """``{"torch", "cuda", "gpu", "python", "ipython"}`` for ``device`` (a ``torch.device``
    or its name); ``cuda`` and ``gpu`` are absent on a CPU device, ``ipython`` outside IPython."""
    dev = torch.device(device)
    key = str(dev)
    if key not in _CACHE:
        out = {"torch": torch.__version__, "python": platform.python_version()}
        if dev.type == "cuda":
            out["cuda"] = str(torch.version.cuda)
            try:
                out["gpu"] = torch.cuda.get_device_name(dev.index or 0)
            except Exception:  # noqa: BLE001
                pass
        _CACHE[key] = out
    out = dict(_CACHE[key])
    ipython = sys.modules.get("IPython")  # loaded or not by now: not cached
    if ipython is not None and getattr(ipython, "__version__", None):
        out["ipython"] = ipython.__version__
    return out
