"""Random generators the user's code reaches below a name (a helper object's, a dataclass config's, a hook's
closure object's, a bound-method loss's object) are put back by every entry point (adversary round f)."""
from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch
import torch.nn as nn

import vramnb


class Aug:
    def __init__(self) -> None:
        self.g = torch.Generator().manual_seed(1)
        self.np = np.random.default_rng(2)
        self.legacy = np.random.RandomState(3)
        self.py = random.Random(4)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        noise = torch.randn(x.shape, generator=self.g) * 0.01
        scale = float(self.np.uniform(0.9, 1.1)) * float(self.legacy.uniform(0.9, 1.1)) * self.py.uniform(0.9, 1.1)
        return x * scale + noise


class WithHelper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.aug = Aug()
        self.lin = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(self.aug(x))


@dataclasses.dataclass
class Cfg:
    p: float = 0.1
    rng: np.random.Generator = dataclasses.field(default_factory=lambda: np.random.default_rng(7))


class WithCfg(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cfg = Cfg()
        self.lin = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = torch.from_numpy(self.cfg.rng.random(x.shape[-1]) > self.cfg.p).float()
        return self.lin(x * keep)


class Trainer:
    def __init__(self) -> None:
        self.rng = random.Random(11)
        self.legacy = np.random.RandomState(12)

    def loss(self, m: nn.Module, b: torch.Tensor) -> torch.Tensor:
        return m(b).pow(2).mean() * (self.rng.random() + float(self.legacy.rand()))


def _loss(m: nn.Module, b: torch.Tensor) -> torch.Tensor:
    return m(b).pow(2).mean()


def _states(*gens: object) -> list[object]:
    out: list[object] = []
    for g in gens:
        if isinstance(g, torch.Generator):
            out.append(bytes(g.get_state().tolist()))
        elif isinstance(g, np.random.Generator):
            out.append(repr(g.bit_generator.state))
        elif isinstance(g, np.random.RandomState):
            s = g.get_state()
            out.append((s[1].tobytes(), s[2:]))
        else:
            assert isinstance(g, random.Random)
            out.append(g.getstate())
    return out


def _helper():
    m = WithHelper()
    return m, _loss, [m.aug.g, m.aug.np, m.aug.legacy, m.aug.py]


def _config():
    m = WithCfg()
    return m, _loss, [m.cfg.rng]


def _bound_loss():
    m = nn.Sequential(nn.Linear(8, 2))
    t = Trainer()
    return m, t.loss, [t.rng, t.legacy]


def _hook_object():
    m = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    aug = Aug()
    m[0].register_forward_hook(lambda mod, i, o: aug(o))
    return m, _loss, [aug.g, aug.np, aug.legacy, aug.py]


@pytest.mark.parametrize("case", [_helper, _config, _bound_loss, _hook_object], ids=lambda f: f.__name__)
@pytest.mark.parametrize("entry", ["profile_step", "estimate"])
def test_generators_below_a_name_are_put_back(case, entry):
    torch.manual_seed(0)
    m, loss, gens = case()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    batch = torch.randn(4, 8)
    before = _states(*gens)
    if entry == "profile_step":
        vramnb.profile_step(m, batch, loss, opt)
    else:
        vramnb.estimate(m, batch, loss, opt, target="8GiB")
    assert _states(*gens) == before
    # and they draw what they would have drawn: the next draw equals a fresh copy's
    torch.manual_seed(0)
    _, _, fresh = case()
    assert _states(*gens) == _states(*fresh)


class NoisySGD(torch.optim.SGD):
    """A user optimizer with attributes of its own: a step counter, a log and two noise generators."""

    def __init__(self, params, lr: float) -> None:
        super().__init__(params, lr=lr)
        self.noise_gen = torch.Generator().manual_seed(31)
        self.np_rng = np.random.default_rng(32)
        self.steps = 0
        self.log: list[int] = []

    @torch.no_grad()
    def step(self, closure=None):
        out = super().step(closure)
        self.steps += 1
        self.log.append(self.steps)
        for g in self.param_groups:
            for p in g["params"]:
                p.add_(torch.randn(p.shape, generator=self.noise_gen) * 1e-3 * float(self.np_rng.random()))
        return out


@pytest.mark.parametrize("entry", ["profile_step", "estimate"])
def test_an_optimizer_with_its_own_generators_and_counters(entry):
    torch.manual_seed(0)
    m = nn.Linear(8, 2)
    opt = NoisySGD(m.parameters(), lr=0.1)
    batch = torch.randn(4, 8)
    _loss(m, batch).backward()
    opt.step()
    opt.zero_grad()
    before = (_states(opt.noise_gen, opt.np_rng), opt.steps, list(opt.log), [p.detach().clone() for p in m.parameters()])
    if entry == "profile_step":
        vramnb.profile_step(m, batch, _loss, opt)
    else:
        est = vramnb.estimate(m, batch, _loss, opt, target="8GiB")
        params = 8 * 2 * 4 + 2 * 4
        assert est.peak.sources["parameters"] >= params  # the step ran on the copy (the CUDA block rounding aside)
    assert (_states(opt.noise_gen, opt.np_rng), opt.steps, opt.log) == before[:3]
    assert all(torch.equal(a, b) for a, b in zip(m.parameters(), before[3]))


class Wrapping(torch.optim.Optimizer):
    """An optimizer that wraps another over the same parameters (a Lookahead)."""

    def __init__(self, params) -> None:
        params = list(params)
        super().__init__(params, {"lr": 0.1})
        self.base = torch.optim.Adam(params, lr=1e-3)

    def step(self, closure=None):
        return self.base.step(closure)


def test_an_optimizer_wrapping_another_is_refused_by_the_estimate_naming_the_attribute():
    torch.manual_seed(0)
    m = nn.Linear(8, 2)
    opt = Wrapping(m.parameters())
    with pytest.raises(ValueError, match=r"Wrapping keeps tensors, a module or an optimizer in its attribute 'base'"):
        vramnb.estimate(m, torch.randn(4, 8), _loss, opt, target="8GiB")
    # the factory it names works
    est = vramnb.estimate(m, torch.randn(4, 8), _loss, lambda ps: Wrapping(ps), target="8GiB")
    assert est.peak.sources["parameters"] > 0


class Spawner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rng = np.random.default_rng(41)
        self.lin = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        child = self.rng.spawn(1)[0]  # advances the SeedSequence's child counter, which NumPy keeps read-only
        return self.lin(x * float(child.random()))


def test_a_numpy_generators_spawn_counter_is_kept():
    torch.manual_seed(0)
    m = Spawner()
    seq = m.rng.bit_generator.seed_seq
    r = vramnb.profile_step(m, torch.randn(4, 8), _loss, torch.optim.SGD(m.parameters(), lr=0.1))
    assert m.rng.bit_generator.seed_seq is seq and seq.n_children_spawned == 0
    assert "model, optimizer and RNG state restored exactly" in r.notes
    for entry in ("compare", "estimate"):
        if entry == "compare":
            vramnb.compare(m, torch.randn(4, 8), _loss, torch.optim.SGD(m.parameters(), lr=0.1),
                           toggles={"precision": ["fp32", "bf16"]}, progress=False)
        else:
            vramnb.estimate(m, torch.randn(4, 8), _loss, torch.optim.SGD(m.parameters(), lr=0.1), target="8GiB")
        assert m.rng.bit_generator.seed_seq is seq and seq.n_children_spawned == 0, entry
    child = m.rng.spawn(1)[0]  # the next child is the one a step never made
    assert child.bit_generator.seed_seq.spawn_key == (0,)


def test_an_lr_schedulers_wrapper_of_step_is_not_taken_into_the_estimates_optimizer():
    """The scheduler patches ``optimizer.step`` on the instance (bound to the user's optimizer): the estimate's copy
    must step itself, so the bytes are those without a scheduler."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
    batch = torch.randn(4, 64)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    plain = vramnb.estimate(m, batch, _loss, opt, target="8GiB")
    torch.optim.lr_scheduler.StepLR(opt, 2)
    assert callable(opt.__dict__.get("step"))
    with_scheduler = vramnb.estimate(m, batch, _loss, opt, target="8GiB")
    assert with_scheduler.peak.sources == plain.peak.sources
    # Adam's exp_avg and exp_avg_sq per parameter and a float32 step per parameter, each in CUDA's 512-byte blocks
    blocks = sum(-(-4 * p.numel() // 512) * 512 for p in m.parameters())
    assert with_scheduler.peak.sources["optimizer state"] == 2 * blocks + 4 * 512


class SeqHolder(nn.Module):
    """A model holding a NumPy SeedSequence itself and spawning from it in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.ss = np.random.SeedSequence(7)
        self.lin = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x * float(np.random.default_rng(self.ss.spawn(1)[0]).random()))


def test_a_seed_sequence_held_by_the_model_is_put_back():
    torch.manual_seed(0)
    m = SeqHolder()
    ss = m.ss
    vramnb.profile_step(m, torch.randn(4, 8), _loss, torch.optim.SGD(m.parameters(), lr=0.1))
    vramnb.compare(m, torch.randn(4, 8), _loss, torch.optim.SGD(m.parameters(), lr=0.1),
                   toggles={"precision": ["fp32", "bf16"]}, progress=False)
    assert m.ss is ss and ss.n_children_spawned == 0
