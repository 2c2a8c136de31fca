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
