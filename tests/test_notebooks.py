"""Execute every tutorial once with nbclient.

nbval (run by the same ``pytest`` command) compares outputs, but lets a magic's
``UsageError`` pass as plain stderr text; here any error output outside a
cell tagged ``raises-exception`` fails the test, and so does a ``UsageError``
printed to stderr.
"""

from __future__ import annotations

import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("[0-9]*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_clean(path: pathlib.Path) -> None:
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        expected_error = "raises-exception" in cell.metadata.get("tags", [])
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                assert expected_error, f"cell {i} raised {out.ename}: {out.evalue}\n{cell.source}"
            if out.output_type == "stream" and out.name == "stderr":
                assert "UsageError" not in out.text, f"cell {i}: {out.text}\n{cell.source}"
