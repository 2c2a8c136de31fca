"""Adversary round 2026-12-04e: tensors and class state the user's step changes beside the model.

* A tensor a module keeps inside a plain helper object (``self.stats.total``, added into in forward):
  the snapshot walked only a module's containers, and the code state left the model's values to it, so
  ``profile_step`` and ``compare`` left the profiled steps' sums there.
* An EMA object whose forward hook ``lerp_``s a dict of shadow tensors: two levels below the hook's
  object, the shadow tensors were "kept by their binding only", and kept the profiled steps' averages.
* A tensor subclass of the user's whose ``__torch_function__`` counts calls on the class: every entry
  point left the count advanced (the step's calls, and vramnb's own reads of the parameter).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from tests.conftest import ENTRY_POINTS, REAL_STEPS


class Stats:
    def __init__(self) -> None:
        self.n = 0
        self.total = torch.zeros(8)

    def update(self, x: torch.Tensor) -> None:
        self.n += 1
        self.total += x.detach().sum(0)


class WithHelper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 2)
        self.stats = Stats()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.stats.update(x)
        return self.lin(x)


class EMA:
    def __init__(self, m: nn.Module) -> None:
        self.shadow = {k: v.detach().clone() for k, v in m.state_dict().items()}

    def hook(self, mod: nn.Module, inp: object, out: object) -> None:
        with torch.no_grad():
            for k, v in mod.state_dict().items():
                self.shadow[k].lerp_(v, 0.1)


@pytest.mark.parametrize("entry", list(REAL_STEPS))
def test_a_tensor_in_a_modules_helper_object_is_put_back(entry: str) -> None:
    torch.manual_seed(0)
    m = WithHelper()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    total = m.stats.total
    before, version = total.clone(), total._version
    REAL_STEPS[entry](m, torch.randn(4, 8), opt)
    assert m.stats.total is total and m.stats.n == 0
    assert torch.equal(total, before) and total._version == version


@pytest.mark.parametrize("entry", list(REAL_STEPS))
def test_an_ema_hooks_shadow_tensors_are_put_back(entry: str) -> None:
    torch.manual_seed(0)
    m = nn.Linear(8, 2)
    ema = EMA(m)
    with torch.no_grad():
        m.weight.add_(1.0)  # the shadow differs from the weights: a lerp_ changes its bytes
    m.register_forward_hook(ema.hook)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    before = {k: (v, v.clone(), v._version) for k, v in ema.shadow.items()}
    REAL_STEPS[entry](m, torch.randn(4, 8), opt)
    for k, (t, copy, version) in before.items():
        assert ema.shadow[k] is t and torch.equal(t, copy) and t._version == version, k


class Counted(torch.Tensor):
    calls = 0
    seen: list[str] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        cls.calls += 1
        cls.seen.append(getattr(func, "__name__", "?"))
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_a_tensor_subclass_parameters_class_state_is_kept(entry: str) -> None:
    torch.manual_seed(0)
    m = nn.Linear(8, 2)
    m.weight = nn.Parameter(torch.randn(2, 8).as_subclass(Counted))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    Counted.calls, Counted.seen = 0, []
    seen = Counted.seen
    ENTRY_POINTS[entry](m, torch.randn(4, 8), opt)
    assert Counted.calls == 0 and Counted.seen is seen and seen == []
