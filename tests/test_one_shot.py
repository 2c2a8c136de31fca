"""Item 28.1: no entry point reads (consumes) the user's one-shot iterator of batches.

A generator, ``iter(loader)`` or any object that is its own iterator is refused before a
single batch is read, with a message naming what to pass; the iterator is left as found.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import vramnb
from vramnb._checks import InputError

N = 19


def _loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(2 * N, 8)), batch_size=2)


def _gen():
    for (x,) in _loader():
        yield x


class _Stream:
    """A hand-written one-shot stream (its own iterator)."""

    def __init__(self) -> None:
        self.left = list(_loader())

    def __iter__(self):
        return self

    def __next__(self):
        if not self.left:
            raise StopIteration
        return self.left.pop(0)[0]


def _model() -> torch.nn.Module:
    return torch.nn.Linear(8, 4)


ENTRY = {
    "estimate": lambda m, d: vramnb.estimate(m, d),
    "max_batch_size": lambda m, d: vramnb.max_batch_size(m, d, target="1GiB"),
    "fit": lambda m, d: vramnb.fit(m, d, target="1GiB", progress=False),
    "profile_step": lambda m, d: vramnb.profile_step(m, d),
    "compare": lambda m, d: vramnb.compare(m, d, progress=False),
    "panel": lambda m, d: vramnb.panel(m, d, display=False),
}


def _count(it) -> int:
    return sum(1 for _ in it)


@pytest.mark.parametrize("kind", ["iter(loader)", "generator", "stream"])
@pytest.mark.parametrize("entry", sorted(ENTRY))
def test_one_shot_refused_and_not_consumed(entry: str, kind: str) -> None:
    if kind == "iter(loader)":
        data = iter(_loader())
        next(data)
        left = N - 1
    elif kind == "generator":
        data, left = _gen(), N
    else:
        data, left = _Stream(), N
    with pytest.raises((InputError, ValueError)) as err:
        ENTRY[entry](_model(), data)
    assert "one-shot" in str(err.value) and "DataLoader itself" in str(err.value)
    assert _count(data) == left  # nothing was read


def test_loader_itself_still_accepted_by_fit() -> None:
    loader = _loader()
    plan = vramnb.fit(_model(), loader, lambda m, x: m(x[0]).sum(), target="8GiB", progress=False)
    assert plan.best is not None
    assert _count(loader) == N
