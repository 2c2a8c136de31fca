"""Optimizer state at any depth and objects whose classes refuse updates come
back exactly after profile_step; what cannot be restored is refused before the
step (issue 28 items 3 and 17)."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from torch import nn

import vramnb
from vramnb._checks import InputError


class History(torch.optim.SGD):
    """An optimizer whose state holds a list it appends to, a dict of tensors,
    an object holding a tensor, and a tuple of tensors."""

    class Box:
        def __init__(self, t):
            self.t = t
            self.calls = 0

    @torch.no_grad()
    def step(self, closure=None):
        super().step(closure)
        for g in self.param_groups:
            for p in g["params"]:
                st = self.state[p]
                if "history" not in st:
                    st["history"] = [torch.zeros(())]
                    st["stats"] = {"mean": torch.zeros(()), "n": [0]}
                    st["box"] = self.Box(torch.zeros(2))
                    st["pair"] = (torch.zeros(3), [1])
                st["history"].append(p.detach().sum().clone())
                st["stats"]["mean"].add_(1.0)
                st["stats"]["n"][0] += 1
                st["box"].t.add_(2.0)
                st["box"].calls += 1
                st["pair"][0].add_(3.0)
                st["pair"][1].append(2)
            g["seen"] = g.get("seen", 0) + 1
            g["betas"] = (0.5, 0.5)
            g["lr_t"].mul_(0.5)


def _snapshot(opt):
    out = {}
    for i, (p, st) in enumerate(opt.state.items()):
        out[i] = (len(st["history"]), [h.clone() for h in st["history"]], st["stats"]["mean"].clone(),
                  list(st["stats"]["n"]), st["box"].t.clone(), st["box"].calls, st["pair"][0].clone(),
                  list(st["pair"][1]), id(st["history"]), id(st["stats"]), id(st["box"].t))
    groups = [({k: v for k, v in g.items() if k not in ("params", "lr_t")}, g["lr_t"].clone()) for g in opt.param_groups]
    return out, groups


def _equal(a, b):
    assert a[0].keys() == b[0].keys()
    for k in a[0]:
        for x, y in zip(a[0][k], b[0][k]):
            if isinstance(x, torch.Tensor):
                assert torch.equal(x, y)
            elif isinstance(x, list) and x and isinstance(x[0], torch.Tensor):
                assert len(x) == len(y) and all(torch.equal(u, v) for u, v in zip(x, y))
            else:
                assert x == y
    for (ga, ta), (gb, tb) in zip(a[1], b[1]):
        assert ga == gb
        assert torch.equal(ta, tb)


def test_nested_optimizer_state_is_restored_at_any_depth():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = History(model.parameters(), lr=0.1)
    opt.param_groups[0]["lr_t"] = torch.tensor(1.0)
    x = torch.randn(8, 4)
    model(x).pow(2).mean().backward()
    opt.step()  # the state exists before profiling
    before = _snapshot(opt)
    lr_t = opt.param_groups[0]["lr_t"]
    vramnb.profile_step(model, x, lambda m, b: m(b).pow(2).mean(), opt)
    after = _snapshot(opt)
    _equal(before, after)
    assert opt.param_groups[0]["lr_t"] is lr_t
    assert all(len(st["history"]) == 2 for st in opt.state.values())  # created with 1, one step appended 1


class _Slots:
    __slots__ = ("t",)

    def __init__(self):
        self.t = torch.zeros(2)


def test_state_that_cannot_be_snapshot_is_refused_before_the_step():
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.state[model.weight]["odd"] = _Slots()
    w = model.weight.detach().clone()
    with pytest.raises(InputError, match=r"SGD\['state'\]\[<Parameter of shape \(3, 4\)>\]\['odd'\].*_Slots"):
        vramnb.profile_step(model, torch.randn(2, 4), lambda m, b: m(b).sum(), opt)
    assert torch.equal(model.weight, w) and model.weight.grad is None


class Frozen(OrderedDict):
    """diffusers' FrozenDict: update/setitem/pop refuse once built."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self._frozen = True

    def update(self, *a, **k):
        raise Exception("You cannot use update on a Frozen instance.")

    def __setitem__(self, k, v):
        if getattr(self, "_frozen", False):
            raise Exception("frozen")
        super().__setitem__(k, v)


class WithConfig(nn.Module):
    def __init__(self, changes=False):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self._internal_dict = Frozen(a=1, b=[1, 2], c="x")
        self.changes = changes

    def forward(self, x):
        if self.changes:  # a forward that changes the frozen dict through the base class
            OrderedDict.__setitem__(self._internal_dict, "added", 3)
            self._internal_dict["b"].append(3)
        return self.lin(x)


@pytest.mark.parametrize("changes", [False, True])
def test_a_dict_whose_class_refuses_updates_is_restored_whole(changes):
    model = WithConfig(changes)
    d, b = model._internal_dict, model._internal_dict["b"]
    vramnb.profile_step(model, torch.randn(2, 4), lambda m, x: m(x).sum(), torch.optim.SGD(model.parameters(), 0.1))
    assert model._internal_dict is d and d["b"] is b
    assert list(d.items()) == [("a", 1), ("b", [1, 2]), ("c", "x")]


def test_compare_names_the_device_when_every_recipe_fails():
    model = nn.Linear(4, 4)

    def loss(m, x):
        raise RuntimeError("boom")

    cmp = vramnb.compare(model, torch.randn(2, 4), loss, torch.optim.SGD(model.parameters(), 0.1), progress=False)
    assert cmp.device == "cpu"
    assert all(v.error and "boom" in v.error for v in cmp.variants)


def test_an_lr_scheduler_attached_to_the_optimizer_sees_nothing_of_the_step():
    model = nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    attrs, sched_state = dict(opt.__dict__), sched.state_dict()
    group = dict(opt.param_groups[0])
    vramnb.profile_step(model, torch.randn(2, 4), lambda m, b: m(b).sum(), opt)
    assert opt.__dict__.keys() == attrs.keys() and all(opt.__dict__[k] is v for k, v in attrs.items())
    assert not getattr(opt, "_opt_called", False)  # the flag StepLR's warning reads: the step did not count
    assert sched.state_dict() == sched_state and opt.param_groups[0] == group and len(opt.state) == 0
