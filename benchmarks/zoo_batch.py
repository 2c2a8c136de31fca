"""max_batch_size against the true largest batch, on a card emulated on the GPU machine.

For each case (a fresh process each, in parallel: the cap is per process), bf16 autocast and
AdamW as the zoo writes them:

* the card: ``--card`` GiB of device memory. The caching allocator is capped with
  ``torch.cuda.set_per_process_memory_fraction`` at the card minus the memory this process
  holds outside PyTorch (measured with ``nvidia-smi`` after one step at batch 1);
* ``vramnb.max_batch_size(target=card)`` in its default safe mode and with ``safety="none"``
  (estimates only, no GPU), then both answers run for real: two steps each;
* the true largest batch: real steps searched by doubling then bisection (an out-of-memory
  trial is caught, the cache emptied, and the search goes on).

    python benchmarks/zoo_batch.py --cases hf/gpt2 hf/t5 --card 16 --out DIR
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

DEFAULT = ["hf/gpt2", "hf/t5", "hf/bert", "torchvision/resnet50", "torchvision/vit_b_16", "nn/lstm", "hf/llama"]


def one(name: str, card_gib: float, out: str, recipe: str) -> None:
    import torch

    import vramnb
    from zoo_gpu import _case, _smi_used

    case = _case(name)
    torch.manual_seed(0)
    model = case.build()
    card = int(card_gib * (1 << 30))
    rec: dict = {"case": name, "recipe": recipe, "card": card, "validation": case.validation}

    def loss_fn(m, b):
        return case.loss(m, b, recipe, "cuda")

    t0 = time.perf_counter()
    for safety in ("worst", "none"):
        try:
            s = vramnb.max_batch_size(model, case.make_batch(1, "cpu"), loss_fn, lambda p: case.optimizer(p, recipe),
                                      target=card, progress=False, safety=safety, limit=4096)
            rec[f"predicted_{safety}"] = s.batch_size
            rec[f"estimates_{safety}"] = len(s.tried)
            rec[f"margin_{safety}"] = getattr(s, "margin", None)
        except Exception as e:  # noqa: BLE001
            rec[f"predicted_{safety}_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    rec["search_seconds"] = time.perf_counter() - t0

    model = model.cuda()
    opt = case.optimizer(model.parameters(), recipe)

    def fits(b: int) -> bool:
        batch = None
        try:
            batch = case.make_batch(b, "cuda")
            for _ in range(2):
                case.loss(model, batch, recipe, "cuda").backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            return True
        except torch.OutOfMemoryError:
            return False
        finally:
            opt.zero_grad(set_to_none=True)
            del batch
            gc.collect()
            torch.cuda.empty_cache()

    fits(1)  # libraries loaded, optimizer state made
    outside = (_smi_used(os.getpid()) or 0) - torch.cuda.memory_reserved()
    rec["outside_pytorch"] = outside
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction((card - outside) / total)
    tried = {}

    def check(b: int) -> bool:
        if b not in tried:
            tried[b] = fits(b)
        return tried[b]

    lo, hi = 1, 2
    while check(hi) and hi < 8192:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if check(mid):
            lo = mid
        else:
            hi = mid
    rec["true_largest"] = lo
    for safety in ("worst", "none"):
        b = rec.get(f"predicted_{safety}")
        if b:
            rec[f"predicted_{safety}_runs"] = check(b)
    rec["trials"] = sorted(tried.items())
    json.dump(rec, open(os.path.join(out, name.replace("/", "__") + ".batch.json"), "w"), indent=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one")
    ap.add_argument("--cases", nargs="*", default=DEFAULT)
    ap.add_argument("--card", type=float, default=16.0, help="GiB")
    ap.add_argument("--recipe", default="bf16")
    ap.add_argument("--timeout", type=float, default=400)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.one:
        one(a.one, a.card, a.out, a.recipe)
        return
    procs = []
    for n in a.cases:
        log = open(os.path.join(a.out, n.replace("/", "__") + ".batch.log"), "w")
        procs.append((n, subprocess.Popen([sys.executable, __file__, "--one", n, "--card", str(a.card), "--recipe", a.recipe,
                                           "--out", a.out], stdout=log, stderr=subprocess.STDOUT)))
    t0 = time.time()
    for n, p in procs:
        try:
            p.wait(timeout=max(1, a.timeout - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            print("KILLED", n, flush=True)
    for n, _ in procs:
        f = os.path.join(a.out, n.replace("/", "__") + ".batch.json")
        if os.path.exists(f):
            r = json.load(open(f))
            print(n, {k: r.get(k) for k in ("predicted_worst", "predicted_none", "true_largest", "predicted_worst_runs",
                                            "predicted_none_runs", "search_seconds")}, flush=True)


if __name__ == "__main__":
    main()
