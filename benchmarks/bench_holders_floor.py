"""The floor under ``%vram`` at many live tensors (issue 28 item 16): what each step the exact
listing cannot skip costs per tensor on this host, timed alone (process CPU time, best of 3).

Run: ``PYTHONPATH=. python benchmarks/bench_holders_floor.py [N]`` (default 1e6). It builds N
one-element float tensors in one list, registers them with the CPU tracker as ``%vram`` does
(so each has its preserved storage object and its registry entry, as in a notebook), then times
each C-level pass over them that the full scan (``StorageTracker._unknown``) and the listing
(``_holders._plain_storages_on``, the name's ``{storage key: bytes}`` dict, the data-range sort)
make, and prints the sum of those the scan needs and of those the listing needs.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable
from operator import attrgetter
from typing import Any

import torch

from vramnb._storages import RangeLog, _live_tensors_and_storages
from vramnb._tracker import cpu_tracker


def best(fn: Callable[[], Any], reps: int = 3) -> float:
    out = float("inf")
    for _ in range(reps):
        t = time.process_time()
        fn()
        out = min(out, time.process_time() - t)
    return out


def main() -> None:
    n = int(float(sys.argv[1])) if len(sys.argv) > 1 else 10**6
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"torch {torch.__version__}; {os.cpu_count()} cores; load average {load}; {n} tensors")
    ts = [torch.zeros(1) for _ in range(n)]
    tr = cpu_tracker()
    tr.stale = True
    tr.scan()
    tr.stale = True
    tr.scan()  # (verified)
    gc.collect()
    sts = list(map(torch.Tensor.untyped_storage, ts))
    keys = list(map(attrgetter("_cdata"), sts))
    sizes = list(map(torch.UntypedStorage.nbytes, sts))
    starts = list(map(torch.UntypedStorage.data_ptr, sts))
    get = tr._verified.get
    rows: list[tuple[str, str, float]] = []

    def step(part: str, label: str, fn: Callable[[], Any]) -> None:
        s = best(fn)
        rows.append((part, label, s))
        print(f"{part:8s} {label:58s} {s:7.3f} s  {s / n * 1e9:6.0f} ns/tensor", flush=True)

    step("scan", f"gc.get_objects() ({len(gc.get_objects())} objects) + type filter",
         _live_tensors_and_storages)
    step("scan", "type of each tensor (set)", lambda: set(map(type, ts)))
    for a in ("requires_grad", "is_nested", "is_quantized"):
        g = attrgetter(a)
        step("scan", f"tensor.{a}", lambda g=g: any(map(g, ts)))
    step("scan", "tensor.layout", lambda: list(map(attrgetter("layout"), ts)).count(torch.strided))
    step("scan", "tensor.untyped_storage() (preserved object)", lambda: list(map(torch.Tensor.untyped_storage, ts)))
    step("scan", "storage._cdata (its key)", lambda: list(map(attrgetter("_cdata"), sts)))
    step("scan", "the registry's verified (address, size) by key", lambda: list(map(get, keys)))
    step("scan", "storage.data_ptr() and nbytes() as pairs", lambda: list(zip(
        map(torch.UntypedStorage.data_ptr, sts), map(torch.UntypedStorage.nbytes, sts))))
    was = list(map(get, keys))
    now = list(zip(starts, sizes))
    step("scan", "compare the pairs", lambda: now == was)
    step("listing", "tensor.is_leaf and .grad (plain_leaves)", lambda: (
        all(map(attrgetter("is_leaf"), ts)), list(map(attrgetter("grad"), ts)).count(None)))
    step("listing", "the name's {key: bytes} dict", lambda: {}.update(zip(keys, sizes)))
    log = RangeLog()
    log.extend(keys, starts, sizes)
    step("listing", "data ranges sorted (same_memory)", log.same_memory)
    for part in ("scan", "listing"):
        print(f"sum of the {part}'s steps: {sum(s for p, _, s in rows if p == part):.3f} s")


if __name__ == "__main__":
    main()
