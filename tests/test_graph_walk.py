"""The graph walk never runs saved-tensor hooks, and counts what the hooks packed, exactly.

Reading ``grad_fn._saved_*`` runs the unpack hook of a hooked saved tensor:
under non-reentrant checkpointing that recomputes the checkpointed block
every time (issue 11, item 1). Every walk (the CPU tracker's scan, ``%vram``'s
holders, ``%%vram``'s start and end) must read what was packed instead.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import vramnb._graph as graph
from tests.conftest import run
from vramnb._graph import graph_tensors
from vramnb._holders import storages_held
from vramnb._tracker import StorageTracker

CPU = torch.device("cpu")
F32 = 4


def _nbytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


def _params(m: torch.nn.Module) -> int:
    return sum(_nbytes(p) for p in m.parameters())


def _checkpointed():
    """The issue's reproduction, smaller: a block run under non-reentrant checkpoint."""
    torch.manual_seed(0)
    blk = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    calls = [0]
    blk.register_forward_pre_hook(lambda m, a: calls.__setitem__(0, calls[0] + 1))
    x = torch.randn(512, 256, requires_grad=True)
    out = checkpoint(blk, x, use_reentrant=False)
    loss = out.pow(2).mean()
    return blk, x, out, loss, calls


def _expected_checkpoint_bytes(blk, x, out) -> int:
    # the loss, pow's saved input (the block's output), the leaf x (checkpoint keeps
    # it to recompute from; also the graph's leaf), the parameters (the graph's leaves)
    # and the CPU RNG state checkpoint saved to replay the block; nothing of the
    # block's inside: its packed holders are empty until backward recomputes it
    return 4 + _nbytes(out) + _nbytes(x) + _params(blk) + _nbytes(torch.get_rng_state())


@pytest.mark.parametrize("old_torch", [False, True], ids=["SavedTensor.data", "profile-guard"])
def test_walks_do_not_rerun_a_checkpointed_forward(old_torch, monkeypatch):
    if old_torch:  # PyTorch < 2.10 has no SavedTensor.data: the read is guarded instead
        monkeypatch.setattr(graph, "_HAS_DATA", False)
    blk, x, out, loss, calls = _checkpointed()
    assert calls[0] == 1
    tr = StorageTracker("cpu")
    tr.scan()
    held = storages_held(loss, CPU)
    list(graph_tensors(loss.grad_fn, {}))
    assert calls[0] == 1, "the walk recomputed the checkpointed block"
    if not old_torch:  # exact: what checkpoint really keeps
        assert sum(held.values()) == _expected_checkpoint_bytes(blk, x, out)
    else:  # the hooked saved tensors are skipped, the plain ones still counted
        assert sum(held.values()) == 4 + _nbytes(out) + _nbytes(x) + _params(blk)
    # the graph is intact: backward recomputes once and gives the gradient of the plain block
    loss.backward()
    assert calls[0] == 2
    x2 = x.detach().clone().requires_grad_(True)
    blk(x2).pow(2).mean().backward()
    torch.testing.assert_close(x.grad, x2.grad)


def test_vram_and_an_empty_cell_do_not_rerun_a_checkpointed_forward(ip):
    ip.user_ns["make"] = _checkpointed
    run(ip, "blk, x, out, loss, calls = make()")
    calls = ip.user_ns["calls"]
    res, cap = run(ip, "%vram -d cpu")
    assert res.error_in_exec is None
    res, _ = run(ip, "%%vram -d cpu\npass")
    assert res.error_in_exec is None
    res, _ = run(ip, "%%vram -d cpu --breakdown\npass")
    assert res.error_in_exec is None
    assert calls[0] == 1
    rep = ip.run_line_magic("vram", "-d cpu")  # returns the holders report
    rows = {h.name: h for h in rep.holders}
    ns = ip.user_ns
    assert rows["loss"].nbytes == _expected_checkpoint_bytes(ns["blk"], ns["x"], ns["out"])
    # `out` keeps the same checkpointed graph: deleting `loss` frees only the loss itself
    assert rows["loss"].unique == 4 and rows["out"].unique == 0
    run(ip, "del out")
    rows = {h.name: h for h in ip.run_line_magic("vram", "-d cpu").holders}
    # now the block's output (saved by pow) and the RNG state checkpoint keeps are loss's alone
    assert rows["loss"].unique == 4 + 512 * 256 * F32 + _nbytes(torch.get_rng_state())
    assert calls[0] == 1
    run(ip, "del blk, x, loss, calls, make")


