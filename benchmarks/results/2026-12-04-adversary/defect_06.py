# profile_step "puts the model back bit for bit", but a NumPy array attribute of a module changed in place
# by forward stays changed; a module-level dict the forward fills keeps the profiled step's tensors
import numpy as np, torch, vramnb
ACTS = {}
class M(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.l = torch.nn.Linear(8, 8); self.calls = np.zeros(1)
    def forward(self, x):
        self.calls += 1; y = self.l(x); ACTS["l"] = y; return y.sum()
m = M(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
vramnb.profile_step(m, torch.randn(4, 8), None, opt)
print("m.calls:", m.calls, " ACTS:", {k: tuple(v.shape) for k, v in ACTS.items()}, "grad_fn:", ACTS.get("l", torch.empty(0)).grad_fn)
ok = m.calls[0] == 0 and not ACTS
print("PASS" if ok else "FAIL: model attribute 0 -> %d and the user's dict holds the profiled step's activation (with its graph)" % m.calls[0])
