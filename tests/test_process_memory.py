"""The CPU report's process view: RSS beside the tracked tensors, glibc's kept
free bytes, child processes' private memory, and `%vram free`'s malloc_trim."""

from __future__ import annotations

import multiprocessing as mp
import sys

import pytest
import torch

from vramnb import vram
from vramnb._free import FreeReport
from vramnb._process import malloc_free, malloc_trim, process_memory
from vramnb._report import process_line

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux only")
MiB = 1 << 20


@linux
def test_cpu_report_shows_rss_beside_exact_tensors() -> None:
    # 64 MiB: above glibc's largest mmap threshold (32 MiB), so fresh pages, not heap an earlier test freed
    with vram("cpu") as m:
        x = torch.ones(64 * MiB // 4)  # written: resident
    r = m.report
    assert r is not None
    assert r.end_allocated - r.start_allocated == 64 * MiB  # exact: tracked storage
    assert r.rss is not None and r.rss_start is not None
    assert r.rss >= r.end_allocated  # every byte of x is written, so resident
    assert r.rss - r.rss_start >= 48 * MiB  # the 64 MiB touched shows in RSS (bound: RSS is not exact)
    rec = r.to_record()
    if r.malloc_used is not None:  # glibc: the 64 MiB mmap-ed block is handed out and kept
        assert r.malloc_used_start is not None and r.malloc_used - r.malloc_used_start >= 64 * MiB
    for k in ("rss", "rss_start", "malloc_free", "malloc_used_start", "malloc_used", "children", "children_private"):
        assert rec[k] is None or type(rec[k]) is int
    text = r._table().to_text()
    assert "process RSS" in text
    line = process_line(r)
    assert line.startswith("process RSS ") and "of tracked tensor storage" in line
    del x


@linux
def test_glibc_free_bytes_are_measured_and_trimmed() -> None:
    if malloc_free() is None:
        pytest.skip("no glibc >= 2.33")
    # many small tensors (below glibc's mmap threshold): their freed storage stays in the arenas
    xs = [torch.ones(1024) for _ in range(20000)]  # 80 MiB of 4 KiB storages
    before = malloc_free()
    del xs
    after = malloc_free()
    assert after is not None and before is not None and after - before >= 60 * MiB
    with vram("cpu") as m:
        pass
    r = m.report
    assert r is not None and r.malloc_free is not None and r.malloc_free >= 60 * MiB
    assert "freed but kept by the C allocator" in process_line(r)
    rss0 = process_memory().rss  # type: ignore[union-attr]
    assert malloc_trim() is True
    # fordblks still counts the trimmed bytes (glibc advises the pages away, keeps the chunks): RSS drops
    assert process_memory().rss < rss0 - 30 * MiB  # type: ignore[union-attr]


def _child(q: "mp.Queue[int]", ev: "mp.Event") -> None:  # type: ignore[valid-type]
    b = bytearray(64 * MiB)
    for i in range(0, len(b), 4096):
        b[i] = 1
    q.put(1)
    ev.wait(30)


@linux
def test_children_private_memory_is_summed() -> None:
    ctx = mp.get_context("fork")
    q, ev = ctx.Queue(), ctx.Event()
    p = ctx.Process(target=_child, args=(q, ev))
    p.start()
    try:
        q.get(timeout=30)
        with vram("cpu") as m:
            pass
        r = m.report
        assert r is not None and r.children >= 1
        assert r.children_private is not None and r.children_private >= 64 * MiB
        assert "child process" in r._table().to_text()
        assert "private memory besides" in process_line(r)
    finally:
        ev.set()
        p.join(30)


def test_line_is_true_when_storage_is_not_resident() -> None:
    from vramnb._report import CellReport

    r = CellReport("cpu", "CPU storage tracker", 0, 3 * MiB, 3 * MiB, 0.0, rss_start=MiB, rss=2 * MiB)
    assert "exceeds RSS by 1.0 MiB" in process_line(r)
    r.rss = None
    assert process_line(r) == ""


@linux
def test_free_report_trims_on_cpu(shell) -> None:  # type: ignore[no-untyped-def]
    from vramnb._free import free_hidden

    if malloc_free() is None:
        pytest.skip("no glibc >= 2.33")
    rep = free_hidden(shell, torch.device("cpu"))  # the session's shell (a second kind is refused by traitlets)
    assert isinstance(rep, FreeReport) and isinstance(rep.trimmed, int)
    assert "malloc_trim(0)" in rep._table().to_text()
