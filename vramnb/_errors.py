"""The package's own exception types."""

from __future__ import annotations

__all__ = ["VramnbError", "MissingDependencyError"]


class VramnbError(RuntimeError):
    """An error raised by vramnb itself (not by the user's code).

    Its message says what was asked, what was found (device, allocator state)
    and how to fix it. User mistakes in magics are reported as IPython's
    ``UsageError`` instead; bad arguments to library calls are ``ValueError``.
    """


class MissingDependencyError(ModuleNotFoundError):
    """A feature needs an optional package that is not installed.

    The message names the feature, the package and the extra that brings it
    (``vramnb.panel needs ipywidgets, which is not installed: pip install
    "vramnb[widgets]" (or pip install ipywidgets)``); ``name`` is the missing
    module. It is a ``ModuleNotFoundError``, so ``except ImportError`` catches it.
    Raised by :mod:`vramnb._extras`, the one place that words it.
    """


# tracebacks and reprs show the names users import (vramnb.VramnbError), not the private module
VramnbError.__module__ = MissingDependencyError.__module__ = "vramnb"
