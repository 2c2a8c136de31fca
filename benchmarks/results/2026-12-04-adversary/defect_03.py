# fit(DataLoader(IterableDataset over a stream)): passes refuse_one_shot (the loader is re-iterable) but
# consumes the user's one-shot stream (issue 28 #1 fixed only for a bare iterator)
import torch, vramnb
from torch.utils.data import DataLoader, IterableDataset
def stream():
    for i in range(20): yield (torch.randn(8),)
s = stream()
class Stream(IterableDataset):
    def __init__(self, s): self.s = s
    def __iter__(self): return self.s
model = torch.nn.Linear(8, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)
vramnb.fit(model, DataLoader(Stream(s), batch_size=4), lambda m, b: m(b[0]).sum(), opt, target="24GiB", progress=False)
left = sum(1 for _ in s)
print("samples left in the user's stream:", left, "of 20")
print("PASS" if left == 20 else "FAIL: fit consumed the user's stream")
