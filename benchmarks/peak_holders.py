"""What is alive at a real CUDA step's peak, by the code that allocated it, beside the estimate.

For a step the estimate under-predicts (a plan of ``bench_fit.py`` that ran out of memory or
peaked higher than predicted), one real step with ``torch.cuda.memory._record_memory_history``
and the allocator trace replayed: at the highest allocated point, the live blocks grouped by
the innermost frame of ``transformers``/``torch.nn``/``torch.utils.checkpoint`` code that
allocated them (bytes, count), and the phase (forward/backward by the frames). Beside it the
estimate's peak breakdown and phase. Writes ``$OUT/peak-holders.jsonl``.

    python benchmarks/peak_holders.py MODEL RECIPE_JSON
    python benchmarks/peak_holders.py mistral '{"checkpointing": "every block"}'
"""

from __future__ import annotations

import collections
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import vramnb  # noqa: E402
from bench_fit import build, models, validation  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")


def _where(frames: list[dict]) -> str:
    for f in frames:
        name = f.get("filename", "")
        if any(k in name for k in ("transformers/", "torch/nn/", "torch/utils/checkpoint", "torch/optim")):
            return f"{name.split('site-packages/')[-1]}:{f.get('line')} {f.get('name')}"
    return "other"


def holders(run_step) -> dict:
    """What is alive at the highest allocated point of the second call of ``run_step`` (the
    first makes the optimizer state), from the allocator's recorded history."""
    run_step()  # the first step: optimizer state made
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    run_step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    live: dict[int, tuple[int, list]] = {}
    for seg in snap["segments"]:  # blocks alive when recording began
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                live[addr] = (b["size"], b.get("frames", []))
            addr += b["size"]
    # the trace runs forward from the start of recording: undo it to the start, then replay
    events = snap["device_traces"][0]
    start = dict(live)
    for e in reversed(events):
        if e["action"] == "alloc":
            start.pop(e["addr"], None)
        elif e["action"] == "free_completed":
            start[e["addr"]] = (e["size"], e.get("frames", []))
    cur = dict(start)
    total = sum(s for s, _ in cur.values())
    best, at = total, dict(cur)
    for e in events:
        if e["action"] == "alloc":
            cur[e["addr"]] = (e["size"], e.get("frames", []))
            total += e["size"]
            if total > best:
                best, at = total, dict(cur)
        elif e["action"] == "free_completed" and e["addr"] in cur:
            total -= cur.pop(e["addr"])[0]
    groups: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for size, frames in at.values():
        g = groups[_where(frames)]
        g[0] += size
        g[1] += 1
    top = sorted(groups.items(), key=lambda kv: -kv[1][0])[:25]
    big = sorted(at.values(), key=lambda sf: -sf[0])[:12]  # the largest blocks, with their Python frames
    for size, frames in big:
        py = [f"{f.get('filename', '').split('site-packages/')[-1]}:{f.get('line')} {f.get('name')}" for f in frames
              if f.get("filename", "").endswith(".py")][:4]
        print(f"  block {size / 2**20:8.1f} MiB  " + " < ".join(py), flush=True)
    return {"peak_replayed": best, "max_memory_allocated": torch.cuda.max_memory_allocated(),
           "top": [(k, v[0], v[1]) for k, v in top]}


def real_peak(make, make_batch, recipe: dict) -> dict:
    dev = torch.device("cuda")
    model, batch, opt = build(make, make_batch, dev)
    from vramnb.techniques.code import step_code

    code = step_code(vramnb.Recipe(**recipe), vramnb.Recipe(), model, batch, None)
    if "# each step:" not in code:  # the plain step
        code = "# each step:\nloss = model(**batch).loss\nloss.backward()\noptimizer.step()\noptimizer.zero_grad()\n"
    setup, _, step = code.partition("# each step:\n")
    ns = {"torch": torch, "model": model, "batch": batch, "optimizer": opt, "loss_fn": None}
    exec(setup, ns)
    out = holders(lambda: exec(step, ns))  # noqa: F821 - pyflakes reads the lambda after the del below
    est = vramnb.estimate(model, batch, None, opt, recipe=recipe, steps=1, warm_optimizer=True)
    out["estimate_peak"] = est.peak_allocated
    out["estimate_phase"] = est.steps[-1].peak_phase
    out["estimate_sources"] = est.steps[-1].peak.sources
    out["estimate_backends"] = est.backends
    del ns, model, batch, opt
    torch.cuda.empty_cache()
    return out


def main() -> None:
    name, recipe = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    zoo = {**models(), **validation()}
    record({"model": name, "recipe": recipe, **real_peak(*zoo[name], recipe)}, "peak-holders.jsonl")


def record(rec: dict, filename: str) -> None:
    """Append ``rec`` to ``$OUT/filename`` as a JSON line; print it and its largest holders."""
    with open(os.path.join(OUT, filename), "a") as f:
        f.write(json.dumps(rec, default=str) + "\n")
    print(json.dumps({k: v for k, v in rec.items() if k != "top"}, default=str))
    for k, b, n in rec["top"]:
        print(f"{b / 2**20:10.1f} MiB {n:5d}  {k}")


if __name__ == "__main__":
    main()
