"""``%vram free`` counts only what it freed: what another thread (or a user's gc callback) allocates
while it runs is said apart, not subtracted from the rows as negative bytes "freed" (validation-8:
a producer thread filling a queue gave "-768.0 KiB" freed by gc.collect and "-1.5 MiB" in all)."""

from __future__ import annotations

import gc

from tests.conftest import run

MiB = 2**20


def test_allocations_while_it_runs_are_said_apart_and_the_rows_count_what_was_freed(ip):
    run(ip, "def fdeep():\n    fbig = torch.ones(MiB_)\n    raise KeyError('k')\nMiB_ = 2**20")
    run(ip, "fdeep()")  # its traceback keeps fbig: 4 MiB

    made: list = []
    stops = [0]

    def alloc_at_each_collection(phase, info):  # type: ignore[no-untyped-def]
        if phase == "stop":
            stops[0] += 1
            made.append(__import__("torch").ones(2**18))  # 1 MiB each time a collection ends

    gc.callbacks.append(alloc_at_each_collection)
    try:
        run(ip, "%vram free -d cpu -q -o fr")
    finally:
        gc.callbacks.remove(alloc_at_each_collection)
    fr = ip.user_ns["fr"]
    freed = dict(fr.freed)
    assert all(b >= 0 for b in freed.values()), freed
    assert freed["last exception (traceback frames)"] == 4 * MiB
    assert stops[0] >= 3 and fr.meanwhile == len(made) * MiB
    text = fr._table().to_text()
    assert f"{len(made)}.0 MiB was allocated while this ran, by other code (another thread" in text, text
    made.clear()


def test_nothing_allocated_meanwhile_prints_no_such_line(ip):
    run(ip, "%vram free -d cpu -q -o fr2")
    fr = ip.user_ns["fr2"]
    assert fr.meanwhile == 0 and "allocated while this ran" not in fr._table().to_text()
