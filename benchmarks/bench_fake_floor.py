"""What an estimate costs beyond PyTorch's own fake tensors (issue 15, item 2).

For each torchvision model named, in a fresh process with one intra-op thread, CPU
seconds (``time.process_time``, less sensitive to other load than wall time) of:

* ``floor``: the two training steps an estimate runs (forward, ``.sum()`` loss,
  backward, AdamW step), on a model built under a bare ``FakeTensorMode``: what
  PyTorch's fake tensors alone cost, step by step (the first step pays the fake
  mode's cache misses: a meta kernel or decomposition per new operator and shape);
* ``estimate``: ``vramnb.estimate(model, batch, loss, AdamW, target="H100")`` of the
  same model with real weights, called twice (the second call finds PyTorch's fake
  dispatch cache warm).

    python benchmarks/bench_fake_floor.py --out floor.json densenet201 mvit_v2_s resnet50
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _model_and_batch(name: str, batch_size: int):  # type: ignore[no-untyped-def]
    """torchvision's model ``name`` (any of ``list_models()``) and a batch for it: 16 frames for video models."""
    import torch
    import torchvision

    video = name in torchvision.models.list_models(module=torchvision.models.video)
    shape = (batch_size, 3, 16, 224, 224) if video else (batch_size, 3, 224, 224)
    return torchvision.models.get_model(name), torch.randn(shape)


def one(name: str, batch_size: int) -> dict:
    import torch
    import torchvision

    torch.set_num_threads(1)
    out: dict = {"model": name, "batch_size": batch_size, "torch": torch.__version__,
                 "torchvision": torchvision.__version__}
    if sys.argv[-1] == "floor":
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            m, x = _model_and_batch(name, batch_size)
            opt = torch.optim.AdamW(m.parameters())
            FakeTensorMode.cache_clear()
            steps = []
            for _ in range(2):
                c0 = time.process_time()
                m(x).sum().backward()
                opt.step()
                opt.zero_grad()
                steps.append(time.process_time() - c0)
        out["floor_steps_s"] = steps
        return out
    import vramnb

    m, x = _model_and_batch(name, batch_size)
    opt = torch.optim.AdamW(m.parameters())
    from torch._subclasses.fake_tensor import FakeTensorMode

    FakeTensorMode.cache_clear()  # as for the floor: the model's construction made no fake entries here anyway
    calls = []
    for _ in range(2):
        c0 = time.process_time()
        vramnb.estimate(m, x, lambda mm, b: mm(b).sum(), opt, target="H100")
        calls.append(time.process_time() - c0)
    out["estimate_calls_s"] = calls
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    results = []
    for name in a.models:
        rec: dict = {}
        for part in ("floor", "estimate"):
            code = (f"import sys, json; sys.argv.append({part!r}); sys.path.insert(0, {sys.path[0]!r}); "
                    f"import bench_fake_floor as b; print(json.dumps(b.one({name!r}, {a.batch_size})))")
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
            if p.returncode:
                rec[part + "_error"] = p.stderr[-2000:]
                continue
            rec.update(json.loads(p.stdout.strip().splitlines()[-1]))
        f, e = rec.get("floor_steps_s"), rec.get("estimate_calls_s")
        if f and e:
            rec["over_floor_first_pct"] = 100 * (e[0] / sum(f) - 1)
            rec["over_floor_second_pct"] = 100 * (e[1] / (2 * f[1]) - 1)  # both steps' ops cached: two warm steps
        print(json.dumps(rec), flush=True)
        results.append(rec)
        json.dump(results, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
