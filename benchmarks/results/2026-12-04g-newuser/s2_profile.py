"""profile_step on every model: exact parameter/gradient/optimizer bytes vs my own count; state restored bit for bit."""
import sys, time, random, numpy as np, torch
sys.path.insert(0, '.')
import vramnb
from common import snap, diff
from models import ALL
def expected(model, opt):
    ps = {id(p): p for p in model.parameters()}  # dedup tied
    P = sum(p.numel() * p.element_size() for p in ps.values())
    trainable = [p for p in ps.values() if p.requires_grad]
    G = sum(p.numel() * p.element_size() for p in trainable)
    name = type(opt).__name__
    if name in ("Adam", "AdamW"):
        O = 2 * G + 4 * len(trainable)  # exp_avg, exp_avg_sq + float32 step scalars
    elif name == "SGD":
        O = G
    return P, G, O
for build in ALL:
    random.seed(1); np.random.seed(1); torch.manual_seed(1)
    name, model, batch, loss_fn, opt = build()
    # warm the optimizer so its state exists as in a real loop? no: first profile with lazily-built state
    s0 = snap(model, opt); it = iter(range(10)); next(it)
    t = time.perf_counter()
    try:
        rep = vramnb.profile_step(model, batch, loss_fn, opt)
    except Exception as e:
        print(f"### {name}: profile_step RAISED {type(e).__name__}: {e}"); continue
    dt = time.perf_counter() - t
    s1 = snap(model, opt)
    P, G, O = expected(model, opt)
    print(f"\n########## {name}  ({sum(p.numel() for p in model.parameters())/1e6:.2f} M params incl. tied dupes) profile_step {dt:.1f}s")
    print(rep)
    print("restored:", diff(s0, s1), "| iterator next:", next(it))
    if name == "cnn_bn_adam":
        print("StepReport attrs:", [a for a in dir(rep) if not a.startswith('_')])
    try:
        src = rep.steady if hasattr(rep, 'steady') else None
    except Exception as e:
        src = None
    print("MY COUNT: params", P, "grads", G, "optimizer", O)
    with open(f"s2_{name}.txt", "w") as f: f.write(str(rep))
    globals()[f"rep_{name}"] = rep
    torch.save({"rep_repr": repr(rep)[:2000]}, "/dev/null")
