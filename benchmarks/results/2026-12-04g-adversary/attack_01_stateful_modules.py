"""Modules whose forward (or whose parametrization) updates state: `spectral_norm` (old and parametrize
versions: u/v buffers updated by each training forward), `weight_norm` (parametrize), `orthogonal`,
BatchNorm with `momentum=None` (cumulative average through `num_batches_tracked`), BatchNorm with
`track_running_stats` and eval mode mixed, `prune` masks (forward pre-hook recomputes weight), a
`parametrize` with `unsafe=True` and a cached parametrization (`parametrize.cached()` around the call),
a module whose forward counts calls in a Python attribute, `InstanceNorm` with running stats,
GroupNorm + LazyLinear already materialized. Prints PASS/FAIL per case and entry point."""
import sys

import torch
import torch.nn as nn
import torch.nn.utils.parametrize as P
from torch.nn.utils import parametrizations as PZ
from torch.nn.utils import prune

from _common import main


def _opt(m):
    return torch.optim.Adam(m.parameters(), lr=1e-2)


def loss(mm, b):
    return mm(b).pow(2).mean()


def _w(m):
    return {"m": m, "sd": m.state_dict(keep_vars=True)}


def spectral_old():
    torch.manual_seed(0)
    m = nn.Sequential(nn.utils.spectral_norm(nn.Linear(8, 16)), nn.ReLU(), nn.Linear(16, 2))
    return m, torch.randn(4, 8), loss, _opt(m), _w(m)


def spectral_param():
    torch.manual_seed(0)
    m = nn.Sequential(PZ.spectral_norm(nn.Linear(8, 16)), nn.ReLU(), nn.Linear(16, 2))
    return m, torch.randn(4, 8), loss, _opt(m), _w(m)


def weight_norm_param():
    torch.manual_seed(0)
    m = nn.Sequential(PZ.weight_norm(nn.Linear(8, 16)), nn.ReLU(), nn.Linear(16, 2))
    return m, torch.randn(4, 8), loss, _opt(m), _w(m)


def orthogonal_param():
    torch.manual_seed(0)
    m = nn.Sequential(PZ.orthogonal(nn.Linear(8, 8)), nn.ReLU(), nn.Linear(8, 2))
    return m, torch.randn(4, 8), loss, _opt(m), _w(m)


def bn_cumulative():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16, momentum=None), nn.ReLU(), nn.Linear(16, 2))
    m.train()
    m(torch.randn(4, 8))  # num_batches_tracked = 1
    return m, torch.randn(4, 8), loss, _opt(m), _w(m)


def bn_mixed_modes():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.BatchNorm1d(16), nn.Linear(16, 2))
    m[1].eval()
    return m, torch.randn(4, 8), loss, _opt(m), {**_w(m), "modes": [x.training for x in m.modules()]}


def instance_norm_stats():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv1d(3, 4, 3), nn.InstanceNorm1d(4, track_running_stats=True, affine=True), nn.Flatten(), nn.Linear(24, 2))
    return m, torch.randn(2, 3, 8), loss, _opt(m), _w(m)


def pruned():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    prune.l1_unstructured(m[0], "weight", amount=0.5)
    prune.random_unstructured(m[2], "bias", amount=0.5)
    return m, torch.randn(4, 8), loss, _opt(m), {**_w(m), "hooks": dict(m[0]._forward_pre_hooks)}


class Sym(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)


def param_unsafe_and_cached():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    P.register_parametrization(m[0], "weight", Sym(), unsafe=True)
    return m, torch.randn(4, 8), loss, _opt(m), _w(m)


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 2)
        self.calls = 0
        self.seen_shapes = []
        self.register_buffer("ema", torch.zeros(8))

    def forward(self, x):
        self.calls += 1
        self.seen_shapes.append(tuple(x.shape))
        with torch.no_grad():
            self.ema.mul_(0.9).add_(x.mean(0), alpha=0.1)
        return self.l(x)


def counting_module():
    torch.manual_seed(0)
    m = Counting()
    return m, torch.randn(4, 8), loss, _opt(m), _w(m)


def lazy_materialized():
    torch.manual_seed(0)
    m = nn.Sequential(nn.LazyLinear(16), nn.GroupNorm(4, 16), nn.ReLU(), nn.Linear(16, 2))
    m(torch.randn(1, 8))
    return m, torch.randn(4, 8), loss, _opt(m), _w(m)


def lazy_unmaterialized():
    torch.manual_seed(0)
    m = nn.Sequential(nn.LazyLinear(16), nn.ReLU(), nn.Linear(16, 2))
    return m, torch.randn(4, 8), loss, None, _w(m)


def spectral_under_parametrize_cached():
    torch.manual_seed(0)
    m = nn.Sequential(PZ.spectral_norm(nn.Linear(8, 16), n_power_iterations=3), nn.ReLU(), nn.Linear(16, 2))

    def l(mm, b):
        with P.cached():
            return mm(b).pow(2).mean() + mm(b).sum() * 0
    return m, torch.randn(4, 8), l, _opt(m), _w(m)


CASES = {k: v for k, v in globals().items() if callable(v) and v.__module__ == __name__ and not k.startswith("_")
         and k not in ("loss", "main", "Sym", "Counting")}

if __name__ == "__main__":
    only = sys.argv[1] if len(sys.argv) > 1 else None
    ok = True
    for name, setup in CASES.items():
        if only and name != only:
            continue
        ok &= main(name, setup)
    print("ALL PASS" if ok else "SOME FAIL")
