"""An out-of-memory inside one library call gets a reading of that call (:mod:`vramnb.diagnose._op_call`):
what it asked for, for which output of which operator, from how much input (×k), and its family's cheaper form
from one table (:mod:`vramnb.diagnose._call_table`), each code line executed here. CPU: real failures where the
request alone is too large; elsewhere a dispatch mode *below* the tracker's raises the CPU allocator's error at
one operator with the request computed from the shapes (the tracker sees the failure as it sees a real one).
A Python-side ``MemoryError`` (``.tolist()``) gets its Python objects' bytes, checked against tracemalloc."""

from __future__ import annotations

import sys
import tracemalloc

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.conftest import measured_oom, run
from vramnb._units import format_bytes


class FailAt(TorchDispatchMode):
    """Raises the CPU allocator's error, asking ``nbytes``, at the first call of ``op`` (an overload packet)."""

    def __init__(self, op, nbytes, skip=0):
        super().__init__()
        self.op, self.nbytes, self.skip = op, nbytes, skip

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket is self.op and self.skip:
            self.skip -= 1
        elif func.overloadpacket is self.op:
            raise RuntimeError(f"DefaultCPUAllocator: can't allocate memory: you tried to allocate {self.nbytes} "
                               "bytes. Error code 12 (Cannot allocate memory)")
        return func(*args, **(kwargs or {}))


def _failing(ip, setup, cell, op, nbytes, skip=0):
    run(ip, setup)
    ip.user_ns["_fail_mode"] = FailAt(op, nbytes, skip)
    run(ip, "_fail_mode.__enter__()")  # below the tracker's mode, which %%vram enters after it
    try:
        oom, _ = measured_oom(ip, cell)
    finally:
        run(ip, "_fail_mode.__exit__(None, None, None)")
    assert oom.state.requested == nbytes and oom.state.at_failure
    return oom


def _fix(oom, text):
    """The fix whose sentence holds ``text`` (what the notebook holds out of sight may come first)."""
    found = [f for f in oom.verdict.fixes if text in f.what]
    assert found, [f.what for f in oom.verdict.fixes]
    return found[0]


def _ns(ip, code, **extra):
    g = {"torch": torch, **{k: v for k, v in ip.user_ns.items() if not k.startswith("_")}, **extra}
    exec(code, g)
    return g


def test_einsum_of_four_operands_gets_its_intermediate_and_a_pairwise_order(ip, monkeypatch):
    from torch.backends import opt_einsum

    if opt_einsum.is_available():  # installed, torch contracts in the best order: left to right as without it
        monkeypatch.setattr(opt_einsum, "enabled", False)
    n = 100
    oom = _failing(ip, f"n = {n}\nA, B, C = torch.randn(n, n), torch.randn(n, n), torch.randn(n, n)",
                   'D = torch.einsum("ij,jk,kl,jk->il", A, B, C, B)', torch.ops.aten.mul, n ** 4 * 4, skip=1)
    ctx = oom.state.context
    inputs = 3 * n * n * 4  # A, B, C (B twice: one storage)
    assert ctx.call == (f'`torch.einsum("ij,jk,kl,jk->il", A, B, C, B)` asked for {format_bytes(n ** 4 * 4)} for the '
                        f"(100, 100, 100, 100) float32 output of aten::mul inside it from {format_bytes(inputs)} of "
                        f"inputs (×{n ** 4 * 4 / inputs:,.0f}): A (100, 100) float32, B (100, 100) float32, "
                        "C (100, 100) float32")
    f = _fix(oom, "torch.einsum contracts")
    assert ("torch.backends.opt_einsum.enabled is False" if opt_einsum.is_available()
            else "left to right when the opt_einsum package is not installed") in f.what
    assert f"its largest intermediate is {format_bytes(n * n * 4)} instead of the {format_bytes(n ** 4 * 4)}" in f.what
    g = _ns(ip, f.code)
    A, B, C = (ip.user_ns[k] for k in "ABC")
    torch.testing.assert_close(g["D"], A @ (B ** 2) @ C, rtol=1e-4, atol=1e-3)
    assert not any("read the shapes on the failing line" in x.what for x in oom.verdict.fixes)


