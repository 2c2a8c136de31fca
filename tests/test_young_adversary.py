"""The CPU tracker's registry kept between measured cells (vramnb._young), attacked: code
the dispatch mode cannot see (other threads, shared-memory moves, autograd filling a
``.grad`` in C++, a Ctrl-C inside a scan) must not leave a wrong byte count behind."""

from __future__ import annotations

import gc

import pytest

import vramnb
from tests.conftest import run
from vramnb._tracker import cpu_tracker


def _last():  # type: ignore[no-untyped-def]
    return vramnb.history()[-1]


def _key(t):  # type: ignore[no-untyped-def]
    return t.untyped_storage()._cdata


def test_a_thread_left_running_by_a_measured_cell_keeps_the_next_scans_full(ip):
    """A thread a measured cell starts and leaves running resizes a tensor made before it
    (no dispatch mode sees another thread's operators): the registry cannot be vouched for
    while it lives, so the next cell rescans and the tensor's free counts its real size."""
    run(ip, "%%vram -q -d cpu\nimport gc, threading\nold = torch.ones(10); gc.collect()\n"
            "go, done = threading.Event(), threading.Event()\n"
            "def work():\n    go.wait(); old.resize_(1000); done.set()\n"
            "th = threading.Thread(target=work, daemon=True); th.start()")
    ip.user_ns["go"].set()  # between the cells
    assert ip.user_ns["done"].wait(5)
    run(ip, "%%vram -q -d cpu\nu = torch.ones(5)")
    assert _last().delta_allocated == 20
    tracker = cpu_tracker()
    assert tracker.nbytes_of(_key(ip.user_ns["old"])) == 4000
    run(ip, "%%vram -q -d cpu\nth.join()\ndel old")
    assert _last().delta_allocated == -4000


def test_a_thread_alive_at_the_cells_end_makes_its_end_scan_full(ip):
    """While the user's thread lives, what it does to old storages during a cell is found
    by the cell's end scan (a full one), as before the registry was kept."""
    run(ip, "%%vram -q -d cpu\nimport gc, threading\nold = torch.ones(10); gc.collect()")
    run(ip, "%%vram -q -d cpu\ngo, done, stop = threading.Event(), threading.Event(), threading.Event()\n"
            "def work():\n    go.wait(); old.resize_(500); done.set(); stop.wait()\n"
            "th = threading.Thread(target=work, daemon=True); th.start()\ngo.set(); done.wait(5)")
    try:
        assert _last().delta_allocated == 1960
        assert cpu_tracker().last_scan[0] == "full"
    finally:
        ip.user_ns["stop"].set()
        ip.user_ns["th"].join(5)
    run(ip, "%%vram -q -d cpu\ndel old")
    assert _last().delta_allocated == -2000


def test_a_finished_thread_leaves_the_registry_to_young_scans(ip):
    """Once the user's thread has ended, the cells after the next full scan are young again."""
    run(ip, "%%vram -q -d cpu\nimport threading\nth = threading.Thread(target=lambda: None); th.start()")
    ip.user_ns["th"].join(5)
    run(ip, "%%vram -q -d cpu\nx = torch.ones(4)")  # full (the thread was alive at the last vouch)
    tracker = cpu_tracker()
    full = tracker.full_scans
    run(ip, "%%vram -q -d cpu\ny = torch.ones(6)")
    assert tracker.full_scans == full
    assert _last().delta_allocated == 24


def test_share_memory_then_an_allocation_at_the_freed_address_counts_in_full(ip):
    """share_memory_ copies a storage's bytes to shared memory and frees the old ones (the
    same StorageImpl and size, no ATen operator): a tensor allocated next at the freed
    address is its own memory, not a second view of the moved storage (counted 0 bytes)."""
    run(ip, "%%vram -q -d cpu\nimport gc\nsm = torch.zeros(1000); gc.collect()")
    run(ip, "%%vram -q -d cpu\np0 = sm.data_ptr(); sm.share_memory_()\nu = torch.zeros(1000); p1 = u.data_ptr()")
    assert ip.user_ns["p0"] != ip.user_ns["sm"].data_ptr()
    assert _last().delta_allocated == 4000
    assert cpu_tracker().same_as(_key(ip.user_ns["u"])) == _key(ip.user_ns["u"])
    # the moved storage's new bytes: a NumPy view of them counts nothing
    run(ip, "%%vram -q -d cpu\nimport numpy as np\nview = torch.from_numpy(sm.numpy())")
    assert _last().delta_allocated == 0


def test_share_memory_in_an_unmeasured_cell_is_followed_by_the_full_scan(ip):
    run(ip, "%%vram -q -d cpu\nimport gc\nsm = torch.zeros(1000); gc.collect()")
    run(ip, "sm.share_memory_()")  # unmeasured
    run(ip, "%%vram -q -d cpu\nu = torch.zeros(1000)\nimport numpy as np\nview = torch.from_numpy(sm.numpy())")
    assert _last().delta_allocated == 4000


