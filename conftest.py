"""Root conftest, for the tutorials under notebooks/ (a conftest there would clash
with tests/conftest.py under ``--doctest-modules``). nbval checks each cell's
outputs against the stored ones, but a magic's ``UsageError`` reaches it as
plain stderr text, which nbval does not compare: fail the cell here when its
fresh stderr carries one."""

from __future__ import annotations

import pytest


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
