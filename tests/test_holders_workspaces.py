"""%vram on CUDA after a failed profile_step (issue 28 #12): the memory it called "held by no name
listed" was cuBLAS's workspaces (32 MiB per thread and stream on an H200, taken by the first matrix
multiply of the forward and of the backward's thread, and kept by PyTorch) and the allocator's
512-byte rounding of the named storages, not anything of vramnb's (measured on the H200: 0 B left
once cuBLAS had run). The report names both, and says "no name" only for what is left."""

from __future__ import annotations

import torch

from vramnb._holders import HoldersReport
from vramnb.diagnose import _one_time

MiB = 2**20


def _text(**kw):
    return HoldersReport(device="cuda:0", total=2142248, **kw)._table().to_text()


def test_workspaces_and_rounding_are_named_not_held_by_no_name():
    rounding, workspaces = 472, 2 * 32 * MiB + MiB
    text = _text(allocated=2142248 + rounding + workspaces, rounding=rounding, workspaces=workspaces)
    assert "held by no name" not in text
    assert "cuBLAS's workspaces: 65.0 MiB" in text and "torch._C._cuda_clearCublasWorkspaces()" in text
    assert "512-byte blocks: 472 B more" in text
    # what is left beyond them is still said, to the byte
    text = _text(allocated=2142248 + rounding + workspaces + 4096, rounding=rounding, workspaces=workspaces)
    assert "4.0 KiB allocated is not found under the names listed" in text


def test_cublas_workspaces_are_the_blocks_of_their_sizes_that_back_no_tensor(monkeypatch):
    live = torch.empty(8)  # a block of a workspace's size that backs a tensor is the tensor's
    blocks = [{"state": "active_allocated", "requested_size": 32 * MiB, "address": 4096},
              {"state": "active_allocated", "requested_size": MiB, "address": 8192},
              {"state": "active_allocated", "requested_size": 32 * MiB, "address": live.data_ptr()},
              {"state": "inactive", "requested_size": 32 * MiB, "address": 16384},
              {"state": "active_allocated", "requested_size": 3 * MiB, "address": 32768}]
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda device=None: {"segments": [{"device": 0,
                                                                                            "blocks": blocks}]})
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.delenv("CUBLASLT_WORKSPACE_SIZE", raising=False)
    assert sorted(_one_time.cublas_workspaces(0)) == [MiB, 32 * MiB]
    del live
