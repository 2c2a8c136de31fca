# fit(DataLoader(ds)) where the dataset draws from its own numpy Generator: the generator is advanced
import numpy as np, torch, vramnb
from torch.utils.data import DataLoader, Dataset
class DS(Dataset):
    def __init__(self): self.rng = np.random.default_rng(0)   # per-dataset augmentation RNG
    def __len__(self): return 32
    def __getitem__(self, i): return (torch.tensor(self.rng.normal(size=8), dtype=torch.float32),)
model = torch.nn.Linear(8, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)
ds = DS(); st = ds.rng.bit_generator.state
vramnb.fit(model, DataLoader(ds, batch_size=8), lambda m, b: m(b[0]).sum(), opt, target="24GiB", progress=False)
same = ds.rng.bit_generator.state == st
print("dataset's np.random.Generator unchanged:", same)
print("PASS" if same else "FAIL: ds.rng advanced by 32 draws (augmentations the user gets next differ)")