def test_a_full_sort_read_at_one_index_gets_kthvalue(ip):
    n = 1_000_000
    oom = _failing(ip, f"scores = torch.rand({n})\nsparsity = 0.9",
                   "values, _ = torch.sort(scores)\nthreshold = values[int(sparsity * scores.numel())]",
                   torch.ops.aten.sort, n * 8)
    assert oom.state.context.call == (f"`torch.sort(scores)` asked for {format_bytes(n * 8)} for one of its 2 outputs, "
                                      f"({n},) int64 from {format_bytes(n * 4)} of inputs (×2.0): scores ({n},) "
                                      "float32")
    f = _fix(oom, "kthvalue")
    assert f.what.startswith(f"the sort's whole result (values and int64 indices: {n:,} × (4 + 8) B = "
                             f"{format_bytes(n * 12)}) serves to read one value, `values[int(sparsity * "
                             "scores.numel())]`: torch.kthvalue")
    g = _ns(ip, f.code)
    s = ip.user_ns["scores"]
    assert g["values_k"] == torch.sort(s).values[int(0.9 * s.numel())]


def test_a_sort_whose_values_are_used_whole_gets_no_kthvalue(ip):
    oom = _failing(ip, "scores = torch.rand(1000)", "values, _ = torch.sort(scores)\ntotal = values.cumsum(0)",
                   torch.ops.aten.sort, 8000)
    assert oom.state.context.call.startswith("`torch.sort(scores)` asked for")
    assert not any("kthvalue" in f.what for f in oom.verdict.fixes)


def test_a_densified_sparse_operand_gets_sparse_mm(ip):
    n = 1000
    setup = (f"idx = torch.randint(0, {n}, (2, 5000))\n"
             f"A = torch.sparse_coo_tensor(idx, torch.rand(5000), ({n}, {n})).coalesce()\n"
             f"B = torch.sparse_coo_tensor(idx.flip(0), torch.rand(5000), ({n}, {n})).coalesce()")
    oom = _failing(ip, setup, "C = torch.sparse.mm(A, B.to_dense())", torch.ops.aten._sparse_addmm, n * n * 4)
    B = ip.user_ns["B"]
    held = B._indices().numel() * 8 + B._values().numel() * 4
    A = ip.user_ns["A"]
    from vramnb._storages import storages_of_tensor

    a_held = sum(st.nbytes() for _, st in storages_of_tensor(A))  # its indices' and values' storages
    # B.to_dense() has no meta copy of its size: no total (nor ratio) is claimed
    assert oom.state.context.call == ("`torch.sparse.mm(A, B.to_dense())` asked for 3.8 MiB inside aten::_sparse_addmm "
                                      f"(inputs not all readable: A (1000, 1000) float32 sparse_coo {format_bytes(a_held)})")
    f = _fix(oom, "to_dense")
    assert f.what.startswith(f"`B.to_dense()` writes every element of the sparse B ((1000, 1000) float32: "
                             f"{format_bytes(n * n * 4)} dense, from {format_bytes(held)} of indices and values, "
                             f"{B._nnz():,} non-zeros); torch.sparse.mm multiplies two sparse COO matrices")
    assert f.code == "C = torch.sparse.mm(A, B)"
    g = _ns(ip, f.code)
    torch.testing.assert_close(g["C"].to_dense(), torch.sparse.mm(ip.user_ns["A"], B.to_dense()))


def test_torch_tensor_of_a_numpy_array_gets_from_numpy(ip):
    ip.user_ns["batch"] = np.zeros((64, 3, 32, 32), dtype=np.float32)
    nbytes = 64 * 3 * 32 * 32 * 4
    oom = _failing(ip, "pass", "x = torch.tensor(batch)", torch.ops.aten.lift_fresh, nbytes)
    f = _fix(oom, "from_numpy")
    assert f.what.startswith(f"torch.tensor(batch) copies the NumPy array ((64, 3, 32, 32) float32, "
                             f"{format_bytes(nbytes)}) into new memory; torch.from_numpy(batch)")
    assert f.code == "x = torch.from_numpy(batch)"
    assert oom.state.context.call.endswith(f"from {format_bytes(nbytes)} of inputs (×1.0): batch (64, 3, 32, 32) "
                                           "float32")


def test_unfold_multiplied_with_a_weight_gets_conv2d(ip):
    setup = "x = torch.randn(2, 4, 10, 10)\nweight = torch.randn(8, 4, 3, 3)"
    cell = ("cols = torch.nn.functional.unfold(x, kernel_size=3, padding=1)\n"
            "out = (weight.view(8, -1) @ cols).view(2, 8, 10, 10)")
    req = 2 * 36 * 100 * 4
    oom = _failing(ip, setup, cell, torch.ops.aten.im2col, req)
    assert oom.state.context.call == (f"`torch.nn.functional.unfold(x, kernel_size=3, padding=1)` asked for "
                                      f"{format_bytes(req)} for the (2, 36, 100) float32 output of aten::im2col inside "
                                      f"it from {format_bytes(800 * 4)} of inputs (×9.0): x (2, 4, 10, 10) float32")
    f = _fix(oom, "unfold copies")
    assert "the result holds each element up to 9 times" in f.what and "F.conv2d" in f.what
    g = _ns(ip, f.code)
    x, w = ip.user_ns["x"], ip.user_ns["weight"]
    want = (w.view(8, -1) @ torch.nn.functional.unfold(x, kernel_size=3, padding=1)).view(2, 8, 10, 10)
    torch.testing.assert_close(g["out"], want, rtol=1e-4, atol=1e-4)


