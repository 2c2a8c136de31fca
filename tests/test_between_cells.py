"""Growth between measured cells (issue 28, validation-7): a prefetch thread that refills its queue after
a cell ended makes no cell's change; the next cell says how much grew while no cell ran and which live
thread keeps it, with the queue's fix only where the thread is checked to wait in put() on a full queue."""

from __future__ import annotations

import gc
import queue
import sys
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
    """Wait until ``count`` producers are blocked with a full queue. Found through the threads' frames, not
    ``gc.get_objects()``: a list of every object, held while a producer advances its ``enumerate``, keeps
    that enumerate's cached ``(k, batch)`` tuple shared, so it builds new ones and the stale first tuple
    keeps its batch alive for the thread's life (CPython's enumerate reuses its result tuple only while
    nothing else holds it): a test harness must not make the growth it checks."""
    for _ in range(500):
        frames = sys._current_frames()
        full = 0
        for f in frames.values():
            while f is not None and f.f_code.co_name != "producer":
                f = f.f_back
            if f is not None and type(q := f.f_locals.get("q")) is queue.Queue and q.full():
                full += 1
        frames.clear()
        del frames, f, q
        if full >= count:
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
    # the cell itself leaves nothing more each run (its last `batch` is freed when the next run rebinds it):
    # the growth is between the cells, and only the note above says so
    assert [(h.end_allocated - h.start_allocated) for h in vramnb.history()[-3:]] == [EACH, 0, 0]
    assert not [n for n in last.notes if n.startswith("each run")], last.notes


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
    from vramnb.diagnose import _threads

    class Fake:
        def __init__(self, filename: str) -> None:
            self.f_code = type("C", (), {"co_filename": filename})()
            self.f_back = None

    assert _threads.any_front_end([Fake("/usr/lib/python3/site-packages/ipykernel/iostream.py")])  # type: ignore[list-item]
    assert not _threads.any_front_end([Fake("/tmp/ipykernel_4242/1234.py")])  # type: ignore[list-item]


def test_the_walk_keeps_no_frame_of_the_notebook_alive(ip, threads_ended):  # type: ignore[no-untyped-def]
    """The threads' walk read sys._current_frames(), whose entry for the walking thread is a cycle (its frame
    holds the dict that holds it): until the garbage collector ran, the frames of the magic's note and their
    locals (the notebook's names) stayed alive, so a tensor the next cell rebinds was not freed (seen as
    'each run leaves 1.0 MiB more' in the prefetch case). With the collector off, it is freed at once."""
    import weakref

    run(ip, "import threading\nstop = threading.Event()\ndef keep(ev):\n    kept = torch.zeros(512, 1024)\n    ev.wait()")
    run(ip, "%%vram -d cpu\nx = torch.zeros(256, 1024)")
    gc.collect()
    gc.disable()
    try:
        run(ip, "t = threading.Thread(target=keep, args=(stop,), daemon=True)\nt.start()\nimport time\ntime.sleep(0.2)")
        run(ip, "%%vram -d cpu\ny = 1")  # grew between cells: the threads are walked
        assert len(_note(ip)) == 1
        old = weakref.ref(ip.user_ns["x"])
        run(ip, "%%vram -d cpu\nx = torch.zeros(256, 1024)")
        assert old() is None
    finally:
        gc.enable()
        ip.user_ns["stop"].set()


def test_a_thread_kept_by_its_arguments_is_named_in_the_regrowth_line(ip):  # type: ignore[no-untyped-def]
    """Each run starts a thread that waits, holding the tensor it was given: the referrer walk reaches it
    through threading._active[<ident>] and names the thread, with the fix for a thread."""
    run(ip, "import threading\nstop = threading.Event()\ndef keep(t, ev):\n    ev.wait()")
    try:
        for _ in range(3):
            run(ip, "%%vram -d cpu\nthreading.Thread(target=keep, args=(torch.zeros(256, 1024), stop), daemon=True).start()")
        last = __import__("vramnb").history()[-1]
        grown = [n for n in last.notes if n.startswith("each run")]
        assert len(grown) == 1 and "threading._active[" not in grown[0], last.notes
        assert grown[0].startswith(f"each run of this cell leaves {format_bytes(EACH)} more (3 runs in a row)")
        assert "the thread 'Thread-" in grown[0] and "(keep)' is still running (a daemon)" in grown[0]
        assert "join()" in grown[0]
    finally:
        ip.user_ns["stop"].set()
