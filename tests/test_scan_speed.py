"""A full rescan of many known tensors (issue 28 item 16): no per-tensor registration call,
and the registry stays exact (resizes, moved bytes, new storages, grads still found)."""

import gc

import torch

from vramnb._tracker import StorageTracker


def _counting(tr):
    calls = []
    add = tr.add_storage

    def counted(st, owner="auto"):
        calls.append(1)
        return add(st, owner)

    tr.add_storage = counted
    return calls


def test_rescan_of_1e5_known_tensors_registers_nothing_again_and_stays_exact():
    n = 10**5
    gc.collect()
    tr = StorageTracker("cpu")
    tr.scan(full=True)
    base = tr.current
    ts = [torch.zeros(1) for _ in range(n)]  # 4 bytes each
    tr.scan(full=True)
    assert tr.current - base == 4 * n
    calls = _counting(tr)
    tr.scan(full=True)
    assert len(calls) < 1000  # the tracker's own and the test runner's few, not one per tensor
    assert tr.current - base == 4 * n
    del ts
    gc.collect()
    assert tr.current == base


def test_rescan_still_sees_what_changed_outside_tracking():
    gc.collect()
    tr = StorageTracker("cpu")
    tr.scan(full=True)
    base = tr.current
    a = torch.zeros(4)  # 16 bytes
    b = torch.zeros(2, dtype=torch.float64)  # 16 bytes
    w = torch.zeros(3, requires_grad=True)  # 12 bytes
    tr.scan(full=True)
    assert tr.current - base == 44
    a.untyped_storage().resize_(40)  # untracked resize: 16 -> 40
    w.grad = torch.ones(3)  # 12 bytes, found through the leaf
    st = torch.UntypedStorage(24)  # a bare storage
    tr.scan(full=True)
    assert tr.current - base == 40 + 16 + 12 + 12 + 24
    b.share_memory_()  # the same storage's bytes move to shared memory
    tr.scan(full=True)
    assert tr._ranges.span(b.untyped_storage()._cdata)[0] == b.untyped_storage().data_ptr()
    assert tr.current - base == 40 + 16 + 12 + 12 + 24
    del a, b, w, st
    gc.collect()
    assert tr.current == base