def test_combinations_gets_its_grid_and_the_pieces_that_make_the_same(ip):
    n = 100_000  # a real failure: the n^3 boolean mask alone is 1e15 bytes, more than any address space maps
    run(ip, f"atoms = torch.arange({n})")
    oom, _ = measured_oom(ip, "triplets = torch.combinations(atoms, r=3)")
    grid = n ** 3
    assert oom.state.requested == grid  # the bool mask
    assert oom.state.context.call == (f"`torch.combinations(atoms, r=3)` asked for {format_bytes(grid)} for the "
                                      f"({n}, {n}, {n}) bool output of aten::full inside it from {format_bytes(n * 8)} "
                                      f"of inputs (×{grid / (n * 8):,.0f}): atoms ({n},) int64")
    f = _fix(oom, "torch.combinations works")
    assert f.what.startswith(f"torch.combinations works on the whole {n}^3 grid of index tuples ({grid:,} elements: "
                             f"a boolean mask of {format_bytes(grid)}, and each of the 3 index grids, "
                             f"{format_bytes(grid * 8)} in int64")
    small = torch.arange(9)
    for r in (2, 3):
        code = f.code.replace("r=2", f"r={r - 1}") if r == 2 else f.code
        if r == 2:
            code = code.replace("torch.combinations(atoms[i + 1:], r=1)", "atoms[i + 1:].reshape(-1, 1)")
        g = _ns(ip, code, atoms=small)
        assert torch.equal(g["triplets"], torch.combinations(small, r=r)) or r == 2


def test_one_hot_targets_for_a_log_softmax_loss_get_cross_entropy(ip):
    setup = "C = 8\nlogits = torch.randn(2, C, 4, 4)\nlabels = torch.randint(0, C, (2, 4, 4))"
    cell = ("target = torch.nn.functional.one_hot(labels, C).permute(0, 3, 1, 2).float()\n"
            "loss = -(target * torch.nn.functional.log_softmax(logits, dim=1)).sum(1).mean()")
    req = 32 * 8 * 8
    oom = _failing(ip, setup, cell, torch.ops.aten.zeros, req)
    f = _fix(oom, "F.one_hot")
    assert f.what.startswith(f"F.one_hot(labels, C) makes an int64 tensor of labels's shape × 8 classes: 32 × 8 × 8 B "
                             f"= {format_bytes(req)} (each conversion of it, .float(), {format_bytes(req // 2)} more)")
    assert "F.cross_entropy takes the class indices labels directly" in f.what
    g = _ns(ip, f.code)
    lg, lb = ip.user_ns["logits"], ip.user_ns["labels"]
    want = -(torch.nn.functional.one_hot(lb, 8).permute(0, 3, 1, 2).float()
             * torch.nn.functional.log_softmax(lg, dim=1)).sum(1).mean()
    torch.testing.assert_close(g["loss"], want)


def test_vmap_of_grad_over_the_batch_gets_chunk_size_and_the_per_sample_size(ip):
    setup = ("from torch.func import functional_call, grad, vmap\nmodel = torch.nn.Linear(16, 4)\n"
             "params = {k: v.detach() for k, v in model.named_parameters()}\n"
             "x, y = torch.randn(64, 16), torch.randn(64, 4)\n"
             "def loss_fn(p, xi, yi):\n    return ((functional_call(model, p, (xi,)) - yi) ** 2).sum()")
    oom = _failing(ip, setup, "per_sample = vmap(grad(loss_fn), in_dims=(None, 0, 0))(params, x, y)",
                   torch.ops.aten.mul, 64 * 4 * 4)  # in the batched backward
    pb = (16 * 4 + 4) * 4
    f = _fix(oom, "vmap runs")
    assert f.what.startswith("vmap runs `grad(loss_fn)` on all 64 samples at once: every tensor inside it carries the "
                             "batch dimension of 64; vmap(..., chunk_size=8) runs 8 at a time")
    assert f"one gradient per sample, is 64 × {format_bytes(pb)} = {format_bytes(64 * pb)}" in f.what
    assert f.code == "per_sample = vmap(grad(loss_fn), in_dims=(None, 0, 0), chunk_size=8)(params, x, y)"
    g = _ns(ip, f.code)
    assert g["per_sample"]["weight"].shape == (64, 4, 16)


