"""Whether a forked rank can use CUDA, and what a CPU rank does when it cannot.

Once a process has started the CUDA driver (``cuInit``), a child it forks cannot start it again: every
CUDA runtime call there fails with ``CUDA error: initialization error``. ``torch.cuda.is_available()``
starts the driver (it calls ``cudaGetDeviceCount``; PyTorch's note on fork poisoning, and
pytorch/pytorch#144152 for ``torch.device(0)``), so on a GPU machine a notebook that asked that once
forks ranks that cannot touch CUDA. CPU ranks (``gloo``) meet it anyway: torch's own optimizers ask
whether the current CUDA stream is capturing a graph (``Optimizer._accelerator_graph_capture_health_check``
when ``torch.accelerator.is_available()``), and that call fails in such a child.

:func:`driver_started_here` finds out without touching this process: a throwaway forked child calls the
driver's ``cuInit(0)`` through ``ctypes`` and exits. :func:`cuda_unavailable_in_this_child` is then called
in each forked CPU rank, where it makes ``torch.cuda.is_available()`` say what is true there (False).
"""

from __future__ import annotations

import ctypes
import os
import warnings

__all__ = ["driver_started_here", "cuda_unavailable_in_this_child", "NOTE"]

#: the line a report carries when its forked CPU ranks were told CUDA is unavailable
NOTE = ("this process had started the CUDA driver before the ranks were forked (torch.cuda.is_available() starts it, "
        "as does any CUDA call), and a forked child cannot start it again: in each rank torch.cuda.is_available() "
        "returned False, so CPU code that asks (torch's optimizers check for CUDA graph capture) ran. For ranks on "
        "CUDA: backend='nccl' with start_method='spawn', or a fresh kernel whose first CUDA use is inside train_fn")


def driver_started_here() -> bool:
    """Whether a child forked from this process now would fail to start the CUDA driver.

    Returns ``False`` where there is no driver library (``libcuda.so.1``) to ask or no ``os.fork``. Costs a
    fork and, where the driver was not started here, one ``cuInit`` in the child (no CUDA context is made:
    ``cuInit`` creates none), on the order of 0.1 s; this process's CUDA state is not touched.
    """
    if not hasattr(os, "fork"):
        return False
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "this process is multi-threaded": the child only calls cuInit
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's exit code is the answer
        try:
            code = int(driver.cuInit(0))
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(0 if code == 0 else 1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) != 0


def _unavailable() -> bool:
    """``torch.cuda.is_available`` in a forked CPU rank whose parent had started the driver: False (this child
    cannot start it)."""
    return False


def cuda_unavailable_in_this_child() -> None:
    """In a forked CPU rank (this process only, which ends with the rank): ``torch.cuda.is_available()``
    returns False, as CUDA cannot be used here; ``torch.accelerator.is_available()`` follows it."""
    import torch

    torch.cuda.is_available = _unavailable
