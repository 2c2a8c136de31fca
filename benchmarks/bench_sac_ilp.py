"""vramnb.fit's checkpointing per block beside PyTorch's own ``sac_milp`` (issue 14), on a GPU.

PyTorch's ``torch.distributed._tools.sac_ilp.sac_milp`` chooses selective activation
checkpointing per module by a mixed-integer program (``pulp``'s CBC solver) over statistics
that ``MemTracker``, ``RuntimeEstimator`` and ``SACEstimator`` gather on a fake step (the
pipeline of PyTorch's ``test/distributed/_tools/test_sac_ilp.py``). For each model of
``bench_fit.models()`` in fp32 with AdamW, under the same budget as ``bench_fit`` (the plain
step's predicted device memory x ``CAP``, less the memory outside PyTorch's allocator):

* ``sac_milp``: whether it runs, its seconds, the modules it checkpoints (the fraction of
  their activations discarded), its predicted recomputation time and peak;
* ``vramnb.fit`` with checkpointing only (``allow={"checkpointing": [...]}``): its plan, the
  predicted step time against the plain step, seconds.

Neither choice is run here (``bench_fit.py`` runs vramnb's); the figures are what each
predicts. Writes ``$OUT/sac-ilp.jsonl``.

    python benchmarks/bench_sac_ilp.py [model ...]   # needs pulp (a wheel carried to the GPU machine)
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(__file__))
import vramnb  # noqa: E402
from bench_fit import CAP, models  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")


def step(model, batch, opt) -> None:
    loss = model(**batch).loss
    loss.backward()
    opt.step()
    opt.zero_grad()


def pytorch_sac(make, make_batch, budget_gib: float) -> dict:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.ilp_utils import aggregate_stats, parse_module_info
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed._tools.runtime_estimator import RuntimeEstimator
    from torch.distributed._tools.sac_estimator import SACEstimator
    from torch.distributed._tools.sac_ilp import sac_milp

    dev = torch.device("cuda", torch.cuda.current_device())  # aggregate_stats looks up "cuda:0", not "cuda"
    t0 = time.perf_counter()
    # built on the device inside the fake mode, as PyTorch's test_sac_ilp.py does: a fake
    # model's `.to("cuda")` fails to swap its parameters ("has weakref associated with it")
    with FakeTensorMode(), torch.device(dev):
        torch.manual_seed(0)
        model = make().train()
        batch = dict(make_batch())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        mem = MemTracker()
        mem.track_external(model, opt)
        with mem as mt:
            for i in range(2):
                step(model, batch, opt)
                if i == 0:
                    mt.reset_mod_stats()
        rt = RuntimeEstimator()
        with rt(estimate_mode_type="operator-level-cost-model"):
            step(model, batch, opt)
        sac = SACEstimator()
        with sac(estimate_mode_type="operator-level-cost-model"):
            loss = model(**batch).loss
        loss.backward()
    info = aggregate_stats(model, mem, rt, sac, dev)
    graph = parse_module_info(info)
    decisions, recompute, peak = sac_milp(graph, memory_budget=budget_gib, world_size=1)
    return {"seconds": time.perf_counter() - t0, "decisions": decisions, "recompute_ms": recompute,
            "peak": peak, "solved": peak != -1}


def ours(make, make_batch, cap: int) -> dict:
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = make().to(dev).train()
    batch = {k: v.to(dev) for k, v in make_batch().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    t0 = time.perf_counter()
    r = vramnb.fit(model, batch, None, opt, target=cap, margin=0.0, progress=False,
                   allow={"checkpointing": ["every 2nd block", "every block"]})
    out = {"seconds": time.perf_counter() - t0, "plans": [(p.recipe.describe(), p.ratio, p.fits) for p in r.plans]}
    if r.best is not None:
        out.update(best=r.best.recipe.describe(), ratio=r.best.ratio, peak=r.best.peak)
    del model, batch, opt
    torch.cuda.empty_cache()
    return out


def main(names: list[str]) -> None:
    path = os.path.join(OUT, "sac-ilp.jsonl")
    zoo = models()
    for name in names or list(zoo):
        make, make_batch = zoo[name]
        rec: dict = {"model": name}
        try:
            torch.manual_seed(0)
            model = make().cuda().train()
            batch = {k: v.cuda() for k, v in make_batch().items()}
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            plain = vramnb.estimate(model, batch, None, opt, steps=1, warm_optimizer=True)
            del model, batch, opt
            torch.cuda.empty_cache()
            cap = int(plain.device_memory * CAP)
            outside = plain.device_memory - (plain.peak_reserved or 0)
            rec.update(cap=cap, budget_gib=(cap - outside) / 2**30)
            rec["vramnb"] = ours(make, make_batch, cap)
            try:
                rec["sac_milp"] = pytorch_sac(make, make_batch, rec["budget_gib"])
            except Exception:  # noqa: BLE001 - recorded: where PyTorch's tool does not run
                rec["sac_milp"] = {"error": traceback.format_exc()[-1500:]}
        except Exception:  # noqa: BLE001
            rec["error"] = traceback.format_exc()[-1500:]
        with open(path, "a") as f:
            f.write(json.dumps(rec, default=str) + "\n")
        print(json.dumps(rec, default=str)[:1500], flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
