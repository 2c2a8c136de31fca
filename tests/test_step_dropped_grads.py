"""Gradients left before profile_step are freed by the step's zero_grad(set_to_none=True) exactly
when the user's loop would free them, and come back as the same objects (issue 28, F1).

Each case measures how much less the steady step holds at its start than the first step: the
bytes the loop's zero_grad frees (0 where something else of the user's keeps the gradient)."""

from __future__ import annotations

import weakref

import torch
from torch import nn

from tests.conftest import F32, flat_grads, mlp, sq_loss
from vramnb._step import profile_step


def _record(model):
    """Each parameter's .grad: the object (weakly: a strong reference would keep it, as a user's
    name does), its storage, values, layout and version."""
    out = []
    for p in model.parameters():
        g = p.grad
        if g is None:
            out.append((p, None, None))
        elif g.layout == torch.sparse_coo:
            out.append((p, weakref.ref(g), (g.coalesce().to_dense().clone(), g._version)))
        else:
            out.append((p, weakref.ref(g), (g.clone(), g.untyped_storage()._cdata, g.untyped_storage().nbytes(),
                                            g.storage_offset(), g.stride(), g.dtype, g._version)))
    return out


def _check_restored(recorded):
    for p, ref, saved in recorded:
        if ref is None:
            assert p.grad is None
            continue
        g = ref()
        assert g is not None and p.grad is g
        if g.layout == torch.sparse_coo:
            dense, version = saved
            assert torch.equal(g.coalesce().to_dense(), dense) and g._version == version
            continue
        values, cdata, nbytes, offset, stride, dtype, version = saved
        assert torch.equal(g, values) and g.untyped_storage()._cdata == cdata
        assert g.untyped_storage().nbytes() == nbytes and g.storage_offset() == offset
        assert g.stride() == stride and g.dtype == dtype and g._version == version


def _freed(model, x, optimizer=None, loss=sq_loss):
    """Bytes the steady step's start holds less than the first step's (the gradients freed)."""
    rep = profile_step(model, x, loss, optimizer or torch.optim.SGD(model.parameters(), lr=0.1))
    return rep.first.mark("start").allocated - rep.steady.mark("start").allocated


def _param_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


def test_gradient_views_of_one_flat_buffer_nothing_else_holds_are_freed_with_it():
    """Two or more parameters whose gradients are views of one flat buffer (as a flattening optimizer
    or DDP's gradient-as-bucket-view leaves them), the buffer itself dropped: the loop frees it at
    zero_grad; the views come back sharing one storage."""
    model, x = mlp(), torch.randn(8, 64)
    params = list(model.parameters())
    flat = flat_grads(model)
    sq_loss(model, x).backward()
    nbytes = flat.untyped_storage().nbytes()
    del flat
    recorded = _record(model)
    assert _freed(model, x) == nbytes
    _check_restored(recorded)
    assert len({p.grad.untyped_storage()._cdata for p in params}) == 1


def test_gradient_views_of_a_buffer_the_user_keeps_are_not_freed():
    model, x = mlp(), torch.randn(8, 64)
    params = list(model.parameters())
    flat = flat_grads(model)
    sq_loss(model, x).backward()
    recorded = _record(model)
    assert _freed(model, x) == 0
    _check_restored(recorded)
    assert flat.data_ptr() == params[0].grad.data_ptr()


def test_a_gradient_on_part_of_a_larger_storage_frees_the_whole_storage():
    """``p.grad = big[:n]`` with ``big`` dropped: the loop frees all of big's storage; all its bytes
    come back."""
    model, x = nn.Linear(64, 10), torch.randn(8, 64)
    big = torch.randn(3 * 64 * 10)
    model.weight.grad = big[640:1280].view(10, 64)
    model.bias.grad = torch.randn(10)
    nbytes = big.untyped_storage().nbytes()
    before = bytes(big.untyped_storage())
    del big
    recorded = _record(model)
    assert _freed(model, x) == nbytes + 10 * F32
    _check_restored(recorded)
    assert bytes(model.weight.grad.untyped_storage()) == before


def test_a_gradient_whose_storage_object_the_user_keeps_is_not_freed():
    model, x = mlp(), torch.randn(8, 64)
    sq_loss(model, x).backward()
    kept = model[0].weight.grad.untyped_storage()
    recorded = _record(model)
    assert _freed(model, x) == _param_bytes(model) - model[0].weight.numel() * F32
    _check_restored(recorded)
    assert kept.data_ptr() == model[0].weight.grad.data_ptr()


def test_a_gradient_a_user_graph_saved_is_not_freed():
    """A graph the notebook keeps saved a gradient (``(x * p.grad).sum()``): PyTorch holds it, so
    the loop's zero_grad does not free it."""
    model, x = mlp(), torch.randn(8, 64)
    sq_loss(model, x).backward()
    w = torch.randn(10, requires_grad=True)
    kept = (w * model[2].bias.grad).sum()
    recorded = _record(model)
    assert _freed(model, x) == _param_bytes(model) - 10 * F32
    _check_restored(recorded)
    kept.backward()
    assert torch.equal(w.grad, model[2].bias.grad)


def test_gradients_of_parameters_the_optimizer_does_not_step_stay():
    """zero_grad of an optimizer over part of the model leaves the other parameters' gradients (as
    the loop does): only those it drops are freed."""
    model, x = mlp(), torch.randn(8, 64)
    sq_loss(model, x).backward()
    recorded = _record(model)
    assert _freed(model, x, torch.optim.SGD(model[2].parameters(), lr=0.1)) == _param_bytes(model[2])
    _check_restored(recorded)


