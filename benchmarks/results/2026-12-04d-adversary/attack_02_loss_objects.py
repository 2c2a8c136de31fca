"""loss_fn that is not a plain function: a bound method of a Trainer that counts steps and logs
losses on self, a callable instance, a functools.partial carrying a log list, a closure over a
local list (cell variable), a lambda calling a helper object's method. Prints PASS/FAIL."""
import functools

import torch

from _common import main


class Trainer:
    def __init__(self):
        self.step, self.history, self.seen = 0, [], {}

    def loss(self, m, b):
        self.step += 1
        out = m(b).pow(2).mean()
        self.history.append(out.item())
        self.seen[self.step] = b.shape[0]
        return out


class Meter:
    def __init__(self):
        self.n, self.vals = 0, []

    def __call__(self, m, b):
        self.n += 1
        out = m(b).sum()
        self.vals.append(out.detach())
        return out


def partial_loss(m, b, log):
    y = m(b).sum()
    log.append(float(y))
    return y


def make_closure():
    log = []
    count = 0

    def loss(m, b):
        nonlocal count
        count += 1
        y = m(b).sum()
        log.append(y.detach())
        return y
    return loss, log, lambda: count


class Helper:
    def __init__(self):
        self.calls = []

    def record(self, y):
        self.calls.append(y.detach().clone())
        return y


def base():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    return m, torch.randn(4, 8), opt


def s_bound():
    m, x, opt = base()
    t = Trainer()
    return m, x, t.loss, opt, {"trainer": t, "m": m}


def s_callable():
    m, x, opt = base()
    t = Meter()
    return m, x, t, opt, {"meter": t, "m": m}


def s_partial():
    m, x, opt = base()
    log = []
    return m, x, functools.partial(partial_loss, log=log), opt, {"log": log}


def s_closure():
    m, x, opt = base()
    loss, log, count = make_closure()
    return m, x, loss, opt, {"log": log, "count": (lambda c=count: c())}


def s_helper():
    m, x, opt = base()
    h = Helper()
    return m, x, (lambda mm, b: h.record(mm(b).sum())), opt, {"helper": h}


if __name__ == "__main__":
    ok = True
    for title, s in [("bound method", s_bound), ("callable instance", s_callable), ("partial", s_partial),
                     ("closure", s_closure), ("helper object", s_helper)]:
        extra = (lambda w: {"count": w["count"]()}) if s is s_closure else None
        ok &= main(title, s, extra=extra)
    print("ALL PASS" if ok else "SOME FAIL")
