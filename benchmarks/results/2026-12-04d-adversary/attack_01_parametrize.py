"""Parametrizations: parametrize.register_parametrization (orthogonal), weight_norm, spectral_norm
(new style, u/v buffers updated in forward), caching off. Prints PASS/FAIL per entry point."""
import torch
from torch.nn.utils import parametrize, parametrizations

from _common import main


class Sym(torch.nn.Module):
    def forward(self, x):
        return x.triu() + x.triu(1).transpose(-1, -2)


def setup():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    parametrize.register_parametrization(m[0], "weight", Sym())
    parametrizations.weight_norm(m[1])
    parametrizations.spectral_norm(m[2])
    parametrizations.orthogonal(m[3])
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    x = torch.randn(4, 8)
    loss = lambda mm, b: mm(b).pow(2).sum()
    loss(m, x).backward(); opt.step()
    return m, x, loss, opt, {"m": m, "opt": opt}


if __name__ == "__main__":
    main("parametrize", setup)
