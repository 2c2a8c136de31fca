"""An estimate of a step with any of torch.optim's optimizers, before its first step or after
real ones (its state holds scalar tensors: ``step``, NAdam's ``mu_product``, ASGD's ``eta`` and
``mu``), equals the CPU tracker's measurement of the same steps byte for byte.

The fake optimizer's step reads its scalar state with ``.item()`` (bias corrections, RAdam's
rectification branch, ASGD's averaging branch). Those values decide what the step allocates
and, for NAdam, whether it can run at all (``1 - mu_product`` divides): the estimate must read
the values the real optimizer would read, not a placeholder.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vramnb
from tests.conftest import assert_same_steps

F32 = 4


def _variants(name: str, **kw: object) -> list[tuple[str, dict[str, object]]]:
    """``name`` with its per-tensor, foreach and (where torch has it) fused CPU kernels (the default on
    CPU parameters is the per-tensor loop)."""
    cls = getattr(torch.optim, name)
    out = [(name, {**kw, "foreach": False}), (name, {**kw, "foreach": True})]
    try:
        cls([nn.Parameter(torch.zeros(1))], **kw, fused=True)
    except (TypeError, RuntimeError, ValueError):
        pass
    else:
        out.append((name, {**kw, "fused": True}))
    return out


OPTIMIZERS = [
    *_variants("Adam"), *_variants("Adam", amsgrad=True), *_variants("AdamW"),
    *_variants("NAdam"), *_variants("NAdam", decoupled_weight_decay=True, weight_decay=0.1),
    *_variants("RAdam"), *_variants("RAdam", decoupled_weight_decay=True, weight_decay=0.1),
    *_variants("Adamax"), *_variants("Adagrad"), *_variants("Adagrad", lr_decay=0.1), *_variants("Adadelta"),
    *_variants("ASGD"), *_variants("ASGD", t0=0.0, lambd=1.0),  # mu = 1 / max(1, step): the averaging branch moves
    *_variants("Rprop"), *_variants("RMSprop"), *_variants("RMSprop", centered=True, momentum=0.9),
    *_variants("SGD", lr=0.1, momentum=0.9), *_variants("SGD", lr=0.1, momentum=0.9, nesterov=True),
]
if hasattr(torch.optim, "Adafactor"):
    OPTIMIZERS += _variants("Adafactor")


def _id(case: tuple[str, dict[str, object]]) -> str:
    name, kw = case
    return name + "".join(f"-{k}={v}" for k, v in kw.items())


def _model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    batch = (torch.randn(8, 16), torch.randint(0, 4, (8,)))
    return model, batch, lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1])


def _state_bytes(opt: torch.optim.Optimizer) -> int:
    """The bytes of every tensor in the optimizer's state, each storage once."""
    seen: dict[int, int] = {}
    for st in opt.state.values():
        for v in st.values():
            if isinstance(v, torch.Tensor):
                seen[v.untyped_storage().data_ptr()] = v.untyped_storage().nbytes()
    return sum(seen.values())


@pytest.mark.parametrize("warm", [0, 6], ids=["cold", "warm6"])
@pytest.mark.parametrize("case", OPTIMIZERS, ids=[_id(c) for c in OPTIMIZERS])
def test_estimate_of_a_warm_optimizer_equals_its_real_steps(case, warm):
    name, kw = case
    model, batch, loss_fn = _model()
    opt = getattr(torch.optim, name)(model.parameters(), **kw)
    for _ in range(warm):  # RAdam rectifies from its 6th step on; ASGD(t0=0) averages from its 3rd
        loss_fn(model, batch).backward()
        opt.step()
        opt.zero_grad()
    saved = {id(p): {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in st.items()}
             for p, st in opt.state.items()}
    est = vramnb.estimate(model, batch, loss_fn, opt, device="cpu", steps=3)
    # the user's optimizer state untouched (values, and no entry added)
    assert {id(p) for p in opt.state} == set(saved)
    for p, st in opt.state.items():
        assert st.keys() == saved[id(p)].keys()
        for k, v in st.items():
            assert torch.equal(v, saved[id(p)][k]) if isinstance(v, torch.Tensor) else v == saved[id(p)][k]
    real = vramnb.profile_step(model, batch, loss_fn, opt, steps=3, module_depth=None)
    assert_same_steps(est, real, 3)
    # the parameters' bytes from shapes, and a warm state's bytes as the user's optimizer holds them
    n_param = sum(p.numel() for p in model.parameters()) * F32
    assert est.steps[-1].mark("start").sources["parameters"] == n_param
    if warm:
        assert est.steps[0].mark("start").sources.get("optimizer state", 0) == _state_bytes(opt)
