"""State inside and beside the model that the step changes, in forms earlier rounds did not try:
QAT fake-quant observers (per-channel min/max buffers resized in forward), a plain helper object
(not a module) the forward updates through a method (a counter and a tensor it adds into), a
module kept in a plain dict attribute (not registered) with a BatchNorm, a retain_grad non-leaf kept
as an attribute, a tensor-subclass parameter whose class counts calls, a loss object with a running
mean tensor, an EMA object updated by a forward hook, a torch.jit.script module, a module shared
in two places of the model. Prints PASS/FAIL per case and entry point."""
import sys

import torch
import torch.nn as nn

from _common import main


def qat():
    torch.manual_seed(0)
    import torch.ao.quantization as q
    m = nn.Sequential(q.QuantStub(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2), q.DeQuantStub())
    m.train()
    m.qconfig = q.get_default_qat_qconfig("fbgemm")
    q.prepare_qat(m, inplace=True)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    return m, torch.randn(4, 8), lambda mm, b: mm(b).pow(2).mean(), opt, {"m": m, "opt": opt}


class Stats:
    def __init__(self):
        self.n = 0
        self.total = torch.zeros(8)
        self.seen = []

    def update(self, x):
        self.n += 1
        self.total += x.detach().sum(0)
        self.seen.append(tuple(x.shape))


class WithHelper(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 2)
        self.stats = Stats()

    def forward(self, x):
        self.stats.update(x)
        return self.l(x)


def helper_object():
    torch.manual_seed(0)
    m = WithHelper()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    return m, torch.randn(4, 8), lambda mm, b: mm(b).pow(2).mean(), opt, {"m": m, "stats": m.stats}


class DictHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 8)
        object.__setattr__(self, "heads", {"a": nn.Sequential(nn.BatchNorm1d(8), nn.Linear(8, 2))})

    def forward(self, x):
        return self.heads["a"](self.body(x))


def dict_module():
    torch.manual_seed(0)
    m = DictHeads()
    opt = torch.optim.SGD(list(m.parameters()) + list(m.heads["a"].parameters()), lr=0.1)
    return m, torch.randn(4, 8), lambda mm, b: mm(b).pow(2).mean(), opt, {"m": m, "head": m.heads["a"], "opt": opt}


class RetainNonLeaf(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 2)

    def forward(self, x):
        h = x * 2
        h.retain_grad()
        self.last = h
        return self.l(h)


def retain_nonleaf():
    torch.manual_seed(0)
    m = RetainNonLeaf()
    x = torch.randn(4, 8, requires_grad=True)
    m(x).sum().backward()  # the user's last step: m.last has a .grad
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    return m, x.detach(), lambda mm, b: mm(b).pow(2).mean(), opt, {"m": m, "last": m.last, "last_grad": m.last.grad}


class Counted(torch.Tensor):
    calls = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls += 1
        return super().__torch_function__(func, types, args, kwargs or {})


def subclass_param():
    torch.manual_seed(0)
    m = nn.Linear(8, 2)
    m.weight = nn.Parameter(torch.randn(2, 8).as_subclass(Counted))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    Counted.calls = 0
    return m, torch.randn(4, 8), lambda mm, b: mm(b).pow(2).mean(), opt, {"m": m, "cls": Counted, "calls": lambda: Counted.calls}


class RunningLoss:
    def __init__(self):
        self.mean = torch.zeros(())
        self.count = 0

    def __call__(self, mm, b):
        out = mm(b).pow(2).mean()
        self.count += 1
        self.mean.mul_(0.9).add_(out.detach(), alpha=0.1)
        return out


def loss_object():
    torch.manual_seed(0)
    m = nn.Linear(8, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    lo = RunningLoss()
    return m, torch.randn(4, 8), lo, opt, {"m": m, "loss": lo}


class EMA:
    def __init__(self, m):
        self.shadow = {k: v.detach().clone() for k, v in m.state_dict().items()}
        self.updates = 0

    def hook(self, mod, inp, out):
        self.updates += 1
        with torch.no_grad():
            for k, v in mod.state_dict().items():
                if v.is_floating_point():
                    self.shadow[k].lerp_(v, 0.1)
                else:
                    self.shadow[k].copy_(v)


def ema_hook():
    torch.manual_seed(0)
    m = nn.Linear(8, 2)
    e = EMA(m)
    with torch.no_grad():
        m.weight.add_(1.0)
    m.register_forward_hook(e.hook)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    return m, torch.randn(4, 8), lambda mm, b: mm(b).pow(2).mean(), opt, {"m": m, "ema": e}


def scripted():
    torch.manual_seed(0)
    m = torch.jit.script(nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)))
    opt = torch.optim.Adam(m.parameters(), lr=0.1)
    return m, torch.randn(4, 8), lambda mm, b: mm(b).pow(2).mean(), opt, {"sd": m.state_dict(), "opt": opt}


def shared_twice():
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(8, momentum=None)
    m = nn.Sequential(nn.Linear(8, 8), bn, nn.ReLU(), nn.Linear(8, 8), bn, nn.Linear(8, 2))
    opt = torch.optim.Adam(m.parameters(), lr=0.1)
    return m, torch.randn(4, 8), lambda mm, b: mm(b).pow(2).mean(), opt, {"m": m, "opt": opt}


CASES = {"qat": qat, "helper object": helper_object, "module in a plain dict": dict_module,
         "retain_grad non-leaf attribute": retain_nonleaf, "tensor subclass parameter": subclass_param,
         "loss object": loss_object, "EMA forward hook": ema_hook, "torch.jit.script": scripted,
         "module used twice": shared_twice}


def extra_calls(w):
    return {k: v() for k, v in w.items() if callable(v) and getattr(v, "__name__", "") == "<lambda>"}


if __name__ == "__main__":
    only = sys.argv[1:]
    ok = True
    for name, s in CASES.items():
        if not only or name in only:
            ok &= main(name, s, extra=extra_calls)
    print("ALL PASS" if ok else "SOME FAIL")
