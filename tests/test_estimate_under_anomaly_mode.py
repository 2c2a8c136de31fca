"""An estimate under PyTorch's anomaly detection (``torch.autograd.set_detect_anomaly(True)``, a common notebook
debugging setting, or the ``detect_anomaly()`` context) gives the same bytes as without, and the setting stays as
the user set it. Anomaly mode's NaN check reads gradients' values, which fake tensors do not have: the estimate
refused every step, blaming a `.item()` of the user's code (adversary round f)."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import vramnb


def _setup():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    return m, torch.randn(4, 8), torch.optim.Adam(m.parameters(), lr=1e-3)


def _loss(m: nn.Module, b: torch.Tensor) -> torch.Tensor:
    return m(b).pow(2).mean()


@pytest.mark.parametrize("how", ["set_detect_anomaly", "detect_anomaly"])
def test_the_estimate_runs_under_anomaly_detection(how):
    m, b, opt = _setup()
    plain = vramnb.estimate(m, b, _loss, opt, target="8GiB")
    try:
        if how == "set_detect_anomaly":
            torch.autograd.set_detect_anomaly(True)
            est = vramnb.estimate(m, b, _loss, opt, target="8GiB")
            assert torch.is_anomaly_enabled() and torch.is_anomaly_check_nan_enabled()
        else:
            with torch.autograd.detect_anomaly():
                est = vramnb.estimate(m, b, _loss, opt, target="8GiB")
                assert torch.is_anomaly_enabled() and torch.is_anomaly_check_nan_enabled()
    finally:
        torch.autograd.set_detect_anomaly(False)
    assert est.peak.allocated == plain.peak.allocated
    assert est.peak.sources == plain.peak.sources
