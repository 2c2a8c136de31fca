"""Where the step-time model is wrong: measured on a GPU against the roofline (issue 14).

1. The host's cost per operator, on micro-benchmarks that are no model of the zoo:
   * ``forward``: ``x = x.add(1)`` issued from Python, 5 000 times, no synchronisation
     (host seconds per operator);
   * ``module``: a 200-layer ``nn.Sequential`` of tiny ``Linear``/``GELU``/``LayerNorm``
     (host seconds per ATen operator, module calls included);
   * ``backward``: the autograd engine running a 2 000-node chain of ``mul``/``add``
     (host seconds per backward operator).
2. Per model (``bench_fit.models()`` and the validation set ``VALIDATION``): the plain step
   (AdamW) in fp32 and under bf16 autocast, at the benchmark's batch and at batch 1: the
   measured step time (median of 5 after 2 warm-ups), against the roofline's sum and the
   fake step's operator counts (forward and backward), from ``vramnb.estimate(step_time=True)``.
3. For the first model in bf16: ``torch.profiler``'s CUDA time per ATen operator, against the
   roofline's per operator (``StepTime.by_op``).

Writes ``$OUT/step-time.jsonl``, one line per measurement.

    python benchmarks/bench_step_time.py
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(__file__))
import vramnb  # noqa: E402
from bench_fit import models  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")
PATH = os.path.join(OUT, "step-time.jsonl")


def emit(rec: dict) -> None:
    with open(PATH, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps(rec)[:400], flush=True)


def host_costs() -> None:
    dev = torch.device("cuda")
    x = torch.zeros(256, device=dev)
    for _ in range(200):
        x = x.add(1)
    torch.cuda.synchronize()
    n = 5000
    t0 = time.perf_counter()
    for _ in range(n):
        x = x.add(1)
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    total = time.perf_counter() - t0
    emit({"what": "host forward op", "seconds_per_op": host / n, "gpu_bound_seconds_per_op": total / n})

    layers = []
    for _ in range(200):
        layers += [torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.LayerNorm(16)]
    seq = torch.nn.Sequential(*layers).to(dev)
    inp = torch.randn(4, 16, device=dev)
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        seq(inp)
    ops = Count.n
    for ctx in (contextlib.nullcontext, lambda: torch.autocast("cuda", torch.bfloat16)):
        times = []
        for _ in range(7):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with ctx():
                seq(inp)
            times.append(time.perf_counter() - t0)
        emit({"what": "host module op", "autocast": ctx is not contextlib.nullcontext, "aten_ops": ops,
              "seconds_per_op": statistics.median(times[2:]) / ops})

    a = torch.randn(256, device=dev, requires_grad=True)
    y = a
    for i in range(1000):
        y = y * 1.0001 + 0.001
    Count.n = 0
    with Count():
        y.sum().backward(retain_graph=True)
    bops = Count.n
    times = []
    for _ in range(7):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y.sum().backward(retain_graph=True)
        times.append(time.perf_counter() - t0)
    emit({"what": "host backward op", "aten_ops": bops, "seconds_per_op": statistics.median(times[2:]) / bops})


def step_seconds(model, batch, opt, bf16: bool) -> float:
    ctx = (lambda: torch.autocast("cuda", torch.bfloat16)) if bf16 else contextlib.nullcontext
    times = []
    for i in range(7):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with ctx():
            loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def tiny(batch: dict) -> dict:
    out = {}
    for k, v in batch.items():
        if v.dim() >= 2 and v.dtype == torch.long:
            out[k] = v[:1, :32]
        else:
            out[k] = v[:1]
    return out


def per_model(name, make, make_batch, profile: bool) -> None:
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = make().to(dev).train()
    torch.manual_seed(1)
    full = {k: v.to(dev) for k, v in make_batch().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for label, batch in (("full", full), ("batch 1", tiny(full))):
        for bf16 in (False, True):
            recipe = vramnb.Recipe(precision="bf16") if bf16 else None
            e = vramnb.estimate(model, batch, None, opt, recipe=recipe, target="H200", steps=1,
                                warm_optimizer=True, step_time=True)
            t = e.time
            measured = step_seconds(model, batch, opt, bf16)
            emit({"what": "step", "model": name, "batch": label, "bf16": bf16, "measured": measured,
                  "roofline": t.seconds, "compute": t.compute, "memory": t.memory, "ops": t.ops,
                  "backward_ops": t.backward_ops, "flops": t.total_flops, "bytes": t.bytes})
            if profile and label == "full" and bf16:
                from torch.profiler import ProfilerActivity, profile as prof

                with prof(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as p:
                    step_seconds(model, batch, opt, bf16)
                rows = {}
                for ev in p.key_averages():
                    if ev.key.startswith("aten::"):
                        rows[ev.key[6:]] = {"cuda_us": ev.self_device_time_total / 7, "count": ev.count / 7}
                pred = dict(sorted(t.by_op.items(), key=lambda kv: -kv[1])[:30])
                emit({"what": "by op", "model": name, "measured_us": rows,
                      "predicted_us": {k: v * 1e6 for k, v in pred.items()}})
    del model, opt, full
    torch.cuda.empty_cache()


def main() -> None:
    host_costs()
    zoo = models()
    for i, (name, (make, make_batch)) in enumerate(zoo.items()):
        try:
            per_model(name, make, make_batch, profile=i == 0)
        except Exception:  # noqa: BLE001
            emit({"what": "error", "model": name, "error": traceback.format_exc()[-1500:]})


if __name__ == "__main__":
    main()