def test_save_on_cpu_counts_the_packed_copies():
    w = torch.randn(256, 256, requires_grad=True)
    x = torch.randn(8, 256)
    with torch.autograd.graph.save_on_cpu():
        h = (x @ w).tanh()  # mm saves x (w is the leaf), tanh its output: both packed (tensor.cpu(): themselves on CPU)
        loss = h.sum()
    h_key = h.untyped_storage()._cdata
    del h
    held = storages_held(loss, CPU)
    # the loss, the leaf w, and the two packed tensors (8 x 256 each), found in save_on_cpu's (device, tensor) tuples
    assert sum(held.values()) == 4 + _nbytes(w) + 2 * 8 * 256 * F32
    assert x.untyped_storage()._cdata in held and h_key in held


def test_user_hooks_packing_to_a_tuple_and_raising_unpack_hooks_are_never_run():
    unpacked = [0]

    def pack(t):
        return ("packed", t.detach().clone(), {"note": "x"})

    def unpack(p):
        unpacked[0] += 1
        raise RuntimeError("unpack must not run while vramnb walks the graph")

    w = torch.randn(64, 64, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss = torch.tanh(torch.randn(16, 64) @ w).sum()  # saves the input and the tanh output, both cloned
    held = storages_held(loss, CPU)
    tr = StorageTracker("cpu")
    tr.scan()
    assert unpacked[0] == 0
    assert sum(held.values()) == 4 + _nbytes(w) + 2 * 16 * 64 * F32
    with pytest.raises(RuntimeError, match="must not run"):
        loss.backward()  # the user's hook is still there and still raises
    assert unpacked[0] == 1


def test_guarded_read_skips_hooked_tensors_and_keeps_plain_ones(monkeypatch):
    monkeypatch.setattr(graph, "_HAS_DATA", False)
    ran = [0]

    def unpack(p):
        ran[0] += 1
        return p

    w = torch.randn(32, 32, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, unpack):
        hooked = torch.tanh(torch.randn(4, 32) @ w).sum()
    plain_in = torch.randn(4, 32)
    plain = torch.tanh(plain_in @ w)
    held_plain = storages_held(plain, CPU)
    held_hooked = storages_held(hooked, CPU)
    assert ran[0] == 0
    # tanh saves its output (plain itself), mm the input: read without hooks, as before
    assert sum(held_plain.values()) == _nbytes(plain) + _nbytes(plain_in) + _nbytes(w)
    # the hooked ones cannot be read without running the hook: skipped, the leaf still counted
    assert sum(held_hooked.values()) == 4 + _nbytes(w)


def test_custom_function_ctx_attributes_are_held():
    class Keep(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            ctx.extra = a * 2  # a tensor kept on ctx, not through save_for_backward
            return a * 3

        @staticmethod
        def backward(ctx, g):
            return g * 3

    a = torch.randn(1000, requires_grad=True)
    y = Keep.apply(a)
    held = storages_held(y, CPU)
    assert sum(held.values()) == _nbytes(y) + _nbytes(a) + 1000 * F32  # y, the leaf a (saved), ctx.extra


@pytest.mark.parametrize("legacy", [False, True])
def test_tensors_a_custom_function_saved_for_backward_are_held(legacy, monkeypatch):
    """ctx.save_for_backward of an intermediate (a fused kernel's workspace kept
    for backward): the result holds it, on PyTorch with and without SavedTensor.data."""
    if legacy:
        monkeypatch.setattr(graph, "_HAS_DATA", False)

    class Fused(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            big = x.repeat(256)
            ctx.save_for_backward(big)
            return x.sum()

        @staticmethod
        def backward(ctx, g):
            (big,) = ctx.saved_tensors
            return g * big[:4096]

    x = torch.randn(4096, requires_grad=True)
    loss = Fused.apply(x)
    held = storages_held(loss, CPU)
    assert sum(held.values()) == _nbytes(loss) + _nbytes(x) + 4096 * 256 * F32
