"""A functools.lru_cache'd helper the forward calls (a causal mask cache), and a module named by the
loss (a tracker/metric) updated through a method, not its forward. Prints PASS/FAIL per entry point."""
import functools

import torch

from _common import main


@functools.lru_cache(maxsize=None)
def causal_mask(n):
    return torch.ones(n, n).triu(1).bool()


class Tracker(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(()))
        self.count = 0

    def update(self, v):
        self.total += v.detach()
        self.count += 1


TRACKER = Tracker()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.l(x).masked_fill(causal_mask(x.shape[0])[:, :1], 0)


def loss(mm, b):
    y = mm(b).sum()
    TRACKER.update(y)
    return y


def setup():
    causal_mask.cache_clear()
    torch.manual_seed(0)
    m = Net()
    return m, torch.randn(5, 8), loss, torch.optim.SGD(m.parameters(), lr=0.1), {"tracker": TRACKER, "m": m}


def extra(w):
    info = causal_mask.cache_info()
    return {"cache entries": info.currsize, "next call type": type(causal_mask(5)).__name__ if info.currsize else "-"}


if __name__ == "__main__":
    main("lru_cache + tracker module", setup, extra=extra)
