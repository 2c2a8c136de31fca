import sys, time, torch, traceback, warnings
sys.path.insert(0, '.')
import vramnb
from models import t5, unet, qwen2, gat
from common import snap, diff
import torch.nn.functional as F
# T5: does a plain step work?
name, m, b, lf, opt = t5()
try:
    out = m(**b); print("T5 plain forward ok, loss", float(out.loss))
except Exception as e:
    print("T5 plain forward raises too:", type(e).__name__, e)
# unet plain step time vs profile_step's step time
name, m, b, lf, opt = unet()
for i in range(2):
    t = time.perf_counter(); l = lf(m, b); l.backward(); opt.step(); opt.zero_grad(); print("unet plain step", round(time.perf_counter()-t, 2), "s")
# qwen fresh: does the ModTracker line show up on its own?
name, m, b, lf, opt = qwen2()
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    rep = vramnb.profile_step(m, b, lf, opt)
print("warnings during qwen profile_step:", [str(x.message)[:120] for x in w])
print("\n".join(l for l in str(rep).splitlines() if "restored" in l or "not checked" in l))
t = time.perf_counter(); l = m(**b).loss; l.backward(); opt.step(); opt.zero_grad(); print("qwen plain step", round(time.perf_counter()-t, 2), "s")
# PyG: the error, then the workaround a user would try
name, m, data, lf, opt = gat()
try:
    vramnb.profile_step(m, data, lf, opt)
except Exception as e:
    print("PyG Data error:", type(e).__module__, type(e).__name__, "|", e)
class Wrap(torch.nn.Module):
    def __init__(s, g): super().__init__(); s.g = g
    def forward(s, x, ei):
        from types import SimpleNamespace
        return s.g(SimpleNamespace(x=x, edge_index=ei))
w = Wrap(m); s0 = snap(w, opt)
rep = vramnb.profile_step(w, (data.x, data.edge_index, data.y), lambda m, b: F.cross_entropy(m(b[0], b[1]), b[2]), opt)
print(rep); print("restored:", diff(s0, snap(w, opt)))
P = sum(p.numel()*4 for p in m.parameters()); print("MY COUNT params", P, "adam", 2*P + 4*len(list(m.parameters())))
open("s2b_gat.txt", "w").write(str(rep))
