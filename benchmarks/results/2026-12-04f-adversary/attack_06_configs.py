"""Configuration objects the model holds and its forward (or a hook) changes as it runs: a Hugging Face
`PretrainedConfig` (a counter and a dict attribute), diffusers' `FrozenDict` config (through
`register_to_config`'s `_internal_dict`), a frozen dataclass written with `object.__setattr__`, a
`dataclass(slots=True)`, an `attrs` class, a pydantic model (validate_assignment), a `SimpleNamespace`
and an `argparse.Namespace` the loss names, `typing.NamedTuple` holding a list. Prints PASS/FAIL per case
and entry point."""
import argparse
import dataclasses
import sys
import types
from typing import NamedTuple

import attrs
import pydantic
import torch
import torch.nn as nn

from _common import main


def _loss(m, b):
    return m(b).pow(2).mean()


def _setup(m, extra=None):
    torch.manual_seed(0)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    return m, torch.randn(4, 8), _loss, opt, {"m": m, **(extra or {})}


class HF(nn.Module):
    def __init__(self):
        super().__init__()
        from transformers import PretrainedConfig
        self.config = PretrainedConfig(calls=0, seen={})
        self.l = nn.Linear(8, 2)

    def forward(self, x):
        self.config.calls += 1
        self.config.seen[tuple(x.shape)] = self.config.seen.get(tuple(x.shape), 0) + 1
        self.config.use_cache = False
        return self.l(x)


def hf_config():
    m = HF()
    return _setup(m, {"config": m.config, "dict": m.config.to_dict()})


def diffusers_frozen():
    from diffusers.configuration_utils import ConfigMixin, register_to_config

    class D(nn.Module, ConfigMixin):
        config_name = "c.json"

        @register_to_config
        def __init__(self, width: int = 8):
            super().__init__()
            self.l = nn.Linear(width, 2)

        def forward(self, x):
            d = dict(self._internal_dict)
            d["calls"] = d.get("calls", 0) + 1
            from diffusers.configuration_utils import FrozenDict
            self._internal_dict = FrozenDict(d)
            return self.l(x)
    m = D()
    return _setup(m, {"cfg": m.config})


@dataclasses.dataclass(frozen=True)
class Frozen:
    width: int = 8
    hist: tuple = ()


class WithFrozen(nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = Frozen()
        self.l = nn.Linear(8, 2)

    def forward(self, x):
        object.__setattr__(self.cfg, "hist", self.cfg.hist + (x.shape[0],))
        return self.l(x)


def frozen_dataclass():
    m = WithFrozen()
    return _setup(m, {"cfg": m.cfg})


@dataclasses.dataclass(slots=True)
class Slotted:
    n: int = 0
    log: list = dataclasses.field(default_factory=list)


@attrs.define
class AttrsCfg:
    n: int = 0
    log: list = attrs.field(factory=list)


class PydCfg(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(validate_assignment=True)
    n: int = 0
    log: list = []


class Many(nn.Module):
    def __init__(self):
        super().__init__()
        self.s = Slotted()
        self.a = AttrsCfg()
        self.p = PydCfg()
        self.l = nn.Linear(8, 2)

    def forward(self, x):
        self.s.n += 1
        self.s.log.append(1)
        self.a.n += 1
        self.a.log.append(1)
        self.p.n = self.p.n + 1
        self.p.log.append(1)
        return self.l(x)


def slots_attrs_pydantic():
    m = Many()
    return _setup(m, {"s": m.s, "a": m.a, "p": m.p, "p_dump": m.p.__dict__, "p_set": m.p.__pydantic_fields_set__})


NS = types.SimpleNamespace(steps=0, losses=[])
ARGS = argparse.Namespace(step=0, lr=0.1)


class NT(NamedTuple):
    name: str
    hist: list


TAG = NT("x", [])


def ns_loss(m, b):
    out = m(b).pow(2).mean()
    NS.steps += 1
    NS.losses.append(1)
    ARGS.step += 1
    ARGS.lr *= 0.5
    TAG.hist.append(1)
    return out


def namespaces():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 2))
    return m, torch.randn(4, 8), ns_loss, torch.optim.SGD(m.parameters(), lr=0.1), {"m": m, "NS": NS, "ARGS": ARGS, "TAG": TAG}


CASES = {f.__name__: f for f in (hf_config, diffusers_frozen, frozen_dataclass, slots_attrs_pydantic, namespaces)}

if __name__ == "__main__":
    only = sys.argv[1:]
    allok = True
    for name, f in CASES.items():
        if only and name not in only:
            continue
        allok &= main(name, f)
    print("ALL PASS" if allok else "SOME FAIL")
