"""Screenshots of a %%vram report's warnings in JupyterLab 4, light and dark, with their contrast.

    .venv/bin/python benchmarks/results/2026-12-03-release/shoot.py [OUT_DIR]

Uses tests/test_browser.py's server and browser (Debian's chromium, Playwright, a fresh Jupyter
home) on a small notebook written here: a ``%%vram --budget`` cell over its budget (a report
whose "⚠ over budget" line is a warning), the same report with its old fixed colour
(``#c62828``) beside it for comparison, and a figure's text (``rep.plot()``'s ``text/plain``).
For each theme it reads, on the page, the computed colour of the report's warning line and of
the old one and the output area's background, prints their WCAG 2.1 contrast ratios and saves
``jupyterlab-{light,dark}.png``.
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from tests.test_browser import Browser, JupyterLab, open_and_run_all  # noqa: E402

THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}
CELLS = [
    "%load_ext vramnb\nimport torch, vramnb\nfrom IPython.display import HTML",
    "%%vram -d cpu --budget 1MiB -o rep\nx = torch.ones(2**20)",
    "# the same report with the fixed colour it had before (for comparison)\n"
    "HTML(rep._repr_html_().replace('var(--jp-error-color1, #c62828)', '#c62828'))",
    "model = torch.nn.Linear(64, 64)\n"
    "step = vramnb.profile_step(model, torch.randn(8, 64), lambda m, b: m(b).square().mean(),\n"
    "                           torch.optim.SGD(model.parameters()))\n"
    "print(repr(step.plot()))",
]

# a warning line's colour and the background it sits on, as the page computed them
PROBE = """() => {
  const outs = [...document.querySelectorAll('.jp-OutputArea-output')];
  const warn = (o) => [...o.querySelectorAll('div')].find(d => d.textContent.startsWith('⚠'));
  let bg = 'rgba(0, 0, 0, 0)', el = outs[0];
  while (el && /rgba\\(0, 0, 0, 0\\)|transparent/.test(bg)) { bg = getComputedStyle(el).backgroundColor; el = el.parentElement; }
  return {now: getComputedStyle(warn(outs[0])).color, before: getComputedStyle(warn(outs[1])).color, background: bg,
          figure: outs[outs.length - 1].textContent.trim()};
}"""


def _luminance(css: str) -> float:
    rgb = [int(v) / 255 for v in css[css.index("(") + 1:css.index(")")].split(",")[:3]]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    """WCAG 2.1 contrast ratio of two CSS ``rgb(...)`` colours."""
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def main() -> None:
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory() as tmp:
        nb_path = pathlib.Path(tmp) / "release.ipynb"
        nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
                         "source": src} for i, src in enumerate(CELLS)],
              "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        nb_path.write_text(json.dumps(nb))
        for theme, name in THEMES.items():
            work = pathlib.Path(tmp) / theme
            work.mkdir()
            server = JupyterLab(work, nb_path, theme=name)
            try:
                browser = Browser(work, width=1100, height=700)
                try:
                    page = browser.page
                    open_and_run_all(page, server)
                    page.locator(".jp-OutputArea-output", has_text="Figure size").wait_for(timeout=120_000)
                    page.wait_for_timeout(500)
                    seen = page.evaluate(PROBE)
                    page.screenshot(path=str(out / f"jupyterlab-{theme}.png"), full_page=True)
                finally:
                    browser.stop()
            finally:
                server.stop()
            print(f"{theme}: background {seen['background']}; warning now {seen['now']} "
                  f"{contrast(seen['now'], seen['background']):.2f}:1; before {seen['before']} "
                  f"{contrast(seen['before'], seen['background']):.2f}:1; figure's text {seen['figure']!r}", flush=True)


if __name__ == "__main__":
    main()
