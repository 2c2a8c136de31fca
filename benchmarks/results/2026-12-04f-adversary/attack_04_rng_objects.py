"""Random generators the user holds in places earlier rounds did not try: inside a plain helper object
(not a module) that the model's forward calls, inside a dataclass config, inside a global object the
forward calls, a bound-method loss's object, a forward hook's closure object, a custom optimizer that
draws noise in `step` from its own generator, NumPy's legacy `RandomState` and Python's `random.Random`
instances in those places, a NumPy `Generator` whose `spawn()` the forward calls (the SeedSequence's
child counter), and a forward that reseeds torch's global generator (`torch.manual_seed` inside forward:
`torch.initial_seed()`). Prints PASS/FAIL per case and entry point."""
import dataclasses
import random
import sys

import numpy as np
import torch
import torch.nn as nn

from _common import main


class Aug:
    def __init__(self):
        self.g = torch.Generator().manual_seed(1)
        self.np = np.random.default_rng(2)
        self.legacy = np.random.RandomState(3)
        self.py = random.Random(4)

    def __call__(self, x):
        noise = torch.randn(x.shape, generator=self.g) * 0.01
        scale = float(self.np.uniform(0.9, 1.1)) * float(self.legacy.uniform(0.9, 1.1)) * self.py.uniform(0.9, 1.1)
        return x * scale + noise


class WithHelper(nn.Module):
    def __init__(self):
        super().__init__()
        self.aug = Aug()
        self.l = nn.Linear(8, 2)

    def forward(self, x):
        return self.l(self.aug(x))


def _opt(m):
    return torch.optim.SGD(m.parameters(), lr=0.1)


def loss(mm, b):
    return mm(b).pow(2).mean()


def helper_object():
    torch.manual_seed(0)
    m = WithHelper()
    return m, torch.randn(4, 8), loss, _opt(m), {"m": m, "aug": m.aug}


@dataclasses.dataclass
class Cfg:
    p: float = 0.1
    rng: np.random.Generator = dataclasses.field(default_factory=lambda: np.random.default_rng(7))
    trng: torch.Generator = dataclasses.field(default_factory=lambda: torch.Generator().manual_seed(8))


class WithCfg(nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = Cfg()
        self.l = nn.Linear(8, 2)

    def forward(self, x):
        keep = torch.from_numpy(self.cfg.rng.random(x.shape[-1]) > self.cfg.p).float()
        return self.l(x * keep + torch.rand(x.shape, generator=self.cfg.trng) * 0.0)


def dataclass_config():
    torch.manual_seed(0)
    m = WithCfg()
    return m, torch.randn(4, 8), loss, _opt(m), {"m": m, "cfg": m.cfg}


AUG = Aug()


class WithGlobal(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 2)

    def forward(self, x):
        return self.l(AUG(x))


def global_object():
    torch.manual_seed(0)
    m = WithGlobal()
    return m, torch.randn(4, 8), loss, _opt(m), {"m": m, "AUG": AUG}


class Trainer:
    def __init__(self):
        self.rng = random.Random(11)
        self.legacy = np.random.RandomState(12)

    def loss(self, mm, b):
        w = self.rng.random() + float(self.legacy.rand())
        return mm(b).pow(2).mean() * w


def bound_method_loss():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 2))
    t = Trainer()
    return m, torch.randn(4, 8), t.loss, _opt(m), {"m": m, "t": t}


class HookState:
    def __init__(self):
        self.g = torch.Generator().manual_seed(21)
        self.rng = np.random.default_rng(22)


def hook_closure():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    hs = HookState()

    def hook(mod, inp, out):
        return out + torch.randn(out.shape, generator=hs.g) * 0.0 + float(hs.rng.random()) * 0.0
    m[0].register_forward_hook(hook)
    return m, torch.randn(4, 8), loss, _opt(m), {"m": m, "hs": hs}


class NoisySGD(torch.optim.SGD):
    def __init__(self, params, lr):
        super().__init__(params, lr=lr)
        self.noise_gen = torch.Generator().manual_seed(31)
        self.np_rng = np.random.default_rng(32)

    @torch.no_grad()
    def step(self, closure=None):
        out = super().step(closure)
        for g in self.param_groups:
            for p in g["params"]:
                p.add_(torch.randn(p.shape, generator=self.noise_gen) * 1e-3 * float(self.np_rng.random()))
        return out


def optimizer_generator():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 2))
    o = NoisySGD(m.parameters(), lr=0.1)
    return m, torch.randn(4, 8), loss, o, {"m": m, "o": o, "gen": o.noise_gen, "np": o.np_rng}


class Spawner(nn.Module):
    def __init__(self):
        super().__init__()
        self.rng = np.random.default_rng(41)
        self.l = nn.Linear(8, 2)

    def forward(self, x):
        child = self.rng.spawn(1)[0]
        return self.l(x * float(child.random()))


def numpy_spawn():
    torch.manual_seed(0)
    m = Spawner()
    return m, torch.randn(4, 8), loss, _opt(m), {"m": m, "rng": m.rng, "ss": m.rng.bit_generator.seed_seq}


class Reseeds(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 2)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        torch.manual_seed(1234)  # "deterministic dropout" inside forward
        return self.l(self.drop(x))


def forward_reseeds():
    torch.manual_seed(99)
    m = Reseeds()
    return m, torch.randn(4, 8), loss, _opt(m), {"m": m}


CASES = {f.__name__: f for f in (helper_object, dataclass_config, global_object, bound_method_loss, hook_closure,
                                 optimizer_generator, numpy_spawn, forward_reseeds)}

if __name__ == "__main__":
    only = sys.argv[1:]
    allok = True
    for name, f in CASES.items():
        if only and name not in only:
            continue
        allok &= main(name, f)
    print("ALL PASS" if allok else "SOME FAIL")
