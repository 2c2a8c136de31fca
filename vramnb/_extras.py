"""Optional dependencies: which extra brings each, and the one error a missing one raises.

``pip install vramnb`` brings torch, IPython, tqdm and sortedcontainers: enough for
``%%vram``, ``%vram``, ``profile_step``, ``compare``, ``estimate`` and ``fit``. The figures,
the panel and the DataFrame exports need more; each imports it inside
``with optional("matplotlib", "vramnb's figures"):``, so that a missing package is a
:class:`~vramnb.MissingDependencyError` naming the feature and the extra to install,
never a bare ``ModuleNotFoundError`` (the approach of pandas'
``import_optional_dependency``, ``pandas/compat/_optional.py``). Pure standard library
(tqdm, a core dependency, is imported by :func:`progress_bar` when a bar is made).
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from typing import Any

from ._errors import MissingDependencyError

__all__ = ["EXTRAS", "install_hint", "optional", "require", "progress_bar"]

#: importable module -> (the distribution pip installs, the extra of vramnb that brings it);
#: ``tests/test_package.py`` checks each against ``[project.optional-dependencies]`` in pyproject.toml
EXTRAS: dict[str, tuple[str, str]] = {
    "matplotlib": ("matplotlib", "plot"),
    "ipywidgets": ("ipywidgets", "widgets"),
    "pandas": ("pandas", "pandas"),
}


def install_hint(module: str, extra: str | None = None) -> str:
    """The command that installs ``module``: ``pip install "vramnb[plot]" (or pip install matplotlib)``;
    ``extra``: another extra that brings it, where the feature needs that one's other packages
    too (the panel: ``widgets``).

    Raises:
        KeyError: ``module`` is not one of :data:`EXTRAS`.
    """
    dist, default = EXTRAS[module]
    return f'pip install "vramnb[{extra or default}]" (or pip install {dist})'


def _missing(module: str, feature: str, extra: str | None) -> MissingDependencyError:
    return MissingDependencyError(
        f"{feature} needs {EXTRAS[module][0]}, which is not installed: {install_hint(module, extra)}", name=module)


@contextlib.contextmanager
def optional(module: str, feature: str, extra: str | None = None) -> Iterator[None]:
    """Run the imports of ``module`` in the block; if ``module`` itself is not installed,
    raise :class:`~vramnb.MissingDependencyError` saying that ``feature`` needs it and how
    to install it (``extra``: as for :func:`install_hint`). A module that ``module`` imports
    and lacks (a broken install) keeps its own error.

    Raises:
        MissingDependencyError: ``module`` is not installed.
    """
    try:
        yield
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] != module:
            raise
        raise _missing(module, feature, extra) from None


def require(module: str, feature: str, extra: str | None = None) -> None:
    """Check that ``module`` is installed, without importing it (for a feature that
    imports it only later, as the panel's charts do at its first run; ``extra``: as for
    :func:`install_hint`).

    Raises:
        MissingDependencyError: ``module`` is not installed.
    """
    if importlib.util.find_spec(module) is None:
        raise _missing(module, feature, extra)


def progress_bar(**kwargs: Any) -> Any:
    """A tqdm bar (``kwargs`` go to ``tqdm``): the notebook widget in a Jupyter kernel where
    ipywidgets is installed, else tqdm's text bar. ``tqdm.auto`` alone warns "IProgress not
    found. Please update jupyter and ipywidgets" in a kernel without ipywidgets (a plain
    ``pip install vramnb``), which needs no widget for a bar."""
    if importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm(**kwargs)
