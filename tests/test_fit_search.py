"""fit's search over micro-batches: a count that cannot fit is not estimated, one that can is."""

from __future__ import annotations

import torch

import vramnb
import vramnb.predict._estimate as estimate_module

from .test_fit import _Net

MICRO = {"micro_batches": [1, 2, 4, 8, 16]}


def _counted(monkeypatch):  # type: ignore[no-untyped-def]
    """Record each micro-batch count the planner estimates (its recipe's ``micro_batches``)."""
    seen: list[int] = []
    real = estimate_module.estimate

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        recipe = kwargs.get("recipe")
        seen.append(recipe.changed().get("micro_batches", 1) if isinstance(recipe, vramnb.Recipe) else 1)
        return real(*args, **kwargs)

    monkeypatch.setattr(estimate_module, "estimate", counting)
    return seen


def test_micro_batches_that_cannot_fit_are_not_estimated(monkeypatch):
    """Parameters, gradients and AdamW's state alone exceed the card: splitting the batch cannot
    help, and after 1 and 2 micro-batches show it, 4, 8 and 16 are not estimated (each was: five
    estimates per combination, the 865 s of a UNet's fit)."""
    torch.manual_seed(0)
    net = _Net(1024, 4)  # 134 MB of fp32 parameters
    opt = torch.optim.AdamW(net.parameters())
    params = sum(p.numel() * p.element_size() for p in net.parameters())
    x = torch.randn(64, 1024)
    seen = _counted(monkeypatch)
    r = vramnb.fit(net, x, None, opt, target=3 * params, margin=0.0, allow=MICRO, progress=False)
    assert r.best is None and r.misses is not None and r.misses > 0, r.notes
    searched = [k for k in seen if k in (4, 8, 16)]
    assert searched == [], f"estimated {searched} micro-batches though 1 and 2 showed none can fit"
    assert 2 in seen


def test_the_fewest_micro_batches_that_fit_are_still_found(monkeypatch):
    """Activations dominate: the card lies between the estimates at 4 and at 2 micro-batches, and
    the plan with 4 is found (the bound from 1 and 2 is a lower one: memory is convex in 1/k)."""
    torch.manual_seed(0)
    net = _Net(256, 4)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.randn(4096, 256)
    two = vramnb.estimate(net, x, None, opt, target="H100", recipe={"micro_batches": 2})
    four = vramnb.estimate(net, x, None, opt, target="H100", recipe={"micro_batches": 4})
    assert four.device_memory < two.device_memory
    card = (two.device_memory + four.device_memory) // 2
    r = vramnb.fit(net, x, None, opt, target=card, margin=0.0, allow=MICRO, progress=False)
    assert r.best is not None and r.best.recipe == vramnb.Recipe(micro_batches=4)
    assert r.best.device_memory == four.device_memory