def test_one_gradient_object_of_two_parameters_is_freed_once():
    model, x = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8)), torch.randn(4, 8)
    g = torch.randn(8, 8)
    model[0].weight.grad = model[1].weight.grad = g
    del g
    recorded = _record(model)
    assert _freed(model, x) == 8 * 8 * F32
    _check_restored(recorded)
    assert model[0].weight.grad is model[1].weight.grad


def test_a_tied_weights_gradient_is_freed_once():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.head = nn.Linear(16, 50, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, ids):
            return self.head(self.emb(ids)).pow(2).sum()

    torch.manual_seed(0)
    model, ids = Tied(), torch.randint(0, 50, (4, 6))
    model(ids).backward()
    recorded = _record(model)
    assert _freed(model, ids, loss=lambda m, b: m(b)) == 50 * 16 * F32
    _check_restored(recorded)


def test_half_precision_gradients_are_freed():
    model, x = mlp().half(), torch.randn(8, 64, dtype=torch.float16)
    sq_loss(model, x).backward()
    assert all(p.grad.dtype == torch.float16 for p in model.parameters())
    recorded = _record(model)
    assert _freed(model, x) == _param_bytes(model)
    _check_restored(recorded)


def _sparse_bytes(g, batch):
    """The bytes of a sparse gradient's parts, but those of the batch's memory (Embedding's sparse
    backward makes its indices on the batch's ids: freeing the gradient does not free those)."""
    lo, hi = batch.untyped_storage().data_ptr(), batch.untyped_storage().data_ptr() + batch.untyped_storage().nbytes()
    return sum(x.untyped_storage().nbytes() for x in (g._indices(), g._values())
               if not lo <= x.untyped_storage().data_ptr() < hi)


def test_sparse_gradients_are_freed_and_come_back():
    """An Embedding(sparse=True)'s gradient (a sparse COO tensor: its indices and values) is freed by
    the loop's zero_grad too; the same object comes back with its values and version."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(100, 16, sparse=True), nn.Linear(16, 4))
    ids = torch.randint(0, 100, (5, 7))
    model(ids).pow(2).sum().backward()
    sparse_bytes = _sparse_bytes(model[0].weight.grad, ids)
    assert sparse_bytes == 35 * 16 * F32  # the values; the indices are the batch's
    recorded = _record(model)
    rep = profile_step(model, ids, lambda m, b: m(b).pow(2).sum(), torch.optim.SGD(model.parameters(), lr=0.1))
    assert rep.first.mark("start").allocated - rep.steady.mark("start").allocated == sparse_bytes + _param_bytes(model[1])
    _check_restored(recorded)


def test_a_sparse_gradient_the_user_keeps_is_not_freed():
    """The loss does not reach the embedding, whose sparse gradient the user keeps a name to: the
    step's zero_grad drops it from the parameter but it stays ("other"), as in the loop."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(100, 16, sparse=True), nn.Linear(16, 4))
    ids = torch.randint(0, 100, (5, 7))
    model(ids).pow(2).sum().backward()
    kept = model[0].weight.grad
    dense = kept.to_dense()
    x = torch.randn(3, 16)
    rep = profile_step(model, x, lambda m, b: m[1](b).pow(2).sum(), torch.optim.SGD(model.parameters(), lr=0.1))
    assert rep.first.mark("start").allocated - rep.steady.mark("start").allocated == _param_bytes(model[1])
    assert rep.steady.mark("start")["other"] - rep.first.mark("start")["other"] == _sparse_bytes(kept, ids)
    assert model[0].weight.grad is kept and torch.equal(kept.to_dense(), dense)


def test_gradients_an_optimizers_state_keeps_are_not_freed():
    """A custom optimizer that keeps each step's gradient object in its state holds them past
    zero_grad in the loop too: nothing is freed, and everything comes back."""
    class KeepsGrad(torch.optim.SGD):
        @torch.no_grad()
        def step(self, closure=None):  # type: ignore[no-untyped-def, override]
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        self.state[p]["last"] = p.grad
            return super().step(closure)

    model, x = mlp(), torch.randn(8, 64)
    sq_loss(model, x).backward()
    opt = KeepsGrad(model.parameters(), lr=0.1)
    for p in model.parameters():
        opt.state[p]["last"] = p.grad  # as after an earlier step
    recorded = _record(model)
    assert _freed(model, x, opt) == 0
    _check_restored(recorded)
    assert all(opt.state[p]["last"] is p.grad for p in model.parameters())



def test_compare_gives_the_earlier_gradients_back_as_the_same_objects():
    import vramnb

    model, x = mlp(), torch.randn(8, 64)
    sq_loss(model, x).backward()
    recorded = _record(model)
    vramnb.compare(model, x, sq_loss, torch.optim.SGD(model.parameters(), lr=0.1),
                   recipes=[{"zero_grad": "zeros"}, {"mode": "no_grad"}], progress=False)
    _check_restored(recorded)


def test_zero_grad_without_set_to_none_frees_nothing():
    model, x = mlp(), torch.randn(8, 64)
    sq_loss(model, x).backward()
    recorded = _record(model)
    rep = profile_step(model, x, sq_loss, torch.optim.SGD(model.parameters(), lr=0.1), set_to_none=False)
    assert rep.first.mark("start").allocated == rep.steady.mark("start").allocated
    _check_restored(recorded)
