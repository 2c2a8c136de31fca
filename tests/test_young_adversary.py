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
