"""Growth between measured cells (issue 28, validation-7): a prefetch thread that refills its queue after
a cell ended makes no cell's change; the next cell says how much grew while no cell ran and which live
thread keeps it, with the queue's fix only where the thread is checked to wait in put() on a full queue."""

from __future__ import annotations

import gc
import queue
import threading
import time

import pytest

from vramnb._units import format_bytes

from .conftest import run

_PREFETCH = """import threading, queue
gate = threading.Semaphore(0)
def iter_in_background(make_batches, prefetch=4):
    q = queue.Queue(maxsize=prefetch)
    done = object()
    def producer():
        for k, b in enumerate(make_batches()):
            q.put(b)
            if k == 0:
                gate.acquire()   # the rest only once the cell has ended (the test lets it go)
        q.put(done)
    threading.Thread(target=producer, daemon=True).start()
    while True:
        item = q.get()
        if item is done:
            break
        yield item
def make_batches():
    for i in range(7):
        yield torch.zeros(256, 1024)
"""
_CONSUME = "%%vram -d cpu\nfor i, batch in enumerate(iter_in_background(make_batches)):\n    if i == 0:\n        break"
EACH = 256 * 1024 * 4


@pytest.fixture
def threads_ended():  # type: ignore[no-untyped-def]
    """Let the test's producer threads finish (drain their queues) so no other test sees them."""
    before = set(threading.enumerate())
    yield
    for _ in range(200):
        left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not left:
            break
        for o in gc.get_objects():
            if type(o) is threading.Semaphore:
                o.release(10)
            if type(o) is queue.Queue:
                while True:
                    try:
                        o.get_nowait()
                    except queue.Empty:
                        break
        time.sleep(0.01)


def _settle(count: int) -> None:
    """Wait until ``count`` producers are blocked with a full queue."""
    for _ in range(500):
        full = [o for o in gc.get_objects() if type(o) is queue.Queue and o.full()]
        if len(full) >= count:
            time.sleep(0.05)
            return
        time.sleep(0.01)


def _note(ip):  # type: ignore[no-untyped-def]
    import vramnb

    return [n for n in vramnb.history()[-1].notes if n.startswith("allocated grew by")]


def test_a_blocked_prefetch_thread_is_named_with_what_it_keeps(ip, threads_ended):  # type: ignore[no-untyped-def]
    import vramnb

    run(ip, _PREFETCH)
    for k in range(3):
        run(ip, _CONSUME)
        if k < 2:
            ip.user_ns["gate"].release()
            _settle(k + 1)
    last = vramnb.history()[-1]
    prev = vramnb.history()[-2]
    # after the last run its producer put 4 batches into the queue and waits to put the 5th (6 made, 1 read)
    assert last.start_allocated - prev.end_allocated == 5 * EACH
    note = _note(ip)
    cell = last.cell
    line = _PREFETCH.splitlines().index("            q.put(b)") + 1
    # after each run its producer put 4 batches into the queue and waits to put the 5th (6 made in all, 1 read)
    assert len(note) == 1
    assert note[0].startswith(
        f"allocated grew by {format_bytes(5 * EACH)} after the last %%vram cell ([{cell - 1}]) ended and before this "
        f"one started, while no cell ran; 2 threads still running keep {format_bytes(10 * EACH)} that no name "
        f"reaches: daemon thread ")
    assert (f"(producer) keeps {format_bytes(5 * EACH)} in `q` (a Queue with 4 items (maxsize=4), "
            f"{format_bytes(4 * EACH)}), `b` (a tensor (256, 1024), {format_bytes(EACH)}), blocked in `q.put(...)` "
            f"(line {line} of producer) on a full queue (maxsize=4), and 1 more daemon thread like it running producer "
            f"({format_bytes(10 * EACH)} in all)") in note[0]
    assert "drain the queue" in note[0] and "threading.Event" in note[0]
    # the referrer walk names the running thread, not threading._active[<ident>], with the fix for a thread
    grown = [n for n in last.notes if n.startswith("each run")]
    assert len(grown) == 1 and "threading._active[" not in grown[0]
    assert "the thread 'Thread-" in grown[0] and "(producer)' is still running (a daemon)" in grown[0]


def test_a_thread_waiting_on_an_event_gets_no_queue_advice(ip, threads_ended):  # type: ignore[no-untyped-def]
    run(ip, "import threading\nstop = threading.Event()\nstarted = []\n"
            "def hold():\n    kept = torch.zeros(512, 1024)\n    started.append(1)\n    stop.wait()")
    run(ip, "%%vram -d cpu\nx = 1")
    run(ip, "%%vram -d cpu\nthreading.Thread(target=hold, daemon=True).start()\nwhile not started:\n    pass")
    run(ip, "%%vram -d cpu\ny = 2")
    try:
        note = _note(ip)
        assert note == []  # it was made inside the measured cell, not between cells
        import vramnb

        assert vramnb.history()[-2].delta_allocated == 512 * 1024 * 4
    finally:
        ip.user_ns["stop"].set()


def test_a_plain_cell_in_between_gets_no_note(ip):  # type: ignore[no-untyped-def]
    run(ip, "%%vram -d cpu\nx = 1")
    run(ip, "big = torch.zeros(1024, 1024)")
    run(ip, "%%vram -d cpu\ny = 2")
    assert _note(ip) == []


def test_a_thread_that_allocates_between_cells_is_named_without_queue_advice(ip, threads_ended):  # type: ignore[no-untyped-def]
    run(ip, "import threading\ngo = threading.Event()\nstop = threading.Event()\nmade = []\n"
            "def later():\n    go.wait()\n    kept = torch.zeros(512, 1024)\n    made.append(1)\n    stop.wait()")
    run(ip, "%%vram -d cpu\nt = threading.Thread(target=later, daemon=True)\nt.start()\ngo.set()")
    for _ in range(500):
        if ip.user_ns["made"]:
            break
        time.sleep(0.01)
    run(ip, "%%vram -d cpu\ny = 2")
    try:
        note = _note(ip)
        kept = 512 * 1024 * 4
        assert len(note) == 1
        assert note[0].startswith(f"allocated grew by {format_bytes(kept)} after the last %%vram cell")
        assert f"1 thread still running keeps {format_bytes(kept)} that no name reaches: daemon thread " in note[0]
        assert f"(later) keeps {format_bytes(kept)} in `kept` (a tensor (512, 1024), {format_bytes(kept)})" in note[0]
        assert "stop it (and join() it)" in note[0] and "queue" not in note[0]
    finally:
        ip.user_ns["stop"].set()


def test_the_front_ends_own_threads_are_not_walked():  # type: ignore[no-untyped-def]
    from vramnb.diagnose import _between_cells

    class Fake:
        def __init__(self, filename: str) -> None:
            self.f_code = type("C", (), {"co_filename": filename})()
            self.f_back = None

    assert _between_cells.any_front_end([Fake("/usr/lib/python3/site-packages/ipykernel/iostream.py")])  # type: ignore[list-item]
    assert not _between_cells.any_front_end([Fake("/tmp/ipykernel_4242/1234.py")])  # type: ignore[list-item]
