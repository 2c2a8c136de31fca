"""%%vram --live and %vram on --live: a gauge updated while the cell runs, replaced by the report.

Run in a real Jupyter kernel (nbclient), which is where output updates exist: the kernel's
``update_display_data`` messages are counted as they arrive; in a terminal IPython (no kernel)
the cell gets the report only."""

from __future__ import annotations

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

from vramnb._live import sparkline  # noqa: E402


class _Counting(nbclient.NotebookClient):  # type: ignore[misc]
    """A client that keeps every update_display_data text the kernel sends, per cell index."""

    def __init__(self, nb, **kw):  # type: ignore[no-untyped-def]
        super().__init__(nb, **kw)
        self.updates: dict[int, list[str]] = {}

    def process_message(self, msg, cell, cell_index):  # type: ignore[no-untyped-def]
        if msg["msg_type"] == "update_display_data":
            self.updates.setdefault(cell_index, []).append(msg["content"]["data"].get("text/plain", ""))
        return super().process_message(msg, cell, cell_index)


def _run(cells: list[str]) -> tuple[object, dict[int, list[str]]]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    client = _Counting(nb, timeout=120, kernel_name="python3")
    client.execute()
    return nb, client.updates


def test_the_live_gauge_updates_while_the_cell_runs_and_becomes_the_report():
    nb, updates = _run([
        "%load_ext vramnb",
        "%%vram --live\nimport time, torch\nkeep = []\n"
        "for i in range(6):\n    keep.append(torch.ones(2**18))\n    time.sleep(0.5)",
        "%vram on --live",
        "import time, torch\ny = torch.ones(2**20)\ntime.sleep(1.5)",
    ])
    # a 3-second cell, sampled every 0.25 s: several updates while it ran, the allocated memory growing
    live = [u for u in updates[1] if u.startswith("vram live · cpu")]
    assert len(live) >= 5, updates[1]
    seen = [float(u.split(" · ")[2].removeprefix("allocated ").removesuffix(" MiB")) for u in live]
    assert seen == sorted(seen) and seen[-1] == 6.0 and len(set(seen)) >= 3, live  # 1 MiB more every 0.5 s
    assert all(u.split(" · ")[3] == u.split(" · ")[2].replace("allocated", "peak") for u in live)  # it only grows
    # the last update is the report, which replaced the gauge: one output, the report's text
    (out,) = [o for o in nb.cells[1].outputs if o.get("output_type") == "display_data"]
    assert out["data"]["text/plain"].startswith("vram [") and "+6.0 MiB" in out["data"]["text/plain"]
    assert updates[1][-1] == out["data"]["text/plain"]
    # %vram on --live: the same for a plain cell
    assert sum(u.startswith("vram live · cpu") for u in updates[3]) >= 3, updates.get(3)
    (out,) = [o for o in nb.cells[3].outputs if o.get("output_type") == "display_data"]
    assert "+4.0 MiB" in out["data"]["text/plain"]


def test_the_sparkline_scales_to_its_maximum():
    assert sparkline([0, 1, 2, 4, 8]) == "▁▂▃▅█"
    assert sparkline([0, 0]) == "▁▁"
    assert sparkline(list(range(100)), width=4) == "████"  # the last 4, scaled to the largest
