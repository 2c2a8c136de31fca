"""Estimates against real CUDA steps, side by side with what users use today.

For 8 architectures x 4 recipes, on the GPU machine:

* real: two plain training steps on the GPU (fresh allocator: ``empty_cache``
  before the model is moved); ``max_memory_allocated`` of the first and the
  steady-state step, ``max_memory_reserved``, and device memory in use
  (reserved + memory outside PyTorch, what nvidia-smi shows);
* vramnb.estimate(target="H200"): fake CPU tensors + CUDA model (no GPU used);
  run again in a subprocess with CUDA hidden (``--cpu-only``) to show it gives
  the same prediction on a CPU-only machine;
* PyTorch's MemTracker under FakeTensorMode, with fake ``cuda`` tensors (needs
  a GPU) and with fake ``cpu`` tensors (what a CPU-only machine can do).

Then the batch-size search: GPT-2 small, bf16, on a card emulated with
``torch.cuda.set_per_process_memory_fraction``: the true largest batch found
by real trials, vramnb.max_batch_size (predictions, one verification step),
and accelerate's ``find_executable_batch_size`` when installed.

    python benchmarks/bench_estimate.py --out results.json
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from archs import archs  # noqa: E402

RECIPES = {
    "fp32 AdamW": {},
    "bf16 AdamW": {"precision": "bf16"},
    "bf16 + checkpointing": {"precision": "bf16", "checkpointing": "every block"},
    "fp32 SGD momentum": {"optimizer": "SGD momentum"},
}


def run_plan_steps(plan, n=2, on_step=None):
    """Plain steps following a vramnb StepPlan (recipe applied), no tracking."""
    from vramnb._step import default_loss

    for i in range(n):
        if on_step:
            on_step(i, "before")
        for micro in plan.batches:
            with contextlib.ExitStack() as st:
                for make in plan.forward_contexts:
                    st.enter_context(make())
                loss = (plan.loss_fn or default_loss)(plan.model, micro)
                if len(plan.batches) > 1:
                    loss = loss / len(plan.batches)
            (plan.scaler.scale(loss) if plan.scaler is not None else loss).backward()
            del loss
        if plan.scaler is not None:
            plan.scaler.step(plan.optimizer)
            plan.scaler.update()
        else:
            plan.optimizer.step()
        plan.optimizer.zero_grad(set_to_none=True)
        if on_step:
            on_step(i, "after")


def make_plan(model, batch, loss_fn, recipe):
    from vramnb import Recipe
    from vramnb._plan import StepPlan
    from vramnb._step import default_loss

    opt = torch.optim.AdamW(model.parameters())
    dev = next(model.parameters()).device
    plan = StepPlan(model, [batch], loss_fn or default_loss, opt, dev, user_optimizer=opt)
    Recipe(**recipe).apply(plan)
    return plan


def real_run(make, recipe):
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=4_000_000)
    model, batch, loss_fn = make()
    plan = make_plan(model, batch, loss_fn, recipe)
    peaks = []
    max_reserved = [0]

    def on_step(i, when):
        torch.cuda.synchronize()
        if when == "before":
            max_reserved[0] = max(max_reserved[0], torch.cuda.max_memory_reserved())
            torch.cuda.reset_peak_memory_stats()
        else:
            peaks.append(torch.cuda.max_memory_allocated())
            max_reserved[0] = max(max_reserved[0], torch.cuda.max_memory_reserved())

    t0 = time.perf_counter()
    run_plan_steps(plan, 2, on_step)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    free, total = torch.cuda.mem_get_info()
    non_pytorch = (total - free) - torch.cuda.memory_reserved()
    replayed = _replay_trace()
    plan.run_undo()
    del model, batch, plan
    gc.collect()
    torch.cuda.empty_cache()
    return {"first_peak": peaks[0], "steady_peak": peaks[1], "max_reserved": max_reserved[0],
            "non_pytorch": non_pytorch, "device_memory": max_reserved[0] + non_pytorch, "step_seconds": elapsed / 2,
            "replayed_max_reserved": replayed}


def _replay_trace():
    """The real run's own allocations and frees (the allocator's trace) replayed
    through vramnb's allocator model: the model's error alone, apart from the
    estimate's event sequence."""
    from vramnb.predict._allocator import replay

    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    events, sizes = [], {}
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            sizes[e["addr"]] = e["size"]
            events.append((e["addr"], 0, e["size"]))
        elif e["action"] == "free_completed" and e["addr"] in sizes:
            events.append((e["addr"], sizes.pop(e["addr"]), 0))
    r = replay(events)
    return max(r.reserved) if r.reserved else None


