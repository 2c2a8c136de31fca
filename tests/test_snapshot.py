"""The snapshot puts back each tensor exactly as it was (storage, size, view, bytes,
version counter), copies each storage once and only the bytes a step can reach,
and covers plain tensor attributes, nested containers and generator objects."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

import vramnb
from vramnb._restore import Snapshot

F32 = 4


def _exact(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.untyped_storage().nbytes(), t._version)


# -- finding 1: a forward that resizes a buffer in place --------------------------------
def test_per_channel_observer_buffers_come_back_with_their_size_and_storage():
    from torch.ao.quantization.observer import PerChannelMinMaxObserver

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(8, 4)
            self.obs = PerChannelMinMaxObserver(ch_axis=0)

        def forward(self, x):
            y = self.l(x)
            self.obs(y.detach().T)
            return y.sum()

    m = M()
    before = {k: (_exact(v), v.clone()) for k, v in m.obs.state_dict().items()}
    vramnb.profile_step(m, torch.randn(5, 8), None, torch.optim.SGD(m.parameters(), lr=0.1))
    after = {k: (_exact(v), v.clone()) for k, v in m.obs.state_dict().items()}
    assert before.keys() == after.keys()
    for k in before:
        assert before[k][0] == after[k][0], k
        assert torch.equal(before[k][1], after[k][1]), k
    mv = m.obs.min_val
    assert mv.untyped_storage().nbytes() >= mv.numel() * mv.element_size()


def test_prepare_qat_scales_are_back_with_shape_storage_and_bytes():
    tq = pytest.importorskip("torch.ao.quantization")
    torch.manual_seed(0)
    model = nn.Sequential(tq.QuantStub(), nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4), tq.DeQuantStub())
    model.train()
    model.qconfig = tq.get_default_qat_qconfig("fbgemm")
    with pytest.warns(UserWarning):
        tq.prepare_qat(model, inplace=True)
    x = torch.randn(8, 16)
    model(x)  # one real step so scales have values
    before = {k: (_exact(v), v.clone()) for k, v in model.state_dict().items()}
    vramnb.profile_step(model, x, lambda m, b: m(b).pow(2).mean(), torch.optim.SGD(model.parameters(), lr=0.01))
    after = model.state_dict()
    for k, (meta, v) in before.items():
        assert _exact(after[k]) == meta, k
        assert torch.equal(after[k], v), k


def test_a_storage_the_step_swaps_and_resizes_is_the_original_again():
    class Grow(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(4, 4)
            self.register_buffer("b", torch.arange(3.0))
            self.register_buffer("c", torch.arange(6.0)[1:5])  # a view at an offset

        def forward(self, x):
            with torch.no_grad():
                self.b.resize_(1000).fill_(7)  # grows the storage in place
                self.c.set_(torch.zeros(50))  # another storage
            return self.l(x).sum()

    m = Grow()
    b_st, c_st = m.b.untyped_storage()._cdata, m.c.untyped_storage()._cdata
    meta = (_exact(m.b), _exact(m.c))
    vramnb.profile_step(m, torch.randn(2, 4), None, torch.optim.SGD(m.parameters(), lr=0.1), steps=1)
    assert (_exact(m.b), _exact(m.c)) == meta
    assert m.b.untyped_storage()._cdata == b_st and m.c.untyped_storage()._cdata == c_st
    assert torch.equal(m.b, torch.arange(3.0)) and torch.equal(m.c, torch.arange(6.0)[1:5])


# -- finding 13 and the snapshot side of 16 ------------------------------------------
def test_views_of_one_flat_buffer_are_copied_once():
    n, d = 8, 64
    flat = torch.randn(n * d * d)

    class Flat(nn.Module):
        def __init__(self):
            super().__init__()
            self.ws = nn.ParameterList([nn.Parameter(flat[i * d * d:(i + 1) * d * d].view(d, d)) for i in range(n)])

        def forward(self, x):
            for w in self.ws:
                x = torch.tanh(x @ w)
            return x.sum()

    model = Flat()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(4, d)
    assert Snapshot.take(model, opt, [x]).nbytes == n * d * d * F32 + 4 * d * F32
    before = [p.detach().clone() for p in model.parameters()]
    vramnb.profile_step(model, x, None, opt)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_a_batch_sliced_from_a_dataset_copies_the_slice_not_the_dataset():
    data = torch.randn(10_000, 32)
    x, y = data[100:132], torch.randint(0, 10, (32,))
    model = nn.Linear(32, 10)
    snap = Snapshot.take(model, None, [x, y])
    assert snap.nbytes == (32 * 10 + 10) * F32 + 32 * 32 * F32 + 32 * 8

    def lf(m, b):
        with torch.no_grad():
            b[0].mul_(2)  # a step that changes its batch in place
        return nn.functional.cross_entropy(m(b[0]), b[1])

    ref = data.clone()
    vramnb.profile_step(model, (x, y), lf, torch.optim.SGD(model.parameters(), lr=0.1))
    assert torch.equal(data, ref)


# -- finding 7: version counters ------------------------------------------------------
def test_a_graph_built_before_profiling_still_backpropagates_with_the_same_grads():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    x = torch.randn(4, 8)
    ref = [g.clone() for g in torch.autograd.grad(model(x).pow(2).mean(), list(model.parameters()))]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(x).pow(2).mean()
    versions = [p._version for p in model.parameters()]
    vramnb.profile_step(model, x, lambda m, b: m(b).pow(2).mean(), opt)
    assert [p._version for p in model.parameters()] == versions
    loss.backward()
    assert all(torch.equal(p.grad, r) for p, r in zip(model.parameters(), ref))


# -- finding 10: plain tensor attributes and containers --------------------------------
def test_plain_tensor_attributes_and_nested_lists_come_back():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(8, 16)
            self.act_ema = torch.zeros(16)
            self.stats = {"norms": [], "peak": torch.zeros(1)}
            self.pair = (torch.ones(2), [])

        def forward(self, x):
            h = torch.relu(self.l(x))
            with torch.no_grad():
                self.act_ema.mul_(0.9).add_(h.mean(0), alpha=0.1)
                self.stats["peak"].copy_(h.max().reshape(1))
                self.pair[0].add_(1)
            self.stats["norms"].append(h.norm().item())
            self.pair[1].append(1)
            return h.sum()

    m = Net()
    m(torch.randn(4, 8))
    ema, peak, one = m.act_ema.clone(), m.stats["peak"].clone(), m.pair[0].clone()
    norms, extra = list(m.stats["norms"]), list(m.pair[1])
    vramnb.profile_step(m, torch.randn(4, 8), None, torch.optim.SGD(m.parameters(), lr=0.1))
    assert torch.equal(m.act_ema, ema) and torch.equal(m.stats["peak"], peak) and torch.equal(m.pair[0], one)
    assert m.stats["norms"] == norms and m.pair[1] == extra


# -- finding 11: generator objects ----------------------------------------------------
_NP = np.random.default_rng(0)
_PY = random.Random(0)


def _noise(shape):
    return torch.from_numpy(_NP.standard_normal(shape).astype("float32")) * _PY.random()


def test_generator_objects_the_step_reads_are_restored():
    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(8, 1)
            self.gen = torch.Generator().manual_seed(3)
            self.legacy = np.random.RandomState(1)

        def forward(self, x):
            x = x + _noise(tuple(x.shape)) + torch.rand(x.shape, generator=self.gen) + float(self.legacy.rand())
            return self.l(x).mean()

    m = Noisy()
    states = (_NP.bit_generator.state, _PY.getstate(), m.gen.get_state(), m.legacy.get_state()[1].copy())
    vramnb.profile_step(m, torch.randn(4, 8), None, torch.optim.SGD(m.parameters(), lr=0.1))
    assert _NP.bit_generator.state == states[0]
    assert _PY.getstate() == states[1]
    assert torch.equal(m.gen.get_state(), states[2])
    assert np.array_equal(m.legacy.get_state()[1], states[3])


# -- finding 12: nothing of a deleted model stays alive -------------------------------
@pytest.mark.parametrize("depth", [1, None])
def test_a_deleted_model_is_freed_after_profile_step(depth):
    import gc
    import weakref

    model = nn.Sequential(nn.Embedding(1000, 64), nn.Linear(64, 64), nn.Linear(64, 1000))
    batch = (torch.randint(0, 1000, (2, 8)), torch.randint(0, 1000, (2, 8)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    alive = [weakref.ref(p) for p in model.parameters()]
    vramnb.profile_step(model, batch, lambda m, b: nn.functional.cross_entropy(m(b[0]).flatten(0, 1), b[1].flatten()),
                        opt, module_depth=depth)
    del model, opt, batch
    gc.collect()
    assert [r() is None for r in alive] == [True] * len(alive)
