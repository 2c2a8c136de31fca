# Ctrl-C while estimate/fit/max_batch_size registers its CUDA autocast policy (CudaPolicy.__enter__, ~90 ms
# and ~380 torch.library registrations per estimate; fit runs dozens of estimates) leaves the half-made
# torch.library.Library alive in the interrupted frame. IPython keeps that traceback (sys.last_traceback), so
# PyTorch's AutocastCPU kernels stay overridden: the user's own torch.autocast("cpu", bfloat16) silently stops
# casting (F.linear returns float32), also sdpa/dropout, until another error replaces the traceback.
# The interrupt is simulated at the 300th registration (a hook on Library.impl), as a SIGINT landing there.
import sys, torch, vramnb
model = torch.nn.Linear(8, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)
orig = torch.library.Library.impl
n = [0]
def impl(self, *a, **k):
    n[0] += 1
    if n[0] == 300: raise KeyboardInterrupt
    return orig(self, *a, **k)
torch.library.Library.impl = impl
try:
    vramnb.estimate(model, torch.randn(4, 8), lambda m, b: m(b).sum(), opt, target="A100")
except KeyboardInterrupt:
    sys.last_type, sys.last_value, sys.last_traceback = sys.exc_info()   # what IPython keeps after a cell's error
torch.library.Library.impl = orig
with torch.autocast("cpu", dtype=torch.bfloat16):
    out = torch.nn.functional.linear(torch.randn(4, 4), torch.randn(4, 4))
print("user's autocast(cpu, bf16) linear ->", out.dtype, "(bfloat16 without the interrupted estimate)")
print("PASS" if out.dtype == torch.bfloat16 else "FAIL: the interrupted estimate left PyTorch's CPU autocast kernels replaced")
