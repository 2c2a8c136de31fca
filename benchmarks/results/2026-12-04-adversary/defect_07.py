# estimate(world_size=2, parallel="fsdp") replaces sys.excepthook with torch.distributed's
# _distributed_excepthook (from init_process_group) and never puts the user's back; each call nests one more.
import sys, torch, vramnb, subprocess
model = torch.nn.Linear(8, 1); opt = torch.optim.AdamW(model.parameters())
hook0 = sys.excepthook
vramnb.estimate(model, torch.randn(4, 8), lambda m, b: m(b).sum(), opt, target="24GiB", world_size=2, parallel="fsdp")
print("sys.excepthook before:", hook0, "\n               after: ", sys.excepthook)
import torch.distributed as dist
print("process group still initialized:", dist.is_available() and dist.is_initialized())
ok = sys.excepthook is hook0
print("PASS" if ok else "FAIL: sys.excepthook changed by estimate(world_size=2)")
if len(sys.argv) > 1:
    raise RuntimeError("user's own uncaught error")
