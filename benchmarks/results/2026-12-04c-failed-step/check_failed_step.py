"""Issue 28 #12a on a device: a failed profile_step (out of memory in forward or backward, a shape
error) leaves nothing of vramnb's alive. In an IPython shell as a notebook runs it: the allocated bytes
after the failure, once IPython's exception is dropped, equal those before, and %vram lists nothing
unnamed (allocated == named). Prints one line per case and PASS/FAIL."""
import sys

from IPython.core.interactiveshell import InteractiveShell

dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"
sh = InteractiveShell.instance(colors="nocolor")
sh.run_cell("%load_ext vramnb")
sh.run_cell(f"""
import gc, torch, vramnb
DEV = {dev!r}
torch.manual_seed(0)
class M(torch.nn.Module):
    def __init__(s):
        super().__init__(); s.a = torch.nn.Linear(512, 1024); s.b = torch.nn.Linear(1024, 10); s.mode = 'none'
    def forward(s, x):
        h = s.a(x).relu()
        if s.mode == 'oom forward': torch.empty(2**45, device=x.device)
        if s.mode == 'shape error': h = h @ torch.randn(3, 3, device=x.device)
        if s.mode == 'oom backward': h = Boom.apply(h)
        return s.b(h).square().mean()
class Boom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x): return x.clone()
    @staticmethod
    def backward(ctx, g): torch.empty(2**45, device=g.device); return g
model = M().to(DEV)
opt = torch.optim.Adam(model.parameters())
x = torch.randn(64, 512, device=DEV)
def allocated():
    gc.collect()
    if DEV == 'cuda':
        return torch.cuda.memory_allocated()
    from vramnb._tracker import cpu_tracker
    t = cpu_tracker(); t.scan(full=True); return t.current
""")
ok = True
for case in ("oom forward", "shape error", "oom backward"):
    sh.run_cell(f"model.mode = {case!r}; before = allocated()")
    sh.run_cell("vramnb.profile_step(model, x, optimizer=opt)")
    sh.run_cell("import sys; sys.last_value = sys.last_traceback = sys.last_type = None; sys.last_exc = None; "
                "get_ipython().InteractiveTB.tb = None")
    sh.run_cell(f"after = allocated()\nh = %vram -d {dev}\nRES = (after - before, h.allocated - h.total, h.out_of_sight)")
    got = sh.user_ns["RES"]
    good = got == (0, 0, 0)
    ok &= good
    print(f"{case}: allocated after - before {got[0]} B, %vram unnamed {got[1]} B, out of sight {got[2]} B:",
          "PASS" if good else "FAIL", flush=True)
print("ALL PASS" if ok else "SOME FAIL")
