"""vramnb: where PyTorch memory goes, measured in Jupyter (``%load_ext vramnb``)."""

from __future__ import annotations

from typing import Any

from ._errors import MissingDependencyError, VramnbError
from ._report import CellReport
from ._units import format_bytes, parse_size

__version__ = "0.1.0"

__all__ = [
    "vram",
    "profile_step",
    "profile_distributed",
    "DistributedReport",
    "estimate",
    "Estimate",
    "max_batch_size",
    "BatchSearch",
    "fit",
    "FitResult",
    "GPUS",
    "StepReport",
    "Recipe",
    "compare",
    "panel",
    "Panel",
    "Comparison",
    "plot_breakdown",
    "plot_timeline",
    "plot_sources",
    "plot_compare",
    "set_theme",
    "SOURCES",
    "CellReport",
    "history",
    "session_peak",
    "clear_history",
    "format_bytes",
    "parse_size",
    "VramnbError",
    "MissingDependencyError",
    "__version__",
]

# torch-dependent names load on first use, so `import vramnb` stays cheap and
# never touches CUDA, ipywidgets or matplotlib.
_LAZY = {
    "panel": "._panel",
    "Panel": "._panel",
    "estimate": ".predict._estimate",
    "Estimate": ".predict._estimate",
    "max_batch_size": ".predict._batch_search",
    "BatchSearch": ".predict._batch_search",
    "fit": ".planner._fit",
    "FitResult": ".planner._fit",
    "GPUS": ".predict._gpus",
    "Recipe": ".techniques",
    "compare": "._compare",
    "Comparison": "._compare",
    "profile_step": "._profile_step",
    "profile_distributed": ".distributed._launch",
    "DistributedReport": ".distributed._report",
    "StepReport": "._breakdown",
    "plot_breakdown": "._plot",
    "plot_timeline": "._plot",
    "plot_sources": "._plot",
    "plot_compare": "._plot",
    "set_theme": "._theme",
    "SOURCES": "._sources",
    "vram": "._measure",
    "history": "._measure",
    "session_peak": "._measure",
    "clear_history": "._measure",
}


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(_LAZY))


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'vramnb' has no attribute {name!r}")


_loaded: dict[int, Any] = globals().get("_loaded", {})
# ``%reload_ext vramnb`` unloads, re-executes this module in the same namespace
# and loads: the ``%vram on`` settings that unload kept carry over to that load
# only (an unload followed by a plain load starts with ``%vram on`` off).
_resume: dict[int, Any] = dict(globals().get("_kept", {}))
_kept: dict[int, Any] = {}


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext vramnb``: register ``%%vram``/``%vram`` and the cell events
    used by ``%vram on``. Resets no counter and creates no CUDA context."""
    from ._magics import VramMagics

    if id(ipython) in _loaded:
        return
    magics = VramMagics(ipython)
    from ._tracker import cpu_tracker

    cpu_tracker().host_threads()  # the kernel's threads: running no user code, they keep no scan full
    ipython.input_transformers_post.append(magics.transformer)
    ipython.ast_transformers.append(magics.gate)
    ipython.register_magics(magics)
    magics._auto = _resume.pop(id(ipython), None)
    ipython.events.register("pre_run_cell", magics.pre_run_cell)
    ipython.events.register("post_run_cell", magics.post_run_cell)
    _loaded[id(ipython)] = magics
    # the imports the first dispatch mode makes (seconds), here and whole; an interrupt during
    # them is raised once they are done, with the extension loaded
    cpu_tracker().warm_up()


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext vramnb``: remove the magics and every event callback."""
    magics = _loaded.pop(id(ipython), None)
    if magics is None:
        return
    _kept[id(ipython)] = magics.close()  # for %reload_ext's load
    if magics.transformer in ipython.input_transformers_post:
        ipython.input_transformers_post.remove(magics.transformer)
    if magics.gate in ipython.ast_transformers:
        ipython.ast_transformers.remove(magics.gate)
    ipython.events.unregister("pre_run_cell", magics.pre_run_cell)
    ipython.events.unregister("post_run_cell", magics.post_run_cell)
    for kind in ("line", "cell"):
        table = ipython.magics_manager.magics[kind]
        if getattr(table.get("vram"), "__self__", None) is magics:
            del table["vram"]
    ipython.magics_manager.registry.pop(type(magics).__name__, None)
    if not _loaded:  # the last shell with the extension: the tracker's gc callback goes too
        from . import _tracker

        if _tracker._CPU_TRACKER is not None:
            _tracker._CPU_TRACKER.stop_watching()
