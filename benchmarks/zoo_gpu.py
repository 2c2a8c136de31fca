"""The untuned zoo on a real GPU: each case and recipe in a fresh process, beside the estimate.

For each (case, recipe), in its own process (the allocator, the CUDA context and the libraries
loaded are the case's own):

* **real**: the user's loop (``benchmarks/zoo``: their autocast, GradScaler, the model's own
  checkpointing) for three steps on the GPU: ``max_memory_allocated`` and ``max_memory_reserved``
  of the first and the steady-state (second) step, the device memory the process holds
  (``nvidia-smi``'s per-process figure, when the container shows it), and the third step's
  operators with the allocator's readings (``op_log.OpLog``);
* **profile_step** on the same model: the measured breakdown by source;
* **estimate**: ``vramnb.estimate`` of the same step (the GPU present), with its fake step's
  operators logged (``op_log.logged_estimate``); with ``--cuda-hidden`` the estimate alone, in a
  process that cannot see CUDA (``CUDA_VISIBLE_DEVICES=""``, ``target="H200"``).

Results: one JSON per task under ``--out`` (written when the task ends, so a time limit loses
only running tasks), op logs as ``.ops.json.gz``.

    python benchmarks/zoo_gpu.py --sample --jobs 14 --out results/zoo --deadline 500
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

#: the GPU sample, chosen before anything was fixed against the zoo (30 architectures)
SAMPLE = [
    "torchvision/resnet50", "torchvision/mobilenet_v3_large", "torchvision/efficientnet_b0", "torchvision/convnext_tiny",
    "torchvision/vit_b_16", "torchvision/swin_t", "torchvision/densenet121", "torchvision/regnet_y_400mf",
    "torchvision/inception_v3", "torchvision/deeplabv3_resnet50", "torchvision/fcn_resnet50", "torchvision/r3d_18",
    "torchvision/maxvit_t", "torchvision/mvit_v2_s",
    "hf/bert", "hf/gpt2", "hf/llama", "hf/qwen2", "hf/t5", "hf/bart", "hf/mixtral", "hf/whisper", "hf/wav2vec2",
    "hf/vit", "hf/swin", "hf/falcon", "hf/deberta-v2", "hf/gpt_neox", "hf/segformer", "hf/phi3",
    "nn/transformer-encoder", "nn/transformer", "nn/lstm", "nn/gru", "nn/conv3d",
]


def _case(name: str):
    from zoo import cases

    for c in cases(name.split("/")[0]):
        if c.name == name:
            return c
    raise SystemExit(f"no case {name!r}")


def _smi_used(pid: int) -> int | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
    except Exception:  # noqa: BLE001
        return None
    for line in out.splitlines():
        p, _, mib = line.partition(",")
        if p.strip() == str(pid):
            return int(mib.strip()) << 20
    return None


def _estimate(case, recipe: str, model, target, log=None) -> dict:
    import torch

    import vramnb
    from op_log import logged_estimate

    batch = case.make_batch(case.batch_size, "cpu")
    kw = dict(target=target)
    t0 = time.perf_counter()
    ctx = logged_estimate(log) if log is not None else _null()
    with ctx:
        est = vramnb.estimate(model, batch, lambda m, b: case.loss(m, b, recipe, "cuda"),
                              lambda p: case.optimizer(p, recipe), **kw)
    return {"seconds": time.perf_counter() - t0, "peak_first": est.steps[0].peak.allocated,
            "peak": est.steps[-1].peak.allocated, "reserved": est.peak_reserved, "device": est.device_memory,
            "context": est.target.context if est.target else None, "backends": est.backends, "notes": est.notes,
            "sources_at_peak": dict(est.steps[-1].peak.sources), "torch": torch.__version__,
            "kinds": list(est.expected_error.kinds) if getattr(est, "expected_error", None) else None,
            "outside_pytorch": getattr(est, "outside_pytorch", None)}


def _memtracker(case, recipe: str, device: str) -> dict:
    """PyTorch's MemTracker under FakeTensorMode (its documented fake-mode use), fake ``device`` tensors."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    t0 = time.perf_counter()
    with FakeTensorMode(allow_non_fake_inputs=True):
        torch.manual_seed(0)
        with torch.device(device):
            model = case.build()
        if recipe == "checkpointing":
            case.enable_checkpointing(model)
        batch = case.make_batch(case.batch_size, device)
        opt = case.optimizer(model.parameters(), recipe)
        mt = MemTracker()
        mt.track_external(model, opt)
        with mt:
            for i in range(2):
                loss = case.loss(model, batch, recipe, device)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                del loss
                if i == 0:
                    mt.reset_mod_stats()
        snap = mt.get_tracker_snapshot("peak")
    dev = [d for d in snap if str(d).startswith(device)]
    return {"peak": snap[dev[0]]["Total"], "seconds": time.perf_counter() - t0}


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


TRACE = bool(os.environ.get("ZOO_TRACE"))


