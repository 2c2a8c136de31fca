"""Item 28.4: the code a plan prints splits the batch exactly as the estimate split it.

The printed step is executed (``exec`` in a namespace holding the user's objects) for each
batch kind the estimate accepts; each micro-step's batch must have the estimate's type and
shapes (``MicroBatches.apply``: k equal parts of the first dimension, 0-d tensors kept).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping

import pytest
import torch

from vramnb._checks import _batch_tensors
from vramnb._plan import StepPlan
from vramnb.techniques.batching import MicroBatches
from vramnb.techniques.code import step_code
from vramnb.techniques.registry import Recipe

Pair = collections.namedtuple("Pair", ["x", "y"])


class Frozen(Mapping):
    """A read-only custom mapping."""

    def __init__(self, d: dict) -> None:
        self._d = dict(d)

    def __getitem__(self, k):
        return self._d[k]

    def __iter__(self):
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)


def _batches() -> dict:
    x, y = torch.randn(8, 6), torch.randn(8, 6)
    out = {
        "tensor": x,
        "tuple": (x, y),
        "list": [x, y],
        "dict": {"x": x, "y": y},
        "Mapping": Frozen({"x": x, "y": y}),
        "namedtuple": Pair(x, y),
        "nested": {"pair": Pair(x, [y, torch.tensor(3.0)]), "t": (x,)},
    }
    tf = pytest.importorskip("transformers")
    out["BatchEncoding"] = tf.BatchEncoding({"x": x, "y": y})
    return out


def _shapes(batch) -> list:
    return [(p, tuple(t.shape)) for p, t in _batch_tensors(batch)]


@pytest.mark.parametrize("kind", list(_batches()))
@pytest.mark.parametrize("k", [2, 4])
def test_printed_code_splits_as_the_estimate(kind: str, k: int) -> None:
    batch = _batches()[kind]
    model = torch.nn.Linear(6, 6)
    seen: list = []

    def loss_fn(m, b):
        seen.append((type(b), _shapes(b)))
        return sum(m(t).sum() for _, t in _batch_tensors(b) if t.dim() == 2)

    plan = StepPlan(model=model, batches=[batch], loss_fn=loss_fn, optimizer=None, device=torch.device("cpu"))
    MicroBatches.apply(plan, k)
    expected = [(type(b), _shapes(b)) for b in plan.batches]
    code = step_code(Recipe(micro_batches=k), Recipe(), model, batch, loss_fn, device_type="cpu")
    ns = {"torch": torch, "model": model, "batch": batch, "loss_fn": loss_fn,
          "optimizer": torch.optim.SGD(model.parameters(), lr=0.1)}
    exec(code, ns)
    assert seen == expected
