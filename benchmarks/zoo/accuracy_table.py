"""The expected-error table of ``vramnb/predict/_accuracy.py`` from a zoo benchmark run.

Reads the run's records, a JSON list of

    {"case": str, "family": str, "recipe": str, "kinds": [str], "real_peak": int, "est_peak": int,
     "real_device": int | null, "est_device": int | null, "validation": bool}

(or ``{"gpu": .., "torch": .., "date": .., "records": [...]}``), groups them by kind
(a case counts for each of its kinds; ``kinds`` as :func:`vramnb.predict._accuracy.classify`
gives them, e.g. ``"sdpa/16-bit"``) and prints the Python literals ``SOURCE`` and
``MEASURED`` to paste into ``_accuracy.py``, with the run's date, GPU and torch version
in a comment, and the validation third's figures apart.

    python benchmarks/zoo/accuracy_table.py results.json --gpu "NVIDIA H200" --torch 2.11.0 --date 2026-12-02

``--from-run8 estimate.json`` converts the records of an earlier benchmark
(``benchmarks/bench_estimate.py``: 8 architectures x 4 recipes, the
``benchmarks/results/2026-11-29-h200-run8-estimate`` run) into zoo records: their kinds are
found the way an estimate finds them, by running each architecture (at the
``small`` size: the kinds do not depend on it) under its recipe on fake tensors
(needs torchvision: ``/work/venv-zoo``). ``--save-records`` writes the records.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

# the family of each architecture of benchmarks/archs.py (records of the zoo carry their own)
_RUN8_FAMILIES = {"gpt2-small": "decoder", "bert-base": "encoder", "llama-gqa": "decoder", "lstm-lm": "rnn",
                  "mlp": "mlp", "resnet50": "cnn", "vit-b-16": "vit", "convnext-tiny": "cnn"}


def stats(errors: list[float]) -> dict[str, Any]:
    """cases, median |error|, worst error (signed), under-estimates, worst under-estimate (<= 0)."""
    return {"cases": len(errors), "median_abs": round(statistics.median(abs(e) for e in errors), 6),
            "worst": round(max(errors, key=abs), 6), "under": sum(1 for e in errors if e < 0),
            "worst_under": round(min(min(errors), 0.0), 6)}


def _err(est: int | None, real: int | None) -> float | None:
    return None if est is None or not real else (est - real) / real


def table(records: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """kind -> {"peak": stats, "device": stats (where device memory was measured)}."""
    kinds = sorted({k for r in records for k in r["kinds"]})
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for kind in kinds:
        rs = [r for r in records if kind in r["kinds"]]
        peak = [e for r in rs if (e := _err(r["est_peak"], r["real_peak"])) is not None]
        device = [e for r in rs if (e := _err(r.get("est_device"), r.get("real_device"))) is not None]
        if peak:
            out[kind] = {"peak": stats(peak)}
            if device:
                out[kind]["device"] = stats(device)
    return out


def render(records: list[dict[str, Any]], source: dict[str, str]) -> str:
    """The literals to paste into ``_accuracy.py``."""
    lines = [(f"# zoo benchmark {source.get('run', '?')}: {source.get('date', '?')}, {source.get('gpu', '?')}, "
              f"torch {source.get('torch', '?')}; {len(records)} steps "
              f"({sum(1 for r in records if r.get('validation'))} of the validation third)"),
             "# printed by benchmarks/zoo/accuracy_table.py; fractions: (estimate - real) / real"]
    val = [r for r in records if r.get("validation")]
    if val:
        lines.append("# validation third apart (steady peak allocated):")
        for kind, t in table(val).items():
            p = t["peak"]
            lines.append(f"#   {kind}: {p['cases']} steps, median {p['median_abs']:.2%}, worst {p['worst']:+.2%}, "
                         f"under-estimates {p['under']} of {p['cases']}")
    else:
        lines.append("# no validation records in this run")
    lines.append("SOURCE: dict[str, str] = {")
    lines += [f"    {json.dumps(k)}: {json.dumps(v)}," for k, v in source.items()]
    lines.append("}")
    lines.append("MEASURED: dict[str, dict[str, dict[str, float | int]]] = {")
    for kind, t in table(records).items():
        lines.append(f"    {json.dumps(kind)}: {{")
        lines += [f"        {json.dumps(what)}: {json.dumps(st)}," for what, st in t.items()]
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines)


def from_run8(path: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Zoo records from ``bench_estimate.py``'s JSON (the ``vramnb`` estimate, steady-state peak)."""
    import torch

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.dirname(here))
    from archs import archs  # benchmarks/archs.py
    from bench_estimate import RECIPES

    import vramnb

    with open(path) as f:
        run = json.load(f)
    kinds: dict[tuple[str, str], list[str]] = {}
    records = []
    for row in run["rows"]:
        if "vramnb" not in row or "real" not in row:
            continue
        key = (row["arch"], row["recipe"])
        if key not in kinds:
            model, batch, loss_fn = archs(torch.device("meta"), True)[row["arch"]]()
            recipe = RECIPES[row["recipe"]]
            e = vramnb.estimate(model, batch, loss_fn, lambda p: torch.optim.AdamW(p), recipe=recipe or None,
                                target="H200")
            kinds[key] = list(e.expected_error.kinds)
            print(f"# {row['arch']} · {row['recipe']}: {', '.join(kinds[key])}", file=sys.stderr)
        records.append({"case": f"run8/{row['arch']}", "family": _RUN8_FAMILIES.get(row["arch"], "?"),
                        "recipe": row["recipe"], "kinds": kinds[key], "real_peak": row["real"]["steady_peak"],
                        "est_peak": row["vramnb"]["steady_peak"], "real_device": row["real"].get("device_memory"),
                        "est_device": row["vramnb"].get("device_memory"),
                        "validation": False})  # the 8 architectures the estimate was tuned on
    source = {"benchmark": "8-architecture benchmark", "run": os.path.basename(os.path.dirname(os.path.abspath(path))),
              "date": run.get("date", "?"),
              "gpu": run.get("gpu", "?"), "torch": run.get("torch", "?")}
    return records, source


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", help="the zoo run's records (JSON)")
    ap.add_argument("--from-run8", help="convert benchmarks/bench_estimate.py's estimate.json instead")
    ap.add_argument("--save-records", help="write the (converted) records here")
    ap.add_argument("--gpu")
    ap.add_argument("--torch")
    ap.add_argument("--date")
    ap.add_argument("--run", help="the run's name (default: the results' folder)")
    ap.add_argument("--benchmark", help="what the estimate's note calls it (default: 'zoo benchmark')")
    args = ap.parse_args()
    if bool(args.results) == bool(args.from_run8):
        ap.error("give a results JSON or --from-run8, one of them")
    if args.from_run8:
        records, source = from_run8(args.from_run8)
    else:
        with open(args.results) as f:
            data = json.load(f)
        records = data["records"] if isinstance(data, dict) else data
        meta = data if isinstance(data, dict) else {}
        source = {"benchmark": "zoo benchmark", "run": os.path.basename(os.path.dirname(os.path.abspath(args.results))),
                  "date": meta.get("date", "?"), "gpu": meta.get("gpu", "?"), "torch": meta.get("torch", "?")}
    for k in ("benchmark", "run", "date", "gpu", "torch"):
        if getattr(args, k):
            source[k] = getattr(args, k)
    if args.save_records:
        with open(args.save_records, "w") as f:
            json.dump(records, f, indent=1)
    print(render(records, source))
    return 0


if __name__ == "__main__":
    sys.exit(main())
