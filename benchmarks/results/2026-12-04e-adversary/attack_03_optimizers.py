"""Every torch.optim optimizer, warm (two real steps before), with its less common flags, and optimizers of
the user's: a Lion written as users do, one keeping a step counter under a string key of ``self.state``, one
with a param group added later holding its own settings, one whose state holds a Python list and a nested
dict; chained schedulers (SequentialLR over LinearLR + CosineAnnealingLR, SWALR). Each entry point on a fresh
setup; prints PASS/FAIL per optimizer and entry point."""
import sys

import torch
import torch.nn as nn

from _common import main


class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if "exp_avg" not in st:
                    st["exp_avg"] = torch.zeros_like(p)
                b1, b2 = group["betas"]
                upd = st["exp_avg"].mul(b1).add(p.grad, alpha=1 - b1).sign_()
                p.add_(upd, alpha=-group["lr"])
                st["exp_avg"].mul_(b2).add_(p.grad, alpha=1 - b2)


class StringKeyed(torch.optim.SGD):
    def step(self, closure=None):
        self.state["global_step"] = self.state.get("global_step", 0) + 1
        self.state["history"] = self.state.get("history", []) + [self.state["global_step"]]
        return super().step(closure)


class Nested(torch.optim.SGD):
    def step(self, closure=None):
        out = super().step(closure)
        for g in self.param_groups:
            for p in g["params"]:
                st = self.state[p]
                st.setdefault("log", []).append(float(p.detach().sum()))
                st.setdefault("stats", {"n": 0, "t": torch.zeros(())})
                st["stats"]["n"] += 1
                st["stats"]["t"] += 1
        return out


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))


O = torch.optim
OPTS = {
    "Adam amsgrad foreach=False": lambda p: O.Adam(p, lr=1e-2, amsgrad=True, foreach=False),
    "Adam fused (CPU)": lambda p: O.Adam(p, lr=1e-2, fused=True),
    "AdamW fused maximize": lambda p: O.AdamW(p, lr=1e-2, fused=True, maximize=True),
    "SGD nesterov fused": lambda p: O.SGD(p, lr=1e-2, momentum=0.9, nesterov=True, fused=True),
    "NAdam decoupled": lambda p: O.NAdam(p, lr=1e-2, decoupled_weight_decay=True, weight_decay=0.1),
    "RAdam decoupled": lambda p: O.RAdam(p, lr=1e-2, decoupled_weight_decay=True, weight_decay=0.1),
    "Adamax": lambda p: O.Adamax(p, lr=1e-2),
    "ASGD": lambda p: O.ASGD(p, lr=1e-2, t0=1),
    "Adadelta": lambda p: O.Adadelta(p),
    "Adagrad fused": lambda p: O.Adagrad(p, lr=1e-2, fused=True),
    "Rprop": lambda p: O.Rprop(p),
    "RMSprop centered momentum": lambda p: O.RMSprop(p, lr=1e-2, centered=True, momentum=0.9),
    "Adafactor": lambda p: O.Adafactor(p, lr=1e-2),
    "SGD differentiable": lambda p: O.SGD(p, lr=1e-2, momentum=0.9, differentiable=True),
    "Lion (user's)": lambda p: Lion(p, lr=1e-3),
    "string-keyed state (user's)": lambda p: StringKeyed(p, lr=1e-2),
    "nested list/dict state (user's)": lambda p: Nested(p, lr=1e-2),
}


def make(factory, sched=None, late_group=False):
    def setup():
        m = model()
        params = list(m.parameters())
        opt = factory(params[:2] if late_group else params)
        if late_group:
            opt.add_param_group({"params": params[2:], "lr": 0.5, "my_key": "x"})
        s = sched(opt) if sched else None
        x = torch.randn(4, 8)
        for _ in range(2):
            opt.zero_grad()
            m(x).pow(2).mean().backward()
            opt.step()
            if s is not None:
                s.step()
        return m, x, lambda mm, b: mm(b).pow(2).mean(), opt, {"m": m, "opt": opt, "sched": s}
    return setup


def seq(opt):
    return O.lr_scheduler.SequentialLR(opt, [O.lr_scheduler.LinearLR(opt, 0.1, total_iters=2),
                                             O.lr_scheduler.CosineAnnealingLR(opt, 10)], milestones=[2])


if __name__ == "__main__":
    only = sys.argv[1:]
    ok = True
    for name, f in OPTS.items():
        if not only or name in only:
            ok &= main(name, make(f))
    if not only or "sched" in only:
        ok &= main("AdamW + SequentialLR", make(lambda p: O.AdamW(p, lr=1e-2), sched=seq))
        ok &= main("SGD + SWALR", make(lambda p: O.SGD(p, lr=1e-2), sched=lambda o: O.swa_utils.SWALR(o, swa_lr=0.05)))
        ok &= main("Adam + late param group", make(lambda p: O.Adam(p, lr=1e-2), late_group=True))
    print("ALL PASS" if ok else "SOME FAIL")
