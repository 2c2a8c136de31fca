"""The loss records through built-in bound methods: `record = losses.append`, `store = cache.__setitem__`,
`bump = counts.update` (a Counter), `push = queue.append` (a deque). Prints PASS/FAIL per entry point."""
import collections

import torch

from _common import main

LOSSES, CACHE, COUNTS, QUEUE = [], {}, collections.Counter(), collections.deque()
record, store, bump, push = LOSSES.append, CACHE.__setitem__, COUNTS.update, QUEUE.append


def loss(mm, b):
    y = mm(b).sum()
    record(y.detach())
    store("last", y.detach())
    bump(["step"])
    push(y.detach())
    return y


def setup():
    torch.manual_seed(0)
    m = torch.nn.Linear(8, 2)
    return m, torch.randn(4, 8), loss, torch.optim.SGD(m.parameters(), lr=0.1), {
        "losses": LOSSES, "cache": CACHE, "counts": COUNTS, "queue": list(QUEUE)}


def extra(w):
    return {"losses": len(LOSSES), "cache": sorted(CACHE), "counts": dict(COUNTS), "queue": len(QUEUE)}


if __name__ == "__main__":
    main("built-in bound methods", setup, extra=extra)
