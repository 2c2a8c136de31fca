"""The versions a measurement was made with, so that numbers from two machines compare.

Read once per device and cached: torch, its CUDA build, the GPU's name (once CUDA is
initialised: asking earlier would create the context), Python, IPython (if loaded).
"""

from __future__ import annotations

import platform
import sys
from typing import Any

import torch

__all__ = ["versions"]

_CACHE: dict[str, dict[str, str]] = {}


def versions(device: Any = "cpu") -> dict[str, str]:
    """``{"vramnb", "torch", "cuda", "gpu", "python", "ipython"}`` for ``device`` (a ``torch.device``
    or its name); ``cuda`` and ``gpu`` are absent on a CPU device, ``ipython`` outside IPython."""
    dev = torch.device(device)
    key = str(dev)
    if key in _CACHE:
        out = dict(_CACHE[key])
    else:
        from . import __version__

        out = {"vramnb": __version__, "torch": torch.__version__, "python": platform.python_version()}
        if dev.type == "cuda":
            out["cuda"] = str(torch.version.cuda)
        # the GPU's name only once CUDA is initialised: asking would create the context
        if dev.type != "cuda" or torch.cuda.is_initialized():
            if dev.type == "cuda":
                try:
                    out["gpu"] = torch.cuda.get_device_name(dev.index or 0)
                except Exception:  # noqa: BLE001
                    pass
            _CACHE[key] = dict(out)
    ipython = sys.modules.get("IPython")  # loaded or not by now: not cached
    if ipython is not None and getattr(ipython, "__version__", None):
        out["ipython"] = ipython.__version__
    return out
