"""fit, %vram estimate / fit magics, max_batch_size on a graph batch, CPU out-of-memory post-mortem, panel in a terminal."""
import sys, time
sys.path.insert(0, '.')
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
def cell(src, label=None):
    print(f"\n===== In: {label or src.splitlines()[0]}")
    t = time.perf_counter(); r = ip.run_cell(src, store_history=True); dt = time.perf_counter() - t
    print(f"----- [{dt:.2f} s wall, success={r.success}]"); return r
cell("%load_ext vramnb")
cell("""
import warnings; warnings.filterwarnings("ignore", message="The module hierarchy")
import torch, random, numpy as np, vramnb, torch.nn.functional as F
from common import snap, diff
from models import qwen2, gat, cnn, unet
random.seed(7); np.random.seed(7)
name, model, batch, loss_fn, opt = qwen2()
ids = torch.randint(0, 8000, (32, 256)); batch = {"input_ids": ids, "labels": ids}
s0 = snap(model, opt)
""", "setup qwen2, batch 32x256")
cell("%vram estimate model batch loss_fn opt --target T4 --recipe precision=bf16", "%vram estimate (loss_fn is None)")
cell("%vram estimate model batch None opt --target T4", "%vram estimate with None literal")
cell("%vram estimate model batch --target \"RTX 3060\" --max-batch", "%vram estimate --max-batch, no optimizer")
cell("%vram fit model batch opt --target \"RTX 3060 (12 GB)\" --batch-size 256", "%vram fit qwen bs256 on a 3060")
cell("plan = vramnb.fit(model, batch, None, opt, target='T4', batch_size=512, progress=False)\nprint(plan)\nprint(plan.code)", "fit bs512 T4")
cell("plan2 = vramnb.fit(model, batch, None, opt, target='T4', batch_size=4096, progress=False)\nprint(plan2)\nprint(plan2.code)", "fit that cannot fit")
cell("print('qwen restored after estimates/fits:', diff(s0, snap(model, opt)))")
cell("""
from torch.utils.data import DataLoader, TensorDataset
g = torch.Generator().manual_seed(11)
dl = DataLoader(TensorDataset(ids), batch_size=8, shuffle=True, generator=g)
itr = iter(dl); first = next(itr)
gs = g.get_state().clone()
plan3 = vramnb.fit(model, dl, lambda m, b: m(input_ids=b[0], labels=b[0]).loss, opt, target='T4', progress=False)
print(plan3)
print('generator unchanged:', torch.equal(gs, g.get_state()), '| live iterator continues:', next(itr)[0].shape)
""", "fit with a DataLoader")
cell("""
name, gm, data, glf, gopt = gat()
class Wrap(torch.nn.Module):
    def __init__(s, g): super().__init__(); s.g = g
    def forward(s, x, ei):
        from types import SimpleNamespace
        return s.g(SimpleNamespace(x=x, edge_index=ei))
w = Wrap(gm); gb = (data.x, data.edge_index, data.y)
gl = lambda m, b: F.cross_entropy(m(b[0], b[1]), b[2])
e = vramnb.estimate(w, gb, gl, gopt, target='T4'); print(str(e).splitlines()[-12:])
r = vramnb.max_batch_size(w, gb, gl, gopt, target='T4', progress=False); print(r)
""", "graph batch: estimate + max_batch_size (edge_index is (2, E))")
cell("""%%vram
huge = torch.empty(2**44, dtype=torch.uint8)
""", "CPU OOM in %%vram: 16 TiB")
cell("""%%vram
acts = []
for i in range(3):
    acts.append(torch.randn(1024, 1024, requires_grad=True) * 2)
boom = torch.empty(2**44)
""", "CPU OOM with a list of graph tensors")
cell("""
cname, cm, cb, clf, copt = cnn()
p = vramnb.panel(cm, cb, clf, copt, target='T4')
p.run(); print(p)
""", "panel in a terminal")
cell("""
import time as _t
name, um, ub, ulf, uopt = unet()
t=_t.perf_counter(); ue = vramnb.estimate(um, ub, ulf, uopt, target='L4'); print('unet estimate', round(_t.perf_counter()-t,1),'s'); print(str(ue).split('\\n')[0]); print(ue.fits, ue.peak_allocated)
""", "unet estimate timing")
cell("""
with vramnb.vram() as mm:
    l = ulf(um, ub); l.backward()
print(mm.report)
""", "context manager")
