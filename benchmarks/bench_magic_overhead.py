"""Per-cell overhead of %%vram (CUDA and CPU paths) and the CPU tracker's cost per op.

Run:  python benchmarks/bench_magic_overhead.py [--out results.json]

Compared side by side, in one run and one process:
* ``vram()`` measurement alone (enter + exit on an empty block);
* a whole ``%%vram -q`` cell minus a plain cell (IPython's run_cell cost removed);
* IPython's own ``%%time`` cell minus a plain cell, as a reference magic;
* one ``torch.cuda.memory_stats()`` call (what a naive per-cell reader pays, at least twice);
* ipyexperiments' ``IPyExperimentsPytorch`` cell logger (pre/post_run_cell hooks), if installed.
Times are medians of many repetitions, in microseconds.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time

import torch


def median_us(fn, n: int, warmup: int = 20) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e6


def cell_cost(shell, cell: str, n: int) -> float:
    return median_us(lambda: shell.run_cell(cell, store_history=False, silent=False), n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("-n", type=int, default=400)
    args = ap.parse_args()
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    import vramnb
    from vramnb._tracker import StorageTracker

    shell = InteractiveShell.instance()
    shell.run_cell("%load_ext vramnb")
    shell.run_cell("import torch")
    res: dict = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "gc_objects": len(gc.get_objects()),
    }
    devices = ["cpu"]
    if torch.cuda.is_available():
        torch.ones(1, device="cuda")  # the context exists, as in a real GPU session
        devices.append("cuda:0")
        res["gpu"] = torch.cuda.get_device_name(0)
        res["cuda_memory_stats_call_us"] = median_us(lambda: torch.cuda.memory_stats(0), args.n)
        res["cuda_memory_allocated_call_us"] = median_us(lambda: torch.cuda.memory_allocated(0), args.n)
        res["cuda_synchronize_us"] = median_us(lambda: torch.cuda.synchronize(0), args.n)

    with capture_output():
        plain = cell_cost(shell, "pass", args.n)
        res["plain_cell_us"] = plain
        res["time_magic_extra_us"] = cell_cost(shell, "%%time\npass", args.n) - plain
        for dev in devices:
            key = dev.split(":")[0]

            def measure(dev=dev):
                with vramnb.vram(dev, record=False):
                    pass

            res[f"{key}_vram_measure_us"] = median_us(measure, args.n)
            res[f"{key}_vram_cell_extra_us"] = cell_cost(shell, f"%%vram -q -d {dev}\npass", args.n) - plain
            if dev != "cpu":  # the default device: no options at all, report displayed (and captured)
                res[f"{key}_vram_default_cell_extra_us"] = cell_cost(shell, "%%vram\npass", args.n) - plain
        vramnb.clear_history()

        try:
            from ipyexperiments import IPyExperimentsPytorch  # type: ignore[import-not-found]
        except Exception as e:  # not installed: say so
            res["ipyexperiments"] = f"not installed ({type(e).__name__})"
        else:
            import types

            # it reads the namespace through ipython.kernel.shell; a plain
            # InteractiveShell has no kernel, so give it one pointing back.
            shell.kernel = types.SimpleNamespace(shell=shell)
            exp = IPyExperimentsPytorch(cl_enable=True, cl_compact=True)
            res["ipyexperiments_cell_extra_us"] = cell_cost(shell, "pass", max(50, args.n // 4)) - plain
            del exp

    # CPU tracker: cost per ATen op (small tensors, so dispatch dominates)
    x = torch.ones(16)
    n_ops = 20000

    def ops():
        y = x
        for _ in range(n_ops):
            y = y + 1
        return y

    base = median_us(ops, 5, warmup=1)
    tr = StorageTracker("cpu")
    with tr.tracking():
        tracked = median_us(ops, 5, warmup=1)
    res["cpu_op_us"] = base / n_ops
    res["cpu_tracked_op_us"] = tracked / n_ops
    res["cpu_tracker_cost_per_op_us"] = (tracked - base) / n_ops
    t0 = time.perf_counter()
    tr.scan()
    res["cpu_scan_ms"] = (time.perf_counter() - t0) * 1e3
    print(json.dumps(res, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
