"""%load_ext vramnb, %%vram, %vram, %vram free on a small CNN with BatchNorm + Adam, driven through IPython."""
import sys, time
sys.path.insert(0, '.')
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
def cell(src, label=None):
    print(f"\n===== In: {label or src.splitlines()[0]}")
    t = time.perf_counter(); r = ip.run_cell(src); dt = time.perf_counter() - t
    print(f"----- [{dt:.2f} s wall, success={r.success}]")
    return r
cell("%load_ext vramnb")
cell("""
import torch, torch.nn as nn, torch.nn.functional as F, random, numpy as np
from common import snap, diff, nbytes_params
torch.manual_seed(0)
class CNN(nn.Module):
    def __init__(s):
        super().__init__()
        s.c1 = nn.Conv2d(3, 32, 3, padding=1); s.b1 = nn.BatchNorm2d(32)
        s.c2 = nn.Conv2d(32, 64, 3, padding=1); s.b2 = nn.BatchNorm2d(64)
        s.fc = nn.Linear(64*8*8, 10)
    def forward(s, x):
        x = F.max_pool2d(F.relu(s.b1(s.c1(x))), 2)
        x = F.max_pool2d(F.relu(s.b2(s.c2(x))), 2)
        return s.fc(x.flatten(1))
model = CNN(); opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(64, 3, 32, 32); y = torch.randint(0, 10, (64,))
P = nbytes_params(model); print('param bytes', P, 'params', sum(p.numel() for p in model.parameters()))
""", "setup")
cell("%%vram\nbig = torch.empty(256 * 2**20, dtype=torch.uint8)", "%%vram 256MiB uint8")
cell("%%vram\ndel big", "%%vram del big")
cell("""%%vram -o rep1
loss = F.cross_entropy(model(x), y)
loss.backward()
opt.step(); opt.zero_grad()
""", "%%vram first train step (expect +P grads? no: set_to_none; +2P adam state)")
cell("print('expected delta: adam state 2P + step counters =', 2*P, '+', 4*len(list(model.parameters())), '+ loss 4B'); print(repr(rep1)); print([a for a in dir(rep1) if not a.startswith('_')])")
cell("%vram", "%vram")
cell("%%vram --breakdown\nloss = F.cross_entropy(model(x), y)\nloss.backward()", "--breakdown")
cell("s0 = snap(model, opt)")
cell("%vram", "%vram after backward (grads held)")
cell("%vram free", "%vram free")
cell("print('state after %vram/%vram free:', diff(s0, snap(model, opt)))")
cell("%%vram --budget 1MiB\nz = torch.zeros(1024, 1024)", "--budget 1MiB")
cell("%%vram -d cuda\nz2 = torch.zeros(10)", "-d cuda on CPU machine")
cell("%%vram --bogus\nz3 = 1", "bad flag")
cell("%%vram --budget 24GB\nz3 = 1", "budget 24GB (decimal)")
cell("%%vram --budget lots\nz3 = 1", "budget lots")
cell("%vram bogus", "%vram bogus")
cell("%%vram\nraise ValueError('boom')", "cell raising")
cell("%vram history", "%vram history")
cell("%vram -h", "%vram -h")
# timing: plain cell
cell("import time as _t\n_ts=[]\nfor _ in range(5):\n    _a=_t.perf_counter(); get_ipython().run_cell('%%vram -q\\n_q = 1'); _ts.append(_t.perf_counter()-_a)\nprint('plain %%vram -q cell times', [round(t,3) for t in _ts])", "timing plain cells")
cell("many = [torch.zeros(4) for _ in range(100000)]", "100k tensors")
cell("_a=time.perf_counter() if 'time' in dir() else None", "")
cell("import time\n_a=time.perf_counter(); get_ipython().run_line_magic('vram', ''); print('%vram with 100k tensors took', round(time.perf_counter()-_a,2), 's')", "%vram 100k tensors")
cell("_a=time.perf_counter(); get_ipython().run_cell('%%vram\\n_q = 2'); print('%%vram cell with 100k tensors live took', round(time.perf_counter()-_a,2), 's')", "%%vram with 100k live")
cell("_a=time.perf_counter(); get_ipython().run_cell('%%vram\\n_q = 3'); print('second', round(time.perf_counter()-_a,2), 's')")
cell("del many")
cell("s1 = snap(model, opt); print('state over the whole session (should differ only where cells trained):', diff(s0, s1))")
