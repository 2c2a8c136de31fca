# fit(DataLoader) with a resumable sampler (the checkpoint/resume pattern: the sampler remembers how far the
# epoch got, so a restarted run skips what it has seen). fit reads the loader's batches and the sampler's
# position moves (fit stops after 256 batches, mid-epoch): the user's next epoch starts mid-way and silently
# skips the samples fit read.
import torch, vramnb
from torch.utils.data import DataLoader, TensorDataset, Sampler
class ResumableSampler(Sampler):
    def __init__(self, n): self.n, self.pos = n, 0
    def __iter__(self):
        while self.pos < self.n:
            i = self.pos; self.pos += 1; yield i
        self.pos = 0                        # epoch finished: the next one starts from 0
    def __len__(self): return self.n - self.pos
    def state_dict(self): return {"pos": self.pos}
ds = TensorDataset(torch.arange(300.).reshape(300, 1).repeat(1, 8))
sampler = ResumableSampler(300)
dl = DataLoader(ds, batch_size=1, sampler=sampler)
model = torch.nn.Linear(8, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)
vramnb.fit(model, dl, lambda m, b: m(b[0]).sum(), opt, target="24GiB", progress=False)
print("sampler position after fit:", sampler.pos, "(0 before)")
seen = [int(v) for b in dl for v in b[0][:, 0]]
print("the user's next epoch covers", len(seen), "of 300 samples, starting at", seen[:1])
print("PASS" if sampler.pos == 0 and len(seen) == 300 else "FAIL: fit advanced the user's resumable sampler")
