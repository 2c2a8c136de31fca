"""Screenshots of a %%vram report and the panel in JupyterLab 4 and Notebook 7, light and dark.

    VENV/bin/python benchmarks/results/2026-12-03-frontends/shoot.py [OUT_DIR] [--kernel-ipywidgets=7.7]

Uses tests/test_browser.py's server and browser (Debian's chromium, Playwright; a fresh
Jupyter home) on tests/browser/frontends.ipynb, in JupyterLab and in Notebook 7 of the venv
that runs it, light and dark: runs the notebook, checks the %%vram report's table, picks
"SGD" in the panel's optimizer menu, presses Run step, waits for the second row of the runs
table and both charts, and saves one PNG of the page, ``{app}-{theme}-ipywidgets{version}.png``.

A venv with ipywidgets 7.7 (``pip install -e ".[test]" "ipywidgets==7.7.*" "notebook>=7"``) has
pip's jupyterlab_widgets 1.1 for it, whose manager runs in JupyterLab 4. With
``--kernel-ipywidgets=7.7`` only the kernel imports ipywidgets 7.7 (a pip ``--target`` folder
on PYTHONPATH) while the front-ends keep the venv's ipywidgets 8 manager (jupyterlab_widgets 3):
a kernel from another environment; that manager cannot load 7.x widgets, and the PNGs
(``...-kernel-only.png``) show its error box.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from tests.test_browser import Browser, JupyterLab  # noqa: E402

THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}


def shoot(app: str, theme: str, out: pathlib.Path, tag: str) -> str:
    from playwright.sync_api import expect

    from tests.test_browser import open_and_run_all

    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        server = JupyterLab(work, ROOT / "tests" / "browser" / "frontends.ipynb", theme=THEMES[theme], app=app)
        try:
            browser = Browser(work, width=1280, height=2300)
            try:
                page = browser.page
                errors: list[str] = []
                page.on("console", lambda m: errors.append(m.text.splitlines()[0]) if m.type == "error" else None)
                t0 = time.monotonic()
                open_and_run_all(page, server)
                report = page.locator(".jp-CodeCell").nth(1).locator(".jp-OutputArea-output")  # the %%vram cell
                expect(report.locator("table")).to_have_count(1)
                expect(report).to_contain_text("measured by the CPU storage tracker")
                panel = page.locator(".vramnb-panel")
                expect(panel).to_have_count(1)
                page.wait_for_timeout(1000)
                path = out / f"{app}-{theme}-ipywidgets{tag}.png"
                if panel.locator(".jupyter-widgets-error-widget").count():  # the front-end could not render it
                    page.screenshot(path=str(path), full_page=True)
                    return f"{path.name}: report table rendered; the panel NOT: the front-end's widget manager " \
                           f"shows its error box; console: {sorted(set(errors))}"
                rows = panel.locator("table.vramnb-runs tr.vramnb-run")
                expect(rows).to_have_count(1)
                panel.locator(".vramnb-control-optimizer select").select_option(label="SGD")
                panel.get_by_role("button", name="Run step").click()
                expect(rows).to_have_count(2, timeout=60_000)
                expect(rows.first.locator("td").first).to_have_text("optimizer SGD")
                expect(panel.locator(".vramnb-chart img")).to_have_count(2)
                page.wait_for_timeout(500)
                bg = page.evaluate("getComputedStyle(document.body).getPropertyValue('--jp-layout-color0')").strip()
                page.screenshot(path=str(path), full_page=True)
                return f"{path.name}: report table and panel rendered, 2 runs, 2 charts, page background {bg}, " \
                       f"{time.monotonic() - t0:.1f} s"
            finally:
                browser.stop()
        finally:
            server.stop()


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out = pathlib.Path(args[0]) if args else pathlib.Path(__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    suffix = ""
    if "--kernel-ipywidgets=7.7" in sys.argv:
        target = pathlib.Path(tempfile.mkdtemp()) / "ipywidgets77"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                        "ipywidgets==7.7.*", "ipython_genutils==0.2.*"], check=True)
        os.environ["PYTHONPATH"] = str(target)  # the server's environment, so its kernels'
        suffix = "-kernel-only"
    version = subprocess.run([sys.executable, "-c", "import ipywidgets; print(ipywidgets.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip() + suffix
    for app in ("jupyterlab", "notebook"):
        for theme in THEMES:
            print(shoot(app, theme, out, version), flush=True)


if __name__ == "__main__":
    main()