def test_a_retained_gradient_another_thread_makes_is_found_without_a_full_scan(ip):
    """retain_grad(): backward fills a non-leaf's .grad in C++ (no young Python object), like a
    leaf's; the young scan reads it as it reads the leaves'."""
    run(ip, "%%vram -q -d cpu\nimport gc\nw = torch.ones(100, requires_grad=True)\nh = w.exp(); h.retain_grad()\n"
            "gc.collect()")
    assert _last().delta_allocated == 800
    tracker = cpu_tracker()
    full = tracker.full_scans
    run(ip, "%%vram -q -d cpu\nimport threading\n"
            "th = threading.Thread(target=lambda: h.sum().backward()); th.start(); th.join()")
    assert ip.user_ns["h"].grad is not None
    assert _last().delta_allocated == 800  # w.grad and h.grad
    assert tracker.full_scans == full


def test_ctrl_c_during_a_cells_end_scan_makes_the_next_scan_a_full_one(ip, monkeypatch):
    """A collection inside a measured cell leaves its young objects for the end scan (the
    thread tracks); a Ctrl-C landing in that scan loses the rest of them, which have left
    generation 0 by then: the registry is incomplete, and the next cell scans everything."""
    run(ip, "%%vram -q -d cpu\nimport gc, numpy as np\nx = torch.ones(1)")
    tracker = cpu_tracker()
    real_register = tracker._register
    calls = {"n": 0}

    def register(tensors, storages, young):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:  # the end scan's (the start scan's is the first)
            raise KeyboardInterrupt
        real_register(tensors, storages, young)

    monkeypatch.setattr(tracker, "_register", register)
    result, _ = run(ip, "%%vram -q -d cpu\narr = torch.from_numpy(np.zeros(100)); gc.collect()")
    monkeypatch.setattr(tracker, "_register", real_register)
    assert calls["n"] == 2
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    full = tracker.full_scans
    run(ip, "%%vram -q -d cpu\ny = torch.ones(3)")
    assert tracker.full_scans == full + 1
    assert _last().delta_allocated == 12
    assert tracker.nbytes_of(_key(ip.user_ns["arr"])) == 800


def test_ctrl_c_inside_a_collections_registration_makes_the_next_scan_a_full_one(ip, monkeypatch):
    """The same Ctrl-C landing in the watch's callback at a collection's end (between cells,
    where no thread tracks): it is delivered again, and the young objects it had not
    registered yet are found by the next (full) scan."""
    import time

    run(ip, "%%vram -q -d cpu\nimport gc, numpy as np\nx = torch.ones(1)")
    tracker = cpu_tracker()
    assert not tracker.stale
    run(ip, "%%vram -q -d cpu\narr = torch.from_numpy(np.zeros(50)); arr2 = torch.from_numpy(np.zeros(25))")
    watch = tracker._watch
    watch._callback("start", {"generation": 0})
    tracker._pending.clear()  # the cell's end scan registered these; keep only what follows
    import numpy as np
    import torch

    late = [torch.from_numpy(np.zeros(30)), torch.from_numpy(np.zeros(40))]  # made between cells
    ip.user_ns["late"] = late
    watch._callback("start", {"generation": 0})
    watch.uninstall()
    gc.collect(0)  # they leave generation 0
    watch.install()

    def interrupted(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    monkeypatch.setattr(tracker, "_register", interrupted)
    with pytest.raises(KeyboardInterrupt):  # delivered again from a timer
        watch._callback("stop", {"generation": 0})
        for _ in range(1000):
            time.sleep(0.001)
    monkeypatch.undo()
    run(ip, "%%vram -q -d cpu\ny = torch.ones(3)")
    assert _last().delta_allocated == 12
    assert [tracker.nbytes_of(_key(t)) for t in late] == [240, 320]


@pytest.mark.xfail(strict=True, reason="a thread started and joined inside a measured cell runs untracked "
                   "(dispatch modes are thread-local) and is gone by the end scan, which stays young: its "
                   "resize of a tensor older than the last collection is not seen")
def test_a_thread_started_and_joined_in_a_cell_resizing_an_old_tensor(ip):
    run(ip, "%%vram -q -d cpu\nimport gc, threading\nold = torch.ones(10); gc.collect()")
    run(ip, "%%vram -q -d cpu\nth = threading.Thread(target=lambda: old.resize_(1000)); th.start(); th.join()")
    assert _last().delta_allocated == 3960


def test_a_measured_cell_after_many_tensors_scans_only_the_new_ones(ip):
    """1e5 tensors made in a measured cell: the next cells' young scans must not walk 1e5 objects
    (the end of the block hands its storages over in place: replacing each entry made 1e5 new
    collector-tracked objects in generation 0, which every later young scan walked, 70-110 ms)."""
    run(ip, "%%vram -q -d cpu\nimport gc\nmany = [torch.ones(1) for _ in range(100_000)]; gc.collect()")
    assert _last().delta_allocated == 400_000
    tracker = cpu_tracker()
    full = tracker.full_scans
    for i in range(2):
        run(ip, f"%%vram -q -d cpu\nz{i} = torch.ones(2)")
        assert _last().delta_allocated == 8
        assert tracker.last_scan[0] == "young"
    assert tracker.full_scans == full
    assert len(gc.get_objects(generation=0)) < 10_000  # what the next young scan walks
