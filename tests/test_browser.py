"""End to end in a real browser: JupyterLab, Debian's Chromium, Playwright.

A JupyterLab server on 127.0.0.1 (a free port, a token, a temporary root holding
a copy of the notebook, fresh Jupyter config/data/runtime and IPython dirs, so
nothing of the user's is read or written) and a headless Chromium with a new,
empty profile, driven by Playwright for Python. The test opens the notebook, runs
it, changes a technique in the panel, presses *Run step*, and checks the page
itself: the new run heads the runs table and the charts are rendered images. It
saves a screenshot of the panel in the test's temporary directory; only with
``VRAMNB_UPDATE_DOCS=1`` does it replace ``docs/panel.png`` (shown in README.md),
so the test command never rewrites a tracked file.

Playwright's own browser download cannot work on our machines, so the browser is
Debian's ``chromium`` package (``apt-get install chromium``; ``.ci/run`` installs
it). Without ``/usr/bin/chromium`` or the ``playwright`` package the test is
skipped with the reason, unless ``VRAMNB_REQUIRE_BROWSER=1`` (as in CI), where it
fails instead. The server (with its kernel) and the browser are stopped in the
fixtures' teardown, also when the test fails.

The same in Notebook 7 (its own server, ``python -m notebook``), on a small notebook: a
``%%vram`` report and the panel render, and Run step works there too.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "tests" / "browser" / "panel.ipynb"
DOCS_SCREENSHOT = ROOT / "docs" / "panel.png"

pytestmark = pytest.mark.slow


def _missing() -> str | None:
    """Why the browser test cannot run here, or None when it can."""
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} not found: install Debian's chromium package (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install playwright, or the [test] extra)"
    try:
        import jupyterlab  # noqa: F401
        import notebook  # noqa: F401
    except ImportError as e:
        return f"{e.name} is not installed (the [test] extra)"
    return None


@pytest.fixture(scope="module")
def browser_ready() -> None:
    """Skip (or, with VRAMNB_REQUIRE_BROWSER=1, fail) when the browser stack is missing."""
    reason = _missing()
    if reason is None:
        return
    if os.environ.get("VRAMNB_REQUIRE_BROWSER") == "1":
        pytest.fail(f"VRAMNB_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def screenshot_path(tmp_path: pathlib.Path) -> pathlib.Path:
    """Where the panel's screenshot goes: ``docs/panel.png`` (tracked, shown in
    README.md) only when ``VRAMNB_UPDATE_DOCS=1`` asks to regenerate the docs,
    else ``tmp_path``, so running the tests leaves the checkout as it was."""
    if os.environ.get("VRAMNB_UPDATE_DOCS") == "1":
        return DOCS_SCREENSHOT
    return tmp_path / "panel.png"


def test_screenshot_goes_to_tmp_unless_docs_are_regenerated(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test command must not rewrite tracked files (runs without the browser)."""
    monkeypatch.delenv("VRAMNB_UPDATE_DOCS", raising=False)
    assert screenshot_path(tmp_path) == tmp_path / "panel.png"
    monkeypatch.setenv("VRAMNB_UPDATE_DOCS", "0")
    assert screenshot_path(tmp_path) == tmp_path / "panel.png"
    monkeypatch.setenv("VRAMNB_UPDATE_DOCS", "1")
    assert screenshot_path(tmp_path) == DOCS_SCREENSHOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_settings(config_dir: pathlib.Path, theme: str | None = None) -> None:
    """JupyterLab user settings for a quiet, fully rendered notebook: no news or
    update check (their toast would cover the page), every cell in the DOM."""
    settings = {
        "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    }
    if theme is not None:
        settings["@jupyterlab/apputils-extension/themes"] = {"theme": theme}
    for plugin, values in settings.items():
        path = config_dir / "lab" / "user-settings" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


class JupyterLab:
    """A JupyterLab server of our own (``app="notebook"``: Notebook 7's); ``stop()`` ends it and its kernels."""

    def __init__(self, workdir: pathlib.Path, notebook: pathlib.Path, theme: str | None = None,
                 app: str = "jupyterlab") -> None:
        if app not in ("jupyterlab", "notebook"):
            raise ValueError(f"app must be 'jupyterlab' or 'notebook', not {app!r}")
        self.app = app
        self.root = workdir / "root"
        self.root.mkdir()
        self.notebook = self.root / notebook.name
        nb = json.loads(notebook.read_text())
        nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
        for cell in nb["cells"]:  # a clean copy: every output on the page comes from this run
            if cell["cell_type"] == "code":
                cell["outputs"], cell["execution_count"] = [], None
        self.notebook.write_text(json.dumps(nb))
        home = workdir / "jupyter"
        env = dict(os.environ)
        for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
            env[var] = str(home / var.lower())
        env.pop("JUPYTER_PATH", None)
        env.pop("JUPYTER_CONFIG_PATH", None)
        _write_settings(pathlib.Path(env["JUPYTER_CONFIG_DIR"]), theme)
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "jupyterlab.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", app, "--no-browser", "--allow-root",
             "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
             f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}"],
            env=env, cwd=self.root, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: the kernels go down with it
        )
        self._wait_ready(timeout=90)

    def log_tail(self, n: int = 40) -> str:
        """The server's last ``n`` log lines."""
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.proc.returncode} before it served:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.3)
        raise RuntimeError(f"JupyterLab did not answer on {self.url} within {timeout:.0f} s:\n{self.log_tail()}")

    def lab_url(self) -> str:
        """The notebook's page in JupyterLab (Notebook 7: its notebook page), with the token."""
        if self.app == "notebook":
            return f"{self.url}/notebooks/{self.notebook.name}?token={self.token}"
        return f"{self.url}/lab/tree/{self.notebook.name}?token={self.token}"

    def wait_kernel_idle(self, timeout: float) -> None:
        """Wait until the server has a kernel (the page's) and it is idle."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            try:  # while the kernel starts, the server has answered 500 here (once, in a full run on a loaded machine)
                with urllib.request.urlopen(f"{self.url}/api/kernels?token={self.token}", timeout=5) as r:
                    last = json.loads(r.read())
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                last = e
            if isinstance(last, list) and last and all(k["execution_state"] == "idle" for k in last):
                return
            time.sleep(0.3)
        raise RuntimeError(f"no idle kernel within {timeout:.0f} s (last answer: {last!r}):\n{self.log_tail()}")

    def stop(self) -> None:
        """Stop the server and everything in its process group (kernels included)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
            except ProcessLookupError:
                pass
        try:  # kernels that outlived the server's own shutdown
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._log.close()


