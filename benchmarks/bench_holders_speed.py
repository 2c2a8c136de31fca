"""``%vram`` (the holders listing) with many live tensors, CPU: median and minimum of 3 runs.

Issue 28, item 16: 8.1 s at 1e6 live tensors on a quiet 2-core host; goal <= 1 s. Run from the
repository root (or with ``PYTHONPATH`` naming the vramnb to time):
``PYTHONPATH=. python benchmarks/bench_holders_speed.py [N ...] [--layouts one,1000] [--profile N]``.
Each N builds N one-element float tensors (``torch.zeros(1)``) kept in one list (``one``) or in
N/1000 lists of 1000 (``1000``), runs ``%vram`` once (its first full scan registers them), then
times 3 more ``%vram`` calls and prints the median and the minimum in seconds, with the numbers
``%vram`` reported (so a change that alters them shows). ``--profile N`` prints a cProfile of one
``%vram`` at N tensors instead.
"""

import cProfile
import os
import pstats
import statistics
import sys
import time

import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output


def _build(shell, n: int, layout: str) -> None:
    shell.user_ns.pop("ts", None)
    ts = [torch.zeros(1) for _ in range(n)]
    shell.user_ns["ts"] = ts if layout == "one" else [ts[i:i + 1000] for i in range(0, n, 1000)]


def main() -> None:
    args = sys.argv[1:]
    layouts = ["one", "1000"]
    if "--layouts" in args:
        layouts = args[args.index("--layouts") + 1].split(",")
    prof = int(float(args[args.index("--profile") + 1])) if "--profile" in args else None
    sizes = [int(float(a)) for a in args if a[:1].isdigit() and a != str(prof)] or [10**4, 10**5, 10**6]
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "vramnb")
    import vramnb

    print(f"vramnb from {os.path.dirname(vramnb.__file__)}; torch {torch.__version__}; {os.cpu_count()} cores; "
          f"load average {os.getloadavg()}", flush=True)
    if prof is not None:
        _build(shell, prof, layouts[0])
        with capture_output():
            shell.run_line_magic("vram", "-d cpu")
        pr = cProfile.Profile()
        pr.enable()
        with capture_output():
            shell.run_line_magic("vram", "-d cpu")
        pr.disable()
        pstats.Stats(pr).sort_stats("cumulative").print_stats(40)
        pstats.Stats(pr).sort_stats("tottime").print_stats(25)
        return
    for n in sizes:
        for layout in layouts:
            _build(shell, n, layout)
            with capture_output():
                shell.run_line_magic("vram", "-d cpu")  # the first one's full scan registers them
            times = []
            for _ in range(3):
                t = time.perf_counter()
                with capture_output():
                    rep = shell.run_line_magic("vram", "-d cpu")
                times.append(time.perf_counter() - t)
            rows = [(h.name, h.nbytes, h.unique) for h in rep.holders][:3]
            print(f"{n:>9} tensors ({layout:>4}): median {statistics.median(times):.3f} s, min {min(times):.3f} s "
                  f"(runs {', '.join(f'{x:.3f}' for x in times)}); total {rep.total} B; first rows {rows}; "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
            shell.user_ns.pop("ts", None)
            del rep


if __name__ == "__main__":
    main()
