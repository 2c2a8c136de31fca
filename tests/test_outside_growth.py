"""Process memory that grows outside tensors on every re-run (validation-8: pyplot figures never closed; validation-9:
a profiler started and never stopped): after three runs in a row whose RSS grew beyond their tensors, the line names
the types that grew in number and the holder asked directly, with its fix; a cell that grows nothing gets no line."""

from __future__ import annotations

import pytest

import vramnb
from tests.conftest import run


def _line() -> str | None:
    return next((n for n in vramnb.history()[-1].notes if "grows the process's memory outside tensors" in n), None)


def test_open_pyplot_figures_are_named_with_plt_close(ip):
    pytest.importorskip("matplotlib")
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
        assert "pyplot keeps" in line and "plt.close(fig) once it is saved or shown, or plt.close('all')" in line
    finally:
        run(ip, "plt.close('all')")


def test_a_cell_that_grows_nothing_gets_no_line(ip):
    for _ in range(3):
        run(ip, "%%vram -d cpu\nox = sum(range(1000))")
    assert _line() is None
