"""An estimate of a model whose step reads one of its own integer buffers: BatchNorm with ``momentum=None``
(a cumulative average: ``1 / num_batches_tracked`` after adding one). The fake step has the counter's value
(a copy of the user's, updated as the fake step updates it); the user's buffer is not changed, and the
bytes are those of the same model with a fixed momentum (the same tensors)."""
import torch
import torch.nn as nn

import vramnb


def _model(momentum):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16, momentum=momentum), nn.ReLU(), nn.Linear(16, 2))
    m(torch.randn(4, 8))  # num_batches_tracked = 1
    return m


def _loss(mm, b):
    return mm(b).pow(2).mean()


def test_batchnorm_with_a_cumulative_average_is_estimated():
    b = torch.randn(4, 8)
    fixed = _model(0.1)
    want = vramnb.estimate(fixed, b, _loss, torch.optim.Adam(fixed.parameters()), target="8GiB")
    m = _model(None)
    count = int(m[1].num_batches_tracked)
    stats = m[1].running_mean.clone(), m[1].running_var.clone()
    est = vramnb.estimate(m, b, _loss, torch.optim.Adam(m.parameters()), target="8GiB", steps=2)
    assert est.peak_allocated == want.peak_allocated and est.peak_reserved == want.peak_reserved
    assert int(m[1].num_batches_tracked) == count  # the user's counter is not advanced
    assert torch.equal(m[1].running_mean, stats[0]) and torch.equal(m[1].running_var, stats[1])
    read = [n for n in est.notes if "_local_scalar_dense" in n]
    assert read and f"= {count + 1}, {count + 2} (2 reads)" in read[0], est.notes


def test_max_batch_size_of_batchnorm_with_a_cumulative_average():
    m = _model(None)
    count = int(m[1].num_batches_tracked)
    n = vramnb.max_batch_size(m, torch.randn(4, 8), _loss, torch.optim.Adam(m.parameters()), target="8GiB",
                              progress=False, limit=64)
    assert n.batch_size == 64 and n.at_limit
    assert int(m[1].num_batches_tracked) == count
