"""Plots render to PNG with titles, unit labels and the fixed colour of each source."""

import re

import pytest
import torch

import vramnb
from vramnb._sources import COLORS, SOURCES

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def report():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    return vramnb.profile_step(model, torch.randn(16, 32), lambda m, b: m(b).square().mean(),
                               torch.optim.Adam(model.parameters()))


@pytest.mark.parametrize("kind", ["breakdown", "timeline", "sources"])
def test_figures_render_with_titles_and_units(report, kind):
    fig = report.plot(kind)
    png = fig._repr_png_()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    ax = fig.axes[0]
    assert ax.get_title() or fig._suptitle is not None
    assert re.search(r"\((B|KiB|MiB|GiB)\)", ax.get_ylabel())
    assert "pyplot" not in type(fig).__module__


def test_a_figure_shows_public_names(report):
    """Its text in a notebook (text/plain beside the PNG) is matplotlib's, not a private class's."""
    import matplotlib.figure

    fig = report.plot()
    assert repr(fig).startswith("<Figure size 750x420 with 1 Axes") and isinstance(fig, matplotlib.figure.Figure)
    assert "vramnb" not in repr(fig) and "Vram" not in repr(fig)


def test_colours_are_fixed_per_source(report):
    import matplotlib.colors as mcolors

    fig = report.plot("breakdown")
    handles, labels = fig.axes[0].get_legend_handles_labels()
    assert labels and set(labels) <= set(SOURCES)
    for h, lab in zip(handles, labels):
        assert mcolors.to_hex(h.patches[0].get_facecolor()) == COLORS[lab].lower()
    fig2 = vramnb.plot_compare([report, report], ["a", "b"])
    assert re.search(r"\((B|KiB|MiB|GiB)\)", fig2.axes[0].get_xlabel())
    h2, l2 = fig2.axes[0].get_legend_handles_labels()
    for h, lab in zip(h2, l2):
        assert mcolors.to_hex(h.patches[0].get_facecolor()) == COLORS[lab].lower()


def test_bad_plot_arguments(report):
    with pytest.raises(ValueError, match="valid: 'breakdown', 'timeline', 'sources'"):
        report.plot("pie")
    with pytest.raises(ValueError, match="2 labels for 1 reports"):
        vramnb.plot_compare([report], ["a", "b"])
    with pytest.raises(ValueError, match="at least one report"):
        vramnb.plot_compare([])


@pytest.mark.parametrize("kind", ["breakdown", "timeline", "sources"])
def test_figures_follow_the_theme(report, kind):
    """"auto" (the default): a transparent PNG with mid-grey text, which reads on light and dark
    notebook themes (an opaque white figure was a white block in JupyterLab's dark theme);
    "dark" and "light": opaque, for one background; a bad name lists the valid ones."""
    import io

    from PIL import Image

    from vramnb._theme import THEMES

    def corner(fig):  # type: ignore[no-untyped-def]
        return Image.open(io.BytesIO(fig._repr_png_())).convert("RGBA").getpixel((1, 1))

    fig = report.plot(kind)
    assert corner(fig)[3] == 0  # transparent
    assert fig.axes[0].yaxis.label.get_color() == THEMES["auto"].text
    try:
        vramnb.set_theme("dark")
        dark = report.plot(kind)
        assert corner(dark) == (17, 17, 17, 255)
        assert dark.axes[0].yaxis.label.get_color() == THEMES["dark"].text
        vramnb.set_theme("light")
        assert corner(report.plot(kind)) == (255, 255, 255, 255)
    finally:
        vramnb.set_theme("auto")
    with pytest.raises(ValueError, match="unknown theme 'solarized'; valid: auto, light, dark"):
        vramnb.set_theme("solarized")
