"""Memory-saving techniques, one module each, applied to a live model for one
profiled step and undone afterwards. A :class:`Recipe` names the settings.

Adding a technique is one new module here that defines a :class:`Technique`
subclass decorated with :func:`register`, and one line in ``_MODULES`` below;
the recipe, the what-if matrix and the widget panel pick it up from the
registry.
"""

from __future__ import annotations

import importlib

from .registry import REGISTRY, Recipe, Technique, Unavailable, register

__all__ = ["Recipe", "Technique", "Unavailable", "REGISTRY", "register"]

_MODULES = ("precision", "checkpointing", "freezing", "optimizer", "batching", "offload", "grad_mode")
for _m in _MODULES:
    importlib.import_module(f"{__name__}.{_m}")
