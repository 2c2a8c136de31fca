"""What a measured CPU cell costs as the number of live tensors grows, in one run.

Run:  python benchmarks/bench_cell_scaling.py [--sizes 0,10000,100000,1000000] [--out results.json] [--holders-only]

For each number of live tensors (``torch.ones(2)`` in a list: one small storage each)
it times, as medians of ``-n`` cells run through one ``InteractiveShell``:

* ``plain``: a ``pass`` cell;
* ``time``: ``%%time`` on a ``pass`` cell (the reference magic);
* ``vram_after_measured``: ``%%vram -q -d cpu`` on ``pass`` right after another measured
  cell (the registry is kept: a young scan, vramnb._young);
* ``vram_after_unmeasured``: the same cell after an unmeasured one (a full scan);
* ``memtracker``: ``torch.distributed._tools.mem_tracker.MemTracker`` entered and left
  around an empty block, the closest PyTorch tool;
* ``holders``: ``%vram -q -d cpu`` (which variables hold memory): the first call, and
  ``holders_median``, the median of ``max(3, n // 3)`` calls after it (``--holders-only``:
  this column alone);
* ``op_us``: one ``x.add(1)`` inside a measured block minus outside, in microseconds.

Times are in milliseconds unless named ``_us``. Each size runs in a fresh process (the
tensors of one size do not stay alive into the next).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time


def _one(n_tensors: int, reps: int, holders_only: bool = False) -> dict:
    import torch
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    sh = InteractiveShell.instance()
    sh.run_cell("%load_ext vramnb")
    sh.run_cell("import torch")
    sh.run_cell(f"xs = [torch.ones(2) for _ in range({n_tensors})]")

    def cell(src: str) -> float:
        t0 = time.perf_counter()
        with capture_output():
            sh.run_cell(src)
        return (time.perf_counter() - t0) * 1e3

    def med(f, n=reps):  # type: ignore[no-untyped-def]
        return statistics.median(f() for _ in range(n))

    out: dict = {"tensors": n_tensors}
    if holders_only:
        cell("%%vram -q -d cpu\npass")
        out["holders"] = cell("%vram -q -d cpu")
        out["holders_median"] = med(lambda: cell("%vram -q -d cpu"), max(3, reps // 3))
        return out
    out["plain"] = med(lambda: cell("pass"))
    out["time"] = med(lambda: cell("%%time\npass"))
    cell("%%vram -q -d cpu\npass")  # the first measured cell: its full scan
    out["vram_after_measured"] = med(lambda: cell("%%vram -q -d cpu\npass"))

    def after_unmeasured() -> float:
        cell("pass")
        return cell("%%vram -q -d cpu\npass")

    out["vram_after_unmeasured"] = med(after_unmeasured, max(3, reps // 3))
    try:
        from torch.distributed._tools.mem_tracker import MemTracker

        def mt() -> float:
            t0 = time.perf_counter()
            with MemTracker():
                pass
            return (time.perf_counter() - t0) * 1e3

        out["memtracker"] = med(mt, max(3, reps // 3))
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        out["memtracker"] = f"failed: {type(e).__name__}: {e}"[:200]
    cell("%%vram -q -d cpu\npass")
    out["holders"] = cell("%vram -q -d cpu")
    out["holders_median"] = med(lambda: cell("%vram -q -d cpu"), max(3, reps // 3))

    import vramnb

    x = torch.ones(8)
    k = 20000

    def loop() -> float:
        t0 = time.perf_counter()
        for _ in range(k):
            x.add(1)
        return (time.perf_counter() - t0) / k * 1e6

    loop()
    plain = min(loop() for _ in range(3))
    with vramnb.vram("cpu", record=False):
        loop()
        tracked = min(loop() for _ in range(3))
    out["op_plain_us"], out["op_us"] = plain, tracked - plain
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="0,10000,100000,1000000")
    ap.add_argument("-n", type=int, default=9)
    ap.add_argument("--out", default=None)
    ap.add_argument("--holders-only", action="store_true", help="time %%vram alone")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(_one(args.one, args.n, args.holders_only)))
        return
    import torch

    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        res = subprocess.run([sys.executable, __file__, "--one", str(n), "-n", str(args.n)]
                             + (["--holders-only"] if args.holders_only else []),
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    doc = {"python": platform.python_version(), "torch": torch.__version__,
           "machine": platform.machine(), "cores": __import__("os").cpu_count(), "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