def test_jacrev_of_a_tall_jacobian_gets_jacfwd(ip):
    setup = ("from torch.func import jacrev, jacfwd\nK = torch.randn(300, 20)\n"
             "def residual(w):\n    return torch.tanh(K @ w) - 0.5\nw = torch.randn(20)")
    oom = _failing(ip, setup, "J = jacrev(residual)(w)", torch.ops.aten.tanh_backward, 300 * 300 * 4)
    f = _fix(oom, "jacrev computes")
    assert "here 300 outputs, so the failing operator works on (300, 300) tensors" in f.what
    assert "w has 20: (20, 300) tensors" in f.what
    assert f.code == "J = jacfwd(residual)(w)"
    g = _ns(ip, f.code)
    torch.testing.assert_close(g["J"], torch.func.jacrev(ip.user_ns["residual"])(ip.user_ns["w"]))


@pytest.mark.parametrize("cell, op, out_shape", [
    ("d = torch.cdist(a, b)", "_euclidean_dist", "(8388608, 8388608)"),
    ("k = torch.kron(a, b)", "mul", "(8388608, 8388608, 4, 4)"),
])
def test_a_call_not_in_the_table_gets_the_generic_reading(ip, cell, op, out_shape):
    run(ip, "a = torch.randn(2**23, 4)\nb = torch.randn(2**23, 4)")
    oom, _ = measured_oom(ip, cell)  # real failures: the results alone are PiBs, more than any address space maps
    req = oom.state.requested
    inputs = 2 * 2**23 * 4 * 4
    call = cell.split(" = ")[1]
    assert oom.state.context.call == (f"`{call}` asked for {format_bytes(req)} for the {out_shape} float32 output of "
                                      f"aten::{op} inside it from {format_bytes(inputs)} of inputs "
                                      f"(×{req / inputs:,.0f}): a (8388608, 4) float32, b (8388608, 4) float32")
    assert "failing call: " + oom.state.context.call in "\n".join(__import__("vramnb")._report.oom_lines(oom))


# -- a Python-side MemoryError ----------------------------------------------------------------------------------------------
def _raiser():
    """A tolist that raises MemoryError from a library's frame (as CPython's own, from C, would at the user's line)."""
    g: dict = {}
    exec(compile("def tolist(self):\n    raise MemoryError()\n", "/lib/site-packages/fake_tolist.py", "exec"), g)
    return g["tolist"]


def test_tolist_memory_error_gets_its_python_objects(ip, monkeypatch):
    rows, cols = 100, 64
    run(ip, f"e = torch.randn({rows}, {cols})")
    e = ip.user_ns["e"]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = e.tolist()
    made = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del kept
    n = rows * cols
    want = n * sys.getsizeof(0.0) + (1 + rows) * sys.getsizeof([]) + (rows + n) * 8
    # the formula is CPython's own allocation; its free lists (up to 100 floats and 80 lists) may hand back
    # objects freed before, which tracemalloc then does not see allocated again
    assert want - (100 * 24 + 80 * 56) <= made <= want
    monkeypatch.setattr(torch.Tensor, "tolist", _raiser())
    import vramnb

    res, _ = run(ip, "%%vram -d cpu\nrows = e.tolist()")
    assert isinstance(res.error_in_exec, MemoryError)
    note = vramnb.history()[-1].notes[0]
    assert note.startswith("MemoryError: Python (or NumPy) could not allocate memory for its own objects, outside "
                           "torch's allocator")
    assert (f"it failed in `e.tolist()` (line 2): e.tolist() of a (100, 64) float32 tensor ({format_bytes(n * 4)}) "
            f"makes {n:,} Python float objects × 24 B (sys.getsizeof(0.0)) + 101 lists × 56 B (sys.getsizeof([])) + "
            f"6,500 list slots × 8 B = {format_bytes(want)}") in note
    assert "e[i].tolist()" in note and ".numpy()" in note


def test_one_hot_converted_on_the_same_line_gets_cross_entropy_not_only_drop_float(ip):
    setup = "C = 8\nlogits = torch.randn(2, C, 4, 4)\nlabels = torch.randint(0, C, (2, 4, 4))"
    cell = ("target = torch.nn.functional.one_hot(labels, C).permute(0, 3, 1, 2).float()\n"
            "loss = -(target * torch.nn.functional.log_softmax(logits, dim=1)).sum(1).mean()")
    oom = _failing(ip, setup, cell, torch.ops.aten._to_copy, 32 * 8 * 4)  # the .float() copy
    assert oom.state.context.call.startswith("`torch.nn.functional.one_hot(labels, C).permute(0, 3, 1, 2).float()` "
                                             f"asked for {format_bytes(32 * 8 * 4)} for the (2, 8, 4, 4) float32 "
                                             "output of aten::_to_copy inside it from")
    assert _fix(oom, "F.one_hot").code == "loss = torch.nn.functional.cross_entropy(logits, labels)"


