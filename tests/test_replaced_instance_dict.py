"""An object whose class replaces its ``__dict__`` on every assignment (as pydantic's models do with
``validate_assignment=True``) is put back: the recorded dict is its ``__dict__`` again (adversary round f)."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import vramnb


class Rebinds:
    """Each assignment makes a new ``__dict__`` (pydantic's ``validate_assignment`` does the same)."""

    def __init__(self) -> None:
        object.__setattr__(self, "__dict__", {"n": 0, "log": []})

    def __setattr__(self, name: str, value: object) -> None:
        d = dict(self.__dict__)
        d[name] = value
        object.__setattr__(self, "__dict__", d)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cfg = Rebinds()
        self.lin = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cfg.n = self.cfg.n + 1
        self.cfg.log = [*self.cfg.log, x.shape[0]]
        return self.lin(x)


TRACK = Rebinds()


def _loss(m: nn.Module, b: torch.Tensor) -> torch.Tensor:
    TRACK.n = TRACK.n + 1
    return m(b).pow(2).mean()


class CountingSGD(torch.optim.SGD):
    def __init__(self, params) -> None:
        super().__init__(params, lr=0.1)
        self.meta = Rebinds()

    def step(self, closure=None):
        self.meta.n = self.meta.n + 1
        return super().step(closure)


@pytest.mark.parametrize("entry", ["profile_step", "compare", "estimate"])
def test_an_object_that_replaces_its_dict_is_put_back(entry):
    torch.manual_seed(0)
    m = Model()
    opt = CountingSGD(m.parameters())
    batch = torch.randn(4, 8)
    before = [(o.__dict__, dict(o.__dict__)) for o in (m.cfg, TRACK, opt.meta)]
    if entry == "profile_step":
        vramnb.profile_step(m, batch, _loss, opt)
    elif entry == "compare":
        vramnb.compare(m, batch, _loss, opt, toggles={"precision": ["fp32", "bf16"]}, progress=False)
    else:
        vramnb.estimate(m, batch, _loss, opt, target="8GiB")
    for o, (d, kept) in zip((m.cfg, TRACK, opt.meta), before):
        assert o.__dict__ is d
        assert o.__dict__ == kept == {"n": 0, "log": []}