class Browser:
    """Debian's headless Chromium with a new, empty profile, driven by Playwright."""

    def __init__(self, workdir: pathlib.Path, width: int = 1280, height: int = 1600) -> None:
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        try:
            self.context = self._pw.chromium.launch_persistent_context(
                str(workdir / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
                viewport={"width": width, "height": height}, device_scale_factor=1,
            )
        except BaseException:
            self._pw.stop()
            raise
        self.page = self.context.pages[0] if self.context.pages else self.context.new_page()

    def stop(self) -> None:
        """Close the browser (its processes end with it) and Playwright's driver."""
        try:
            self.context.close()
        finally:
            self._pw.stop()


@pytest.fixture
def lab(browser_ready: None, tmp_path: pathlib.Path) -> Iterator[JupyterLab]:
    server = JupyterLab(tmp_path, NOTEBOOK)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def page(browser_ready: None, tmp_path: pathlib.Path) -> Iterator[Any]:
    browser = Browser(tmp_path)
    try:
        yield browser.page
    finally:
        browser.stop()


def open_and_run_all(page: Any, lab: JupyterLab, timeout_s: float = 120) -> None:
    """Open the notebook, wait for its kernel, run every cell, and wait until
    each code cell has an execution count; fail on a traceback or stderr output."""
    from playwright.sync_api import expect

    page.goto(lab.lab_url())
    expect(page.locator(".jp-Notebook")).to_be_visible(timeout=60_000)
    if lab.app == "jupyterlab":
        page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").click()  # fold the file browser away
        # the status bar says "Python 3 (ipykernel) | Idle" once the kernel is connected
        expect(page.locator(".jp-StatusBar-Widget")).to_contain_text("| Idle", timeout=60_000)
    else:  # Notebook 7 has no status bar, and its kernel indicator no text: ask the server
        lab.wait_kernel_idle(timeout=60)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    prompts = page.locator(".jp-CodeCell .jp-InputArea-prompt")
    deadline = time.monotonic() + timeout_s
    while True:
        texts = [t.strip() for t in prompts.all_text_contents()]  # "[ ]:" not run, "[*]:" running, "[3]:" done
        if texts and all(t[1:-2].isdigit() for t in texts):
            break
        if time.monotonic() > deadline:
            pytest.fail(f"cells not done after {timeout_s:.0f} s: prompts {texts}\n{lab.log_tail()}")
        page.wait_for_timeout(250)
    # JupyterLab renders a traceback, like stderr, as application/vnd.jupyter.stderr: the notebook writes neither
    stderr = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert stderr.count() == 0, f"a cell raised or wrote to stderr:\n{stderr.first.inner_text()}"


def test_panel_in_jupyterlab(lab: JupyterLab, page: Any, tmp_path: pathlib.Path) -> None:
    """Run the panel notebook in JupyterLab, switch activation checkpointing to
    every block in the panel, press Run step: the run heads the table, the charts
    are images, the button is ready again. The screenshot goes to ``tmp_path``
    (``docs/panel.png`` with ``VRAMNB_UPDATE_DOCS=1``)."""
    from playwright.sync_api import expect

    open_and_run_all(page, lab)
    panel = page.locator(".vramnb-panel")
    expect(panel).to_have_count(1)
    rows = panel.locator("table.vramnb-runs tr.vramnb-run")
    expect(rows).to_have_count(1)  # the notebook's own press: the baseline
    expect(rows.first.locator("td").first).to_have_text("baseline")

    panel.locator(".vramnb-control-checkpointing select").select_option(label="every block")
    button = panel.get_by_role("button", name="Run step")
    button.click()
    expect(rows).to_have_count(2, timeout=60_000)
    newest = rows.first.locator("td")
    expect(newest.first).to_have_text("checkpointing every block")
    expect(newest.nth(2)).to_have_text(re.compile(r"^-\d"))  # Δ vs first run: checkpointing saves memory
    expect(newest.nth(4)).to_contain_text("fits")
    expect(panel.locator(".vramnb-status")).to_contain_text("done: checkpointing every block")
    expect(button).to_be_enabled()

    charts = panel.locator(".vramnb-chart img")
    expect(charts).to_have_count(2)  # this run's breakdown, and both runs compared
    sizes = charts.evaluate_all("imgs => imgs.map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
    assert all(done and w >= 400 and h >= 150 for done, w, h in sizes), f"charts not rendered: {sizes}"

    # Make it fit: the fastest plans that fit the card, each with Apply, which sets the menus
    panel.get_by_role("button", name="Make it fit").click()
    plans = panel.locator(".vramnb-fit .vramnb-fit-plan")
    expect(plans.first).to_be_visible(timeout=90_000)
    expect(panel.locator(".vramnb-status")).to_contain_text("fastest that fits")
    first = plans.first.inner_text()
    plans.first.get_by_role("button", name="Apply").click()
    expect(panel.locator(".vramnb-status")).to_contain_text("press Run step")
    if "bf16" in first:  # the menu shows the plan's setting
        sel = panel.locator(".vramnb-control-precision select")
        assert "bf16" in sel.evaluate("s => s.options[s.selectedIndex].text")

    shot = screenshot_path(tmp_path)
    shot.parent.mkdir(exist_ok=True)
    panel.screenshot(path=str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


LIVE_NOTEBOOK = ROOT / "tests" / "browser" / "live.ipynb"


def test_live_gauge_updates_in_jupyterlab(browser_ready: None, page: Any, tmp_path: pathlib.Path) -> None:
    """``%%vram --live`` on a 3-second cell in JupyterLab: the page shows the gauge's line
    changing while the cell runs (allocated growing 1 MiB every 0.5 s), then the cell's report
    in its place."""
    from playwright.sync_api import expect

    from vramnb._units import parse_size

    lab = JupyterLab(tmp_path, LIVE_NOTEBOOK)
    try:
        page.goto(lab.lab_url())
        expect(page.locator(".jp-Notebook")).to_be_visible(timeout=60_000)
        expect(page.locator(".jp-StatusBar-Widget")).to_contain_text("| Idle", timeout=60_000)
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        output = page.locator(".jp-CodeCell").nth(1).locator(".jp-OutputArea-output")
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            texts = output.all_inner_texts()
            if texts and texts[-1] not in seen[-1:]:
                seen.append(texts[-1])
            if texts and texts[-1].startswith("vram ["):
                break
            page.wait_for_timeout(100)
        live = [s for s in seen if s.startswith("vram live · cpu")]
        assert len(live) >= 4, seen  # the line changed at least 4 times while the cell ran
        fields = [s.split(" · ")[2].removeprefix("allocated ") for s in live]
        allocated = [0 if f == "0 B" else parse_size(f) for f in fields]
        assert allocated == sorted(allocated) and len(set(allocated)) >= 3, live
        assert seen[-1].startswith("vram [") and "+6.0 MiB" in seen[-1], seen[-1]  # the report replaced it
        expect(output).to_have_count(1)
    finally:
        lab.stop()


FRONTENDS_NOTEBOOK = ROOT / "tests" / "browser" / "frontends.ipynb"


@pytest.fixture
def notebook7(browser_ready: None, tmp_path: pathlib.Path) -> Iterator[JupyterLab]:
    server = JupyterLab(tmp_path, FRONTENDS_NOTEBOOK, app="notebook")
    try:
        yield server
    finally:
        server.stop()


def test_report_and_panel_in_notebook7(notebook7: JupyterLab, page: Any) -> None:
    """Notebook 7 renders the %%vram report's table and the panel; a press of Run step adds a run and its charts."""
    from playwright.sync_api import expect

    open_and_run_all(page, notebook7)
    assert page.locator("#jp-top-bar").count() == 1 and page.locator(".jp-LabShell").count() == 0  # Notebook 7's page
    report = page.locator(".jp-CodeCell").nth(1).locator(".jp-OutputArea-output")  # the %%vram cell
    expect(report.locator("table")).to_have_count(1)
    expect(report.locator("table")).to_contain_text("allocated")
    expect(report).to_contain_text("measured by the CPU storage tracker")
    panel = page.locator(".vramnb-panel")
    expect(panel).to_have_count(1)
    rows = panel.locator("table.vramnb-runs tr.vramnb-run")
    expect(rows).to_have_count(1)
    expect(rows.first.locator("td").first).to_have_text("baseline")
    panel.locator(".vramnb-control-optimizer select").select_option(label="SGD")
    panel.get_by_role("button", name="Run step").click()
    expect(rows).to_have_count(2, timeout=60_000)
    expect(rows.first.locator("td").first).to_have_text("optimizer SGD")
    expect(rows.first.locator("td").nth(2)).to_have_text(re.compile(r"^-\d"))  # SGD keeps no Adam state: less memory
    expect(panel.locator(".vramnb-status")).to_contain_text("done: optimizer SGD")
    charts = panel.locator(".vramnb-chart img")
    expect(charts).to_have_count(2)
    sizes = charts.evaluate_all("imgs => imgs.map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
    assert all(done and w >= 400 and h >= 150 for done, w, h in sizes), f"charts not rendered: {sizes}"
