"""Figures: the breakdown at each phase and at the peak, the step's timeline,
and a side-by-side comparison of several reports.

matplotlib is imported only here, and only when a figure is asked for.
This module draws what the report objects hold and knows them only as types:
the reports (:mod:`vramnb._breakdown`, :mod:`vramnb._compare`) call into it
from their ``plot()`` methods, never the reverse, so the import graph has no
cycle (``tests/test_layers.py``), as :mod:`vramnb._render` draws their tables.
Figures are ``matplotlib.figure.Figure`` objects (no pyplot), so they never
display twice; in a notebook they show as PNG. Every source has one fixed
colour (:mod:`vramnb._sources`), the same in every plot and in the panel.
Their colours come from :mod:`vramnb._theme` (``vramnb.set_theme``): by default a
transparent background and mid-grey text, which read on light and dark notebook
themes (an opaque white figure was a white block in JupyterLab's dark theme).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from ._extras import optional
from ._sources import COLORS, SOURCES
from ._theme import theme
from ._units import UNITS

if TYPE_CHECKING:  # the report classes, for annotations only: they import this module, not the reverse
    from ._breakdown import Breakdown, StepReport, StepResult

__all__ = ["plot_breakdown", "plot_timeline", "plot_sources", "plot_compare", "unit_for"]

_SHORT = {
    "start": "start",
    "after forward": "after\nforward",
    "after backward": "after\nbackward",
    "after optimizer step": "after\noptim. step",
    "after zero_grad": "after\nzero_grad",
    "at failure": "at\nfailure",
}


def unit_for(max_bytes: float) -> tuple[str, int]:
    """The binary unit that keeps ``max_bytes`` between 1 and 1024."""
    name, size = UNITS[0]
    for n, s in UNITS:
        if max_bytes >= s:
            name, size = n, s
    return name, size


_FIGURE_CLASS: Any = None
_FEATURE = "vramnb's figures (.plot(), vramnb.plot_*)"


def _figure(width: float, height: float) -> Any:
    """A ``matplotlib.figure.Figure`` that shows itself as PNG in a notebook
    (no pyplot, so no inline backend is needed and nothing displays twice), in the
    current theme's colours: drawn under its rcParams, and saved under them too
    (matplotlib makes tick labels when it draws)."""
    global _FIGURE_CLASS
    if _FIGURE_CLASS is None:
        import io

        with optional("matplotlib", _FEATURE):
            import matplotlib
            import matplotlib.figure

        # named as matplotlib's own class: its text in a notebook is "<Figure size 750x420 with 1 Axes>"
        class Figure(matplotlib.figure.Figure):
            def _repr_png_(self) -> bytes:
                buf = io.BytesIO()
                with matplotlib.rc_context(getattr(self, "_vramnb_rc", {})):
                    self.savefig(buf, format="png", dpi=100)
                return buf.getvalue()

        _FIGURE_CLASS = Figure
    return _FIGURE_CLASS(figsize=(width, height), dpi=100, facecolor=theme().background, layout="constrained")


def _themed(draw: Any) -> Any:
    """Run a plot function under the theme's rcParams; the figure keeps them for its PNG."""
    import functools

    @functools.wraps(draw)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with optional("matplotlib", _FEATURE):
            import matplotlib

        rc = theme().rc()
        with matplotlib.rc_context(cast(Any, rc)):  # matplotlib types its keys as a Literal of every rcParam
            fig = draw(*args, **kwargs)
        fig._vramnb_rc = rc
        return fig

    return wrapper


def _title(*parts: object, width: float, fontsize: float = 10) -> str:
    """Join ``parts`` with " · ", breaking the line between parts where the text
    would be wider than a figure ``width`` inches wide (a title wider than its
    figure is cut off at both ends; long recipe labels made such titles)."""
    per_line = max(20, int(width * 72 / (fontsize * 0.62)))  # average character about 0.62 em
    lines: list[str] = []
    for part in map(str, parts):
        if lines and len(lines[-1]) + 3 + len(part) <= per_line:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return "\n".join(lines)


def _used_sources(breakdowns: Sequence[Breakdown]) -> list[str]:
    return [s for s in SOURCES if any(b.sources.get(s, 0) for b in breakdowns)]


