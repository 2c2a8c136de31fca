"""Where a training step's memory goes, on real architectures, and what it costs to find out.

Run on a CUDA GPU:  python benchmarks/bench_step.py --out step.json

For each architecture (fp32, AdamW): a plain steady-state step measured with
``torch.cuda.max_memory_allocated`` (the reference), then ``vramnb.profile_step``
on the same model: its steady-state peak against the reference, and its
breakdown. For GPT-2 small, the step time of: a plain step, vramnb's profiled
step (with and without per-module attribution), the same step under an empty
``TorchDispatchMode``, and under PyTorch's ``MemTracker`` — side by side.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from archs import archs as _archs  # noqa: E402


def archs(device):
    """The seven architectures of this benchmark's table (benchmarks/archs.py, without the Llama)."""
    return {k: v for k, v in _archs(device).items() if k != "llama-gqa"}


def default_loss(model, batch):
    from vramnb._step import default_loss as dl

    return dl(model, batch)


def plain_step(model, batch, loss_fn, opt):
    loss = (loss_fn or default_loss)(model, batch)
    loss.backward()
    del loss
    opt.step()
    opt.zero_grad(set_to_none=True)


def timed(fn, n):
    ts = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    import vramnb
    from torch.utils._python_dispatch import TorchDispatchMode

    device = torch.device("cuda")
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "archs": {}}
    for name, make in archs(device).items():
        if args.only and name not in args.only.split(","):
            continue
        torch.manual_seed(0)
        model, batch, loss_fn = make()
        opt = torch.optim.AdamW(model.parameters())
        plain_step(model, batch, loss_fn, opt)  # state exists: steady state from here on
        plain_step(model, batch, loss_fn, opt)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        plain_step(model, batch, loss_fn, opt)
        torch.cuda.synchronize()
        ref_peak = torch.cuda.max_memory_allocated()
        t_plain = timed(lambda: plain_step(model, batch, loss_fn, opt), 5)  # noqa: F821 - pyflakes reads the lambda after the del below
        rep = vramnb.profile_step(model, batch, loss_fn, opt, steps=4, module_depth=None)
        peak = rep.steady.peak
        t_prof = statistics.median(s.step_time for s in rep.steps[1:])
        rec = {
            "reference_peak_allocated": ref_peak,
            "vramnb_peak_allocated": peak.allocated,
            "peak_error": (peak.allocated - ref_peak) / ref_peak,
            "peak_phase": rep.steady.peak_phase,
            "sources_at_peak": peak.sources,
            "unattributed_at_peak": peak.unattributed,
            "max_unattributed_at_marks": max(abs(b.unattributed) for s in rep.steps for _, b in s.marks),
            "reserved_at_end": rep.steady.marks[-1][1].reserved,
            "non_pytorch": rep.steady.marks[-1][1].non_pytorch,
            "plain_step_s": t_plain,
            "profiled_step_s": t_prof,
            "overhead": t_prof / t_plain - 1,
        }
        if name == "gpt2-small":
            rep_mod = vramnb.profile_step(model, batch, loss_fn, opt, steps=4, module_depth=1)
            rec["profiled_step_with_modules_s"] = statistics.median(s.step_time for s in rep_mod.steps[1:])
            rec["modules"] = [vars(m) for m in rep_mod.steady.modules]

            class Empty(TorchDispatchMode):
                def __torch_dispatch__(self, func, types, a=(), k=None):
                    return func(*a, **(k or {}))

            def under_empty():
                with Empty():
                    plain_step(model, batch, loss_fn, opt)  # noqa: F821 - pyflakes reads the lambda after the del below

            rec["empty_dispatch_mode_step_s"] = timed(under_empty, 5)
            try:
                from torch.distributed._tools.mem_tracker import MemTracker

                def under_memtracker():
                    mt = MemTracker()
                    mt.track_external(model, opt, batch)  # noqa: F821 - pyflakes reads the lambda after the del below
                    with mt:
                        plain_step(model, batch, loss_fn, opt)  # noqa: F821 - pyflakes reads the lambda after the del below
                    return mt

                under_memtracker()
                rec["memtracker_step_s"] = timed(under_memtracker, 3)
                mt = under_memtracker()
                snap = next(v for d, v in mt.get_tracker_snapshot("peak").items() if d.type == "cuda")
                rec["memtracker_peak_total"] = snap["Total"]
                del mt, under_memtracker
            except Exception as e:  # noqa: BLE001
                rec["memtracker_error"] = f"{type(e).__name__}: {e}"
            del rep_mod, under_empty
        out["archs"][name] = rec
        print(name, json.dumps({k: v for k, v in rec.items() if k not in ("sources_at_peak", "modules")}), flush=True)
        del model, opt, batch, rep
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
