"""What differs between ipywidgets 7.7 (Colab ships it) and 8, in the few places the panel meets it.

* **Display.** ipywidgets 8 widgets have ``_repr_mimebundle_``; 7.x widgets only
  ``_ipython_display_``, which displays at once. :func:`bundle` gives the same
  mime bundle on both (the widget view and a text/plain line), so the panel can
  put its own text/plain beside the view.
* **Tooltips.** ipywidgets 8 has ``tooltip`` on every control; 7.x only on buttons
  (``description_tooltip`` elsewhere, on the description). :func:`tooltip` gives the
  keyword a class has, or none (traitlets would warn about an unknown one and drop it).

It takes the widgets (or their classes) from :mod:`vramnb._panel` and imports no ipywidgets itself.
Everything else the panel uses (``Dropdown``, ``Combobox``, ``Checkbox``, ``Button``,
``HTML``, ``Output``, ``GridBox``, ``Layout``, ``observe``, ``add_class``) is the same in both.
"""

from __future__ import annotations

from typing import Any

__all__ = ["VIEW", "bundle", "tooltip"]

VIEW = "application/vnd.jupyter.widget-view+json"


def bundle(widget: Any) -> dict[str, Any]:
    """The mime bundle that displays ``widget``: its view (where a widget manager renders it) and text/plain."""
    repr_bundle = getattr(widget, "_repr_mimebundle_", None)
    if repr_bundle is not None:  # ipywidgets 8
        return dict(repr_bundle() or {})
    # ipywidgets 7: what Widget._ipython_display_ displays, built without displaying it
    data: dict[str, Any] = {"text/plain": repr(widget)}
    if widget._view_name is not None and widget.comm is not None:
        data[VIEW] = {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}
    return data


def tooltip(cls: Any, text: str) -> dict[str, str]:
    """``{"tooltip": text}`` where ``cls`` has that trait (ipywidgets 8, buttons in 7), else
    ``{"description_tooltip": text}`` (other 7.x controls), else nothing."""
    for name in ("tooltip", "description_tooltip"):
        if cls.class_traits().get(name) is not None:
            return {name: text}
    return {}
