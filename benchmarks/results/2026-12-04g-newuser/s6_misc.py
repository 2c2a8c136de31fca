"""estimate on device='cpu' against the measured step; warnings for techniques that do nothing; %vram on."""
import sys, time, warnings
warnings.filterwarnings("ignore", message="The module hierarchy")
sys.path.insert(0, '.')
import torch, vramnb
from common import snap, diff
from models import cnn, lstm_tied, gat
for build in [cnn, lstm_tied]:
    name, m, b, lf, opt = build()
    rep = vramnb.profile_step(m, b, lf, opt)
    est = vramnb.estimate(m, b, lf, opt, device="cpu")
    print(name, "measured steady peak", rep.steady.peak.allocated, "| estimate(device='cpu')", est.peak_allocated,
          "| first", rep.first.peak.allocated, est.first.peak.allocated if hasattr(est, 'first') else '')
    for k in rep.steady.peak.sources:
        a, e = rep.steady.peak.sources[k], est.steady.peak.sources.get(k) if hasattr(est, 'steady') else None
        if a != e: print("   differs:", k, a, e)
# checkpointing on a model in eval(): README promises a warning
name, m, b, lf, opt = lstm_tied(); m.eval()
s0 = snap(m, opt)
rep = vramnb.profile_step(m, b, lf, opt, recipe=vramnb.Recipe(checkpointing="every block"))
print("\n".join(l for l in str(rep).splitlines() if "⚠" in l or "checkpoint" in l))
print("eval-mode model restored (still eval):", diff(s0, snap(m, opt)), all(not x.training for x in m.modules()))
# bf16 autocast on a model with no eligible ops? plain LSTM on CPU
rep = vramnb.profile_step(m, b, lf, opt, recipe={"precision": "bf16"})
print("\n".join(l for l in str(rep).splitlines() if "⚠" in l or "autocast" in l))
# Recipe typo
try: vramnb.Recipe(precison="bf16")
except Exception as e: print("Recipe typo:", type(e).__name__, e)
# %vram on in IPython
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance(); ip.run_cell("%load_ext vramnb")
ip.run_cell("import torch"); ip.run_cell("%vram on")
ip.run_cell("a = torch.zeros(1000, 1000)", store_history=True)
ip.run_cell("b = a * 2", store_history=True)
ip.run_cell("%vram off")
ip.run_cell("c = a + 1", store_history=True)
print("(above: 2 reports expected, none after %vram off)")
