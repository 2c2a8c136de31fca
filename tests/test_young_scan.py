"""The CPU tracker's registry kept between measured cells (vramnb._young): after a cell
measured from its first line to its last, the next measured cell scans only what no
garbage collection has seen, and still counts every byte exactly."""

from __future__ import annotations

import gc

import numpy as np
import torch

import vramnb
from tests.conftest import run
from vramnb._tracker import cpu_tracker


def _last(ip):  # type: ignore[no-untyped-def]
    return vramnb.history()[-1]


def test_after_a_measured_cell_the_next_one_scans_only_what_is_new(ip):
    run(ip, "%%vram -q -d cpu\nkeep = [torch.ones(16) for _ in range(1000)]")
    tracker = cpu_tracker()
    full = tracker.full_scans
    # made outside the dispatcher (no dispatch mode sees from_numpy), and moved to the oldest
    # generation by a full collection before the cell's end scan looks
    run(ip, "%%vram -q -d cpu\nimport numpy as np, gc\narr = torch.from_numpy(np.zeros(1000))\ngc.collect()")
    assert tracker.full_scans == full, "the cell after a measured cell ran a full scan"
    assert tracker.last_scan[0] == "young"
    assert _last(ip).delta_allocated == 8000


def test_an_unmeasured_cell_makes_the_next_scan_a_full_one(ip):
    run(ip, "%%vram -q -d cpu\nt = torch.ones(10)")
    tracker = cpu_tracker()
    run(ip, "t.untyped_storage().resize_(4000)")  # unmeasured: no tracker sees the resize
    full = tracker.full_scans
    run(ip, "%%vram -q -d cpu\nu = torch.ones(3)")
    assert tracker.full_scans == full + 1
    assert _last(ip).delta_allocated == 12
    key = ip.user_ns["t"].untyped_storage()._cdata
    assert tracker.nbytes_of(key) == 4000


def test_a_one_line_vram_cell_keeps_the_registry(ip):
    run(ip, "%%vram -q -d cpu\nt = torch.ones(10)")
    tracker = cpu_tracker()
    run(ip, "%vram -q -o held -d cpu")
    full = tracker.full_scans
    run(ip, "%%vram -q -d cpu\nu = torch.ones(5)")
    assert tracker.full_scans == full
    assert _last(ip).delta_allocated == 20


def test_gradients_another_thread_makes_are_found_without_a_full_scan(ip):
    # autograd's AccumulateGrad makes .grad in C++: it has no Python object, so it is never young;
    # the scan reads the .grad of the leaves it knows
    run(ip, "%%vram -q -d cpu\nw = torch.ones(100, requires_grad=True)")
    tracker = cpu_tracker()
    full = tracker.full_scans
    run(ip, "%%vram -q -d cpu\nimport threading\n"
            "th = threading.Thread(target=lambda: (w * 2).sum().backward())\nth.start(); th.join()")
    assert tracker.full_scans == full
    assert _last(ip).delta_allocated == 400
    assert ip.user_ns["w"].grad is not None


def test_a_freeze_makes_the_next_scan_a_full_one(ip):
    run(ip, "%%vram -q -d cpu\nt = torch.ones(10)")
    tracker = cpu_tracker()
    full = tracker.full_scans
    gc.freeze()
    try:
        run(ip, "%%vram -q -d cpu\nu = torch.ones(7)")
    finally:
        gc.unfreeze()
    assert tracker.full_scans == full + 1
    assert _last(ip).delta_allocated == 28


def test_young_objects_a_collection_meets_while_a_step_records_are_its_own():
    """A collection inside an operator sees its output before the dispatch mode registers it:
    it is left for the mode (a recording's listener must hear of it), not taken as nobody's."""
    tracker = cpu_tracker()
    tracker.scan(block_starts=True)
    heard = []
    thresholds = gc.get_threshold()
    gc.set_threshold(1)  # a collection at every allocation
    try:
        with tracker.tracking(), tracker.listening(lambda key, old, new: heard.append(new) if not old else None):
            xs = [torch.ones(25) for _ in range(50)]
    finally:
        gc.set_threshold(*thresholds)
    assert heard.count(100) == 50
    del xs


def test_scanning_is_exact_with_numpy_views_made_between_cells(ip):
    run(ip, "%%vram -q -d cpu\nbase = torch.zeros(500)")
    arr = np.zeros(250)
    ip.user_ns["arr"] = arr
    # a second StorageImpl over base's bytes: counted once
    run(ip, "%%vram -q -d cpu\nalias = torch.from_numpy(base.numpy())\nown = torch.from_numpy(arr)")
    assert _last(ip).delta_allocated == 2000


def test_ctrl_c_inside_the_collection_callback_still_interrupts():
    """Python only prints what a gc.callbacks entry raises: a KeyboardInterrupt that lands in
    the watch's callback is delivered again, so the user's code is still interrupted."""
    import time

    import pytest

    from vramnb._young import YoungWatch

    def interrupted(starts: bool) -> None:
        raise KeyboardInterrupt

    watch = YoungWatch(interrupted)
    watch.install()
    try:
        assert watch.installed
        # called as the collector calls it (a real collection would also run the other gc.callbacks
        # entries of the process, e.g. hypothesis's, which can swallow the redelivered interrupt)
        with pytest.raises(KeyboardInterrupt):
            watch._callback("start", {"generation": 0})
            for _ in range(1000):
                time.sleep(0.001)
    finally:
        watch.uninstall()
    assert not watch.installed


def test_vram_on_scans_every_object_once(ip):
    run(ip, "%vram on -q -d cpu")
    try:
        run(ip, "a = torch.ones(10)")
        tracker = cpu_tracker()
        full = tracker.full_scans
        for i in range(3):
            run(ip, f"b{i} = torch.ones(5)")
            assert _last(ip).delta_allocated == 20
        assert tracker.full_scans == full
    finally:
        run(ip, "%vram off")
