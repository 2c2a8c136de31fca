"""Lazy modules not yet initialised (LazyLinear, LazyConv1d, LazyBatchNorm1d): after any entry point
they must still be uninitialised (UninitializedParameter, the lazy class, the lazy hook present), and
the optimizer (made over uninitialised params) untouched. Prints PASS/FAIL."""
import torch

from _common import main


def setup():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.LazyLinear(8), torch.nn.LazyBatchNorm1d(), torch.nn.ReLU(), torch.nn.LazyLinear(2))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    return m, torch.randn(4, 5), (lambda mm, b: mm(b).sum()), opt, {"m": m, "opt": opt}


def extra(w):
    m = w["m"]
    return {"classes": [type(x).__name__ for x in m], "uninit": [type(p).__name__ for p in m.parameters()],
            "buffers": [type(b).__name__ for b in m.buffers()],
            "has_lazy_hook": [len(x._forward_pre_hooks) for x in m], "opt_params": [type(p).__name__ for g in w["opt"].param_groups for p in g["params"]]}


if __name__ == "__main__":
    main("lazy modules", setup, extra=extra)
