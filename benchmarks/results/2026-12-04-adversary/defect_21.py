# GPU machine only. fit "searches on estimates (nothing runs on a device; your model untouched)", but on a
# machine with a GPU it calibrates step times there (predict/_calibrate.py: matmuls and copies on cuda, then
# torch.cuda.empty_cache()). A notebook whose model is on the CPU and which never touched CUDA ends the fit
# call with CUDA initialised and a CUDA context made in the user's process (device memory taken; README:
# "measuring never creates a CUDA context that your code has not"), which fork-started workers then inherit.
import subprocess, torch, vramnb
if not torch.cuda.is_available():
    print("SKIP: needs a machine with a CUDA GPU"); raise SystemExit
def used_by_me():
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"], capture_output=True, text=True).stdout
    import os
    return [l for l in out.splitlines() if l.split(",")[0].strip() == str(os.getpid())]
with vramnb.vram() as mm:   # vramnb's own measuring: creates no context (as documented)
    pass
print("after vramnb.vram():", torch.cuda.is_initialized())
m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
o = torch.optim.SGD(m.parameters(), lr=0.1)
before = torch.cuda.is_initialized()
vramnb.fit(m, torch.randn(8, 64), lambda a, b: a(b).sum(), o, target="RTX 4090", progress=False)
after = torch.cuda.is_initialized()
print("CUDA initialised before fit:", before, "after fit:", after, "| this process on the GPU:", used_by_me())
print("PASS" if not after else "FAIL: fit on a CPU model initialised CUDA in the user's process")
