"""A cell measured under the CPU tracker that times its own code (%timeit, %time) says how
much the tracker's per-operator cost added to those times; other cells say nothing (a note
that came and went with the machine's speed would make their reports differ run to run)."""

from __future__ import annotations

import vramnb
from tests.conftest import run


def test_timeit_inside_a_vram_cell_gets_a_note(ip):
    run(ip, "a = torch.randn(16, 16)\nm = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])")
    run(ip, "%%vram -q -d cpu\nr = %timeit -o -q -n 100 -r 2 m(a)")
    notes = vramnb.history()[-1].notes
    assert any("ATen operators" in n and "%timeit" in n for n in notes)
    n_ops = int(next(n for n in notes if "ATen operators" in n).split("saw ")[1].split(" ")[0].replace(",", ""))
    assert n_ops >= 2 * 100 * 4 * 2  # at least 2 operators per Linear call (matmul, add), 200 calls


def test_a_cell_that_does_not_time_itself_gets_no_note(ip):
    run(ip, "%%vram -q -d cpu\nx = torch.ones(10)")
    assert not any("ATen operators" in n for n in vramnb.history()[-1].notes)
    run(ip, "m = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])")
    run(ip, "%%vram -q -d cpu\nfor _ in range(2000):\n    y = m(torch.randn(4, 16))")  # slow, but not timed
    assert not any("ATen operators" in n for n in vramnb.history()[-1].notes)


def test_vram_on_cells_that_time_themselves_get_the_note(ip):
    run(ip, "a = torch.randn(16, 16)\nm = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])")
    run(ip, "%vram on -q")
    try:
        run(ip, "r = %timeit -o -q -n 50 -r 2 m(a)")
    finally:
        run(ip, "%vram off")
    assert any("ATen operators" in n for n in vramnb.history()[-1].notes)
