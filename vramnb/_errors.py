"""The package's one exception type."""

from __future__ import annotations

__all__ = ["VramnbError"]


class VramnbError(RuntimeError):
    """An error raised by vramnb itself (not by the user's code).

    Its message says what was asked, what was found (device, allocator state)
    and how to fix it. User mistakes in magics are reported as IPython's
    ``UsageError`` instead; bad arguments to library calls are ``ValueError``.
    """
