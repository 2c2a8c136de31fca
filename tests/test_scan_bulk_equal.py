"""The full scan's bulk check (``StorageTracker._unknown``, compared as lists in the run's order
since 2026-12-04 d) registers exactly what the object-by-object check registers, on mixed live
objects: runs of plain tensors, views and tensors sharing one storage, nested containers, a tensor
subclass, sparse, nested and meta tensors, bare storages, and untracked changes between scans
(a resize in place, ``set_`` to another storage, a storage resized to nothing). Each scan of a
tracker whose bulk path is taken is compared, key by key and byte by byte, with a tracker whose
``_verified`` is emptied before every check (the one-by-one path), and with byte counts computed
from the shapes."""

from __future__ import annotations

import gc

import torch

from vramnb import _tracker
from vramnb._tracker import StorageTracker

N = 3 * _tracker._RUN


class Tagged(torch.Tensor):  # a plain subclass: never in a bulk run
    pass


def _plain_path(tr: StorageTracker) -> StorageTracker:
    """``tr`` with nothing ever verified: every run is checked one object at a time."""
    unknown = tr._unknown

    def every_one(objs, ok, pending):  # type: ignore[no-untyped-def]
        tr._verified.clear()
        return unknown(objs, ok, pending)

    tr._unknown = every_one  # type: ignore[method-assign]
    return tr


def test_bulk_and_one_by_one_register_the_same_bytes() -> None:
    gc.collect()
    fast, plain = StorageTracker("cpu"), _plain_path(StorageTracker("cpu"))
    ts = [torch.zeros(1) for _ in range(N)]  # 4 bytes each
    base = torch.zeros(64)  # 256 bytes, shared by views and by a tensor set_ to it
    views = [base[i:i + 8] for i in range(0, 64, 8)]
    same = torch.empty(0).set_(base.untyped_storage(), 0, (64,), (1,))
    nested_box = {"a": [ts[:5], (torch.ones(3, 5),)], "b": {"c": torch.ones(7, dtype=torch.float64)}}
    tagged = torch.ones(11).as_subclass(Tagged)  # 44 bytes
    sparse = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.tensor([1.0, 2.0]), (5,))
    jagged = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    meta = torch.empty(1000, device="meta")  # no bytes anywhere
    bare = torch.UntypedStorage(24)
    objs = [ts, views, same, nested_box, tagged, sparse, jagged, meta, bare]
    for tr in (fast, plain):
        tr.scan(full=True)  # registers them
        tr.scan(full=True)  # the fast one verifies: its later scans skip runs in bulk
    slow = [0]
    one_by_one = fast._unknown_one_by_one

    def counted(objs, rest, pending):  # type: ignore[no-untyped-def]
        slow[0] += len(objs)
        return one_by_one(objs, rest, pending)

    fast._unknown_one_by_one = counted  # type: ignore[method-assign]

    def both() -> dict[int, int]:
        for tr in (fast, plain):
            tr.scan(full=True)
        assert fast.live() == plain.live()
        assert fast.current == plain.current
        return fast.live()

    first = both()
    # the plain tensors' runs were taken in bulk (how many depends on what else lives in the process:
    # in a pytest-xdist worker other tests' objects break some runs up)
    assert slow[0] < N
    mine = {k: n for k, n in first.items()}
    assert sum(mine[t.untyped_storage()._cdata] for t in ts) == 4 * N
    assert mine[base.untyped_storage()._cdata] == 256
    assert mine[tagged.untyped_storage()._cdata] == 44
    assert mine[bare._cdata] == 24
    assert mine[nested_box["a"][1][0].untyped_storage()._cdata] == 60
    assert mine[nested_box["b"]["c"].untyped_storage()._cdata] == 56

    base_now = fast.current
    ts[3].resize_(100)  # 4 -> 400 bytes in place, untracked
    ts[N - 2].set_(torch.zeros(10).untyped_storage())  # another storage of 40 bytes; its 4 bytes freed
    ts[_tracker._RUN + 1].untyped_storage().resize_(0)  # 4 -> 0
    base.untyped_storage().resize_(512)  # views' storage 256 -> 512
    after = both()
    assert after[ts[3].untyped_storage()._cdata] == 400
    assert after[ts[N - 2].untyped_storage()._cdata] == 40
    assert after[ts[_tracker._RUN + 1].untyped_storage()._cdata] == 0
    assert after[base.untyped_storage()._cdata] == 512
    assert fast.current - base_now == (400 - 4) + (40 - 4) + (0 - 4) + (512 - 256)
    del objs
