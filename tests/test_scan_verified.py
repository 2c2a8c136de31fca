"""The full scan's shortcut (issue 28 item 16): storages found registered and unchanged at the
last scan (``StorageTracker._verified``) are checked in bulk, in C, and skipped while their
(key, data address, size) stay as they were. Every way untracked code can change what an old
tensor holds must still be counted to the byte: each test here fails if the bulk check trusted
anything it does not compare (the storage's key alone, its size alone, or an entry freed since)."""

from __future__ import annotations

import gc
import threading

import pytest
import torch

from vramnb import _tracker
from vramnb._tracker import StorageTracker

# several full runs of plain tensors, so that the bulk path is the one taken even where objects left by
# earlier test files in the process mix into the runs at either end of them (and across gc generations)
N = 8 * _tracker._RUN


@pytest.fixture
def tracked():  # type: ignore[no-untyped-def]
    """A tracker, N registered and verified one-element float tensors (4 bytes each), and the
    number of objects its scans check one at a time (``slow[0]``, from 0; ``slow[1]``: how
    many a scan with nothing changed checks so)."""
    gc.collect()
    tr = StorageTracker("cpu")
    ts = [torch.zeros(1) for _ in range(N)]
    tr.scan(full=True)  # registers them
    tr.scan(full=True)  # finds them registered: verified from now on
    slow = [0]
    one_by_one = tr._unknown_one_by_one

    def counted(objs, rest, pending):  # type: ignore[no-untyped-def]
        slow[0] += len(objs)
        return one_by_one(objs, rest, pending)

    tr._unknown_one_by_one = counted
    tr.scan(full=True)
    assert slow[0] < N // 2  # the tensors' runs were skipped in bulk
    slow.append(slow[0])  # what every scan checks one by one (runs mixing in other objects)
    slow[0] = 0
    yield tr, ts, slow
    del ts
    gc.collect()


def _delta(tr: StorageTracker, base: int) -> int:
    tr.scan(full=True)
    return tr.current - base


def test_a_tensor_resized_in_place_by_untracked_code(tracked):  # type: ignore[no-untyped-def]
    tr, ts, slow = tracked
    base = tr.current
    ts[5].resize_(1000)  # its storage grows in place: 4 -> 4000 bytes, the same StorageImpl
    ts[N - 7].untyped_storage().resize_(80)  # through the storage (not patched outside tracking)
    assert _delta(tr, base) == (4000 - 4) + (80 - 4)
    assert tr.nbytes_of(ts[5].untyped_storage()._cdata) == 4000
    # only the runs holding them were looked at one by one: a tensor's, and its storage's among the bare ones
    assert slow[0] <= slow[1] + 2 * 2 * _tracker._RUN


def test_a_storage_resized_to_nothing_and_back(tracked):  # type: ignore[no-untyped-def]
    tr, ts, _ = tracked
    base = tr.current
    ts[11].untyped_storage().resize_(0)
    assert _delta(tr, base) == -4
    ts[11].untyped_storage().resize_(12)
    assert _delta(tr, base) == 8


def test_data_reassigned_and_set_to_another_storage(tracked):  # type: ignore[no-untyped-def]
    tr, ts, _ = tracked
    base = tr.current
    ts[7].data = torch.zeros(100)  # a new 400-byte storage no live object but ts[7] reaches
    assert tr.current - base == -4  # the old storage's free is counted at once (its weak reference)
    ts[9].set_(torch.UntypedStorage(64), 0, (16,))  # 64 bytes, reached only through ts[9]
    ts[3].set_(ts[4].untyped_storage())  # shares ts[4]'s: its own 4 bytes are freed
    assert _delta(tr, base) == (400 - 4) + (64 - 4) - 4


def test_a_storage_shared_by_views_resized_through_one_of_them(tracked):  # type: ignore[no-untyped-def]
    tr, ts, _ = tracked
    base = tr.current
    views = [ts[20].view(1), ts[20][0:1], ts[20].view(1, 1)]
    assert _delta(tr, base) == 0
    views[1].untyped_storage().resize_(40)
    assert _delta(tr, base) == 36
    del views


def test_moved_bytes_are_followed(tracked):  # type: ignore[no-untyped-def]
    """share_memory_ moves a storage's bytes (same key and size, another address): the data
    range the tracker keeps must follow, or a tensor allocated at the freed address would be
    taken for a view of it and counted 0 bytes."""
    tr, ts, _ = tracked
    base = tr.current
    old = ts[30].data_ptr()
    ts[30].share_memory_()
    assert ts[30].data_ptr() != old
    assert _delta(tr, base) == 0
    key = ts[30].untyped_storage()._cdata
    assert tr._ranges.span(key) == (ts[30].data_ptr(), ts[30].data_ptr() + 4)


def test_tensors_freed_and_made_by_untracked_code_at_the_same_addresses(tracked, monkeypatch):  # type: ignore[no-untyped-def]
    """Freed storages' keys and addresses are reused by the next ones of the same size: a
    new storage with a freed one's key, address and size must not pass for the freed one
    (checked one storage per run here, so that no other storage in its run gives it away)."""
    tr, ts, _ = tracked
    base = tr.current

    def pairs(xs):  # type: ignore[no-untyped-def]
        return {(t.untyped_storage()._cdata, t.data_ptr()) for t in xs}

    freed = pairs(ts[100:2100])
    del ts[100:2100]
    assert tr.current - base == -4 * 2000
    ts += [torch.zeros(1) for _ in range(2000)]
    assert freed & pairs(ts[-2000:])  # some reuse a freed storage's key and address
    ts += [torch.zeros(2) for _ in range(10)]
    monkeypatch.setattr(_tracker, "_RUN", 1)
    assert _delta(tr, base) == 8 * 10


def test_changes_made_in_another_thread(tracked):  # type: ignore[no-untyped-def]
    tr, ts, _ = tracked
    base = tr.current

    def work() -> None:
        ts[40].resize_(10)
        ts[41].data = torch.zeros(5)
        ts.append(torch.zeros(3))

    th = threading.Thread(target=work)
    th.start()
    th.join()
    assert _delta(tr, base) == (40 - 4) + (20 - 4) + 12


def test_a_tensor_that_starts_requiring_grad_has_its_gradient_found(tracked):  # type: ignore[no-untyped-def]
    """A gradient autograd makes in C++ has no Python object: only its leaf leads to it, so a
    verified storage must not let a leaf that now requires grad be skipped."""
    tr, ts, _ = tracked
    base = tr.current
    ts[50].requires_grad_(True)
    (ts[50] * 2).sum().backward()  # untracked: ts[50].grad (4 bytes) exists only in C++
    assert _delta(tr, base) == 4
    ts[50].grad = None
    gc.collect()
    assert tr.current - base == 0
