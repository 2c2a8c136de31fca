"""Threads and allocations outside the dispatcher (issue 11, items 11 and 16).

PyTorch's dispatch modes are thread-local: the tracker's mode sees only the
thread that entered it, and no mode sees storages made outside an ATen
operator (``torch.frombuffer``, ``from_numpy``, storage constructors). A
measured block scans the process at its end, so what those leave alive
counts; a step's timeline (a listener) keeps to its own thread.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
import torch

import vramnb
from vramnb._timeline import CpuRecorder
from vramnb._tracker import StorageTracker, cpu_tracker
from vramnb import profile_step

F32 = 4


def _delta(block) -> int:
    with vramnb.vram("cpu", record=False, warn=False) as m:
        keep = block()
    rep = m.report
    assert rep.peak_allocated >= rep.end_allocated
    del keep
    return rep.end_allocated - rep.start_allocated


def test_allocations_outside_the_dispatcher_are_counted():
    assert _delta(lambda: torch.frombuffer(bytearray(2**20), dtype=torch.uint8)) == 2**20
    assert _delta(lambda: torch.from_numpy(np.ones(1000))) == 1000 * 8
    assert _delta(lambda: torch.UntypedStorage(12345)) == 12345
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TypedStorage is deprecated
        assert _delta(lambda: torch.TypedStorage(1000, dtype=torch.float64)) == 1000 * 8
        assert _delta(lambda: torch.DoubleStorage(300)) == 300 * 8


def test_tensors_another_thread_makes_during_the_block_are_counted():
    keep: list[torch.Tensor] = []

    def other():
        keep.append(torch.ones(2**18))

    def block():
        t = threading.Thread(target=other)
        t.start()
        t.join()
        return None

    assert _delta(block) == 2**18 * F32
    keep.clear()


def _original_resize():
    return torch.UntypedStorage.__dict__.get("resize_"), torch.UntypedStorage.resize_


def test_overlapping_blocks_restore_resize_exactly():
    before = _original_resize()
    a = vramnb.vram("cpu", record=False, warn=False)
    b = vramnb.vram("cpu", record=False, warn=False)
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)  # not the innermost: ends first
    assert torch.UntypedStorage.resize_ is not before[1]  # b still tracks resizes
    x = torch.empty(10, dtype=torch.uint8)
    x.untyped_storage().resize_(1000)
    b.__exit__(None, None, None)
    assert _original_resize() == before


def test_blocks_in_two_threads_restore_resize_exactly():
    before = _original_resize()
    inside, leave = threading.Event(), threading.Event()

    def other():
        with vramnb.vram("cpu", record=False, warn=False):
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    t.start()
    inside.wait(10)
    with vramnb.vram("cpu", record=False, warn=False):
        leave.set()  # the other thread's block ends while this one runs
        t.join()
    assert _original_resize() == before


def test_a_listener_sees_only_its_own_thread_while_another_thread_tracks():
    tr = StorageTracker("cpu")
    tr.scan()
    both = threading.Barrier(2, timeout=10)
    result: dict[str, int] = {}

    def step() -> None:  # records a timeline, as profile_step does
        rec = CpuRecorder(tr)
        with tr.tracking(), tr.listening(rec):
            a = torch.ones(1000)
            both.wait()  # the other thread's tensors are alive now
            b = a * 2
            both.wait()
            del a, b
        totals = rec.finish().totals()
        result["step"] = max(totals) - totals[0]

    def cell() -> None:  # a measured cell in another thread: tracks, does not record
        with tr.tracking():
            keep = torch.ones(5000)
            both.wait()
            keep2 = keep * 2
            both.wait()
            del keep, keep2

    ts = [threading.Thread(target=step), threading.Thread(target=cell)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert result == {"step": 2 * 1000 * F32}


def _model(width: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor]:
    torch.manual_seed(width)
    m = torch.nn.Sequential(torch.nn.Linear(32, width), torch.nn.ReLU(), torch.nn.Linear(width, 4))
    return m, torch.optim.SGD(m.parameters(), lr=0.1), torch.randn(16, 32)


def _numbers(rep) -> list[dict[str, int]]:
    """Every mark's (and the peak's) bytes by source, but "other" (what was there before)."""
    out = []
    for s in rep.steps:
        for _, b in s.marks + [("peak", s.peak)]:
            out.append({k: v for k, v in b.sources.items() if k != "other"})
    return out


def test_a_second_recording_in_another_thread_is_refused_and_the_first_is_exact():
    """Two profile_step calls in two threads counted each other's memory; the
    second is now refused (a wait could deadlock threads that wait on each
    other), before it changes anything, and the first is exact."""
    loss = lambda m, x: m(x).square().mean()  # noqa: E731
    m, o, x = _model(64)
    alone = _numbers(profile_step(m, x, loss, o))
    inside, leave = threading.Event(), threading.Event()

    def waiting(m, x):
        out = m(x).square().mean()
        inside.set()
        leave.wait(20)
        return out

    got: dict[str, object] = {}

    def other() -> None:
        try:
            got["rep"] = profile_step(m, x, waiting, o)
        except BaseException as e:  # noqa: BLE001 - reported below
            got["rep"] = e

    t = threading.Thread(target=other)
    t.start()
    assert inside.wait(20)
    m2, o2, x2 = _model(256)
    before = {k: v.detach().clone() for k, v in m2.state_dict().items()}
    try:
        with pytest.raises(vramnb.VramnbError, match="already recording.*one after another"):
            profile_step(m2, x2, loss, o2)
    finally:
        leave.set()
        t.join()
    assert not isinstance(got["rep"], BaseException), got["rep"]
    assert _numbers(got["rep"]) == alone
    for k, v in m2.state_dict().items():  # the refused call changed nothing
        torch.testing.assert_close(v, before[k])
    assert all(p.grad is None for p in m2.parameters())


def test_the_process_tracker_is_left_without_owned_storages():
    tr = cpu_tracker()
    assert not tr._tracking
    assert all(e.owner is None for e in list(tr._entries.values()))
