"""A growing cache read for what bounds it (issue 28, validation-7): a dict keyed by example index of
its data set is full at one entry per example and stops; a dict keyed by sizes grows with each new
size (the re-runs leave different bytes, yet the regrowth line names it); never a sentence where
the evidence does not hold."""

from __future__ import annotations

import torch

from vramnb._units import format_bytes

from .conftest import run

_DATASET = ("class GridDataset:\n"
            "    def __init__(self, n):\n        self.n = n\n        self.cache = {}\n"
            "    def __len__(self):\n        return self.n\n"
            "    def __getitem__(self, i):\n"
            "        if i not in self.cache:\n            self.cache[i] = torch.ones(3, 1000)\n"
            "        return self.cache[i]\n"
            "dataset = GridDataset({n})\nstep = 0")
_EPOCH = "%%vram -d cpu\nfor _ in range(300):\n    float(dataset[step % len(dataset)].sum())\n    step += 1"


def _line(ip):  # type: ignore[no-untyped-def]
    import vramnb

    return [n for n in vramnb.history()[-1].notes if n.startswith("each run of this cell")]


def test_a_per_example_cache_that_is_full_stops_growing(ip):  # type: ignore[no-untyped-def]
    run(ip, _DATASET.replace("{n}", "900"))
    for _ in range(3):
        run(ip, _EPOCH)
    line = _line(ip)
    per = 3 * 1000 * 4
    assert len(line) == 1
    assert (f"dataset.cache holds one entry per example of dataset (len(dataset) = 900, keys 0 to 899): it is full "
            f"(900 of 900 entries, {format_bytes(900 * per)}), so reading more examples adds nothing to it: it has "
            "stopped growing, which is not a leak") in line[0]
    assert "del dataset.cache" not in line[0]


def test_a_per_example_cache_not_yet_full_says_where_it_stops(ip):  # type: ignore[no-untyped-def]
    run(ip, _DATASET.replace("{n}", "3000"))
    for _ in range(3):
        run(ip, _EPOCH)
    line = _line(ip)
    per = 3 * 1000 * 4
    assert len(line) == 1
    assert (f"dataset.cache holds 900 entries ({format_bytes(900 * per)}, ≈{format_bytes(per)} each), keyed by "
            "example index of dataset (len(dataset) = 3000): it grows until it holds one entry per example "
            f"(≈{format_bytes(3000 * per)} at the current entry size) and then stops") in line[0]


def test_a_dict_beyond_the_data_sets_length_is_not_said_to_be_bounded(ip):  # type: ignore[no-untyped-def]
    # keys are the global step, not the example: the dict outgrows len(dataset)
    run(ip, _DATASET.replace("{n}", "100").replace("if i not in self.cache:\n            self.cache[i]",
                                             "if True:\n            self.cache[len(self.cache)]"))
    for _ in range(3):
        run(ip, _EPOCH)
    line = _line(ip)
    assert len(line) == 1
    assert "one entry per example" not in line[0] and "not a leak" not in line[0]


_ANCHORS = ("class Anchors(torch.nn.Module):\n"
            "    def __init__(self):\n        super().__init__()\n        self._cache = {}\n"
            "    def forward(self, h, w):\n"
            "        if (h, w) not in self._cache:\n            self._cache[(h, w)] = torch.zeros(h * w, 4)\n"
            "        return self._cache[(h, w)]\n"
            "anchor_gen = Anchors()\nsizes = iter([(200 + i % 3, 100 + i) for i in range(100)])")


