"""max_batch_size on a diffusers UNet for a T4; %vram panel / %vram fit --recipe in a terminal; history to_dataframe."""
import sys, time, warnings; sys.path.insert(0, '.')
warnings.filterwarnings("ignore", message="The module hierarchy")
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
def cell(src, label=None):
    print(f"\n===== In: {label or src.splitlines()[0]}")
    t = time.perf_counter(); r = ip.run_cell(src, store_history=True); print(f"----- [{time.perf_counter()-t:.2f} s wall, success={r.success}]")
cell("%load_ext vramnb")
cell("import torch, vramnb\nfrom models import unet, cnn\nfrom common import snap, diff\nname, um, ub, ulf, uopt = unet(); s0 = snap(um, uopt)")
cell("r = vramnb.max_batch_size(um, ub, ulf, uopt, target='T4', progress=False); print(r)", "UNet max_batch_size T4")
cell("print(diff(s0, snap(um, uopt)))")
cell("name, model, batch, loss_fn, opt = cnn()")
cell("%vram panel model batch loss_fn opt", "%vram panel in terminal")
cell("%vram fit model batch loss_fn opt --target T4 --batch-size 100000 --recipe precision=bf16", "%vram fit --recipe bf16 on T4 (bf16 not on T4)")
cell("%%vram -q\nx = torch.ones(10)")
cell("print(vramnb.history().to_dataframe().tail(3).to_string())", "history dataframe")
