# profile_step's out-of-memory diagnosis runs the step again on fake tensors "by default only when vramnb's own
# loss is used (no loss_fn), since a loss_fn of yours may keep what it computes" (README). The model's own
# forward may keep what it computes too: a forward that records activations in a notebook dict ends the
# call holding a FakeTensor (unusable: DataDependentOutputException on .item()).
import torch, vramnb
from torch._subclasses.fake_tensor import FakeTensor
ACTS = {}
calls = [0]
class M(torch.nn.Module):
    def __init__(self): super().__init__(); self.l = torch.nn.Linear(8, 8)
    def forward(self, x):
        y = self.l(x)
        if not isinstance(y, FakeTensor):
            calls[0] += 1
            if calls[0] == 2:   # the 2nd step runs out of memory (as on a GPU; raised here to run on a CPU)
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.6 GiB of which 1.1 GiB is free.")
        ACTS["l"] = y.detach()                                       # activation recorder
        return y.sum()
m = M(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
try:
    vramnb.profile_step(m, torch.randn(4, 8), None, opt)              # no loss_fn: diagnosis on by default
except torch.OutOfMemoryError as e:
    print("profile_step raised the out-of-memory error, as expected")
print("ACTS['l'] after the call is a", type(ACTS["l"]).__name__)
print("PASS" if not isinstance(ACTS["l"], FakeTensor) else "FAIL: the diagnosis left a FakeTensor in the user's dict")
