"""Checkpointing's memory on CUDA: the estimate against a real step, per model (issue 14).

Run 20 found checkpointed plans under-estimated on CUDA (fp32, every block: GPT-2 −3.4 % to
Mistral −35.9 %) while plans without checkpointing were within 0.2 %. For each model of
``bench_fit`` (tuning and validation sets) and each recipe below: ``vramnb.estimate`` (two
steps, as ``fit`` estimates) beside the **code the planner prints** for that recipe, run as
written on a fresh model and AdamW (``bench_fit.run_code``: 2 warm-up steps and 5 timed), its
peak allocated memory. No cap is set: nothing runs out of memory. Writes one JSON line per
model and recipe to ``$OUT/ckpt-memory.jsonl``.

    python benchmarks/bench_ckpt_memory.py [model ...]
"""

from __future__ import annotations

import json
import os
import sys
import traceback

import torch

sys.path.insert(0, os.path.dirname(__file__))
import vramnb  # noqa: E402
from bench_fit import build, models, run_code, validation  # noqa: E402
from vramnb.techniques.code import step_code  # noqa: E402
from vramnb.techniques.registry import Recipe  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")
RECIPES = [
    {"checkpointing": "every block"},
    {"precision": "bf16", "checkpointing": "every block"},
    {"precision": "bf16"},
]


def main(names: list[str]) -> None:
    zoo = {**models(), **validation()}
    path = os.path.join(OUT, "ckpt-memory.jsonl")
    dev = torch.device("cuda")
    for name in names or list(zoo):
        make, make_batch = zoo[name]
        for settings in RECIPES:
            row: dict = {"model": name, "recipe": settings}
            try:
                model, batch, opt = build(make, make_batch, dev)
                e = vramnb.estimate(model, batch, None, opt, recipe=settings)
                code = step_code(Recipe(**settings), Recipe(), model, batch, None)
                del model, batch, opt
                row.update(predicted_peak=e.peak_allocated, code=code, **run_code(code, make, make_batch, dev))
                row["error_pct"] = 100 * (row["predicted_peak"] / row["peak_allocated"] - 1)
            except Exception:  # noqa: BLE001 - recorded, and the next one runs
                row["error"] = traceback.format_exc()[-2000:]
            with open(path, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps({k: v for k, v in row.items() if k != "code"}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
