# compare() on a torch.compile'd model recompiles the user's compiled code once per recipe
# (autocast, no_grad, inference_mode, batch sizes: new guards) until dynamo's recompile_limit (8) is hit.
# From then on dynamo runs that code object eagerly for the rest of the process: the user's own compiled
# model (and every other compiled model sharing Sequential.forward) silently stops being compiled.
# backend="eager" keeps this fast on CPU; inductor hits the same limit.
import torch, vramnb, torch._dynamo, logging
from torch._dynamo.utils import counters
torch._logging.set_logs(recompiles=False)
logging.getLogger("torch._dynamo").setLevel(logging.ERROR)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
cm = torch.compile(model, backend="eager")
opt = torch.optim.SGD(cm.parameters(), lr=0.1); x = torch.randn(4, 8)
cm(x).sum().backward()
vramnb.compare(cm, x, lambda m, b: m(b).sum(), opt,
               toggles={"precision": ["fp32", "bf16"], "mode": ["train", "no_grad", "inference_mode"], "batch_size": [None, 2, 8]},
               progress=False)
# the user's next step with a new batch size (a last, smaller batch of an epoch): compiled or not?
ok0 = counters["frames"]["ok"]
other = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 8)), backend="eager")   # a fresh compiled model
other(torch.randn(3, 8)); cm(torch.randn(5, 8))
compiled_now = counters["frames"]["ok"] - ok0
print("frames compiled for the user's next two calls:", compiled_now, "(2 expected; 0 = running eagerly)")
print("PASS" if compiled_now >= 1 else "FAIL: after compare, dynamo's recompile limit is spent: the user's compiled models run eagerly")