def our_estimate(name, small, recipe, target="H200"):
    """vramnb.estimate on the architecture built on the meta device (no memory anywhere)."""
    import vramnb

    torch.manual_seed(0)
    model, batch, loss_fn = archs(torch.device("meta"), small)[name]()
    t0 = time.perf_counter()
    e = vramnb.estimate(model, batch, loss_fn, lambda p: torch.optim.AdamW(p), recipe=recipe or None, target=target)
    return {"first_peak": e.first.peak.allocated, "steady_peak": e.steady.peak.allocated,
            "max_reserved": e.peak_reserved, "device_memory": e.device_memory,
            "seconds": time.perf_counter() - t0, "backends": e.backends}


def memtracker_fake(make_for, device, recipe):
    """PyTorch's MemTracker under FakeTensorMode (its documented fake-mode use)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    t0 = time.perf_counter()
    with FakeTensorMode():
        model, batch, loss_fn = make_for(torch.device(device))()
        plan = make_plan(model, batch, loss_fn, recipe)
        plan.scaler = None
        mt = MemTracker()
        mt.track_external(model, plan.optimizer)
        with mt:
            run_plan_steps(plan, 2, lambda i, when: mt.reset_mod_stats() if when == "after" else None)
        snap = mt.get_tracker_snapshot("peak")
        plan.run_undo()
    dev = [d for d in snap if getattr(d, "type", str(d)) == device or str(d).startswith(device)]
    return {"steady_peak": snap[dev[0]]["Total"], "seconds": time.perf_counter() - t0}


def rel(a, b):
    return (a - b) / b if b else None


def bench_archs(args, out):
    device = torch.device("cuda")
    cpu_only = None
    if not args.no_cpu_only:
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
        cmd = [sys.executable, __file__, "--estimates-only", "--out", "/tmp/cpu_only_estimates.json"]
        if args.only:
            cmd += ["--only", args.only]
        if args.small:
            cmd += ["--small"]
        subprocess.run(cmd, env=env, check=False)
        with contextlib.suppress(OSError, ValueError):
            cpu_only = json.load(open("/tmp/cpu_only_estimates.json"))
    rows = []
    for name, make in archs(device, args.small).items():
        if args.only and name not in args.only.split(","):
            continue
        for rname, recipe in RECIPES.items():
            row = {"arch": name, "recipe": rname}
            try:
                row["real"] = real_run(make, recipe)
            except Exception as e:  # noqa: BLE001
                row["real_error"] = repr(e)[:300]
                rows.append(row)
                continue
            try:
                row["vramnb"] = our_estimate(name, args.small, recipe)
            except Exception as e:  # noqa: BLE001
                row["vramnb_error"] = repr(e)[:300]
            if cpu_only is not None:
                row["vramnb_cpu_only"] = cpu_only.get(f"{name}|{rname}")
            for dev in ("cuda", "cpu"):
                try:
                    row[f"memtracker_fake_{dev}"] = memtracker_fake(lambda d: archs(d, args.small)[name], dev, recipe)
                except Exception as e:  # noqa: BLE001
                    row[f"memtracker_fake_{dev}_error"] = repr(e)[:300]
            r = row["real"]
            errs = {}
            for k in ("vramnb", "vramnb_cpu_only"):
                if isinstance(row.get(k), dict):
                    errs[k] = {m: rel(row[k][m], r[m]) for m in ("first_peak", "steady_peak", "device_memory")}
            for k in ("memtracker_fake_cuda", "memtracker_fake_cpu"):
                if isinstance(row.get(k), dict):
                    errs[k] = {"steady_peak": rel(row[k]["steady_peak"], r["steady_peak"]),
                               "device_memory": rel(row[k]["steady_peak"], r["device_memory"])}
            row["errors"] = errs
            print(name, rname, json.dumps({k: {m: (f"{v:+.2%}" if v is not None else None) for m, v in e.items()}
                                           for k, e in errs.items()}), flush=True)
            rows.append(row)
            out["rows"] = rows
            if args.out:  # partial results survive a time limit
                json.dump(out, open(args.out, "w"), indent=1, default=str)
    out["rows"] = rows
    summary = {}
    for k in ("vramnb", "vramnb_cpu_only", "memtracker_fake_cuda", "memtracker_fake_cpu"):
        for m in ("first_peak", "steady_peak", "device_memory"):
            vals = [row["errors"][k][m] for row in rows if k in row.get("errors", {}) and row["errors"][k].get(m) is not None]
            if vals:
                summary[f"{k}.{m}"] = {"n": len(vals), "median_abs": statistics.median(abs(v) for v in vals),
                                       "worst": max(vals, key=abs), "min": min(vals), "max": max(vals)}
    out["summary"] = summary
    for k, v in summary.items():
        print(f"{k:40s} n={v['n']:2d} median |err| {v['median_abs']:.2%}  worst {v['worst']:+.2%}  "
              f"range {v['min']:+.2%}..{v['max']:+.2%}")


def estimates_only(args):
    """Run in a subprocess with CUDA hidden: the CPU-only machine's view."""
    assert not torch.cuda.is_available()
    res = {}
    for name in archs(torch.device("cpu"), args.small):
        if args.only and name not in args.only.split(","):
            continue
        for rname, recipe in RECIPES.items():
            try:
                res[f"{name}|{rname}"] = our_estimate(name, args.small, recipe)
            except Exception as e:  # noqa: BLE001
                res[f"{name}|{rname}"] = {"error": repr(e)[:300]}
    json.dump(res, open(args.out, "w"))


