"""A profiled step changes nothing outside what it restores: other modules it runs,
other optimizers it steps, leaves its backward reaches, the user's batch
containers and graph; what cannot be put back is refused; compare keeps every
recipe's result when the user's code raises; two profile_steps at once are refused."""

from __future__ import annotations

import threading
from collections import namedtuple
from dataclasses import dataclass

import pytest
import torch
from torch import nn

import vramnb
from vramnb._checks import InputError
from vramnb._containers import map_tensors
from vramnb._errors import VramnbError


def _gan():
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    D = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
    return G, D


# -- finding 4 ------------------------------------------------------------------------
def test_a_gan_generator_step_leaves_the_discriminator_as_it_was():
    G, D = _gan()
    z = torch.randn(32, 8)
    (-D(G(z).detach()).mean()).backward()  # the user's D step, half done
    before = {k: v.clone() for k, v in D.state_dict().items()}
    grads = [p.grad.clone() for p in D.parameters()]
    rep = vramnb.profile_step(G, z, lambda g, b: -D(g(b)).mean(), torch.optim.Adam(G.parameters(), lr=1e-3))
    for k, v in D.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(torch.equal(p.grad, g) for p, g in zip(D.parameters(), grads))
    assert any("outside the model" in n for n in rep.notes)


def test_another_optimizer_stepped_inside_the_loss_is_put_back():
    G, D = _gan()
    opt_d = torch.optim.Adam(D.parameters(), lr=1e-2)
    z = torch.randn(16, 8)
    (-D(G(z).detach()).mean()).backward()
    opt_d.step()
    before = {k: v.clone() for k, v in D.state_dict().items()}
    exp_avg = [opt_d.state[p]["exp_avg"].clone() for p in D.parameters()]

    def both(g, b):  # a GAN step that also steps D
        opt_d.zero_grad()
        (-D(g(b).detach()).mean()).backward()
        opt_d.step()
        return -D(g(b)).mean()

    vramnb.profile_step(G, z, both, torch.optim.SGD(G.parameters(), lr=0.1))
    for k, v in D.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(torch.equal(opt_d.state[p]["exp_avg"], e) for p, e in zip(D.parameters(), exp_avg))
    assert all(int(opt_d.state[p]["step"]) == 1 for p in D.parameters())


def test_a_leaf_of_the_namespace_keeps_its_grad():
    model = nn.Linear(4, 2)
    scale = torch.ones(2, requires_grad=True)
    (scale * 3).sum().backward()
    g = scale.grad.clone()
    vramnb.profile_step(model, torch.randn(3, 4), lambda m, b: (m(b) * scale).sum(), torch.optim.SGD(model.parameters(), lr=0.1))
    assert torch.equal(scale.grad, g)


def test_a_non_leaf_batch_is_detached_per_step_and_the_users_graph_is_untouched():
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    x0 = torch.randn(3, 4, requires_grad=True)
    x = x0 * 2
    x.retain_grad()
    model(x).sum().backward(retain_graph=True)
    model.zero_grad()
    xg, x0g = x.grad.clone(), x0.grad.clone()
    rep = vramnb.profile_step(model, x, lambda m, b: m(b).sum(), torch.optim.SGD(model.parameters(), lr=0.1), steps=2)
    assert torch.equal(x.grad, xg) and torch.equal(x0.grad, x0g)
    assert any("detached" in n for n in rep.notes)
    model(x).sum().backward()  # the user's graph still runs: nothing of it was freed
    assert torch.equal(x0.grad, 2 * x0g)


def test_a_graph_built_before_the_step_is_refused_and_left_whole():
    enc, head = nn.Linear(4, 4), nn.Linear(4, 2)
    feats = enc(torch.randn(3, 4))  # computed outside the loss, requires grad
    before = [p.detach().clone() for p in head.parameters()]
    with pytest.raises(InputError, match="made before profile_step"):
        vramnb.profile_step(head, torch.randn(3, 4), lambda m, b: m(feats).sum() + m(b).sum(),
                            torch.optim.SGD(head.parameters(), lr=0.1))
    assert all(torch.equal(a, p) for a, p in zip(before, head.parameters()))
    feats.sum().backward()  # its graph was not run nor freed
    assert all(p.grad is not None for p in enc.parameters())


