"""Every plan `fit` gives (GPT-2 config: 4 layers, 256 wide, vocabulary 2000, batch 64 x 256, AdamW,
target 2 GiB), its printed code executed on CPU, against `estimate(device="cpu", recipe=plan.recipe)`.
The code's autocast is CUDA's (`torch.autocast('cuda')`), which does nothing to CPU operators: the bf16
plans are measured on the GPU instead (gpu_fit_plans.py). Also writes fit_plans.json (codes, CUDA peaks)."""
import gc
import json

import torch
import transformers

import vramnb

torch.manual_seed(0)
cfg = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=2000, n_positions=256)
model = transformers.GPT2LMHeadModel(cfg)
opt = torch.optim.AdamW(model.parameters())
torch.manual_seed(0)
ids = torch.randint(0, 2000, (64, 256))
batch = {"input_ids": ids, "labels": ids.clone()}
plan = vramnb.fit(model, batch, optimizer=opt, target="2GiB", progress=False,
                  names={"model": "model", "batch": "batch", "optimizer": "opt"})
print(plan)
base = vramnb.estimate(model, batch, optimizer=opt, target="H200")
out = {"codes": {}, "peaks": {"baseline": [base.steps[-1].peak.allocated, base.steps[-1].peak.reserved]}}
sd = {k: v.clone() for k, v in model.state_dict().items()}
# what this script itself keeps beside each run: the user's model (its parameters), the state_dict copy
# (the tied lm_head/wte weight copied twice) and the first batch's labels (each run's batch has its own)
beside = sum(p.nbytes for p in model.parameters()) + sum(v.nbytes for v in sd.values()) + batch["labels"].nbytes
for p in plan.plans:
    setup, _, each = p.code.partition("# each step:\n")
    out["codes"][str(p.recipe)] = [setup, each]
    out["peaks"][str(p.recipe)] = [p.estimate.steps[-1].peak.allocated, p.estimate.steps[-1].peak.reserved]
    if "precision" in str(p.recipe) or not each:  # CUDA autocast: measured on the GPU; Recipe(): no code (your loop)
        continue
    est = vramnb.estimate(model, batch, optimizer=opt, device="cpu", recipe=p.recipe)
    m = transformers.GPT2LMHeadModel(cfg)
    m.load_state_dict(sd)
    ns = {"model": m, "batch": {"input_ids": ids, "labels": ids.clone()}, "opt": torch.optim.AdamW(m.parameters()),
          "torch": torch}
    exec(setup, ns)
    exec(each, ns)
    ns.pop("loss", None)
    gc.collect()
    with vramnb.vram("cpu") as r:
        exec(each, ns)
    ns.pop("loss", None)
    assert r.report is not None
    real = r.report.peak_allocated - beside
    e = est.steps[-1].peak.allocated
    print(f"{str(p.recipe):60s} estimate {e:>11} printed code run {real:>11} difference {e - real:+}", flush=True)
    del m, ns
    gc.collect()
json.dump(out, open("fit_plans.json", "w"), indent=1)
