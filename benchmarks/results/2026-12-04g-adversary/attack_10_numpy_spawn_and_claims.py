"""NumPy seed-sequence spawning (round f's strict xfail, fixed this round) in more places: `Generator.spawn()` in a
forward (the model's attribute), in the loss (a closure's generator), `bit_generator.spawn()`, a held
`SeedSequence.spawn()` directly, `np.random.default_rng(seed_seq)` children made in a hook; plus a legacy
`RandomState` and `random.Random` drawn in the same forward. The counter (`n_children_spawned`) and the
bit generator's state must be as before, the `SeedSequence` object the same. A case vramnb cannot put back
must be named (no 'RNG state restored exactly' / 'nothing of yours was changed' for it). PASS/FAIL per case and entry."""
import random
import sys

import numpy as np
import torch
import torch.nn as nn

import vramnb
from _common import main


class Spawner(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how = how
        self.rng = np.random.default_rng(41)
        self.ss = np.random.SeedSequence(7)
        self.legacy = np.random.RandomState(3)
        self.py = random.Random(5)
        self.lin = nn.Linear(8, 2)

    def forward(self, x):
        if self.how == "generator":
            v = self.rng.spawn(2)[1].random()
        elif self.how == "bit_generator":
            v = np.random.Generator(self.rng.bit_generator.spawn(1)[0]).random()
        elif self.how == "seed_sequence":
            v = np.random.default_rng(self.ss.spawn(1)[0]).random()
        else:
            v = self.legacy.rand() * self.py.random() * self.rng.random()
        return self.lin(x * float(v))


def _case(how):
    def setup():
        torch.manual_seed(0)
        m = Spawner(how)
        w = {"m": m, "rng": m.rng, "ss": m.ss, "seq": m.rng.bit_generator.seed_seq}
        return m, torch.randn(4, 8), (lambda mm, b: mm(b).pow(2).mean()), torch.optim.SGD(m.parameters(), lr=0.1), w
    return setup


def loss_closure():
    torch.manual_seed(0)
    m = nn.Linear(8, 2)
    rng = np.random.default_rng(9)

    def l(mm, b):
        return mm(b * float(rng.spawn(1)[0].random())).pow(2).mean()
    return m, torch.randn(4, 8), l, torch.optim.SGD(m.parameters(), lr=0.1), {"m": m, "rng": rng, "seq": rng.bit_generator.seed_seq}


def hook_makes_children():
    torch.manual_seed(0)
    m = nn.Linear(8, 2)
    parent = np.random.default_rng(11)
    kids = []
    m.register_forward_hook(lambda mod, i, o: kids.append(parent.spawn(1)[0]) or None)
    return m, torch.randn(4, 8), (lambda mm, b: mm(b).pow(2).mean()), torch.optim.SGD(m.parameters(), lr=0.1), {"m": m, "parent": parent, "kids": kids, "seq": parent.bit_generator.seed_seq}


CASES = {"generator": _case("generator"), "bit_generator": _case("bit_generator"), "seed_sequence": _case("seed_sequence"),
         "legacy_and_python": _case("draws"), "loss_closure": loss_closure, "hook_makes_children": hook_makes_children}

if __name__ == "__main__":
    only = sys.argv[1] if len(sys.argv) > 1 else None
    ok = True
    for name, setup in CASES.items():
        if only and name != only:
            continue
        ok &= main(name, setup)
    print("ALL PASS" if ok else "SOME FAIL")
