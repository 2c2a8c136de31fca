"""``%vram`` (the holders listing) with many live tensors, CPU: best of 3.

Issue 28, item 16. Run from the repository root: ``PYTHONPATH=. python benchmarks/bench_holders_many.py
[N ...] [--profile]``. It prints the seconds of ``%vram`` (best of 3) for N small tensors in one list,
and in N/1000 lists. The notebook state is :func:`bench_holders_speed.build`'s (one builder for both
scripts); ``bench_holders_speed.py`` gives the median too, and the case with a last exception.
"""

import cProfile
import os
import pstats
import sys
import time

import torch
from IPython.utils.capture import capture_output

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_holders_speed import build, load, shell_with_vramnb  # noqa: E402


def main() -> None:
    sizes = [int(float(a)) for a in sys.argv[1:] if not a.startswith("--")] or [10**4, 10**5, 10**6]
    shell = shell_with_vramnb()
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, load average {load():.2f}")
    for n in sizes:
        for layout, label in (("one", "one list"), ("1000", "lists of 1000")):
            build(shell, n, layout)
            with capture_output():
                shell.run_line_magic("vram", "")  # the first one's full scan registers them
            best = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                with capture_output():
                    shell.run_line_magic("vram", "")
                best = min(best, time.perf_counter() - t)
            print(f"{n:>9} tensors ({label}): %vram {best:.3f} s (best of 3)")
            if "--profile" in sys.argv:
                pr = cProfile.Profile()
                pr.enable()
                with capture_output():
                    shell.run_line_magic("vram", "")
                pr.disable()
                pstats.Stats(pr).sort_stats("cumulative").print_stats(25)
    print(f"load average after: {load():.2f}")


if __name__ == "__main__":
    main()
