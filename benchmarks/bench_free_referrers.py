"""Cost of the referrer reading (vramnb/_referrers.py) that ``%vram`` and ``%vram free`` do when a
last exception exists, with N live tensors: ``PYTHONPATH=. python benchmarks/bench_free_referrers.py [N]``
prints the seconds of ``%vram`` (median and minimum of 3) with IPython's last exception set, and of
the plan alone (``_release_plan``: which frames only IPython reaches)."""

import statistics
import sys
import time

import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output


def main() -> None:
    n = int(float(sys.argv[1])) if len(sys.argv) > 1 else 10**6
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "vramnb")
    shell.user_ns["ts"] = [torch.zeros(1) for _ in range(n)]
    with capture_output():
        shell.run_cell("def g():\n    big = torch.ones(2**20)\n    raise ValueError('x')\ng()", store_history=True)
        shell.run_line_magic("vram", "-d cpu")
    times = []
    for _ in range(3):
        t = time.perf_counter()
        with capture_output():
            shell.run_line_magic("vram", "-d cpu")
        times.append(time.perf_counter() - t)
    print(f"{n} tensors, last exception set: %vram median {statistics.median(times):.3f} s, min {min(times):.3f} s")
    try:
        from vramnb._free import _release_plan
    except ImportError:
        return
    times = []
    for _ in range(3):
        t = time.perf_counter()
        _release_plan(shell)
        times.append(time.perf_counter() - t)
    print(f"  _release_plan alone: median {statistics.median(times):.3f} s, min {min(times):.3f} s")


if __name__ == "__main__":
    main()
