"""The layering that ARCHITECTURE.md describes, checked on the source.

Every ``import`` in ``vramnb/`` counts, at module level or inside a function
(a lazy import is still a dependency); only ``if TYPE_CHECKING:`` blocks are
left out, since they never run. The graph must have no cycle, the UI libraries
stay in the UI modules, and what ``import vramnb`` (or a report module) pulls in
is checked in a fresh interpreter.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
import textwrap

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "vramnb"

#: the only modules that may import each third-party UI or optional library
ALLOWED = {
    # the magics and their two helpers (running the body, parsing the options) are the UI layer
    "IPython": {"vramnb._magics", "vramnb._cell_run", "vramnb._magic_args", "vramnb._panel", "vramnb._live"},
    "ipywidgets": {"vramnb._panel"},
    "matplotlib": {"vramnb._plot"},
    "pandas": {"vramnb._render"},
}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def imports() -> dict[str, set[str]]:
    """Module → every module it imports (absolute names), lazy imports included."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        mod = _module_name(path)
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_nodes(tree)
        found: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    found.add(str(node.module))
                    continue
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                if node.module:
                    found.add(".".join([*base, node.module]))
                else:  # from . import _plot
                    found.update(".".join([*base, a.name]) for a in node.names)
        graph[mod] = found
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among vramnb's own modules, or None."""
    own = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}
    # a package's import of its own submodule (vramnb.techniques -> .registry) is not a back edge
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(own[m]):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(own):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_import_graph_has_no_cycle() -> None:
    """No module depends on one that depends back on it, even through a lazy import
    (``_breakdown`` ↔ ``_plot`` was one: the reports now call the figures, which know
    the reports only as types)."""
    cycle = _cycle(imports())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_ui_and_optional_libraries_stay_in_their_modules() -> None:
    """IPython and ipywidgets only in the UI layer (``_magics``, ``_panel``; the package
    root loads ``_magics`` inside ``load_ipython_extension``), matplotlib only in
    ``_plot``, pandas only in ``_render``."""
    wrong = []
    for mod, deps in imports().items():
        for dep in deps:
            top = dep.split(".")[0]
            if top in ALLOWED and mod not in ALLOWED[top]:
                wrong.append(f"{mod} imports {dep}")
    assert not wrong, wrong


def _loaded_after(statement: str) -> set[str]:
    code = textwrap.dedent(f"""
        import sys
        {statement}
        print(" ".join(sorted(sys.modules)))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


@pytest.mark.parametrize(("statement", "absent"), [
    ("import vramnb", {"matplotlib", "ipywidgets", "IPython", "pandas", "torch", "vramnb._plot", "vramnb._magics"}),
    ("import vramnb._breakdown", {"matplotlib", "vramnb._plot", "torch"}),
    ("import vramnb._plot", {"matplotlib", "vramnb._breakdown", "torch"}),
    ("import vramnb._compare", {"matplotlib", "ipywidgets", "IPython", "vramnb._plot"}),
    ("import vramnb.distributed._report", {"matplotlib", "vramnb._plot", "torch"}),
])
def test_what_an_import_loads(statement: str, absent: set[str]) -> None:
    """A report module does not load the figure module or matplotlib, and the figure
    module does not load the reports: each is imported only when it is used."""
    loaded = _loaded_after(statement)
    assert not absent & loaded, f"{statement} loaded {sorted(absent & loaded)}"
