"""Root conftest, for the tutorials under notebooks/ (a conftest there would clash
with tests/conftest.py under ``--doctest-modules``). nbval checks each cell's
outputs against the stored ones, but a magic's ``UsageError`` reaches it as
plain stderr text, which nbval does not compare: fail the cell here when its
fresh stderr carries one.

It also fails the run when the run itself changed the checkout: a tracked file
rewritten or deleted, or a new file git does not ignore (a test's artefact
belongs in ``tmp_path``). It compares ``git status`` before and after the
session, with the content of every file listed, so changes that were there
before the run are left alone; outside a git checkout it does nothing."""

from __future__ import annotations

import hashlib
import pathlib
import subprocess

import pytest

_BEFORE = pytest.StashKey[dict]()


def checkout_state(root: pathlib.Path) -> dict[str, str] | None:
    """Each path ``git status`` lists (changed, deleted or untracked, not ignored)
    → a hash of its content (``"deleted"`` if gone); None outside a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(root), "status", "--porcelain=v1", "-z", "--untracked-files=all"],
                             capture_output=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    state: dict[str, str] = {}
    entries = iter(out.split(b"\0"))
    for entry in entries:
        if not entry:
            continue
        status, path = entry[:2].decode(), entry[3:].decode(errors="replace")
        if status[0] in "RC":  # a rename or copy: its origin follows as its own entry
            next(entries, None)
        f = root / path
        state[path] = hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else "deleted"
    return state


def pytest_sessionstart(session: pytest.Session) -> None:
    before = checkout_state(session.config.rootpath)
    if before is not None:
        session.stash[_BEFORE] = before


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.stash.get(_BEFORE, None)
    after = checkout_state(session.config.rootpath) if before is not None else None
    if before is None or after is None:
        return
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    if changed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        msg = ("the test run changed the checkout (write test artefacts to tmp_path): "
               + ", ".join(changed))
        if reporter is not None:
            reporter.write_line(msg, red=True, bold=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    outs = getattr(item, "test_outputs", None)
    if call.when != "call" or not report.passed or not outs:
        return
    for out in outs:
        if out.get("output_type") == "stream" and out.get("name") == "stderr" and "UsageError" in out.get("text", ""):
            report.outcome = "failed"
            report.longrepr = f"{item.nodeid}: the cell printed a UsageError:\n{out['text']}"
            return
