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


def _live_values(updates: list[str], prefix: str) -> list[dict[str, int]]:
    """The gauge lines among ``updates``, as ``{"allocated": bytes, "reserved": ..., "peak": ...}``."""
    from vramnb._units import parse_size

    out = []
    for u in updates:
        if not u.startswith(prefix):
            continue
        fields = dict(part.split(" ", 1) for part in u.split(" · ")[2:5])
        out.append({k: parse_size(v) for k, v in fields.items()})
    return out


def test_an_interrupted_live_cell_stops_its_gauge_and_keeps_the_cells_error():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in [
        "%load_ext vramnb",
        "%%vram --live\nimport time, torch\nx = torch.ones(2**18)\ntime.sleep(1)\nraise KeyboardInterrupt",
        "import threading, time\ntime.sleep(0.6)\n"
        "print(sorted(t.name for t in threading.enumerate() if t.name.startswith('vramnb')))",
        "print(x.numel())",
    ]]
    client = _Counting(nb, timeout=120, kernel_name="python3", allow_errors=True)
    client.execute()
    errors = [o for o in nb.cells[1].outputs if o.get("output_type") == "error"]
    assert [e["ename"] for e in errors] == ["KeyboardInterrupt"]  # the cell's own error, once
    assert len([u for u in client.updates[1] if u.startswith("vram live · cpu")]) >= 2
    # the gauge's last update is the report of the failed cell, not a frozen gauge line
    assert not client.updates[1][-1].startswith("vram live"), client.updates[1][-1]
    assert nb.cells[2].outputs[0]["text"].strip() == "[]"  # no sampler thread left running
    assert nb.cells[3].outputs[0]["text"].strip() == str(2**18)  # the cell's variable is kept


@pytest.mark.cuda
def test_the_live_gauge_on_cuda_reads_the_allocator_without_creating_the_context():
    nb, updates = _run([
        "%load_ext vramnb",
        "%%vram --live -d cuda:0\nimport time, torch\nprint(torch.cuda.is_initialized())\ntime.sleep(1)\n"
        "print(torch.cuda.is_initialized())\nkeep = []\n"
        "for i in range(5):\n    keep.append(torch.ones(2**20, device='cuda'))\n    time.sleep(0.5)",
    ])
    # the gauge sampled a second before the cell touched CUDA, and that created no context
    assert [o["text"] for o in nb.cells[1].outputs if o.get("name") == "stdout"] == ["False\nFalse\n"]
    live = _live_values(updates[1], "vram live · cuda:0")
    assert len(live) >= 6, updates[1]
    assert live[0] == {"allocated": 0, "reserved": 0, "peak": 0}
    allocated = [v["allocated"] for v in live]
    assert allocated == sorted(allocated) and allocated[-1] == 5 * 4 * 2**20, live  # +4 MiB every 0.5 s
    assert all(v["reserved"] >= v["allocated"] and v["peak"] == v["allocated"] for v in live)
    (out,) = [o for o in nb.cells[1].outputs if o.get("output_type") == "display_data"]
    assert out["data"]["text/plain"].startswith("vram [cuda:0]") and "+20.0 MiB" in out["data"]["text/plain"]
