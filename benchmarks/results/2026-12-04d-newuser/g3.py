import sys; sys.path.insert(0, "/tmp/user5")
from common import *
import vramnb
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(s):
        super().__init__(); s.c1 = SAGEConv(16, 32); s.c2 = SAGEConv(32, 4)
    def forward(s, x, ei): return s.c2(F.relu(s.c1(x, ei)), ei)
N, E = 500, 2000
x = torch.randn(N, 16); ei = torch.randint(0, N, (2, E)); y = torch.randint(0, 4, (N,))
model = Net(); opt = torch.optim.Adam(model.parameters())
loss_fn = lambda m, b: F.cross_entropy(m(b[0], b[1]), b[2])
s0 = snap(model, opt)
try:
    c = vramnb.compare(model, (x, ei, y), loss_fn, opt, toggles={"micro_batches": [1, 2]})
    print(c)
except Exception as e: print(type(e).__name__, e)
print("diff", same(s0, snap(model, opt)))
