"""What the live gauge costs the cell it watches (issue 15: goal < 1 %).

In a real Jupyter kernel (nbclient), the same cell is measured by ``%%vram`` and by
``%%vram --live``, alternating, ``REPS`` times each; the cell times itself
(``time.perf_counter`` around its loop) and prints the seconds. The gauge samples every 0.25 s.
Cells (``--device``):

* ``cpu``: CPU-bound matmuls (1 500 of 384×384, one intra-op thread, 3 s or so);
* ``cuda``: on the GPU, a launch-bound loop (60 000 small adds: the Python thread that launches
  kernels competes with the sampler for the GIL) and a kernel-bound one (2 000 matmuls of
  4096×4096), each ended by ``torch.cuda.synchronize()``.

Prints and writes ``$OUT/live-cost-<device>.json``: the medians and the relative cost per cell.

    python benchmarks/bench_live.py [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import nbclient
import nbformat

REPS = 5
OUT = os.environ.get("OUT", "/tmp")
BODIES = {
    "cpu": {"matmul": "import time, torch\ntorch.manual_seed(0)\na = torch.randn(384, 384)\nt0 = time.perf_counter()\n"
                      "for _ in range(1500):\n    b = a @ a\nprint(time.perf_counter() - t0)"},
    "cuda": {
        "launch-bound": "import time, torch\na = torch.ones(256, device='cuda')\ntorch.cuda.synchronize()\n"
                        "t0 = time.perf_counter()\nfor _ in range(60000):\n    b = a + 1\n"
                        "torch.cuda.synchronize()\nprint(time.perf_counter() - t0)",
        "kernel-bound": "import time, torch\na = torch.randn(4096, 4096, device='cuda')\ntorch.cuda.synchronize()\n"
                        "t0 = time.perf_counter()\nfor _ in range(2000):\n    b = a @ a\n"
                        "torch.cuda.synchronize()\nprint(time.perf_counter() - t0)",
    },
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=sorted(BODIES), default="cpu")
    device = ap.parse_args().device
    cells = ["%load_ext vramnb\nimport torch\ntorch.set_num_threads(1)"]
    names = list(BODIES[device])
    for name in names:
        for _ in range(REPS):
            body = BODIES[device][name]
            cells += [f"%%vram -d {device}\n{body}", f"%%vram --live -d {device}\n{body}"]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    times = [float(next(o["text"] for o in c.outputs if o.get("name") == "stdout").split()[-1]) for c in nb.cells[1:]]
    res: dict = {"device": device, "cpu_count": os.cpu_count(), "load": os.getloadavg(), "cells": {}}
    for i, name in enumerate(names):
        part = times[2 * REPS * i: 2 * REPS * (i + 1)]
        plain, live = part[0::2], part[1::2]
        res["cells"][name] = {"plain_s": plain, "live_s": live, "median_plain_s": statistics.median(plain),
                              "median_live_s": statistics.median(live),
                              "cost_pct": 100 * (statistics.median(live) / statistics.median(plain) - 1)}
    print(json.dumps(res, indent=1))
    with open(os.path.join(OUT, f"live-cost-{device}.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
