"""Probes: read a device's memory counters now, without side effects.

* :class:`CudaProbe` reads the CUDA caching allocator (``torch.cuda.memory_stats``'s
  counters) after ``torch.cuda.synchronize``. It never creates the CUDA context:
  until the user's code has initialised CUDA, every counter is 0 and nothing
  is called.
* :class:`CpuProbe` reads the exact storage tracker (:mod:`vramnb._tracker`).

Both expose the same small interface, used by :mod:`vramnb._measure`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ._tracker import StorageTracker, cpu_tracker

__all__ = ["Sample", "resolve_device", "CudaProbe", "CpuProbe", "probe_for"]


@dataclass
class Sample:
    """Memory counters of one device at one instant (bytes).

    ``reserved``, ``non_pytorch``, ``total`` and ``free`` are ``None`` where the
    device cannot report them (reserved on CPU; non-PyTorch memory before a
    CUDA context exists).
    """

    allocated: int
    peak: int
    reserved: int | None = None
    non_pytorch: int | None = None
    total: int | None = None
    free: int | None = None


def resolve_device(spec: str | int | torch.device | None = None) -> torch.device:
    """The device to measure.

    Args:
        spec: ``None`` (the current CUDA device if CUDA is available, else CPU),
            ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or an index ``N``.

    Raises:
        ValueError: an unknown device type, CUDA asked for where none is
            available, or an index out of range. The message lists the valid
            choices.
    """
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    valid = ", ".join(["cpu"] + (["cuda"] + [f"cuda:{i}" for i in range(n)] if n else []))
    if spec is None:
        if n == 0:
            return torch.device("cpu")
        # current_device() would create the CUDA context; before that it is 0.
        idx = torch.cuda.current_device() if torch.cuda.is_initialized() else 0
        return torch.device("cuda", idx)
    if isinstance(spec, int) and not isinstance(spec, bool):
        spec = f"cuda:{spec}"
    try:
        dev = torch.device(spec)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {spec!r}; valid devices here: {valid}") from None
    if dev.type == "cpu":
        if dev.index not in (None, 0):
            raise ValueError(f"device {spec!r}: there is one CPU device, 'cpu'; valid devices here: {valid}")
        return torch.device("cpu")
    if dev.type != "cuda":
        raise ValueError(f"vramnb measures CPU and CUDA devices, not {dev.type!r}; valid devices here: {valid}")
    if n == 0:
        why = "this PyTorch build has no CUDA support" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise ValueError(f"device {spec!r} asked for, but {why}; valid devices here: {valid}")
    idx = dev.index if dev.index is not None else (torch.cuda.current_device() if torch.cuda.is_initialized() else 0)
    if not 0 <= idx < n:
        raise ValueError(f"device {spec!r} is out of range: {n} CUDA device(s) here; valid devices: {valid}")
    return torch.device("cuda", idx)


def _public_stats(idx: int) -> tuple[int, int, int]:
    """(allocated, peak allocated, reserved) through the public API."""
    s = torch.cuda.memory_stats(idx)
    return (
        s.get("allocated_bytes.all.current", 0),
        s.get("allocated_bytes.all.peak", 0),
        s.get("reserved_bytes.all.current", 0),
    )


def _raw_stats(idx: int) -> tuple[int, int, int]:
    """The same three counters from the C binding behind ``torch.cuda.memory_stats``,
    skipping the Python flattening that is most of that call's cost."""
    s = torch._C._cuda_memoryStats(idx)
    a, r = s["allocated_bytes"]["all"], s["reserved_bytes"]["all"]
    return a["current"], a["peak"], r["current"]


class CudaProbe:
    """Counters of one CUDA device, from the caching allocator."""

    method = "CUDA caching allocator"

    def __init__(self, index: int) -> None:
        self.index = index
        self.device = f"cuda:{index}"
        self._read = _raw_stats if hasattr(torch._C, "_cuda_memoryStats") else _public_stats

    @staticmethod
    def active() -> bool:
        """Whether the CUDA context exists (reading counters is free of side effects)."""
        return torch.cuda.is_initialized()

    def sample(self, *, device_info: bool = True, sync: bool = True) -> Sample:
        """Read allocated, peak, reserved (after ``torch.cuda.synchronize``
        unless ``sync=False``: the allocator's counters are kept on the host
        in launch order, so they are right without it); with ``device_info``,
        also the device's total and free memory (``cudaMemGetInfo``)."""
        if not self.active():
            return Sample(0, 0, 0)
        if sync:
            torch.cuda.synchronize(self.index)
        try:
            alloc, peak, reserved = self._read(self.index)
        except (KeyError, TypeError, AttributeError):  # the private binding changed shape
            self._read = _public_stats
            alloc, peak, reserved = self._read(self.index)
        sample = Sample(alloc, peak, reserved)
        if device_info:
            free, total = torch.cuda.mem_get_info(self.index)
            sample.total, sample.free = total, free
            sample.non_pytorch = max(0, total - free - reserved)
        return sample

    def reset_peak(self) -> None:
        if self.active():
            torch.cuda.reset_peak_memory_stats(self.index)


def _host_memory() -> tuple[int | None, int | None]:
    """(total, available) bytes of host RAM, from sysconf and /proc/meminfo."""
    total = avail = None
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    return total, avail


class CpuProbe:
    """Counters of CPU memory held by tensor storages, from the exact tracker."""

    method = "CPU storage tracker"

    def __init__(self, tracker: StorageTracker | None = None) -> None:
        self.tracker = tracker or cpu_tracker()
        self.device = "cpu"

    @staticmethod
    def active() -> bool:
        return True

    def sample(self, *, device_info: bool = True, sync: bool = True) -> Sample:
        t = self.tracker
        t.settle()  # a failed operator's frames let go first, as its C++ call would have
        sample = Sample(t.current, t.peak)
        if device_info:
            sample.total, sample.free = _host_memory()
        return sample

    def reset_peak(self) -> None:
        self.tracker.reset_peak()


def probe_for(device: torch.device) -> CudaProbe | CpuProbe:
    """The probe for a resolved device."""
    if device.type == "cuda":
        return CudaProbe(device.index or 0)
    return CpuProbe()