def bench_batch_search(args, out):
    import vramnb

    device = torch.device("cuda")
    from transformers import GPT2Config, GPT2LMHeadModel

    seq = 1024 if not args.small else 128
    card = 24 * (1 << 30)  # emulate a 24 GiB allocator limit
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(card / total)
    recipe = {"precision": "bf16"}

    def make_model():
        torch.manual_seed(0)
        return GPT2LMHeadModel(GPT2Config(n_layer=12 if not args.small else 2)).to(device)

    def trial(n, model, opt_holder):
        """Two real steps at batch n: True if it fits."""
        ids = torch.randint(0, 50257, (n, seq), device=device)
        try:
            plan = make_plan(model, {"input_ids": ids, "labels": ids}, None, recipe)
            try:
                run_plan_steps(plan, 2)
            finally:
                plan.run_undo()
            return True
        except torch.OutOfMemoryError:
            return False
        finally:
            del ids
            gc.collect()
            torch.cuda.empty_cache()

    model = make_model()
    # the truth: exponential then binary search with real steps
    t0 = time.perf_counter()
    lo, hi, n, trials, ooms = 0, None, 1, 0, 0
    while hi is None:
        trials += 1
        if trial(n, model, None):
            lo, n = n, n * 2
        else:
            ooms += 1
            hi = n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        trials += 1
        if trial(mid, model, None):
            lo = mid
        else:
            ooms += 1
            hi = mid
    truth = {"batch_size": lo, "trials": trials, "ooms": ooms, "seconds": time.perf_counter() - t0}
    print("true largest batch (real trials):", truth, flush=True)
    # vramnb: predictions for the emulated card (allocator limit + the context it does not count)
    gc.collect()
    torch.cuda.empty_cache()
    free, tot = torch.cuda.mem_get_info()
    ids = torch.randint(0, 50257, (8, seq), device=device)
    t0 = time.perf_counter()
    from vramnb.predict._cuda_model import CUDA_CONTEXT

    s = vramnb.max_batch_size(model, {"input_ids": ids, "labels": ids}, None, lambda p: torch.optim.AdamW(p),
                              target=card + CUDA_CONTEXT["H200"], recipe=recipe, progress=False)
    t_search = time.perf_counter() - t0
    t1 = time.perf_counter()
    ok = trial(s.batch_size, model, None)
    t_verify = time.perf_counter() - t1
    above = trial(s.batch_size + 1, model, None)  # is one more really out of reach? (not part of the search)
    ours = {"batch_size": s.batch_size, "estimates": len(s.tried), "ooms": 0, "seconds_search": t_search,
            "verification_fits": ok, "one_more_fits": above, "tried": s.tried,
            "seconds_with_verification": t_search + t_verify,
            "error_vs_truth": rel(s.batch_size, truth["batch_size"])}
    print("vramnb.max_batch_size:", ours, flush=True)
    res = {"card_bytes": card, "seq": seq, "truth": truth, "vramnb": ours}
    try:
        from accelerate.utils import find_executable_batch_size

        counts = {"trials": 0, "ooms": 0}

        @find_executable_batch_size(starting_batch_size=128)
        def inner(batch_size):
            counts["trials"] += 1
            if not trial(batch_size, model, None):
                counts["ooms"] += 1
                raise torch.OutOfMemoryError("CUDA out of memory. (a trial of this benchmark)")
            return batch_size

        t0 = time.perf_counter()
        found = inner()
        res["accelerate"] = {"batch_size": found, **counts, "seconds": time.perf_counter() - t0,
                             "error_vs_truth": rel(found, truth["batch_size"])}
        print("accelerate find_executable_batch_size:", res["accelerate"], flush=True)
    except ImportError as e:
        res["accelerate"] = {"error": repr(e)}
    torch.cuda.set_per_process_memory_fraction(1.0)
    out["batch_search"] = res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default=None)
    ap.add_argument("--small", action="store_true", help="shrunk models (a quick check of the script)")
    ap.add_argument("--estimates-only", action="store_true")
    ap.add_argument("--no-cpu-only", action="store_true")
    ap.add_argument("--skip", default="", help="comma list: archs,batch")
    args = ap.parse_args()
    if args.estimates_only:
        estimates_only(args)
        return 0
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d")}
    if "batch" not in args.skip:
        bench_batch_search(args, out)
        if args.out:
            json.dump(out, open(args.out, "w"), indent=1, default=str)
    if "archs" not in args.skip:
        bench_archs(args, out)
    if args.out:
        json.dump(out, open(args.out, "w"), indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
