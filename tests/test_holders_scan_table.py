"""``%vram``'s listing takes what the scan just read of the plain tensors it found unchanged
(``vramnb._storages.ScanTable``, issue 28 item 16) instead of reading each again: the rows must be
those of the listing that reads every tensor itself, on random nests (``tests/_random_nests.py``:
lists, dicts, objects, views, repeats, storages over another's bytes, bare storages, parameters,
gradients, graphs, modules, shuffled and long runs), with untracked changes between scans.
(The comparison with the commit before the table, a0b515f, was a one-time check in a
subprocess: benchmarks/results/2026-12-04e-holders-speed/.)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from tests import _random_nests
from vramnb import _tracker
from vramnb._holders import find_holders
from vramnb._storages import ScanTable
from vramnb._tracker import cpu_tracker

CPU = torch.device("cpu")


def _rows(rows: Any) -> tuple[Any, ...]:
    return [dataclasses.asdict(r) for r in rows], rows.total, rows.out_of_sight, rows.blocks


def _table(monkeypatch: pytest.MonkeyPatch, seed: int, ns: dict[str, Any]) -> ScanTable:
    """A full scan that registers ``ns``, untracked changes for some seeds, then the full scan
    that fills the table (``_RUN`` small: a state of a few tensors takes the bulk path too)."""
    monkeypatch.setattr(_tracker, "_RUN", (32, 7, 200)[seed % 3])
    monkeypatch.setattr(ScanTable, "_STRIDE", (16, 4, 2, 1)[seed % 4])
    tracker = cpu_tracker()
    tracker.stale = True
    tracker.scan()
    if seed % 4 == 3:
        _random_nests.mutate(seed, ns)
    tracker.stale = True
    table = ScanTable("cpu")
    tracker.scan(table=table)
    return table


@pytest.mark.parametrize("first", range(0, 60, 20))
def test_random_nests_same_rows(first: int, monkeypatch: pytest.MonkeyPatch) -> None:
    hits = seeds_hit = 0
    for seed in range(first, first + 20):
        ns = _random_nests.build(seed)
        table = _table(monkeypatch, seed, ns)
        with_table = _rows(find_holders(ns, CPU, known=table))
        reading = _rows(find_holders(ns, CPU))
        assert with_table == reading, seed
        hits += table.hits
        seeds_hit += table.hits > 0
        table.clear()
    assert seeds_hit >= 3 and hits >= 300  # the table answered (the comparison is not vacuous)


def test_table_answers_only_for_the_same_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    """A list of the scan's tensors in another order, a copy with one tensor replaced by another
    over the same storage, and a run with a tensor the scan did not find unchanged: read again."""
    base = [torch.zeros(i % 5 + 1) for i in range(64)]
    ns = {"base": base}
    table = _table(monkeypatch, 0, ns)
    monkeypatch.setattr(_tracker, "_RUN", 1)  # (no run of the scan mixes them with other tensors)
    table.clear()
    tr = cpu_tracker()
    tr.stale = True
    tr.scan(table=table)
    assert table.lookup(base) is not None
    swapped = base[::-1]
    assert table.lookup(swapped) is None
    other = list(base)
    other[20] = base[20].detach()  # another tensor object over the same storage
    assert table.lookup(other) is None
    for ns2 in ({"r": swapped, "o": other}, {"b": base, "r": swapped}):
        assert _rows(find_holders(ns2, CPU, known=table)) == _rows(find_holders(ns2, CPU))
    base[5].resize_(100)  # changed after the scan: the table's answer is the scan's
    keys, sizes, starts = table.lookup(base)  # type: ignore[misc]
    assert sizes[5] == 4 * (5 % 5 + 1) and sizes[:5] == [4 * (i % 5 + 1) for i in range(5)]
    table.clear()
    assert len(table) == 0 and table.lookup(base) is None


_KEEPS_NO_TENSOR = """
import weakref
import torch
from IPython.core.interactiveshell import InteractiveShell
from vramnb import _magics, _tracker

ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "vramnb")
_tracker._RUN = 8  # (runs of the scan that hold only these tensors)
ts = [torch.zeros(3) for _ in range(50)]
ip.user_ns["ts_keep"] = ts
ip.run_line_magic("vram", "-d cpu -q")
made = []
real = _magics.ScanTable

def keep(*a):
    made.append(real(*a))
    return made[-1]

_magics.ScanTable = keep
ip.run_line_magic("vram", "-d cpu -q")
assert made and made[0].hits >= 16 and len(made[0]) == 0, (made, made and made[0].hits)  # filled, used, emptied
ref = weakref.ref(ts[10])

def fails(*a, **k):
    raise RuntimeError("listing failed")

_magics.find_holders = fails
try:
    ip.run_line_magic("vram", "-d cpu -q")
except RuntimeError as e:
    assert "listing failed" in str(e)
else:
    raise AssertionError("the listing did not raise")
assert len(made) == 2 and len(made[1]) == 0
del ip.user_ns["ts_keep"], ts
assert ref() is None
print("OK")
"""


def test_vram_keeps_no_tensor() -> None:
    """The table holds the tensors it found only while ``%vram`` lists: after it (also after a
    listing that raised) a tensor deleted is freed, and nothing else holds the table. In a fresh
    process: the table is filled by a full scan of tensors an earlier scan registered, which an
    earlier test's tracker state in the same process decides (CI at e29a069: 0 hits after
    test_user_threads_attribution under --dist loadfile, the same at 97ad102)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _KEEPS_NO_TENSOR], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stderr[-3000:]
