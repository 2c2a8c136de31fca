"""Where widgets cannot render, the panel and the live gauge fall back to text, never a traceback.

Two such places, each run as a user would, in a subprocess: ``jupyter nbconvert --execute
--to notebook`` (a real kernel, but no widget manager: nbclient keeps the widgets' state and
nothing renders it), then ``--to html``; and a terminal IPython (no kernel: no gauge, the panel
as text). Run under ipywidgets 8 and, in the README's test command, under 7.7 too.
Jupyter's and IPython's config, data and runtime dirs are fresh temporary ones.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipywidgets")
pytest.importorskip("nbconvert")

pytestmark = pytest.mark.slow

_WIDGET = "application/vnd.jupyter.widget-view+json"
_SETUP = "import torch\nm = torch.nn.Linear(8, 2)\nx = torch.randn(4, 8)\nfn = lambda m, b: m(b).square().mean()"
_CELLS = [
    "%load_ext vramnb",
    _SETUP,
    "%vram panel m x fn -o pnl",
    "print('run error:', pnl.run()['error'])",
    "pnl",
    "%%vram --live\nimport time\ny = torch.ones(2**18)\ntime.sleep(1)",
]


def _env(tmp: pathlib.Path) -> dict[str, str]:
    env = dict(os.environ)
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        env[var] = str(tmp / var.lower())
    env.pop("JUPYTER_PATH", None)
    env.pop("JUPYTER_CONFIG_PATH", None)
    return env


def _no_widgets_text(text: str) -> None:
    assert text.startswith("vramnb panel · Linear on cpu"), text
    assert "show in JupyterLab, Notebook 7" in text and ".run() runs a step" in text, text


def test_nbconvert_execute_and_html_give_no_traceback(tmp_path: pathlib.Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in _CELLS]
    src = tmp_path / "frontends.ipynb"
    nbformat.write(nb, str(src))
    env = _env(tmp_path)
    done = subprocess.run([sys.executable, "-m", "nbconvert", "--execute", "--to", "notebook", "--output", "executed",
                           "--ExecutePreprocessor.timeout=300", str(src)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = nbformat.read(str(tmp_path / "executed.ipynb"), 4)
    outputs = [c.outputs for c in out.cells]
    for i, cell in enumerate(outputs):
        bad = [o for o in cell if o.output_type == "error" or (o.output_type == "stream" and o.name == "stderr")]
        assert not bad, f"cell {i}: {bad}"
    # the panel, opened by the magic and shown again: the widget view (kept in the notebook's widget state) and text
    for i in (2, 4):
        (shown,) = outputs[i]
        assert _WIDGET in shown.data
        _no_widgets_text(shown.data["text/plain"])
    assert "baseline" in outputs[4][0].data["text/plain"]  # the run of cell 3, listed in the text
    assert [o.text for o in outputs[3]] == ["run error: None\n"]
    state = out.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert outputs[2][0].data[_WIDGET]["model_id"] in state
    # %%vram --live: the gauge's one output, replaced in place by the report
    (report,) = outputs[5]
    assert report.data["text/plain"].startswith("vram [") and "+1.0 MiB" in report.data["text/plain"]

    done = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", str(tmp_path / "executed.ipynb")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    page = (tmp_path / "executed.html").read_text()
    assert "measured by the CPU storage tracker" in page  # the report's HTML
    assert "application/vnd.jupyter.widget-state+json" in page  # the panel's state, for the page's widget renderer


def test_terminal_ipython_gets_text_and_no_traceback(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "cells.py"
    script.write_text("ip = get_ipython()\n"
                      f"for cell in {_CELLS!r}:\n"
                      "    ip.run_cell(cell, store_history=True)\n")
    done = subprocess.run([sys.executable, "-m", "IPython", "--no-banner", "--colors=NoColor", str(script)],
                          env=_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert done.stderr == "", done.stderr
    # the panel opened by the magic, then shown again as `pnl` (IPython's "Out[5]: " before it), with its run
    first, again = done.stdout.split("vramnb panel · Linear on cpu")[1:]
    _no_widgets_text("vramnb panel · Linear on cpu" + first)
    _no_widgets_text("vramnb panel · Linear on cpu" + again)
    assert " 0 run(s)\n(its controls" in first and " 1 run(s)\n  baseline · " in again
    assert "run error: None" in done.stdout
    assert "vram live" not in done.stdout  # no gauge where nothing updates an output in place: the report only
    assert "measured by the CPU storage tracker" in done.stdout and "+1.0 MiB" in done.stdout
