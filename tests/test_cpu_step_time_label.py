"""A step time measured on the CPU says that vramnb's tracker ran in it (newuser8, 2026-12-04 g: "step time
8.01 s" for a step that takes 0.10-0.14 s plainly: the CPU tracker watches every operator)."""

from __future__ import annotations

import torch
from torch import nn

import vramnb
from vramnb._breakdown import CPU_TIME
from vramnb.techniques import Recipe


def _setup() -> tuple[nn.Module, torch.Tensor, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
    return model, torch.randn(8, 16), torch.optim.SGD(model.parameters(), lr=0.1)


def _loss(m: nn.Module, b: torch.Tensor) -> torch.Tensor:
    return m(b).square().mean()


def test_profile_step_on_the_cpu_says_its_time_is_tracked() -> None:
    model, batch, opt = _setup()
    report = vramnb.profile_step(model, batch, _loss, opt)
    assert report.device == "cpu"
    lines = [ln for ln in str(report).splitlines() if "step time" in ln]
    assert lines and all(ln.endswith(CPU_TIME.strip(" ")) or ln.endswith(CPU_TIME) for ln in lines), lines


def test_compare_on_the_cpu_says_its_times_are_tracked() -> None:
    model, batch, opt = _setup()
    cmp = vramnb.compare(model, batch, _loss, opt, recipes=[Recipe(micro_batches=2)], progress=False)
    assert cmp.device == "cpu"
    assert ("step time" + CPU_TIME) in str(cmp)


def test_an_estimate_keeps_its_own_label() -> None:
    model, batch, _ = _setup()
    est = vramnb.estimate(model, batch, _loss, lambda p: torch.optim.SGD(p, lr=0.1), device="cpu")
    text = str(est)
    assert "time to trace on this machine" in text and CPU_TIME not in text
