"""What the live gauge costs the cell it watches (issue 15: goal < 1 %), on the CPU path.

In a real Jupyter kernel (nbclient), the same CPU-bound cell (matmuls, 3 s or so) is measured by
``%%vram`` and by ``%%vram --live``, alternating, ``REPS`` times each; the cell times itself
(``time.perf_counter`` around its loop) and prints the seconds. The gauge samples every 0.25 s.
Prints and writes ``$OUT/live-cost.json``: the medians and the relative cost.

    python benchmarks/bench_live.py
"""

from __future__ import annotations

import json
import os
import statistics

import nbclient
import nbformat

REPS = 5
OUT = os.environ.get("OUT", "/tmp")
BODY = ("import time, torch\ntorch.manual_seed(0)\na = torch.randn(384, 384)\nt0 = time.perf_counter()\n"
        "for _ in range(1500):\n    b = a @ a\nprint(time.perf_counter() - t0)")


def main() -> None:
    cells = ["%load_ext vramnb\nimport torch\ntorch.set_num_threads(1)"]
    for _ in range(REPS):
        cells += [f"%%vram\n{BODY}", f"%%vram --live\n{BODY}"]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    times = [float(next(o["text"] for o in c.outputs if o.get("name") == "stdout").split()[-1]) for c in nb.cells[1:]]
    plain, live = times[0::2], times[1::2]
    res = {"plain_s": plain, "live_s": live, "median_plain_s": statistics.median(plain),
           "median_live_s": statistics.median(live),
           "cost_pct": 100 * (statistics.median(live) / statistics.median(plain) - 1),
           "cpu_count": os.cpu_count(), "load": os.getloadavg()}
    print(json.dumps(res, indent=1))
    with open(os.path.join(OUT, "live-cost.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
