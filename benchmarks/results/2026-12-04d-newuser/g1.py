import sys; sys.path.insert(0, "/tmp/user5")
from common import *
import vramnb, time
import torch.nn.functional as F
from torch_geometric.nn import GCNConv, GATConv, SAGEConv
torch.manual_seed(0); random.seed(0); np.random.seed(0)
class Net(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.c1 = GCNConv(64, 128); s.c2 = GATConv(128, 32, heads=4); s.c3 = SAGEConv(128, 10)
    def forward(s, x, ei):
        x = F.relu(s.c1(x, ei)); x = F.elu(s.c2(x, ei)); return s.c3(x, ei)
N, E = 5000, 50000
x = torch.randn(N, 64); ei = torch.randint(0, N, (2, E)); y = torch.randint(0, 10, (N,))
model = Net(); opt = torch.optim.Adam(model.parameters())
loss_fn = lambda m, b: F.cross_entropy(m(b[0], b[1]), y)
P = sum(p.numel() for p in model.parameters()); print("P", P, 4*P)
s0 = snap(model, opt)
rep = vramnb.profile_step(model, (x, ei), loss_fn, opt)
print(rep); print("diff:", same(s0, snap(model, opt)))
est = vramnb.estimate(model, (x, ei), loss_fn, opt, target="T4")
print(est); print("diff:", same(s0, snap(model, opt)))
print("est steady vs measured steady peak:", est.peak_allocated, rep.peak_allocated if hasattr(rep,'peak_allocated') else None)
