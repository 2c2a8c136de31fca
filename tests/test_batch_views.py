"""A batch that views part of a larger tensor (a slice of a dataset held in
memory) counts the bytes it views as the input batch; the rest of the storage
is held outside the step ("other")."""

from __future__ import annotations

import torch
from torch import nn

from vramnb._attribution import key_fn, viewed_bytes_of
from vramnb._step import profile_step

F32 = 4


def _loss(m, b):
    return nn.functional.cross_entropy(m(b[0]), b[1])


def test_a_batch_sliced_from_a_dataset_counts_the_rows_it_views():
    torch.manual_seed(0)
    data = torch.randn(20_000, 64)
    x, y = data[:32], torch.randint(0, 10, (32,))
    model = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))
    rep = profile_step(model, (x, y), _loss, None)
    for s in rep.steps:
        for _, b in s.marks + [("peak", s.peak)]:
            assert b.total == b.allocated
        start = s.mark("start")
        assert start["input batch"] == 32 * 64 * F32 + 32 * 8
        assert start["other"] >= (20_000 - 32) * 64 * F32  # the rest of the dataset, held by `data`


def test_viewed_bytes_merge_overlaps_and_strides():
    key = key_fn(torch.device("cpu"))
    data = torch.zeros(100, 10)
    k = key(data)
    assert viewed_bytes_of([data[10:20], data[15:25]], key) == {k: 15 * 10 * F32}
    # every other row of 10: rows 0, 2, ..., 18 span 19 rows minus the last row's tail
    assert viewed_bytes_of([data[0:20:2]], key) == {k: (18 * 10 + 10) * F32}
    whole = viewed_bytes_of([data], key)[k]
    assert whole >= data.untyped_storage().nbytes()  # all of it: the whole storage, however rounded
