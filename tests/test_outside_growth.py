"""Process memory that grows outside tensors on every re-run (validation-8: pyplot figures never closed; validation-9:
a profiler started and never stopped): after three runs in a row whose RSS grew beyond their tensors, the line names
the types that grew in number and the holder asked directly, with its fix; a cell that grows nothing gets no line."""

from __future__ import annotations

import pytest

import vramnb
from tests.conftest import run


def _line() -> str | None:
    return next((n for n in vramnb.history()[-1].notes if "grows the process's memory outside tensors" in n), None)


def _heap_with_holes() -> list:
    """glibc's heap with 18 MB holes in it (CI: a worker that ran other tests first): an 18 MB array made
    afterwards reuses a hole, already resident, and the RSS does not grow."""
    import numpy as np

    big = np.ones((1600, 1600))
    del big  # freeing an mmap-ed block raises glibc's mmap threshold: 18 MB blocks now come from the heap
    blocks = []
    for _ in range(30):
        blocks.append(np.ones((1500, 1500)))
        blocks.append(np.ones((100, 100)))
    return blocks[1::2]  # the small ones stay between the holes


@pytest.mark.parametrize("holes", [False, True], ids=["fresh heap", "heap with holes"])
def test_open_pyplot_figures_are_named_with_plt_close(ip, holes):
    pytest.importorskip("matplotlib")
    kept = _heap_with_holes() if holes else []
    run(ip, "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nimport numpy as np\n"
            "ofigs_before = len(plt.get_fignums())")
    cell = "%%vram -d cpu\nfor i in range(3):\n    fig, ax = plt.subplots()\n    ax.imshow(np.zeros((1500, 1500)))"
    for _ in range(3):
        run(ip, cell)
    line = _line()
    try:
        assert line is not None, vramnb.history()[-1].notes
        assert line.startswith("each run of this cell grows the process's memory outside tensors (3 runs in a row, ")
        # matplotlib's own types first among those that grew in number (not the standard library's)
        assert line.split("since the last run: ")[1].startswith("matplotlib."), line
        # not the notebook's own record of each run
        assert "vramnb." not in line and "IPython." not in line, line
        assert "pyplot keeps" in line and "plt.close(fig) once it is saved or shown, or plt.close('all')" in line
    finally:
        run(ip, "plt.close('all')")
        del kept


def test_a_cell_that_grows_nothing_gets_no_line(ip):
    for _ in range(3):
        run(ip, "%%vram -d cpu\nox = sum(range(1000))")
    assert _line() is None


MiB = 1 << 20


def test_memory_alive_only_while_each_run_ends_is_not_growth():
    """Each run ends with 30 MiB more in use than it started (a scan's buffers, freed after): the level
    outside tensors at each run's end stays the same, so no run counts."""
    from vramnb.diagnose._outside_growth import OutsideGrowth

    og = OutsideGrowth()
    for _ in range(4):
        assert og.observe("x = f()", (500 * MiB, 400 * MiB), (530 * MiB, 430 * MiB), (0, 0)) is None


def test_rss_that_grows_with_new_tensors_pages_is_not_growth_outside_them():
    """90 MiB of new tensors each run grow the RSS by 120 MiB (huge pages, rounding) while malloc's count grows
    by the tensors' bytes: no line. The same RSS growth with no tensors growing counts."""
    from vramnb.diagnose._outside_growth import OutsideGrowth

    og = OutsideGrowth()
    for k in range(4):
        start, end = (500 + 120 * k) * MiB, (620 + 120 * k) * MiB
        used0, used1 = (400 + 90 * k) * MiB, (490 + 90 * k) * MiB
        assert og.observe("s = make()", (start, used0), (end, used1), (90 * k * MiB, 90 * (k + 1) * MiB)) is None
    lines = [og.observe("t = make()", ((500 + 30 * k) * MiB, None), ((530 + 30 * k) * MiB, None), (0, 0))
             for k in range(3)]
    assert lines[:2] == [None, None] and lines[2] is not None
    assert lines[2].startswith("each run of this cell grows the process's memory outside tensors (3 runs in a row, "
                               "30.0 MiB beyond its tensors this run)")
