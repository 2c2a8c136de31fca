"""itertools objects that keep what passes through them (validation-10): a cycle saves every item of its first pass,
a tee keeps what one copy has read until every copy has; the regrowth line names them with the fix that fits, not
"remove it from there" (items cannot be removed from either)."""

from __future__ import annotations

import vramnb
from tests.conftest import run


def _line() -> str:
    [line] = [n for n in vramnb.history()[-1].notes if n.startswith("each run of this cell")]
    return line


def test_a_cycle_over_samples_is_named_with_a_generator_that_starts_again(ip):  # type: ignore[no-untyped-def]
    run(ip, "import itertools\nclass Samples:\n    def __getitem__(self, i):\n"
            "        if i >= 10**6:\n            raise IndexError\n        return torch.full((1 << 18,), float(i))\n"
            "it = itertools.cycle(Samples())")
    for _ in range(3):
        run(ip, "%%vram -d cpu\nfor _, s in zip(range(4), it):\n    total = s.sum().item()")
    line = _line()
    assert "it is an itertools.cycle: it saves every element it returns so that it can repeat them" in line
    assert "`def forever(it):` / `    while True:` / `        yield from it`" in line
    assert "remove it from there" not in line
    # the printed generator, run: the same items, nothing kept
    ns: dict = {}
    exec("def forever(it):\n    while True:\n        yield from it", ns)  # noqa: S102 - the printed fix
    import itertools

    assert list(itertools.islice(ns["forever"]([1, 2, 3]), 7)) == [1, 2, 3, 1, 2, 3, 1]


def test_a_tee_copy_never_read_is_named_as_keeping_what_the_other_read(ip):  # type: ignore[no-untyped-def]
    run(ip, "import itertools\ndef batches():\n    while True:\n        yield torch.randn(256, 1024)\n"
            "train, spare = itertools.tee(batches())")
    for _ in range(3):
        run(ip, "%%vram -d cpu\nfor step in range(4):\n    xb = next(train)")
    line = _line()
    assert "train comes from itertools.tee: the items one copy has read are kept until every other copy has read them" \
        in line
    assert "remove it from there" not in line


def test_a_list_trimmed_by_one_per_run_while_a_loop_appends_gets_while_or_deque(ip):  # type: ignore[no-untyped-def]
    """validation-10 replay_memory_trimmed_by_one_per_episode: `if len(replay) > limit: replay.pop(0)` after a loop
    of appends; "store less" or "replay.clear()" are wrong for a replay memory."""
    run(ip, "replay = []\nmemory_limit = 8")
    cell = ("%%vram -d cpu\nfor t in range(20):\n    replay.append(torch.randn(4096))\n"
            "if len(replay) > memory_limit:\n    replay.pop(0)")
    for _ in range(3):
        run(ip, cell)
    line = _line()
    assert ("`if len(replay) > memory_limit: replay.pop(0)` removes one entry per run while the cell adds more than "
            "one (in its loop)") in line
    assert "(`while len(replay) > memory_limit: replay.pop(0)`), or keep it as `collections.deque(maxlen=memory_limit)`" \
        in line
    assert "replay.clear()" not in line
    # the printed while-trim, run: the list stays at the limit
    run(ip, cell.replace("if len(", "while len("))
    assert len(ip.user_ns["replay"]) == 8


def test_a_buffer_at_its_count_whose_entries_grow_gets_a_bound_on_bytes(ip):  # type: ignore[no-untyped-def]
    """validation-10 episode_buffer_capped_by_count_while_episodes_grow: `while len(episodes) > n: popleft()` keeps
    the count, but longer episodes make it grow; "episodes.clear()" is no fix for a replay buffer."""
    run(ip, "from collections import deque\nepisodes = deque()\nmaximum_episodes = 4\nrun_no = 0")
    cell = ("%%vram -d cpu\nrun_no += 1\nfor k in range(4):\n"
            "    episodes.append([torch.randn(4096) for _ in range(40 * run_no)])\n"
            "while len(episodes) > maximum_episodes:\n    episodes.popleft()")
    for _ in range(3):
        run(ip, cell)
    line = _line()
    assert ("`while len(episodes) > maximum_episodes: episodes.popleft()` keeps episodes at 4 entries, and it is at "
            "that count, yet it grows: its entries get larger") in line
    assert "episodes.clear()" not in line
    # the printed bound, run: the buffer's bytes stay under the budget
    run(ip, "nbytes = lambda e: sum(t.nbytes for t in (e if isinstance(e, (list, tuple)) else [e]))\nbudget = 4 << 20\n"
            "while len(episodes) > maximum_episodes or sum(map(nbytes, episodes)) > budget: episodes.popleft()")
    ns = ip.user_ns
    assert sum(map(ns["nbytes"], ns["episodes"])) <= 4 << 20
