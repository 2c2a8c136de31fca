"""A/B of the full rescan (StorageTracker.scan(full=True)) with N known tensors, interleaved in one
process: the one-pass skip of known storages (after) against one add_tensor per object (before,
``_unknown`` replaced by the identity). ``PYTHONPATH=. python benchmarks/bench_scan_ab.py [N ...]``"""

import gc
import json
import os
import sys
import time

import torch

from vramnb._tracker import StorageTracker


def main() -> None:
    sizes = [int(float(a)) for a in sys.argv[1:]] or [10**4, 10**5, 10**6]
    out = {"torch": torch.__version__, "cores": os.cpu_count(), "load_before": os.getloadavg(), "runs": []}
    for n in sizes:
        ts = [torch.zeros(1) for _ in range(n)]
        gc.collect()
        tr = StorageTracker("cpu")
        tr.scan(full=True)
        fast = tr._unknown
        best = {"before": float("inf"), "after": float("inf")}
        for _ in range(3):
            for name in ("before", "after"):
                tr._unknown = fast if name == "after" else (lambda objs: [objs.pop() for _ in range(len(objs))][::-1])
                t = time.perf_counter()
                tr.scan(full=True)
                best[name] = min(best[name], time.perf_counter() - t)
        print(f"{n:>9} tensors: full rescan before {best['before']:.3f} s, after {best['after']:.3f} s (best of 3)")
        out["runs"].append({"tensors": n, "before_s": best["before"], "after_s": best["after"]})
        del ts, tr
    out["load_after"] = os.getloadavg()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
