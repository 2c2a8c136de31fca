"""estimate() copies no real data of the model: a tensor (or an array outside PyTorch) held in a
module attribute at any depth, inside objects that ``copy.deepcopy`` copies through their own
protocol (a ``deque``, a ``@dataclass(slots=True)``, a dict or tuple subclass with ``__deepcopy__``),
becomes a fake in the copy (issue 28 #12: +162 MiB RSS for a 191 MiB table). Exact bytes: the CPU
bytes the estimate allocates are those of the same model without the table."""

from __future__ import annotations

import collections
import copy
import dataclasses

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

import vramnb
from vramnb._tracker import cpu_tracker
from vramnb.predict._fake_model import fake_model

TABLE = 2**20  # float32 elements: 4 MiB


@dataclasses.dataclass(slots=True)
class Slotted:
    table: torch.Tensor


class CopyingDict(dict):
    def __deepcopy__(self, memo):
        return CopyingDict({k: copy.deepcopy(v, memo) for k, v in self.items()})


class CopyingTuple(tuple):
    def __deepcopy__(self, memo):
        return CopyingTuple(copy.deepcopy(tuple(self), memo))


KINDS = {
    "dict": lambda t: {"table": t},
    "deque": lambda t: collections.deque([t]),
    "slots dataclass": Slotted,
    "dict subclass with __deepcopy__": lambda t: CopyingDict(table=t),
    "tuple subclass with __deepcopy__": lambda t: CopyingTuple((t,)),
    "deque in a dict in a list": lambda t: [{"a": collections.deque([t])}],
    "slots object in a deque": lambda t: collections.deque([Slotted(t)]),
}


class Holder(nn.Module):
    def __init__(self, cache):
        super().__init__()
        self.lin = nn.Linear(64, 64)
        self.cache = cache

    def forward(self, x):
        return self.lin(x)


def _allocated_by_estimate(model):
    tr = cpu_tracker()
    x = torch.randn(8, 64)
    tr.scan()
    with tr.tracking():
        start = tr.current
        tr.reset_peak()
        vramnb.estimate(model, x, lambda m, b: m(b).sum(), device="cpu")
        return tr.peak - start


def _fakes_in(obj, seen=None):
    """The tensors the copy holds at any depth (through containers and slots)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _fakes_in(v, seen)]
    if isinstance(obj, (list, tuple, collections.deque)):
        return [t for v in obj for t in _fakes_in(v, seen)]
    if hasattr(type(obj), "__slots__"):
        return [t for k in type(obj).__slots__ for t in _fakes_in(getattr(obj, k), seen)]
    return []


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_tensor_nested_in_a_module_attribute_is_faked_not_copied(kind):
    table = torch.randn(TABLE)
    model = Holder(KINDS[kind](table))
    copied = fake_model(model, FakeTensorMode()).module
    (fake,) = _fakes_in(copied.cache)
    assert isinstance(fake, FakeTensor) and fake.shape == table.shape and fake.dtype == table.dtype
    assert _fakes_in(model.cache)[0] is table  # the user's object is left as it is
    # the estimate allocates the same real bytes as for the model without the table: none of the table
    torch.manual_seed(0)
    without = _allocated_by_estimate(Holder(KINDS[kind](torch.randn(0))))
    assert _allocated_by_estimate(model) == without, (kind, without)
    assert without < table.nbytes


def test_an_array_outside_pytorch_in_a_deque_is_shared_not_copied():
    np = pytest.importorskip("numpy")
    arr = np.ones(TABLE, dtype=np.float32)
    model = Holder(collections.deque([arr]))
    out = fake_model(model, FakeTensorMode())
    assert out.module.cache is not model.cache and out.module.cache[0] is arr
    assert any(line.startswith("cache: numpy.ndarray, 4.0 MiB") for line in out.shared), out.shared


def test_a_numpy_attribute_is_copied_once_and_compared_without_temporaries():
    """The fake step shares NumPy arrays with the user's model, so the estimate keeps one copy of
    each to put back (vramnb/_code_state.py). Comparing it after the step made NaN masks and
    value copies of both: 3.75 times the array traced at the peak; now the copy and one chunk."""
    import tracemalloc

    np = pytest.importorskip("numpy")
    from vramnb._code_state import _CHUNK

    model = Holder({"table": np.ones(16 * 2**20, dtype=np.float32)})  # 64 MiB outside PyTorch
    x = torch.randn(8, 64)
    vramnb.estimate(model, x, lambda m, b: m(b).sum(), device="cpu")  # imports and caches first
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        vramnb.estimate(model, x, lambda m, b: m(b).sum(), device="cpu")
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    nbytes = model.cache["table"].nbytes
    assert nbytes <= peak <= nbytes + _CHUNK + 4 * 2**20, (peak, nbytes)


@pytest.mark.parametrize("where", ["dict", "deque"])
def test_a_bare_storage_in_a_module_attribute_is_faked_not_copied(where):
    st = torch.randn(TABLE).untyped_storage()
    model = Holder({"st": st} if where == "dict" else collections.deque([st]))
    copied = fake_model(model, FakeTensorMode()).module
    fake = copied.cache["st"] if where == "dict" else copied.cache[0]
    assert fake is not st and isinstance(fake, torch.UntypedStorage) and fake.nbytes() == st.nbytes()
    empty = torch.randn(0).untyped_storage()
    without = _allocated_by_estimate(Holder({"st": empty} if where == "dict" else collections.deque([empty])))
    assert _allocated_by_estimate(model) == without < st.nbytes()
