"""CUDA only (run on the GPU machine): a memory-history recording the user has on
is neither switched off, re-configured nor cleared by profile_step, compare or a
``--breakdown`` recording, and the step's numbers read from it are the same."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vramnb

pytestmark = pytest.mark.cuda


def _trace():
    return torch.cuda.memory._snapshot()["device_traces"][0]


def _step_inputs():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda()
    return model, torch.randn(256, 1024, device="cuda"), torch.optim.AdamW(model.parameters())


def test_the_users_memory_history_survives_profile_step_with_the_same_numbers():
    model, x, opt = _step_inputs()
    loss = lambda m, b: m(b).square().mean()  # noqa: E731
    plain = vramnb.profile_step(model, x, loss, opt, module_depth=None).steady.peak.allocated
    assert not torch._C._cuda_isHistoryEnabled()
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=100_000)
    try:
        mine = torch.empty(3 * 2**20, dtype=torch.uint8, device="cuda")
        addr = mine.untyped_storage().data_ptr()
        del mine  # its events stay in the user's trace
        rep = vramnb.profile_step(model, x, loss, opt, module_depth=None)
        assert torch._C._cuda_isHistoryEnabled()  # still on
        trace = _trace()
        # the user's own event from before the step is still there, with its stack (context="all" kept)
        mine_ev = [e for e in trace if e["action"] == "alloc" and e["addr"] == addr and e["size"] == 3 * 2**20]
        assert mine_ev and mine_ev[0].get("frames")
        assert rep.steady.peak.allocated == plain
        assert any("memory-history recording was left on" in n for n in rep.notes)
        after = torch.empty(5 * 2**20, dtype=torch.uint8, device="cuda")  # still recording afterwards
        assert any(e["action"] == "alloc" and e["size"] == 5 * 2**20 for e in _trace())
        del after
        cmp = vramnb.compare(model, x, loss, opt, progress=False, toggles={"precision": ["fp32", "bf16"]})
        assert all(v.report is not None for v in cmp.variants)
        assert torch._C._cuda_isHistoryEnabled()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
