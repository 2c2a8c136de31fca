"""A measurement inside another keeps the outer peak exact (CPU; the same
mechanism hands the pre-reset counter to outer blocks on CUDA)."""

from __future__ import annotations

import pytest
import torch

import vramnb
from tests.conftest import run

MIB = 2**20


def test_nested_vram_keeps_the_outer_peak():
    with vramnb.vram("cpu", record=False) as outer:
        big = torch.ones(16 * MIB // 4)
        del big
        with vramnb.vram("cpu", record=False) as inner:
            small = torch.ones(1024)
        del small
    assert inner.report.peak_delta == 4096 and not inner.report.peak_is_lower_bound
    assert outer.report.peak_delta == 16 * MIB
    assert not outer.report.peak_is_lower_bound
    assert not any("reset" in w for w in outer.report.warnings)


def test_vram_block_inside_a_vram_cell_keeps_the_cell_peak(ip):
    run(ip, "import vramnb")
    run(ip, "%%vram -q -d cpu -o r\nbig = torch.ones(64 * 2**20 // 4)\ndel big\n"
            "with vramnb.vram('cpu', record=False):\n    small = torch.ones(1024)")
    r = ip.user_ns["r"]
    assert r.peak_delta == 64 * MIB
    assert not r.peak_is_lower_bound


@pytest.mark.cuda
def test_nested_vram_keeps_the_outer_peak_on_cuda():
    torch.cuda.init()
    with vramnb.vram("cuda:0", record=False) as outer:
        big = torch.ones(64 * MIB, dtype=torch.uint8, device="cuda")
        del big
        with vramnb.vram("cuda:0", record=False) as inner:
            small = torch.ones(1024, dtype=torch.uint8, device="cuda")
        del small
    assert outer.report.peak_delta >= 64 * MIB
    assert not outer.report.peak_is_lower_bound
    assert inner.report.peak_delta < 64 * MIB
