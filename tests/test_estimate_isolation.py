"""estimate() on what users' notebooks hold: batches sliced from a dataset, loss
functions that reach the notebook's own objects, hooks from helper modules,
modules holding locks, files and big arrays, tied weights under FSDP; and what
max_batch_size says at its search limit. On CPU, exact bytes from shapes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vramnb


def _lf(m, b):
    return nn.functional.cross_entropy(m(b[0]), b[1])


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 10))


# -- 16: a batch that is a view of a dataset --------------------------------------------
@pytest.mark.parametrize("view", ["rows", "rows from the middle", "columns"])
def test_a_batch_sliced_from_a_dataset_counts_the_slice_not_the_dataset(view):
    data = torch.randn(20_000, 256)  # 19.5 MiB "dataset"
    x = {"rows": data[:32], "rows from the middle": data[5000:5032], "columns": data[:32, :256].t().t()}[view]
    y = torch.randint(0, 10, (32,))
    model = _model()
    e_view = vramnb.estimate(model, (x, y), _lf, device="cpu")
    e_copy = vramnb.estimate(model, (x.clone(), y), _lf, device="cpu")
    assert e_view.steady.peak.sources["input batch"] == 32 * 256 * 4 + 32 * 8
    assert e_view.steady.peak.allocated == e_copy.steady.peak.allocated


def test_a_column_view_is_a_dense_copy_and_shared_tensors_count_once():
    data = torch.randn(4096, 256)
    x = data[:32, :128]  # reaches 31 rows and a half of its span: a copy to the device is 32 x 128
    model = nn.Sequential(nn.Linear(128, 10))
    e = vramnb.estimate(model, (x, torch.randint(0, 10, (32,))), _lf, device="cpu")
    assert e.steady.peak.sources["input batch"] == 32 * 128 * 4 + 32 * 8
    ids = torch.randint(0, 100, (8, 16))
    emb = nn.Sequential(nn.Embedding(100, 8), nn.Flatten(), nn.Linear(128, 100))
    buf = torch.randint(0, 100, (2, 8, 16))  # input_ids and labels: two halves of one buffer
    for batch in ({"input_ids": ids, "labels": ids}, {"input_ids": buf[0], "labels": buf[1]}):
        e = vramnb.estimate(emb, batch, lambda m, b: m(b["input_ids"]).sum() + b["labels"].sum() * 0, device="cpu")
        assert e.steady.peak.sources["input batch"] == (1 if batch["labels"] is ids else 2) * 8 * 16 * 8


# -- 21: max_batch_size at its search limit ---------------------------------------------
def test_max_batch_size_says_when_it_stopped_at_its_limit():
    model = nn.Linear(8, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    r = vramnb.max_batch_size(model, torch.randn(16, 8), lambda m, b: m(b).sum(), opt, target="RTX 4090",
                              limit=4096, progress=False)
    assert r.at_limit and r.batch_size == 4096 and r.limit == 4096
    assert "fits at least up to the search limit 4096" in repr(r) and "raise limit=" in repr(r)
    assert "largest batch that fits" not in repr(r)
    big = nn.Sequential(nn.Linear(8, 1 << 16), nn.ReLU(), nn.Linear(1 << 16, 3))  # ~0.5 MiB per example of activations
    r = vramnb.max_batch_size(big, torch.randn(16, 8), lambda m, b: m(b).sum(), target="8GiB", limit=1 << 20,
                              progress=False)
    assert not r.at_limit and 0 < r.batch_size < 1 << 20
    assert f"largest batch that fits: {r.batch_size}" in repr(r)
