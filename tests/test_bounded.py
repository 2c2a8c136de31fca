"""A bounded container (a deque with maxlen, an object naming its capacity) that grows on every
run: where it stops, at the current entry size; never the advice to empty or delete it."""

from __future__ import annotations

import torch

from vramnb._units import format_bytes
from vramnb.diagnose._holding import holding_note

from .conftest import run

CPU = torch.device("cpu")


def _ns(ip):  # type: ignore[no-untyped-def]
    return dict(ip.user_ns)


def test_a_replay_deque_fills_to_its_maxlen(ip):  # type: ignore[no-untyped-def]
    import vramnb

    run(ip, "from collections import deque\nclass Memory:\n    def __init__(self, capacity):\n"
            "        self.buffer = deque(maxlen=capacity)\nmemory = Memory(1000)")
    for _ in range(3):
        run(ip, "%%vram -d cpu\nfor t in range(50):\n    memory.buffer.append(torch.zeros(4, 84, 84, dtype=torch.uint8))")
    line = [n for n in vramnb.history()[-1].notes if "each run of this cell" in n]
    per = 4 * 84 * 84
    assert len(line) == 1
    assert (f"memory.buffer is a deque(maxlen=1000) holding 150 entries ({format_bytes(150 * per)}, "
            f"≈{format_bytes(per)} each): it grows until it holds 1000 entries (≈{format_bytes(1000 * per)} at the "
            "current entry size) and then stops") in line[0]
    assert "del memory.buffer" not in line[0] and "clear()" not in line[0]


def test_a_full_deque_no_longer_grows(ip):  # type: ignore[no-untyped-def]
    run(ip, "from collections import deque\nwindow = deque((torch.zeros(256, 256) for _ in range(8)), maxlen=8)")
    note = holding_note("window", ip.user_ns["window"], CPU, _ns(ip))
    assert note == (f"window is a deque(maxlen=8) and full (8 entries, {format_bytes(8 * 256 * 256 * 4)}): each new "
                    "entry drops the oldest, so it no longer grows; not a leak")


def test_a_capacity_attribute_is_said_conditionally(ip):  # type: ignore[no-untyped-def]
    run(ip, "class Buffer:\n    def __init__(self):\n        self.capacity = 100\n        self.items = []\n"
            "buf = Buffer()\nbuf.items += [torch.zeros(64, 64) for _ in range(10)]")
    note = holding_note("buf", ip.user_ns["buf"], CPU, _ns(ip))
    per = 64 * 64 * 4
    assert note == (f"buf.items holds 10 entries ({format_bytes(10 * per)}, ≈{format_bytes(per)} each) and "
                    "buf.capacity is 100: if Buffer drops entries beyond it (as a replay buffer does), it grows to "
                    f"100 entries (≈{format_bytes(100 * per)} at the current entry size) and then stops, which is not "
                    "a leak; size the capacity to the memory available")


def test_a_queue_nobody_reads_is_told_to_get_not_to_delete_its_deque(ip):  # type: ignore[no-untyped-def]
    run(ip, "import queue\nq = queue.Queue()\nfor k in range(4):\n    q.put(torch.zeros(128, 128))")
    note = holding_note("q", ip.user_ns["q"], CPU, _ns(ip))
    assert note == (f"q is a Queue holding 4 items ({format_bytes(4 * 128 * 128 * 4)}) that nothing has taken out: "
                    "each put() keeps its item until a get() takes it; take them where they are consumed (`q.get()`), "
                    "or give it a maxsize so that put() waits")


def test_a_queue_a_thread_refills_is_told_its_size_not_to_get(ip):  # type: ignore[no-untyped-def]
    """validation-8 (judge8, 2026-12-04 g): a producer thread kept a Queue(maxsize=400) full while the cell took
    batches out; the line said 'take them where they are consumed (`batch_queue.get()`)', which the cell did."""
    run(ip, "import queue, threading\nstop_pq = threading.Event()\npq = queue.Queue(maxsize=6)\n"
            "def fill_pq():\n    while not stop_pq.is_set():\n        try:\n"
            "            pq.put(torch.zeros(64, 64), timeout=0.05)\n        except queue.Full:\n            pass\n"
            "th_pq = threading.Thread(target=fill_pq, name='producer', daemon=True)\nth_pq.start()\n"
            "import time\nwhile pq.qsize() < 6:\n    time.sleep(0.01)\nx_pq = pq.get()\n"
            "while pq.qsize() < 6:\n    time.sleep(0.01)")
    try:
        note = holding_note("pq", ip.user_ns["pq"], CPU, _ns(ip))
        each = 64 * 64 * 4
        assert note == (f"pq is a Queue(maxsize=6) holding 6 items ({format_bytes(6 * each)}, ≈{format_bytes(each)} "
                        "each) that the thread 'producer' puts into as items are taken out: it keeps up to 6 items "
                        f"(≈{format_bytes(6 * each)} at the current item size) for as long as the thread runs; give "
                        "it a smaller maxsize (a few items keep the consumer fed), or stop the thread when done")
    finally:
        run(ip, "stop_pq.set(); th_pq.join()")
    # the thread stopped: nobody refills it, the line is the plain one again
    note = holding_note("pq", ip.user_ns["pq"], CPU, _ns(ip))
    assert note is not None and "take them where they are consumed (`pq.get()`)" in note


def test_a_memory_handler_without_a_target_is_not_told_it_stops(ip):  # type: ignore[no-untyped-def]
    """validation-8 (judge8, 2026-12-04 g, cpython#107028): a MemoryHandler's capacity was read as a replay
    buffer's bound ("it grows to 100 entries ... and then stops, which is not a leak"); without a target its
    flush() keeps every record."""
    run(ip, "import logging, logging.handlers\nmh = logging.handlers.MemoryHandler(capacity=3)\n"
            "lg_mh = logging.getLogger('vramnb-test-mh')\nlg_mh.propagate = False\nlg_mh.setLevel(logging.DEBUG)\n"
            "lg_mh.addHandler(mh)\nfor i in range(5):\n    lg_mh.debug('batch %s', torch.zeros(32, 32))")
    try:
        note = holding_note("mh", ip.user_ns["mh"], CPU, _ns(ip))
        assert len(ip.user_ns["mh"].buffer) == 5  # past its capacity: nothing was cleared
        assert note is not None and "stops" not in note and "not a leak" not in note
        assert note.startswith("mh is a logging MemoryHandler without a target: its flush() has nowhere to send "
                               "the records and keeps them, so its buffer (5 records, ")
        assert note.endswith("grows without bound whatever its capacity: give it a target (`mh.setTarget(...)`) "
                             "or remove it from its logger (`removeHandler`)")
    finally:
        run(ip, "lg_mh.removeHandler(mh)")