def test_a_cache_keyed_by_sizes_gets_a_regrowth_line_though_each_run_differs(ip):  # type: ignore[no-untyped-def]
    run(ip, _ANCHORS)
    deltas = []
    for _ in range(3):
        run(ip, "%%vram -d cpu\nfor _ in range(10):\n    h, w = next(sizes)\n    a = anchor_gen(h, w)")
        import vramnb

        deltas.append(vramnb.history()[-1].delta_allocated)
    assert len(set(deltas)) == 3  # each run leaves a different number of bytes
    line = _line(ip)
    assert len(line) == 1
    shown = ", ".join(f"+{format_bytes(d)}" for d in deltas)
    assert line[0].startswith(f"each run of this cell leaves more ({shown} in the last 3 runs in a row)")
    cache = ip.user_ns["anchor_gen"]._cache
    total = sum(t.nbytes for t in cache.values())
    assert (f"anchor_gen._cache is a cache keyed by a tuple of integers (30 entries, {format_bytes(total)}; the latest "
            "keys (201, 128), (202, 129)) whose tensors' shapes follow the key") in line[0]
    assert "bound it" in line[0] and "key it by a small set" in line[0]
    assert "`if len(self._cache) > 8: self._cache.pop(next(iter(self._cache)))`" in line[0]
    assert "forward hook" not in line[0]


def test_growth_that_swings_gets_no_regrowth_line(ip):  # type: ignore[no-untyped-def]
    # +1, +4, +1 MiB: more than twice apart, not the same growth each run
    run(ip, "keep = []\nsizes = iter([1, 4, 1])")
    for _ in range(3):
        run(ip, "%%vram -d cpu\nkeep.append(torch.zeros(next(sizes) << 18))")
    assert _line(ip) == []


def test_a_size_keyed_dict_of_equal_shapes_is_not_called_a_keyed_cache(ip):  # type: ignore[no-untyped-def]
    run(ip, "store = {}\nk = iter(range(1000))")
    for _ in range(3):
        run(ip, "%%vram -d cpu\nfor _ in range(8):\n    store[(next(k), 1)] = torch.zeros(256, 256)")
    line = _line(ip)
    assert len(line) == 1
    assert "keyed by" not in line[0]
    assert torch.zeros(1).numel() == 1


def test_a_functools_cache_with_a_maxsize_is_said_to_stop(ip):  # type: ignore[no-untyped-def]
    run(ip, "import functools\n@functools.lru_cache(maxsize=40)\ndef table(n):\n    return torch.zeros(n, 1024)\n"
            "k = iter(range(64, 1000))")
    for _ in range(3):
        run(ip, "%%vram -d cpu\nfor _ in range(10):\n    table(64)\n    table(next(k))")
    line = _line(ip)
    assert len(line) == 1
    assert ("table is a functools cache with maxsize=40 holding 30 entries: it grows until it holds 40 and then stops "
            "(each new result drops the least recently used); not a leak") in line[0]
    assert "cache_clear" in line[0]


def test_an_unbounded_functools_cache_is_not_said_to_stop(ip):  # type: ignore[no-untyped-def]
    run(ip, "import functools\n@functools.lru_cache(maxsize=None)\ndef table(n):\n    return torch.zeros(n, 1024)\n"
            "k = iter(range(64, 1000))")
    for _ in range(3):
        run(ip, "%%vram -d cpu\nfor _ in range(10):\n    table(next(k) // 8 * 8 + 64)")
    line = _line(ip)
    assert line and "stops" not in line[0] and "not a leak" not in line[0]


def test_a_length_counted_from_the_cache_itself_bounds_nothing(ip):  # type: ignore[no-untyped-def]
    # __len__ reads the cache: keys 0..len-1 always, yet nothing stops it from growing
    run(ip, _DATASET.replace("{n}", "0").replace("return self.n", "return len(self.cache)").replace(
        "if i not in self.cache:", "if True:\n            i = len(self.cache)").replace(
        "dataset[step % len(dataset)]", "dataset[step]"))
    for _ in range(3):
        run(ip, _EPOCH.replace("dataset[step % len(dataset)]", "dataset[step]"))
    line = _line(ip)
    assert len(line) == 1
    assert "one entry per example" not in line[0] and "not a leak" not in line[0]


def test_a_cache_keyed_by_index_of_a_non_data_set_says_index(ip):  # type: ignore[no-untyped-def]
    run(ip, _DATASET.replace("{n}", "900").replace("GridDataset", "Frames").replace("dataset", "frames"))
    for _ in range(3):
        run(ip, _EPOCH.replace("dataset", "frames"))
    line = _line(ip)
    assert len(line) == 1
    assert "frames.cache holds one entry per index of frames (len(frames) = 900, keys 0 to 899): it is full" in line[0]
