"""What each technique saves, per source, on real architectures (CUDA), next to the
figure the literature gives for it.

Run on a GPU:  python benchmarks/bench_techniques.py --out techniques.json

For each architecture: vramnb.compare over one recipe per technique; for each, the
steady-state peak and the change of each source against the baseline, plus the
ratio the literature predicts for the source it targets:
  mixed precision (bf16): activations about halved (Micikevicius et al. 2018)
  checkpointing every block: activations of the blocks drop to their inputs (Chen et al. 2016)
  SGD momentum / Lion: one state tensor instead of Adam's two -> optimizer state x0.5
  8-bit AdamW: about a quarter of AdamW's state (Dettmers et al. 2022)
  4 micro-batches: activations x0.25
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_step import archs  # noqa: E402

RECIPES = [
    ({"precision": "bf16"}, "activations", 0.5),
    ({"precision": "fp16"}, "activations", 0.5),
    ({"checkpointing": "every block"}, "activations", None),
    ({"checkpointing": "selective"}, "activations", None),
    ({"optimizer": "SGD momentum"}, "optimizer state", 0.5),
    ({"optimizer": "Lion"}, "optimizer state", 0.5),
    ({"optimizer": "AdamW 8-bit"}, "optimizer state", 0.25),
    ({"optimizer": "Adafactor"}, "optimizer state", None),
    ({"micro_batches": 4}, "activations", 0.25),
    ({"activation_offload": "CPU"}, "activations", 0.0),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default="gpt2-small,bert-base,vit-b-16,resnet50,lstm-lm")
    args = ap.parse_args()
    import vramnb

    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "archs": {}}
    for name, make in archs(torch.device("cuda")).items():
        if name not in args.only.split(","):
            continue
        torch.manual_seed(0)
        model, batch, loss_fn = make()
        opt = torch.optim.AdamW(model.parameters())
        cmp = vramnb.compare(model, batch, loss_fn, opt, recipes=[r for r, _, _ in RECIPES], progress=False)
        base = cmp.baseline.report.steady.peak
        rows = {}
        for v in cmp.variants[1:]:
            key = v.recipe.describe()
            target = next(((src, ratio) for r, src, ratio in RECIPES if vramnb.Recipe(**r) == v.recipe), (None, None))
            if v.report is None:
                rows[key] = {"unavailable": v.unavailable, "error": v.error}
                continue
            peak = v.report.steady.peak
            fw_base = cmp.baseline.report.steady.mark("after forward")
            fw = v.report.steady.mark("after forward")
            src, ratio = target
            measured = None
            if src == "activations":
                measured = fw["activations"] / max(1, fw_base["activations"])
            elif src == "optimizer state":
                measured = (v.report.steady.mark("start")["optimizer state"]
                            / max(1, cmp.baseline.report.steady.mark("start")["optimizer state"]))
            rows[key] = {
                "peak": peak.allocated, "baseline_peak": base.allocated,
                "saving": base.allocated - peak.allocated,
                "delta_by_source": {s: base.sources.get(s, 0) - peak.sources.get(s, 0) for s in peak.sources},
                "target_source": src, "measured_ratio": measured, "literature_ratio": ratio,
                "step_time": v.report.steady.step_time, "baseline_step_time": cmp.baseline.report.steady.step_time,
            }
            shown = ("peak", "saving", "measured_ratio", "literature_ratio", "step_time")
            print(name, key, json.dumps({k: rows[key][k] for k in shown}), flush=True)
        out["archs"][name] = {"baseline_peak": base.allocated, "baseline_sources": base.sources, "recipes": rows}
        del model, opt, batch, cmp
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