def one(name: str, recipe: str, out: str, cuda_hidden: bool) -> None:
    import torch

    from op_log import OpLog

    case = _case(name)
    rec: dict = {"case": name, "family": case.family, "recipe": recipe, "validation": case.validation,
                 "batch_size": case.batch_size, "torch": torch.__version__}
    stem = os.path.join(out, f"{name.replace('/', '__')}__{recipe}" + ("__hidden" if cuda_hidden else ""))
    torch.manual_seed(0)
    model = case.build()
    if recipe == "checkpointing":
        case.enable_checkpointing(model)
    if cuda_hidden:
        try:
            rec["estimate"] = _estimate(case, recipe, model, "H200")
        except Exception as e:  # noqa: BLE001
            rec["estimate_error"] = f"{type(e).__name__}: {str(e)[:2000]}"
        json.dump(rec, open(stem + ".json", "w"), indent=1)
        return
    if os.environ.get("ZOO_MEMTRACKER") and recipe in ("fp32", "bf16"):
        for dev in ("cuda", "cpu"):
            try:
                rec[f"memtracker_{dev}"] = _memtracker(case, recipe, dev)
            except Exception as e:  # noqa: BLE001
                rec[f"memtracker_{dev}_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    flog = OpLog()
    try:
        rec["estimate"] = _estimate(case, recipe, model, None, flog)
    except Exception as e:  # noqa: BLE001
        rec["estimate_error"] = f"{type(e).__name__}: {str(e)[:2000]}"
        rec["estimate_tb"] = traceback.format_exc()[-3000:]
    # -- real ---------------------------------------------------------------------------
    try:
        dev = torch.device("cuda")
        model = model.to(dev)
        batch = case.make_batch(case.batch_size, "cuda")
        opt = case.optimizer(model.parameters(), recipe)
        scaler = torch.amp.GradScaler("cuda") if recipe == "fp16-scaler" else None

        def step():
            loss = case.loss(model, batch, recipe, "cuda")
            (scaler.scale(loss) if scaler is not None else loss).backward()
            if scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)

        real: dict = {}
        if scaler is not None:  # GradScaler's first steps overflow and skip the optimizer: warm it to a real step
            for _ in range(30):
                step()
                if opt.state:
                    break
            real["scaler_warmup_steps"] = _ + 1
        if TRACE:
            torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python", context=None)
        for i in range(2):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            real[f"step{i}"] = {"peak": torch.cuda.max_memory_allocated(), "reserved": torch.cuda.max_memory_reserved(),
                                "seconds": time.perf_counter() - t0}
        if TRACE:
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            keep = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
                    "segment_unmap")
            trace = [(e["action"], e["addr"], e["size"], e.get("stream", 0)) for tr in snap["device_traces"] for e in tr
                     if e["action"] in keep]
            with gzip.open(stem + ".trace.json.gz", "wt") as f:
                json.dump(trace, f)
        real["allocated_between"] = torch.cuda.memory_allocated()
        real["reserved_now"] = torch.cuda.memory_reserved()
        used = _smi_used(os.getpid())
        real["device_used"] = used
        real["non_pytorch"] = None if used is None else used - torch.cuda.memory_reserved()
        rlog = OpLog(cuda=True)
        rlog.step = 2
        with rlog:
            step()
        torch.cuda.synchronize()
        rec["real"] = real
        with gzip.open(stem + ".ops.json.gz", "wt") as f:
            json.dump({"real": rlog.rows, "fake": [r for r in flog.rows if r["step"] == 1]}, f)
        del rlog
        try:  # the measured breakdown
            import vramnb

            rep = vramnb.profile_step(model, batch, lambda m, b: case.loss(m, b, recipe, "cuda"), opt)
            rec["profile"] = {"peak": rep.steps[-1].peak.allocated, "sources_at_peak": dict(rep.steps[-1].peak.sources)}
        except Exception as e:  # noqa: BLE001
            rec["profile_error"] = f"{type(e).__name__}: {str(e)[:500]}"
    except Exception as e:  # noqa: BLE001
        rec["real_error"] = f"{type(e).__name__}: {str(e)[:1000]}"
    json.dump(rec, open(stem + ".json", "w"), indent=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=2, metavar=("CASE", "RECIPE"))
    ap.add_argument("--cases", nargs="*")
    ap.add_argument("--sample", action="store_true")
    ap.add_argument("--recipes", nargs="*")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--deadline", type=float, default=500.0, help="seconds; running tasks are killed after it")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per task")
    ap.add_argument("--cuda-hidden", action="store_true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.one:
        one(a.one[0], a.one[1], a.out, a.cuda_hidden)
        return
    from zoo import cases

    names = a.cases or (SAMPLE if a.sample else [c.name for c in cases()])
    known = {c.name: c for c in cases()}
    tasks = [(n, r) for n in names if n in known for r in known[n].recipes() if not a.recipes or r in a.recipes]
    missing = [n for n in names if n not in known]
    if missing:
        print("not in the zoo:", missing, flush=True)
    env = dict(os.environ)
    if a.cuda_hidden:
        env["CUDA_VISIBLE_DEVICES"] = ""
    start, running, done = time.time(), [], 0
    while tasks or running:
        while tasks and len(running) < a.jobs and time.time() - start < a.deadline:
            n, r = tasks.pop(0)
            cmd = [sys.executable, __file__, "--one", n, r, "--out", a.out] + (["--cuda-hidden"] if a.cuda_hidden else [])
            log = open(os.path.join(a.out, f"{n.replace('/', '__')}__{r}.log"), "w")
            running.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), time.time(), n, r))
        for p, t0, n, r in list(running):
            if p.poll() is not None:
                running.remove((p, t0, n, r))
                done += 1
                print(f"[{time.time() - start:6.0f}s] done {n} {r} rc={p.returncode}", flush=True)
            elif time.time() - t0 > a.timeout or time.time() - start > a.deadline:
                p.kill()
                running.remove((p, t0, n, r))
                print(f"[{time.time() - start:6.0f}s] KILLED {n} {r}", flush=True)
        if not tasks or time.time() - start >= a.deadline:
            tasks = [] if time.time() - start >= a.deadline else tasks
        time.sleep(0.5)
    print(f"{done} tasks done in {time.time() - start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
