# estimate's report ends "predicted for … without running on it: nothing of yours was allocated or changed"
# also when the estimate did change the user's objects (the fake step ran the user's forward, which wrote a
# NumPy attribute shared with the copy and a notebook dict): the sentence is untrue.
import numpy as np, torch, vramnb
ACTS = {}
class Router(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.l = torch.nn.Linear(8, 8); self.calls = np.zeros(1)
    def forward(self, x):
        self.calls += 1; y = self.l(x); ACTS["y"] = y.detach(); return y.sum()
m = Router(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
e = vramnb.estimate(m, torch.randn(4, 8), None, opt, target="24GiB")
claim = [l.strip() for l in str(e).splitlines() if "nothing of yours" in l]
changed = m.calls[0] != 0 or ACTS
print("report says:", claim)
print("meanwhile: m.calls 0 ->", m.calls[0], "; ACTS {} ->", {k: type(v).__name__ for k, v in ACTS.items()})
print("FAIL: the report claims nothing of the user's was changed" if claim and changed else "PASS")
