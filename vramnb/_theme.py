"""The colours of vramnb's figures: one of three themes, ``vramnb.set_theme(...)``.

A PNG cannot know the notebook's theme, and JupyterLab's dark theme showed the figures'
opaque white background as a white block. The default, ``"auto"``, draws on a transparent
background with text, axes and grid lines in a mid grey that reads on light and dark pages
alike (#767676: a contrast ratio of 4.5:1 on white and 4.2:1 on JupyterLab's dark #111111,
by WCAG 2.1's relative luminance); the sources keep their fixed colours
(:mod:`vramnb._sources`, Okabe–Ito, chosen to be told apart on both). ``"light"`` and
``"dark"`` draw opaque figures for one background (a saved PNG, slides).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Theme", "THEMES", "set_theme", "theme"]


@dataclass(frozen=True)
class Theme:
    """A figure's colours (matplotlib colour strings; ``"none"``: transparent)."""

    name: str
    background: str
    text: str
    muted: str  # phase labels, the dashed phase lines
    edge: str  # between stacked bars
    spans: tuple[str, str]  # the alternating phase shading
    box: str  # behind an annotation's text

    def rc(self) -> dict[str, Any]:
        """matplotlib rcParams for the figure and its axes."""
        return {"figure.facecolor": self.background, "axes.facecolor": self.background,
                "savefig.facecolor": self.background, "savefig.transparent": self.background == "none",
                "text.color": self.text, "axes.labelcolor": self.text, "axes.edgecolor": self.muted,
                "axes.titlecolor": self.text, "xtick.color": self.muted, "ytick.color": self.muted,
                "xtick.labelcolor": self.text, "ytick.labelcolor": self.text, "grid.color": self.muted,
                "legend.labelcolor": self.text}


THEMES = {
    "auto": Theme("auto", "none", "#767676", "#8a8a8a", "none", ("#8080801a", "#80808033"), "none"),
    "light": Theme("light", "white", "#1f1f1f", "#555555", "white", ("#f2f2f2", "#e0e0e0"), "white"),
    "dark": Theme("dark", "#111111", "#e6e6e6", "#b3b3b3", "#111111", ("#ffffff14", "#ffffff29"), "#111111"),
}
_current = THEMES["auto"]


def set_theme(name: str) -> None:
    """Draw vramnb's figures for ``name``: ``"auto"`` (transparent, reads on light and dark
    notebook themes; the default), ``"light"`` or ``"dark"`` (opaque).

    Raises:
        ValueError: another name (the message lists the valid ones).
    """
    global _current
    if name not in THEMES:
        raise ValueError(f"unknown theme {name!r}; valid: {', '.join(THEMES)}")
    _current = THEMES[name]


def theme() -> Theme:
    """The theme figures are drawn with now."""
    return _current
