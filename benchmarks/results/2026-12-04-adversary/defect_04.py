# estimate / max_batch_size / fit ("nothing runs, your model untouched") run the user's forward on the fake
# copy, and a forward that records activations in a notebook dict leaves FakeTensors in the user's dict
import torch, vramnb
ACTS = {"l": torch.ones(2)}           # the user's own feature store, filled by forward
class M(torch.nn.Module):
    def __init__(self): super().__init__(); self.l = torch.nn.Linear(8, 8)
    def forward(self, x):
        y = self.l(x); ACTS["l"] = y.detach(); return y.sum()
m = M(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
keep = ACTS["l"]
vramnb.estimate(m, torch.randn(4, 8), None, opt, target="24GiB")
print("ACTS['l'] is now a", type(ACTS["l"]).__name__)
try:
    print(ACTS["l"].sum().item())
except Exception as e:
    print("using it raises", type(e).__name__, str(e)[:100])
ok = ACTS["l"] is keep
print("PASS" if ok else "FAIL: the user's dict now holds a FakeTensor from the estimate (was a real tensor)")
