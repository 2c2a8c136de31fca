"""Timeline replay and the CUDA block-size rule (pure logic, no GPU needed)."""

from vramnb._timeline import Interval, Timeline, block_size


def test_block_size_rounds_to_512():
    assert block_size(1) == 512 and block_size(512) == 512 and block_size(513) == 1024
    assert block_size(0) == 512 and block_size(4 * 2**20) == 4 * 2**20


def test_totals_and_live_at():
    tl = Timeline([Interval(1, 100, -1), Interval(2, 50, 0, 2), Interval(3, 30, 1)], n_events=3)
    assert tl.totals() == [100, 150, 180, 130]
    assert sorted(tl.live_at(0)) == [0]
    assert sorted(tl.live_at(2)) == [0, 1, 2]
    assert sorted(tl.live_at(3)) == [0, 2]
