"""compare with every technique (one recipe per setting) and estimate with each recipe, on a model with the
state attack_02 found changed: a module's helper object holding a tensor it adds into, an EMA forward hook
updating a dict of shadow tensors, a user tensor subclass counting calls on its class, BatchNorm with
momentum=None (cumulative average, num_batches_tracked), a weight_norm parametrization, a warm AdamW with an
LR scheduler. Prints PASS/FAIL per technique setting and entry point."""
import sys

import torch
import torch.nn as nn

import vramnb
from _common import attack
from attack_02_module_state import EMA, Stats, Counted


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.utils.parametrizations.weight_norm(nn.Linear(16, 16))
        self.bn = nn.BatchNorm1d(16, momentum=None)
        self.stats = Stats.__new__(Stats)
        self.stats.n, self.stats.total, self.stats.seen = 0, torch.zeros(16), []

    def forward(self, x):
        self.stats.update(x)
        return torch.relu(self.bn(self.l(x))) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.out = nn.Linear(16, 2)
        self.out.weight = nn.Parameter(self.out.weight.detach().as_subclass(Counted))

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return self.out(h)


def setup():
    torch.manual_seed(0)
    m = Net()
    ema = EMA(m)
    with torch.no_grad():
        m.inp.weight.add_(0.5)
    m.register_forward_hook(ema.hook)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    x = torch.randn(8, 8)
    for _ in range(2):
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
        sched.step()
    Counted.calls = 0
    return m, x, (lambda mm, b: mm(b).pow(2).mean()), opt, {"m": m, "ema": ema, "opt": opt, "sched": sched,
                                                              "calls": lambda: Counted.calls}


def extra(w):
    return {"calls": w["calls"]()}


if __name__ == "__main__":
    from vramnb.techniques.registry import Recipe
    ok = True
    only = sys.argv[1:]
    for tech, choices in Recipe.options().items():
        if only and tech not in only:
            continue
        for c in choices[1:]:
            if tech == "batch_size" and c not in (4, 16):
                continue
            entries = {
                "compare": lambda m, b, l, o, t=tech, c=c: vramnb.compare(m, b, l, o, toggles={t: [c]}, progress=False),
                "estimate": lambda m, b, l, o, t=tech, c=c: vramnb.estimate(m, b, l, o, recipe={t: c}, target="8GiB"),
            }
            import _common
            saved = _common._entries
            _common._entries = lambda target="8GiB", e=entries: e
            try:
                ok &= attack(f"{tech}={c}", setup, extra=extra)
            finally:
                _common._entries = saved
    print("ALL PASS" if ok else "SOME FAIL")