# -- finding 5 ------------------------------------------------------------------------
def test_a_loss_that_pops_labels_from_the_dict_batch_gets_its_own_dict_each_step():
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.e, self.h = nn.Embedding(100, 8), nn.Linear(8, 100)

        def forward(self, input_ids, attention_mask=None):
            return self.h(self.e(input_ids))

    model = LM()
    labels = torch.randint(0, 100, (2, 5))
    inner = [labels]
    batch = {"input_ids": torch.randint(0, 100, (2, 5)), "labels": labels, "extra": inner}
    keys, ids = list(batch), {k: id(v) for k, v in batch.items()}

    def loss(m, inputs):
        lab = inputs.pop("labels")
        inputs.pop("extra").append(1)
        return nn.functional.cross_entropy(m(**inputs).flatten(0, 1), lab.flatten())

    vramnb.profile_step(model, batch, loss, torch.optim.AdamW(model.parameters()), steps=2)
    assert list(batch) == keys and {k: id(v) for k, v in batch.items()} == ids
    assert batch["extra"] == [labels] and batch["extra"] is inner


# -- finding 25: one container map -------------------------------------------------
@dataclass
class _DC:
    x: torch.Tensor
    y: torch.Tensor


def test_the_container_map_keeps_types_and_never_changes_the_input():
    B = namedtuple("B", "x y")
    t = torch.ones(2)
    for batch in (B(t, t), {"a": [t, (t,)]}, _DC(t, t), [t, {"b": t}]):
        out = map_tensors(batch, lambda v: v * 2)
        assert type(out) is type(batch) and out is not batch
    assert map_tensors(B(t, t), lambda v: v + 1).y[0] == 2
    assert isinstance(map_tensors(_DC(t, t), lambda v: v + 1).x, torch.Tensor)


@pytest.mark.parametrize("rec", [{"micro_batches": 2}, {"batch_size": 4}])
def test_namedtuple_batches_work_with_batch_recipes(rec):
    B = namedtuple("B", "x y")
    model = nn.Linear(8, 3)
    b = B(torch.randn(16, 8), torch.randint(0, 3, (16,)))
    rep = vramnb.profile_step(model, b, lambda m, bb: nn.functional.cross_entropy(m(bb.x), bb.y),
                              torch.optim.SGD(model.parameters(), lr=0.1), recipe=rec)
    assert rep.steady.peak.allocated > 0


# -- finding 14 -----------------------------------------------------------------------
def test_compare_lists_a_valueerror_of_the_users_model_as_failed():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    cmp = vramnb.compare(model, (x, y), lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1]),
                         torch.optim.SGD(model.parameters(), lr=0.1), progress=False, toggles={"micro_batches": [1, 16]})
    by = {v.recipe.describe(): v for v in cmp.variants}
    assert by["baseline"].report is not None
    assert by["16 micro-batches"].error.startswith("ValueError: Expected more than 1 value per channel")


def test_compare_still_raises_vramnbs_own_input_errors():
    model = nn.Linear(4, 2)
    with pytest.raises(InputError, match="loss must be a scalar"):
        vramnb.compare(model, torch.randn(3, 4), lambda m, b: m(b), progress=False, toggles={"micro_batches": [1]})


# -- two at once ----------------------------------------------------------------------
def test_a_second_profile_step_in_another_thread_is_refused_before_anything_runs():
    model = nn.Linear(4, 2)
    inside, release = threading.Event(), threading.Event()
    errors = []

    def slow(m, b):
        inside.set()
        release.wait(30)
        return m(b).sum()

    def first():
        try:
            vramnb.profile_step(model, torch.randn(3, 4), slow, steps=1)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    th = threading.Thread(target=first, name="first-profile")
    th.start()
    try:
        assert inside.wait(30)
        other = nn.Linear(4, 2)
        with pytest.raises(VramnbError, match="'first-profile' is already recording \\(a profile_step.*one after another"):
            vramnb.profile_step(other, torch.randn(3, 4), None, steps=0)  # refused before its inputs are checked
    finally:
        release.set()
        th.join(60)
    assert not errors
    vramnb.profile_step(model, torch.randn(3, 4), lambda m, b: m(b).sum(), steps=1)  # free again


def test_a_module_outside_the_model_called_through_functional_call_keeps_its_own_parameters():
    D = nn.Linear(4, 1)
    own = {n: p for n, p in D.named_parameters()}
    values = {n: p.detach().clone() for n, p in own.items()}
    swapped = {n: torch.randn_like(p) for n, p in own.items()}
    model = nn.Linear(4, 4)
    vramnb.profile_step(model, torch.randn(3, 4), lambda m, b: torch.func.functional_call(D, swapped, (m(b),)).sum(),
                        torch.optim.SGD(model.parameters(), lr=0.1))
    for n, p in D.named_parameters():
        assert p is own[n] and torch.equal(p, values[n])


def test_an_old_node_that_saves_nothing_is_run_and_its_leaf_keeps_its_grad():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 4))
            self.wt = self.w.t()  # made before the step; TBackward saves nothing

        def forward(self, x):
            return (x @ self.wt).sum()

    m = Tied()
    vramnb.profile_step(m, torch.randn(2, 4), None, torch.optim.SGD(m.parameters(), lr=0.1))
    assert m.w.grad is None