def _stack(ax: Any, labels: Sequence[str], breakdowns: Sequence[Breakdown], scale: int, highlight: int | None = None) -> None:
    used = _used_sources(breakdowns)
    bottoms = [0.0] * len(breakdowns)
    xs = list(range(len(breakdowns)))
    for src in used:
        vals = [b.sources.get(src, 0) / scale for b in breakdowns]
        ax.bar(xs, vals, bottom=bottoms, color=COLORS[src], label=src, width=0.7, edgecolor=theme().edge, linewidth=0.5)
        bottoms = [a + v for a, v in zip(bottoms, vals)]
    extra = [max(0, b.unattributed) / scale for b in breakdowns]  # the table's own row: the bars sum to allocated
    if any(extra):
        ax.bar(xs, extra, bottom=bottoms, color=theme().muted, hatch="//", label="unattributed", width=0.7,
               edgecolor=theme().text, linewidth=0.5, alpha=0.5)
        bottoms = [a + v for a, v in zip(bottoms, extra)]
    if highlight is not None:
        ax.bar([highlight], [bottoms[highlight]], width=0.78, fill=False, edgecolor=theme().text, linewidth=1.5)
    ax.set_xticks(xs, labels)
    for x, top in zip(xs, bottoms):
        ax.annotate(f"{top:.1f}", (x, top), ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax.margins(y=0.12)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


@_themed
def plot_breakdown(report: StepReport, step: int | str = -1) -> Any:
    """Stacked bars: memory by source at each phase mark of one step, and at its
    peak (outlined).

    Args:
        report: a :class:`StepReport`.
        step: index into ``report.steps`` or ``"first"``/``"steady"``.

    Returns:
        a ``matplotlib.figure.Figure``.
    """
    s = _pick(report, step)
    phase = {"optimizer step": "optim. step"}.get(s.peak_phase, s.peak_phase)
    items = list(s.marks) + [(f"peak\n({phase})", s.peak)]
    bds = [b for _, b in items]
    unit, scale = unit_for(max(max(b.total, b.allocated) for b in bds))
    fig = _figure(7.5, 4.2)
    ax = fig.add_subplot()
    _stack(ax, [_SHORT.get(n, n) for n, _ in items], bds, scale, highlight=len(items) - 1)
    ax.set_ylabel(f"allocated ({unit})")
    ax.set_title(_title("Where the memory goes", s.kind, *report.label.split(" · "), report.device, width=5.8), fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False, reverse=True)
    return fig


def _pick(report: StepReport, step: int | str) -> StepResult:
    if step == "first":
        return report.first
    if step == "steady":
        return report.steady
    if isinstance(step, int):
        return report.steps[step]
    raise ValueError(f"step must be an index, 'first' or 'steady', not {step!r}")


@_themed
def plot_timeline(report: StepReport) -> Any:
    """Allocated memory after every allocation and free of each profiled step,
    with the phases shaded and each step's peak marked.

    Returns:
        a ``matplotlib.figure.Figure``.
    """
    n = len(report.steps)
    top = max(max(s.timeline) if s.timeline else 0 for s in report.steps)
    unit, scale = unit_for(top)
    fig = _figure(7.5, 3.2)
    axes = fig.subplots(1, n, sharey=True, squeeze=False)[0]
    phase_colors = theme().spans
    for ax, s in zip(axes, report.steps):
        ys = [v / scale for v in s.timeline]
        xs = list(range(len(ys)))
        pts = [s.mark_points.get(m)
               for m in ("start", "after forward", "after backward", "after optimizer step", "after zero_grad")]
        names = ["forward", "backward", "optim.", "zero_grad"]
        for i, (a, b) in enumerate(zip(pts, pts[1:])):
            if a is None or b is None or b <= a:
                continue
            ax.axvspan(a, b, color=phase_colors[i % 2], zorder=0)
            # labels inside the plot, staggered so narrow phases do not collide
            last = i == len(names) - 1  # zero_grad: a narrow phase at the right edge, label it from there
            ax.text(b if last else (a + b) / 2, 0.97 if i % 2 == 0 else 0.90, names[i], transform=ax.get_xaxis_transform(),
                    ha="right" if last else "center", va="top", fontsize=7, color=theme().muted, clip_on=True)
        ax.step(xs, ys, where="post", color="#0072B2", linewidth=1.2)
        p = s.peak_point
        if 0 <= p < len(ys):
            ax.plot([p], [ys[p]], "o", color="#D55E00", zorder=3)
            ax.annotate(f"peak {ys[p]:.1f} {unit}", (p, ys[p]), xytext=(6, -4), textcoords="offset points",
                        fontsize=8, color="#D55E00", va="top",
                        bbox={"boxstyle": "round,pad=0.2", "fc": theme().box, "ec": "none", "alpha": 0.85})
        ax.set_xlabel("allocation events")
        ax.set_title(s.kind, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.set_ylim(0, top / scale * 1.15)
    axes[0].set_ylabel(f"allocated ({unit})")
    fig.suptitle(_title("Allocated memory over the step", *report.label.split(" · "), report.device, width=7.5), fontsize=10)
    return fig


@_themed
def plot_sources(report: StepReport, step: int | str = -1) -> Any:
    """The allocation timeline of one step, stacked by source: which source
    grows and shrinks in each phase (drawn offline from the recorded trace).

    Returns:
        a ``matplotlib.figure.Figure``.
    """
    s = _pick(report, step)
    series = s.timeline_by_source
    if not series:
        raise ValueError("this report has no per-source timeline")
    used = [src for src in SOURCES if any(series.get(src, ()))]
    top = max(s.timeline) if s.timeline else 1
    unit, scale = unit_for(top)
    fig = _figure(7.5, 3.6)
    ax = fig.add_subplot()
    xs = list(range(len(s.timeline)))
    ax.stackplot(xs, *[[v / scale for v in series[src]] for src in used], labels=used, colors=[COLORS[u] for u in used],
                 step="post", linewidth=0)
    pts = [s.mark_points.get(m) for m in ("start", "after forward", "after backward", "after optimizer step", "after zero_grad")]
    for i, (a, b) in enumerate(zip(pts, pts[1:])):
        if a is None or b is None or b <= a:
            continue
        if i:
            ax.axvline(a, color=theme().muted, linewidth=0.8, linestyle="--")
        last = i == 3
        ax.text(b if last else (a + b) / 2, 1.0, ["forward", "backward", "optim.", "zero_grad"][i],
                transform=ax.get_xaxis_transform(), fontsize=7, ha="right" if last else "center", va="bottom",
                color=theme().muted)
    ax.set_xlabel("allocation events")
    ax.set_ylabel(f"allocated ({unit})")
    ax.set_ylim(0, top / scale * 1.1)
    ax.set_title(_title("Allocated memory by source", s.kind, *report.label.split(" · "), report.device, width=5.8),
                 fontsize=10, pad=14)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False, reverse=True)
    return fig


@_themed
def plot_compare(reports: Sequence[StepReport], labels: Sequence[str] | None = None) -> Any:
    """Side by side: each report's breakdown at its (steady-state) peak, as
    horizontal stacked bars (one row per report, in the order given).

    Args:
        reports: the reports to compare.
        labels: one label per report (default: each report's label).

    Returns:
        a ``matplotlib.figure.Figure``.
    """
    if not reports:
        raise ValueError("plot_compare needs at least one report")
    labels = list(labels) if labels is not None else [r.label for r in reports]
    if len(labels) != len(reports):
        raise ValueError(f"{len(labels)} labels for {len(reports)} reports")
    bds = [r.peak for r in reports]
    unit, scale = unit_for(max(b.total for b in bds))
    fig = _figure(8.0, 1.0 + 0.42 * len(reports))
    ax = fig.add_subplot()
    used = _used_sources(bds)
    ys = list(range(len(bds)))[::-1]  # first report on top
    lefts = [0.0] * len(bds)
    for src in used:
        vals = [b.sources.get(src, 0) / scale for b in bds]
        ax.barh(ys, vals, left=lefts, color=COLORS[src], label=src, height=0.7, edgecolor=theme().edge, linewidth=0.5)
        lefts = [a + v for a, v in zip(lefts, vals)]
    for y, right in zip(ys, lefts):
        ax.annotate(f"{right:.1f}", (right, y), ha="left", va="center", fontsize=8, xytext=(3, 0), textcoords="offset points")
    ax.set_yticks(ys, [lab.replace("\n", " · ") for lab in labels], fontsize=8)
    ax.set_xlabel(f"peak allocated ({unit})")
    ax.margins(x=0.1)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title("Peak memory by source", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    return fig
