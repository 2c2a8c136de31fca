# the fake copy *shares* NumPy arrays with the user's model ("the fake step only reads it", _fake_model.py);
# a forward that updates a NumPy attribute in place changes the user's array during estimate/max_batch_size/fit
import numpy as np, torch, vramnb
class Router(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.l = torch.nn.Linear(8, 8); self.calls = np.zeros(1)  # a usage counter
    def forward(self, x):
        self.calls += 1; return self.l(x).sum()
m = Router(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
vramnb.max_batch_size(m, torch.randn(4, 8), None, opt, target="1GiB", progress=False)
print("m.calls after max_batch_size:", m.calls)
print("PASS" if m.calls[0] == 0 else f"FAIL: the user's array changed 0 -> {m.calls[0]:.0f}")
