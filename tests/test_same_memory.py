"""One memory behind two StorageImpls (torch.from_numpy(t.numpy()), frombuffer)
is counted once: by the tracker, by %vram and by %%vram."""

from __future__ import annotations

import gc

import numpy as np
import torch

import vramnb
from tests.conftest import run
from vramnb._holders import find_holders
from vramnb._tracker import StorageTracker

MIB4 = 2**20 * 4


def test_tracker_counts_a_numpy_round_trip_once_and_moves_the_bytes_when_the_first_dies():
    tr = StorageTracker("cpu")
    arr = np.ones(2**20, dtype=np.float32)
    a = torch.from_numpy(arr)
    tr.add_tensor(a)
    assert tr.current == MIB4
    b = torch.from_numpy(arr[1024:])  # inside a's bytes
    c = torch.from_numpy(arr)  # the same bytes again
    tr.add_tensor(b)
    tr.add_tensor(c)
    assert tr.current == MIB4
    assert tr.same_as(c.untyped_storage()._cdata) == a.untyped_storage()._cdata
    del a
    gc.collect()
    assert tr.current == MIB4  # the numpy array keeps the bytes: now counted through b or c
    del b, c
    gc.collect()
    assert tr.current == 0


def test_cell_delta_and_vram_count_the_alias_once(ip):
    run(ip, "import numpy as np")
    res, _ = run(ip, "%%vram -q -d cpu -o r\nt = torch.ones(2**20)\nu = torch.from_numpy(t.numpy())")
    r = ip.user_ns["r"]
    assert r.delta_allocated == MIB4
    rows = find_holders({"t": ip.user_ns["t"], "u": ip.user_ns["u"]}, torch.device("cpu"))
    assert rows.total == MIB4
    assert {h.name: h.unique for h in rows} == {"t": 0, "u": 0}  # deleting either alone frees nothing


def test_breakdown_names_the_alias_memory_once(ip):
    run(ip, "import numpy as np")
    run(ip, "%%vram -q -d cpu --breakdown\nt = torch.ones(2**20)\nu = torch.from_numpy(t.numpy())")
    rep = vramnb.history()[-1]
    r = {n: (a, b, p) for n, a, b, p in rep.sources}
    assert r["tensor t"][1] == MIB4
    assert "tensor u" not in r  # u's bytes are t's
    assert sum(b for _, _, b, _ in rep.sources) == rep.end_allocated
    assert rep.delta_allocated == MIB4


def test_dlpack_and_frombuffer_aliases_count_once():
    tr = StorageTracker("cpu")
    t = torch.ones(2**20)
    tr.add_tensor(t)
    d = torch.from_dlpack(t)  # a second StorageImpl over t's bytes
    buf = bytearray(4096)
    f1 = torch.frombuffer(buf, dtype=torch.uint8)
    f2 = torch.frombuffer(buf, dtype=torch.uint8, offset=1024)
    for x in (d, f1, f2):
        tr.add_tensor(x)
    assert tr.current == MIB4 + 4096
    del d, f1, f2, t, x
    gc.collect()
    assert tr.current == 0
