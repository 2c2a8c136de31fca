# fit(DataLoader(shuffle=True, generator=g)) advances the user's torch.Generator g
import torch, vramnb
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(8, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(1)
dl = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=8, shuffle=True, generator=g)
before = g.get_state().clone()
vramnb.fit(model, dl, lambda m, b: m(b[0]).sum(), opt, target="24GiB", progress=False)
same = torch.equal(before, g.get_state())
print("loader generator state unchanged:", same)
print("PASS" if same else "FAIL: the DataLoader's generator was advanced (the user's next epoch order changes)")
