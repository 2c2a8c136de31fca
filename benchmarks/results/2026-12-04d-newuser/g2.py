import sys; sys.path.insert(0, "/tmp/user5")
from common import *
import vramnb, time
import torch.nn.functional as F
from torch_geometric.nn import GCNConv
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(s):
        super().__init__(); s.c1 = GCNConv(64, 128); s.c2 = GCNConv(128, 10)
    def forward(s, x, ei):
        return s.c2(F.relu(s.c1(x, ei)), ei)
N, E = 5000, 50000
x = torch.randn(N, 64); ei = torch.randint(0, N, (2, E)); y = torch.randint(0, 10, (N,))
model = Net(); opt = torch.optim.Adam(model.parameters())
loss_fn = lambda m, b: F.cross_entropy(m(b[0], b[1]), b[2])
try:
    mb = vramnb.max_batch_size(model, (x, ei, y), loss_fn, opt, target="T4")
    print(mb)
except Exception as e:
    import traceback; traceback.print_exc()
