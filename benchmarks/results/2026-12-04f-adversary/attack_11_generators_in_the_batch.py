"""Random generators that travel *in the batch* (a dict batch with a `torch.Generator` and a NumPy `Generator`
the loss draws noise from, a list batch holding a `random.Random`), and in `more_batches`-free `fit`.
Prints PASS/FAIL per case and entry point."""
import random
import sys

import numpy as np
import torch
import torch.nn as nn

from _common import main


def dict_batch():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 2))
    b = {"x": torch.randn(4, 8), "g": torch.Generator().manual_seed(5), "np": np.random.default_rng(6)}

    def loss(mm, bb):
        noise = torch.randn(bb["x"].shape, generator=bb["g"]) * float(bb["np"].random()) * 0.01
        return mm(bb["x"] + noise).pow(2).mean()
    return m, b, loss, torch.optim.SGD(m.parameters(), lr=0.1), {"m": m, "b": b}


def list_batch():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 2))
    b = [torch.randn(4, 8), random.Random(9)]

    def loss(mm, bb):
        return mm(bb[0]).pow(2).mean() * (1 + bb[1].random() * 0.01)
    return m, b, loss, torch.optim.SGD(m.parameters(), lr=0.1), {"m": m, "b": b}


CASES = {f.__name__: f for f in (dict_batch, list_batch)}

if __name__ == "__main__":
    only = sys.argv[1:]
    allok = True
    for name, f in CASES.items():
        if only and name not in only:
            continue
        allok &= main(name, f)
    print("ALL PASS" if allok else "SOME FAIL")