def test_a_rectangular_product_is_not_said_to_grow_with_a_sequence_length(ip):
    run(ip, "q = torch.zeros(2**25, 2)\nd = torch.zeros(2**23, 2)")  # a 4 PiB product: no address space maps it
    oom, _ = measured_oom(ip, 'sim = torch.einsum("id,jd->ij", q, d)')
    f = _fix(oom, "materialises a")
    assert "sequence length" not in f.what and f"the product of {2**25} (`q`'s side) and {2**23} (`d`'s side)" in f.what


def test_inputs_are_counted_by_the_memory_they_hold_and_each_call_once(ip):
    run(ip, "v = torch.arange(1000)")
    oom, _ = measured_oom(ip, "y = v[:, None].expand(1000, 2**44).contiguous()")
    # the expanded view holds v's 8000 bytes, not its 8000 TiB of elements
    assert oom.state.context.call.endswith(f"from {format_bytes(8000)} of inputs (×{oom.state.requested / 8000:,.0f}): "
                                           f"v[:, None].expand(1000, 2 ** 44) (1000, {2**44}) int64")
    oom, _ = measured_oom(ip, "g = torch.cartesian_prod(torch.arange(2**16), torch.arange(2**16), torch.arange(2**16))")
    assert f"from {format_bytes(3 * 2**16 * 8)} of inputs" in oom.state.context.call  # three tensors, not one


def test_an_operator_on_the_line_gets_the_reading_too(ip):
    run(ip, "gx, gy = torch.meshgrid(torch.arange(2**24), torch.arange(2**24), indexing='ij')")
    oom, _ = measured_oom(ip, "z = gx + gy")
    assert oom.state.context.call == (f"`gx + gy` asked for {format_bytes(2**48 * 8)} for its result, "
                                      f"({2**24}, {2**24}) int64 from {format_bytes(2 * 2**24 * 8)} of inputs "
                                      f"(×{2**48 * 8 / (2**25 * 8):,.0f}): gx ({2**24}, {2**24}) int64, "
                                      f"gy ({2**24}, {2**24}) int64")


def test_a_comparison_of_two_views_of_one_tensor_gets_the_reading_with_its_memory_once(ip):
    # notebook 12's pairwise comparison: both sides are views of `w`, itself a view of `d` (2**24 bytes);
    # the result, 2 PiB, is more than any address space maps (a machine that overcommits memory too refuses it)
    run(ip, "d = torch.zeros(2**24, dtype=torch.uint8)\nw = d.unfold(0, 8, 1)")
    oom, _ = measured_oom(ip, "same = w[:, None, :] == w[None, :, :]")
    n = 2**24 - 7
    assert oom.state.requested == n * n * 8  # one bool per compared element
    assert oom.state.context.call == (
        f"`w[:, None, :] == w[None, :, :]` asked for {format_bytes(n * n * 8)} for its result, ({n}, {n}, 8) bool "
        f"from {format_bytes(2**24)} of inputs (×{n * n * 8 / 2**24:,.0f}): "
        f"w[:, None, :] ({n}, 1, 8) uint8, w[None, :, :] (1, {n}, 8) uint8")


def test_a_unary_operator_and_a_gather_get_the_reading(ip):
    run(ip, "v = torch.arange(1000.)\nidx = torch.zeros(1, dtype=torch.long).expand(2**48)")
    oom, _ = measured_oom(ip, "y = v[idx]")
    assert oom.state.context.call == (f"`v[idx]` asked for {format_bytes(2**48 * 4)} for the ({2**48},) float32 "
                                      f"output of aten::index inside it from {format_bytes(4000 + 8)} of inputs "
                                      f"(×{2**48 * 4 / 4008:,.0f}): v (1000,) float32, idx ({2**48},) int64")
    run(ip, "big = torch.zeros(1).expand(2**48)")
    oom, _ = measured_oom(ip, "y = -big")
    assert oom.state.context.call == (f"`-big` asked for {format_bytes(2**48 * 4)} for the ({2**48},) float32 "
                                      f"output of aten::neg inside it from {format_bytes(4)} of inputs "
                                      f"(×{2**48:,.0f}): big ({2**48},) float32")
