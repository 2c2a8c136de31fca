"""The step's per-module tracking (PyTorch's ``ModTracker``) is vramnb's: nothing of it reaches the user's
process or the report as if it were the user's (newuser8, 2026-12-04 g: ``profile_step`` on a Hugging Face
Qwen2 printed PyTorch's "Please file a bug" warning eight times, left ``warnings.formatwarning`` replaced, and
named "ModTracker._fw_post_hook's object" as a library's object the user's code reaches)."""

from __future__ import annotations

import warnings

import torch
from torch import nn

import vramnb


class Recursive(nn.Module):
    """A module that calls itself: ModTracker meets it while it is already active, and warns."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, depth: int = 2) -> torch.Tensor:
        return self.lin(x) if depth == 0 else self(x, depth - 1)


def test_module_trackings_warning_and_formatwarning_stay_vramnbs() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(Recursive(), nn.Linear(8, 1))
    fmt, show = warnings.formatwarning, warnings.showwarning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = vramnb.profile_step(model, torch.randn(4, 8), lambda m, b: m(b).sum(),
                                     torch.optim.SGD(model.parameters(), lr=0.1))
        assert warnings.formatwarning is fmt  # ModTracker replaces it as it warns
    assert [str(w.message) for w in caught] == []
    assert warnings.showwarning is show
    assert report.error is None
    # the step still ran its module tracking: per-module memory of the model's children
    assert {mm.name for mm in report.first.modules} >= {"0", "1"}


def test_a_module_outside_the_model_does_not_name_vramnbs_tracker() -> None:
    """A loss module outside the model is recorded as it starts running, with the process-wide module hooks
    its call runs: ModTracker's were named as the user's "library's object" not checked for changes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1))
    crit = nn.MSELoss()
    target = torch.zeros(4, 1)
    report = vramnb.profile_step(model, torch.randn(4, 8), lambda m, b: crit(m(b), target),
                                 torch.optim.SGD(model.parameters(), lr=0.1))
    text = str(report)
    assert "also restored: 1 module(s) outside the model that the step ran" in text
    assert "ModTracker" not in text and "not checked for changes" not in text


def test_a_formatwarning_the_users_step_replaces_is_put_back() -> None:
    fmt = warnings.formatwarning
    model = nn.Linear(8, 1)

    def loss(m: nn.Module, b: torch.Tensor) -> torch.Tensor:
        warnings.formatwarning = lambda *a, **k: "mine\n"  # type: ignore[assignment]
        return m(b).sum()

    try:
        vramnb.profile_step(model, torch.randn(4, 8), loss, torch.optim.SGD(model.parameters(), lr=0.1))
        assert warnings.formatwarning is fmt
    finally:
        warnings.formatwarning = fmt
