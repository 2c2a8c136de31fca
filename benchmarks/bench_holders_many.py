"""``%vram`` (the holders listing) with many live tensors, CPU.

Issue 28, item 16: 8.1 s at 1e6 live tensors on a quiet 2-core host. Run from the repository
root: ``PYTHONPATH=. python benchmarks/bench_holders_many.py [N ...] [--profile]``. It prints
the seconds of ``%vram`` (best of 3) for N small tensors in one list, and in N/1000 lists.
"""

import cProfile
import os
import pstats
import sys
import time

import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output


def main() -> None:
    sizes = [int(float(a)) for a in sys.argv[1:] if not a.startswith("--")] or [10**4, 10**5, 10**6]
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "vramnb")
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, load average {os.getloadavg()}")
    for n in sizes:
        for layout in ("one list", "lists of 1000"):
            shell.user_ns.clear()
            ts = [torch.zeros(1) for _ in range(n)]
            shell.user_ns["ts"] = ts if layout == "one list" else [ts[i:i + 1000] for i in range(0, n, 1000)]
            del ts
            shell.run_line_magic("vram", "")  # the first one's full scan registers them
            best = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                with capture_output():
                    shell.run_line_magic("vram", "")
                best = min(best, time.perf_counter() - t)
            print(f"{n:>9} tensors ({layout}): %vram {best:.3f} s (best of 3)")
            if "--profile" in sys.argv:
                pr = cProfile.Profile()
                pr.enable()
                with capture_output():
                    shell.run_line_magic("vram", "")
                pr.disable()
                pstats.Stats(pr).sort_stats("cumulative").print_stats(25)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
