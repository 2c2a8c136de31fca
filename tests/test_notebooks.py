"""The tutorials as stored: executed, with no error or UsageError in their saved outputs.

Each notebook is executed once in CI, by nbval (the README's ``pytest``, testpath
``notebooks``), which compares every cell's fresh outputs with the stored ones;
``notebooks/conftest.py`` fails a cell whose fresh stderr carries a magic's
``UsageError`` (nbval itself does not compare stderr). Together with this check
of the stored outputs, that catches what a second, nbclient execution would,
at half the CI time.
"""

from __future__ import annotations

import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("[0-9]*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_stored_outputs_are_clean(path: pathlib.Path) -> None:
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    assert code, f"{path.name} has no code"
    assert all(c.get("execution_count") for c in code), f"{path.name} has cells that were never executed"
    counts = [c.execution_count for c in code]
    assert counts == sorted(counts), f"{path.name} was not run top to bottom: execution counts {counts}"
    for i, cell in enumerate(code):
        expected_error = "raises-exception" in cell.metadata.get("tags", [])
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                assert expected_error, f"{path.name} cell {i} stored {out.ename}: {out.evalue}\n{cell.source}"
            if out.output_type == "stream" and out.name == "stderr":
                assert "UsageError" not in out.text, f"{path.name} cell {i}: {out.text}\n{cell.source}"
