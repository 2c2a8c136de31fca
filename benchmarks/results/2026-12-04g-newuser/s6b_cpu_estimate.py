"""estimate(device='cpu') against the exact CPU measurement, per model; Qwen in eval() with checkpointing."""
import sys, warnings
warnings.filterwarnings("ignore", message="The module hierarchy")
sys.path.insert(0, '.')
import torch, vramnb, torch.nn.functional as F
from models import lstm_tied, qwen2, t5, unet
def wrap_gat():
    from models import gat
    name, gm, data, glf, gopt = gat()
    class Wrap(torch.nn.Module):
        def __init__(s, g): super().__init__(); s.g = g
        def forward(s, x, ei):
            from types import SimpleNamespace
            return s.g(SimpleNamespace(x=x, edge_index=ei))
    return "gat_tuple", Wrap(gm), (data.x, data.edge_index, data.y), (lambda m, b: F.cross_entropy(m(b[0], b[1]), b[2])), gopt
for build in [lstm_tied, qwen2, t5, unet, wrap_gat]:
    name, m, b, lf, opt = build()
    rep = vramnb.profile_step(m, b, lf, opt)
    est = vramnb.estimate(m, b, lf, opt, device="cpu")
    a, e = rep.steady.peak.allocated, est.peak_allocated
    print(f"{name}: measured steady peak {a} B, estimate(device='cpu') {e} B, error {100*(e-a)/a:+.1f} %")
    for k in rep.steady.peak.sources:
        x, y = rep.steady.peak.sources[k], est.steady.peak.sources.get(k)
        if x != y: print(f"   {k}: measured {x}, estimated {y}")
    if name == "lstm_tied_sgdm":
        print(est)
name, m, b, lf, opt = qwen2(); m.eval()
rep = vramnb.profile_step(m, b, lf, opt, recipe={"checkpointing": "every block"})
print("\n".join(l for l in str(rep).splitlines() if "⚠" in l or "checkpoint" in l))
