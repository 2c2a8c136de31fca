"""How long ``vramnb.estimate`` takes, case by case, on this machine (issue 15, item 2).

For every case of the benchmark zoo (``zoo.cases()``: PyTorch's own modules, the
Hugging Face families built from configs, torchvision's models where torchvision
imports) and each recipe asked (default ``fp32`` and ``checkpointing``), in a fresh
process: the model is built as the zoo builds it (real CPU weights), then
``vramnb.estimate(model, batch, loss, optimizer, target="H100")`` runs twice at the
case's GPU batch size; the first call's and the second's wall seconds are kept (the
first pays one-time imports and caches). Then ``max_batch_size`` of GPT-2 small
(bf16) on an "RTX 4090": seconds and the number of estimates it ran.

Each case runs under a timeout in its own process, and the results file is
rewritten after every case (``--resume`` skips what it has).

    python benchmarks/bench_estimate_speed.py --out speed.json [--source nn hf] [--only hf/gpt2]
    python benchmarks/bench_estimate_speed.py --report speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))


def _gpt2_small(batch_size: int):
    """GPT-2 small (124 M parameters) with real weights, and a batch of ``batch_size`` × 1024 tokens."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    ids = torch.randint(0, 50257, (batch_size, 1024))
    return GPT2LMHeadModel(GPT2Config()), {"input_ids": ids, "labels": ids}


def _twice(run) -> list[float]:
    """Wall seconds of two calls of ``run``: the first (one-time imports, caches) and the second."""
    secs = []
    for _ in range(2):
        t0 = time.perf_counter()
        run()
        secs.append(time.perf_counter() - t0)
    return secs


def one(name: str, recipe: str) -> dict:
    import torch

    import vramnb
    from zoo import cases

    out: dict = {"case": name, "recipe": recipe, "torch": torch.__version__}
    adamw = lambda p: torch.optim.AdamW(p)  # noqa: E731
    if name == "gpt2-small":  # the figure: GPT-2 small, AdamW, batch 8 x 1024
        model, batch = _gpt2_small(8)
        out.update(seconds=_twice(lambda: vramnb.estimate(model, batch, optimizer=adamw, target="H100")), batch_size=8)
        return out
    if name == "batch-search":  # the batch search of GPT-2 small, bf16
        model, batch = _gpt2_small(4)
        t0 = time.perf_counter()
        found = vramnb.max_batch_size(model, batch, optimizer=adamw, recipe={"precision": "bf16"},
                                      target="RTX 4090", progress=False)
        out.update(seconds=[time.perf_counter() - t0], batch_size=found.batch_size, estimates=len(found.tried))
        return out
    case = next(c for s in ("nn", "hf", "torchvision") for c in cases(s) if c.name == name)
    torch.manual_seed(0)
    model = case.build()
    if recipe == "checkpointing":
        case.enable_checkpointing(model)
    batch = case.make_batch(case.batch_size, "cpu")
    secs = _twice(lambda: vramnb.estimate(model, batch, lambda m, b: case.loss(m, b, recipe, "cuda"),
                                          lambda p: case.optimizer(p, recipe), target="H100"))
    out.update(seconds=secs, batch_size=case.batch_size)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--source", nargs="*", default=["nn", "hf", "torchvision"])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--recipes", default="fp32,checkpointing")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--report")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print("RESULT " + json.dumps(one(*a.one)))
        return
    if a.report:
        report(json.load(open(a.report)))
        return
    from zoo import cases

    every = {c.name: c for s in ("nn", "hf", "torchvision") for c in cases(s)}
    names = a.only or [c.name for s in a.source for c in cases(s)] + ["gpt2-small", "batch-search"]
    done = json.load(open(a.out)) if a.resume and os.path.exists(a.out) else []
    have = {(r["case"], r["recipe"]) for r in done}
    for name in names:
        recipes = {"batch-search": ["bf16"], "gpt2-small": ["fp32"]}.get(name) or [
            r for r in a.recipes.split(",") if r in every[name].recipes()]
        for recipe in recipes:
            if (name, recipe) in have:
                continue
            t0 = time.perf_counter()
            try:
                p = subprocess.run([sys.executable, __file__, "--one", name, recipe], capture_output=True,
                                   text=True, timeout=a.timeout)
                line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
                rec = json.loads(line[-1][7:]) if line else {
                    "case": name, "recipe": recipe, "error": (p.stderr.strip().splitlines() or ["?"])[-1][:300]}
            except subprocess.TimeoutExpired:
                rec = {"case": name, "recipe": recipe, "error": f"timeout after {a.timeout:.0f} s"}
            rec["process_seconds"] = time.perf_counter() - t0
            done.append(rec)
            print(json.dumps(rec), flush=True)
            if a.out:
                json.dump(done, open(a.out, "w"), indent=1)
    report(done)


def report(rows: list[dict]) -> None:
    ok = [r for r in rows if "seconds" in r and r["case"] not in ("batch-search", "gpt2-small")]
    for r in sorted(rows, key=lambda r: -max(r.get("seconds", [0]))):
        s = r.get("seconds")
        print(f"{r['case']:40s} {r['recipe']:14s} " + (" / ".join(f"{x:6.2f}" for x in s) if s else r.get("error", "")))
    if ok:
        warm = [r["seconds"][-1] for r in ok]
        first = [r["seconds"][0] for r in ok]
        print(f"\n{len(ok)} estimates: first call median {statistics.median(first):.2f} s, worst {max(first):.2f} s; "
              f"second call median {statistics.median(warm):.2f} s, worst {max(warm):.2f} s; "
              f"over 10 s (first call): {sum(x > 10 for x in first)}")


if __name__ == "__main__":
    main()
