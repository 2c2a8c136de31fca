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
