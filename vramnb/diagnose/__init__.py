"""Diagnosis: why memory ran out, and what to do.

The out-of-memory post-mortem is two steps, data flowing one way:

1. :mod:`._postmortem` takes the state at the failure itself, before the
   exception unwinds anything: on CUDA from the caching allocator's
   out-of-memory observer (``torch._C._cuda_attach_out_of_memory_observer``,
   called inside the failed ``malloc`` after the allocator already freed its
   cache and retried), on CPU from the storage tracker's dispatch mode, where the
   failing operator raises. Only while a measurement (``%%vram``, ``%vram on``,
   ``vramnb.vram()``) runs, and never holding a reference to what it saw;
2. :mod:`._verdict` reads that state (plain bytes) and gives one verdict:
   fragmentation, a per-process cap, another process, memory held out of sight,
   or capacity, each with the fixes that apply, as lines of code.

The cell report (:class:`vramnb._report.CellReport`) shows both. :mod:`._cell_verdicts`
reads a cell's own numbers: reserved memory that grew as a cache, and a cell whose
re-runs each leave the same bytes more, with the variable that grew.
"""

from ._cell_verdicts import Regrowth, reserved_growth
from ._postmortem import OOMState, capture_cpu_oom, install_cuda_observer
from ._verdict import Fix, Verdict, verdict

__all__ = ["OOMState", "Verdict", "Fix", "verdict", "install_cuda_observer", "capture_cpu_oom", "reserved_growth",
           "Regrowth"]
