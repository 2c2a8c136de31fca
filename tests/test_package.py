"""The package's own facts, from a checkout or an unpacked sdist: one version, the licence,
README links that work on a package index's page, the extras the errors name, CONTRIBUTING's
commands, a docstring on every public function. ``.ci/package-checks.sh`` builds and installs
the package itself."""

from __future__ import annotations

import importlib.metadata
import pathlib
import re
import subprocess
import sys
import tomllib

import pytest

import vramnb
from vramnb import _extras

ROOT = pathlib.Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
README = (ROOT / "README.md").read_text()
REPOSITORY = PROJECT["urls"]["Repository"]


def test_the_version_is_written_once() -> None:
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "vramnb.__version__"}
    try:
        installed = importlib.metadata.version("vramnb")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("vramnb is not installed here (its metadata is what pip wrote from pyproject.toml)")
    assert installed == vramnb.__version__


def test_licence_and_build_floor() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Copyright (c) 2026 the vramnb authors" in text
    assert PROJECT["license"] == "MIT" and PROJECT["license-files"] == ["LICENSE"]
    # 68.0.0 and 76.1.0 refuse the SPDX string (built with each); 77.0.3 builds it
    assert PYPROJECT["build-system"]["requires"] == ["setuptools>=77.0.3"]


def test_classifiers_claim_only_what_is_tested() -> None:
    """CI runs the whole suite on Python 3.11 (torch 2.13, CPU, Linux): no other Python version is claimed."""
    pythons = [c for c in PROJECT["classifiers"] if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert pythons == ["Programming Language :: Python :: 3.11"]
    assert PROJECT["requires-python"] == ">=3.11"


def _links(text: str) -> list[str]:
    return re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", text)


def test_readme_links_work_on_an_index_page() -> None:
    """A package index shows README.md away from the repository: a relative link (or a bare
    #anchor) resolves against the index's page there. Every link is absolute; those into the
    repository start with pyproject's Repository URL (the placeholder, written the same way)
    and name a file or folder the repository has."""
    links = _links(README)
    relative = [u for u in links if not re.match(r"https?://", u)]
    assert not relative, f"relative links in README.md: {relative}"
    assert REPOSITORY not in ("", None)
    ours = [u for u in links if u.startswith(REPOSITORY)]
    assert len(ours) >= 20, ours
    assert not [u for u in links if "github.com/vramnb" in u and not u.startswith(REPOSITORY)]
    in_sdist = not (ROOT / ".git").exists()
    missing = []
    for u in ours:
        m = re.match(re.escape(REPOSITORY) + r"/(blob|tree|raw)/HEAD/([^#]+)", u)
        if m is None:
            assert re.fullmatch(re.escape(REPOSITORY) + r"(#[a-z0-9-]+)?", u), u  # the front page, an anchor on it
            continue
        path = ROOT / m.group(2)
        if in_sdist and m.group(2).startswith("benchmarks/results/"):
            continue  # the dated results stay in the repository (MANIFEST.in)
        if not (path.is_dir() if m.group(1) == "tree" else path.is_file()):
            missing.append(u)
    assert not missing, missing


def test_the_index_page_has_no_relative_link() -> None:
    """README.md rendered as PyPI renders it (readme_renderer, with twine check): every href and
    src is absolute, but for the headings' own anchors."""
    markdown = pytest.importorskip("readme_renderer.markdown")
    html = markdown.render(README)
    if html is None:
        pytest.skip("readme_renderer has no Markdown renderer here (readme-renderer[md], in the test extra)")
    refs = re.findall(r'(?:href|src)="([^"]+)"', html)
    assert len(refs) > 30
    assert [u for u in refs if not u.startswith(("https://", "http://", "#user-content-"))] == []


def test_readme_says_how_to_install_from_the_index() -> None:
    assert "pip install vramnb" in README and 'pip install "vramnb[widgets]"' in README


def _extra_requirements(extra: str) -> set[str]:
    """The distribution names an extra brings, its references to other extras of vramnb followed."""
    names: set[str] = set()
    for req in PROJECT["optional-dependencies"][extra]:
        name = re.match(r"[A-Za-z0-9_.-]+", req).group(0)  # type: ignore[union-attr]
        if name == "vramnb":
            for other in re.search(r"\[(.*)\]", req).group(1).split(","):  # type: ignore[union-attr]
                names |= _extra_requirements(other.strip())
        else:
            names.add(name)
    return names


def test_the_extras_the_errors_name_bring_those_packages() -> None:
    for module, (dist, extra) in _extras.EXTRAS.items():
        assert dist in _extra_requirements(extra), (module, extra)
    assert "matplotlib" in _extra_requirements("widgets")  # the panel's error names widgets for matplotlib too
    assert {"matplotlib", "ipywidgets", "pandas"} <= _extra_requirements("all")
    assert "jupyterlab" not in _extra_requirements("all") and "jupyterlab" in _extra_requirements("tutorials")
    assert "tqdm" in [re.match(r"[a-z]+", d).group(0) for d in PROJECT["dependencies"]]  # type: ignore[union-attr]
    assert not [e for e in PROJECT["optional-dependencies"] if "tqdm" in _extra_requirements(e)]


def _test_command() -> str:
    return README.split("<!-- test-command -->", 1)[1].split("```bash\n", 1)[1].split("\n```", 1)[0]


def test_contributing_gives_the_readmes_two_commands() -> None:
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    quickstart = next(line for line in README.splitlines() if "jupyter lab" in line and line.startswith("python3 -m venv"))
    assert quickstart in contributing
    assert _test_command() in contributing
    assert "bash .ci/package-checks.sh" in _test_command()


def test_the_changelog_starts_at_this_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[?(\d+\.\d+\.\d+)", text, re.M)
    assert versions and versions[0] == vramnb.__version__ and versions[-1] == "0.1.0"


def test_every_public_function_has_a_docstring() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "docstrings.py"), "--list"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert re.match(r"\d+ public functions, 0 without a docstring", out.stdout), out.stdout


def test_the_readmes_first_examples_are_the_quickstarts_stored_outputs() -> None:
    """The README shows a `%%vram` report and a `%vram` listing "from notebooks/00_quickstart.ipynb":
    each is that notebook's stored output, every line (a CPU report's process RSS lines included)."""
    import json

    path = ROOT / "notebooks" / "00_quickstart.ipynb"
    if not path.exists():
        pytest.skip("the notebooks are not here")
    cells = json.loads(path.read_text())["cells"]

    def stored(pred) -> str:  # type: ignore[no-untyped-def]
        for c in cells:
            src = "".join(c["source"])
            if c["cell_type"] == "code" and pred(src):
                for o in c.get("outputs", []):
                    text = "".join(o.get("text", "")) or "".join(o.get("data", {}).get("text/plain", ""))
                    if text.startswith("vram"):
                        return text.rstrip("\n")
        raise AssertionError("no such cell in the quickstart")

    def shown(code: str) -> str:
        return README.split(f"```\n{code}\n```\n```\n", 1)[1].split("\n```", 1)[0]

    assert shown("%%vram\nloss = train_step(0)") == stored(lambda s: s.startswith("%%vram") and "train_step(0)" in s)
    assert shown("%vram") == stored(lambda s: s.strip() == "%vram")
