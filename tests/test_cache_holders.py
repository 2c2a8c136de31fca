"""Tensors kept by a ``functools.lru_cache`` (field cases lru_cache_dataset_getitem,
lru_cache_method_keeps_old_world): ``%vram`` names the cache, its entries and bytes, and
``cache_clear()``; the bytes no row holds are never called unreachable. CPU, bytes from
shapes; the test checks that ``cache_clear()`` frees what the line says."""

from __future__ import annotations

import gc

import torch

from tests.conftest import run
from vramnb._units import format_bytes

N = 1 << 15  # float32 elements: 128 KiB


def _allocated() -> int:
    from vramnb._probe import probe_for

    probe = probe_for(torch.device("cpu"))
    probe.tracker.scan()
    return probe.sample().allocated


def _text(ip, cell: str) -> str:
    _, cap = run(ip, cell)
    return cap.stdout + "".join(str(o.data.get("text/plain", "")) for o in cap.outputs)


def test_a_method_cache_and_a_function_cache_are_named_and_cache_clear_frees_their_bytes(ip):
    run(ip, "%%vram -d cpu -q\nimport functools\n"
            "class Data:\n    def __init__(self):\n        self.table = torch.ones(%d)\n"
            "    @functools.lru_cache(maxsize=None)\n    def __getitem__(self, i):\n        return torch.full((%d,), float(i))\n"
            "ds = Data()\nfor i in range(3):\n    ds[i]\n"
            "@functools.lru_cache(maxsize=None)\ndef load(i):\n    return torch.zeros(%d)\n"
            "for i in range(2):\n    load(i)\n"
            "ds = Data()  # the old one lives on in the cache's keys" % (N, N, N))
    text = _text(ip, "%vram -d cpu")
    # the cache of Data.__getitem__: 3 results and the old Data's table (the new ds's table is a row)
    method = 3 * N * 4 + N * 4
    fn = 2 * N * 4
    line = (f"functools caches keep tensors: Data.__getitem__ (3 entries) keeps {format_bytes(method)}, load "
            f"(2 entries) keeps {format_bytes(fn)} (its arguments, `self` included, and its results; what only the "
            "cache keeps is held by no name listed): Data.__getitem__.cache_clear(); load.cache_clear()")
    assert line in text, text
    assert "objects no variable of the notebook reaches" not in text
    before = _allocated()
    run(ip, "Data.__getitem__.cache_clear(); load.cache_clear()")
    gc.collect()
    assert before - _allocated() == method + fn


def test_a_method_cache_keeps_the_old_object_and_its_module_after_del(ip):
    # ParlAI#2487: lru_cache on a method keeps self; self holds a model (parameters two levels down)
    run(ip, "import functools, gc\nclass World:\n    def __init__(self):\n"
            "        self.agent = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))\n"
            "    @functools.lru_cache(maxsize=1)\n    def size(self):\n        return 10\n"
            "w = World()\nw.size()\ndel w\ngc.collect()\nnew = World()")
    text = _text(ip, "%vram -d cpu")
    kept = 2 * (64 * 64 + 64) * 4
    assert (f"functools caches keep tensors: World.size (1 entry) keeps {format_bytes(kept)}") in text, text
    before = _allocated()
    run(ip, "World.size.cache_clear()")
    gc.collect()
    assert before - _allocated() == kept


def test_no_cache_line_where_the_cache_keeps_no_tensor(ip):
    run(ip, "import functools\n@functools.lru_cache(maxsize=None)\ndef sq(i):\n    return i * i\nsq(3)\n"
            "kept = torch.ones(%d)" % N)
    text = _text(ip, "%vram -d cpu")
    assert "functools caches" not in text
