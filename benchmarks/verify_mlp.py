"""Why fit(verify=True)'s MLP peaked above its prediction (run 20: +10.7 %), on a GPU.

The model of ``tests/test_cuda.py``'s verify test (4 blocks of Linear 1024→4096, GELU,
Linear 4096→1024; batch 8192×1024 fp32; AdamW; a card of 0.8 of the plain step's device
memory): ``fit(..., verify=True)``'s best plan, its predicted and measured peak allocated,
the estimate's peak phase and sources, and what is alive at the real peak
(``peak_holders.holders``: the allocator's recorded history replayed). Writes
``$OUT/verify-mlp.jsonl``.

    python benchmarks/verify_mlp.py
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import vramnb  # noqa: E402
from peak_holders import holders, record  # noqa: E402
from vramnb.techniques.code import step_code  # noqa: E402



def main() -> None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                                    torch.nn.Linear(4096, 1024)) for _ in range(4)]).cuda()
    opt = torch.optim.AdamW(net.parameters())
    x = torch.randn(8192, 1024, device="cuda")
    loss = lambda m, b: m(b).square().mean()  # noqa: E731
    plain = vramnb.estimate(net, x, loss, opt, steps=1, warm_optimizer=True, target=2**36)
    r = vramnb.fit(net, x, loss, opt, target=int(plain.device_memory * 0.8), verify=True, progress=False)
    best = r.best
    rec = {"best": best.recipe.describe(), "predicted_peak": best.peak,
           "verified_peak": r.verified.steady.peak.allocated, "verified_phase": r.verified.steady.peak_phase,
           "verified_sources": r.verified.steady.peak.sources}
    est = vramnb.estimate(net, x, loss, opt, recipe=best.recipe)
    rec.update(estimate_peak=est.peak_allocated, estimate_phase=est.steps[-1].peak_phase,
               estimate_sources=est.steps[-1].peak.sources, plans=[(p.recipe.describe(), p.peak, p.fits) for p in r.plans])
    code = step_code(best.recipe, vramnb.Recipe(), net, x, loss)
    setup, _, step = code.partition("# each step:\n")
    ns = {"torch": torch, "model": net, "batch": x, "optimizer": opt, "loss_fn": loss}
    exec(setup, ns)
    rec["code"] = code
    rec.update(holders(lambda: exec(step, ns)))
    record(rec, "verify-mlp.jsonl")


if __name__ == "__main__":
    main()
