"""The tutorials as stored: executed, with no error or UsageError in their saved outputs.

Each notebook is executed once in CI, by nbval (the README's ``pytest``, testpath
``notebooks``), which compares every cell's fresh outputs with the stored ones;
the root ``conftest.py`` fails a cell whose fresh stderr carries a magic's
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


def test_a_run_that_changes_the_checkout_fails(tmp_path: pathlib.Path) -> None:
    """The root conftest fails a test run that rewrites a tracked file or leaves a
    new one (``docs/panel.png`` was rewritten by every run), and names them; what
    was already changed before the run does not count."""
    import shutil
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parent.parent
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(root / "conftest.py", repo / "conftest.py")
    (repo / "docs").mkdir()
    (repo / "docs" / "panel.png").write_bytes(b"stored")
    (repo / "edited.txt").write_text("as committed")
    (repo / "test_writes.py").write_text(
        "import pathlib\n"
        "def test_writes():\n"
        "    pathlib.Path('docs/panel.png').write_bytes(b'rewritten')\n"
        "    pathlib.Path('artefact.txt').write_text('left behind')\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "stored"], check=True)
    (repo / "edited.txt").write_text("the user's own edit, before the run")

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:nbval",
                               "-o", "addopts=", "test_writes.py"], cwd=repo, capture_output=True, text=True, timeout=120)

    out = run()
    assert out.returncode == 1, out.stdout + out.stderr
    assert "the test run changed the checkout" in out.stdout
    assert "artefact.txt, docs/panel.png" in out.stdout and "edited.txt" not in out.stdout.split("checkout")[-1]

    (repo / "test_writes.py").write_text("def test_reads():\n    assert open('docs/panel.png', 'rb').read()\n")
    subprocess.run([*git, "checkout", "-q", "docs/panel.png"], check=True)
    (repo / "artefact.txt").unlink()
    out = run()  # test_writes.py is itself a change, but one made before the run
    assert out.returncode == 0, out.stdout + out.stderr
