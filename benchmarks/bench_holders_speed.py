"""``%vram`` (the holders listing) with many live tensors, CPU: median and minimum of 3 runs.

Issue 28, item 16: 8.1 s at 1e6 live tensors on a quiet 2-core host; goal <= 1 s. Run from the
repository root (or with ``PYTHONPATH`` naming the vramnb to time):
``PYTHONPATH=. python benchmarks/bench_holders_speed.py [N ...] [--layouts one,1000]
[--exception none,plain,tensor] [--profile N] [--runs R]``.
Each N builds N one-element float tensors (``torch.zeros(1)``, :func:`build`) kept in one list
(``one``) or in N/1000 lists of 1000 (``1000``), with IPython's last exception left by a failed
cell or not (``--exception``: ``none``; ``plain``, a function that raised holding no tensor;
``tensor``, one whose frame holds a 4 MiB tensor, whose frames ``%vram`` must then decide about),
runs ``%vram`` once (its first full scan registers them), then times R (default 3) more ``%vram`` calls and
prints the median and the minimum in seconds (wall clock, and the process's user CPU time from
``resource.getrusage``, less affected by other processes on a loaded host, and its system CPU
time), with the numbers ``%vram`` reported (so a change that alters them shows) and the load
average (``/proc/loadavg``, 1 minute) before and after.
``--profile N`` prints a cProfile of one ``%vram`` at N tensors instead.
"""

from __future__ import annotations

import cProfile
import gc
import os
import pstats
import resource
import statistics
import sys
import time
from typing import Any

import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

_RAISE = {  # the failed cell of each --exception case
    "plain": "def fails():\n    n = 3\n    raise ValueError(n)\nfails()",
    "tensor": "def fails():\n    big = torch.ones(2**20)\n    raise ValueError('x')\nfails()",
}


def load() -> float:
    """The 1-minute load average, from ``/proc/loadavg``."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def shell_with_vramnb() -> Any:
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "vramnb")
    shell.run_cell("import torch")
    return shell


def build(shell: Any, n: int, layout: str, exception: str = "none") -> None:
    """The notebook state timed: ``ts``, ``n`` tensors of 4 bytes in one list (``layout="one"``)
    or in lists of 1000 (``"1000"``), and IPython's last exception (:func:`set_exception`)."""
    shell.user_ns.pop("ts", None)
    ts = [torch.zeros(1) for _ in range(n)]
    shell.user_ns["ts"] = ts if layout == "one" else [ts[i:i + 1000] for i in range(0, n, 1000)]
    del ts
    set_exception(shell, exception)


def set_exception(shell: Any, exception: str) -> None:
    """With ``exception`` other than ``"none"``, IPython's last exception from a failed cell (see
    the module docstring); else none (``sys.last_*`` and the shell's traceback cleared)."""
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    shell.InteractiveTB.tb = None
    with capture_output():
        shell.run_cell(_RAISE.get(exception, "pass"), store_history=True)  # "pass": the last result has no error
    gc.collect()  # an earlier case's exception, in the cycles IPython's traceback formatter leaves


def main() -> None:
    args = sys.argv[1:]
    layouts = ["one", "1000"]
    exceptions = ["none"]
    if "--layouts" in args:
        layouts = args[args.index("--layouts") + 1].split(",")
    if "--exception" in args:
        exceptions = args[args.index("--exception") + 1].split(",")
    prof = int(float(args[args.index("--profile") + 1])) if "--profile" in args else None
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 3
    values = {i + 1 for i, a in enumerate(args) if a.startswith("--")}  # an option's value is no size
    sizes = [int(float(a)) for i, a in enumerate(args) if i not in values and a[:1].isdigit()] or [10**4, 10**5, 10**6]
    shell = shell_with_vramnb()
    import vramnb

    print(f"vramnb from {os.path.dirname(vramnb.__file__)}; torch {torch.__version__}; {os.cpu_count()} cores; "
          f"load average {load():.2f}", flush=True)
    if prof is not None:
        build(shell, prof, layouts[0], exceptions[0])
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
            build(shell, n, layout)
            for exception in exceptions:
                set_exception(shell, exception)
                with capture_output():
                    shell.run_line_magic("vram", "-d cpu")  # the first one's full scan registers them
                before = load()
                times, cpu, sys_cpu = [], [], []
                for _ in range(runs):
                    r0, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
                    with capture_output():
                        rep = shell.run_line_magic("vram", "-d cpu")
                    times.append(time.perf_counter() - t)
                    r1 = resource.getrusage(resource.RUSAGE_SELF)
                    cpu.append(r1.ru_utime - r0.ru_utime)
                    sys_cpu.append(r1.ru_stime - r0.ru_stime)
                rows = [(h.name, h.nbytes, h.unique) for h in rep.holders][:3]
                print(f"{n:>9} tensors ({layout:>4}, exception {exception:>6}): median {statistics.median(times):.3f} s, "
                      f"min {min(times):.3f} s (runs {', '.join(f'{x:.3f}' for x in times)}); user CPU median "
                      f"{statistics.median(cpu):.3f} s, min {min(cpu):.3f} s; system CPU median "
                      f"{statistics.median(sys_cpu):.3f} s; total {rep.total} B; "
                      f"allocated {rep.allocated} B; first rows {rows}; load {before:.2f} -> {load():.2f}", flush=True)
                del rep
            shell.user_ns.pop("ts", None)


if __name__ == "__main__":
    main()
