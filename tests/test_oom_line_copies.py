"""The failing line's operation that asked for the memory, named with its bytes and its
non-copying form (:mod:`vramnb.diagnose._line_copies`): ``repeat`` -> ``expand``, attention
scores -> ``scaled_dot_product_attention``, a materialised broadcast -> ``cdist`` / matmul, an
out-of-place activation with gradients off -> in place, a conversion of a fresh concatenation,
boolean-mask indexing. CPU: real allocation failures (expanded inputs make the request
enormous), and, where the request must come after a first copy succeeded, an error raised by a
dispatch mode at that operation with the request computed from the shapes."""

from __future__ import annotations

import linecache
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.conftest import measured_oom, run
from vramnb._units import format_bytes
from vramnb.diagnose._line_copies import line_copy


from vramnb.diagnose._verdict import _default_dtype_fixes  # noqa: E402


def _oom(ip, cell):
    return measured_oom(ip, cell)[0]


def test_repeat_is_named_with_its_copy_and_the_expand_form(ip):
    run(ip, "causal = torch.ones(64, 64, dtype=torch.bool)\nbs = 2**40")
    oom = _oom(ip, "mask = causal[None, None].repeat(bs, 1, 1, 1).to(torch.float32) * -1.0")
    want = 2**40 * 64 * 64  # the bool repeat fails first
    assert oom.state.requested == want
    f = oom.verdict.fixes[0]
    assert f.what.startswith(f"`.repeat(bs, 1, 1, 1)` on the failing line copies causal[None, None] (4.0 KiB) "
                             f"{2**40} times into ({2**40}, 1, 64, 64), {format_bytes(want)}; `.expand(...)`")
    assert f.code == "(causal[None, None].to(torch.float32) * -1.0).expand(bs, -1, -1, -1)"


def test_repeat_of_a_dimension_longer_than_one_gets_no_expand(ip):
    run(ip, "w = torch.ones(64, 64, dtype=torch.bool)\nbs = 2**40")
    oom = _oom(ip, "big = w.repeat(bs, 1)")  # (2**40 * 64, 64): no view of w has that shape
    assert oom.state.requested == 2**40 * 64 * 64
    assert oom.state.context.transient is None


def test_attention_scores_are_named_with_the_square_matrix_and_sdpa(ip):
    run(ip, "q = torch.zeros(1, 1, 2**21, 2)\nk = torch.zeros(1, 1, 2**21, 2)\nv = torch.zeros(1, 1, 2**21, 2)")
    oom = _oom(ip, "scores = q @ k.transpose(-2, -1)\nattn = scores.softmax(-1) @ v")
    want = 2**42 * 4
    assert oom.state.requested == want
    f = oom.verdict.fixes[0]
    assert f.what.startswith(f"`q @ k.transpose(-2, -1)` on the failing line materialises a ({2**21} x {2**21}) "
                             f"matrix for each of 1 batch entries: (1, 1, {2**21}, {2**21}), {format_bytes(want)}")
    assert "scaled_dot_product_attention" in f.what and "(a softmax follows)" in f.what
    assert f.code.startswith("out = torch.nn.functional.scaled_dot_product_attention(q, k, v)")
    # no softmax in the code: the square matrix only, no attention claim
    oom = _oom(ip, "gram = q @ k.transpose(-2, -1)")
    assert "scaled_dot_product_attention" not in oom.verdict.fixes[0].what
    assert "compute it in chunks of rows" in oom.verdict.fixes[0].what


def test_a_materialised_pairwise_broadcast_is_named_with_cdist(ip):
    run(ip, "def dist(x, y):\n    n, m = x.size(1), y.size(1)\n    x = x.unsqueeze(2).expand(-1, n, m, -1)\n"
            "    y = y.unsqueeze(1).expand(-1, n, m, -1)\n    return torch.pow(x - y, 2).sum(3)\n"
            "a = torch.zeros(1, 2**20, 8)\nb = torch.zeros(1, 2**20, 8)")
    oom = _oom(ip, "D = dist(a, b)")
    want = 2**40 * 8 * 4
    assert oom.state.requested == want
    f = oom.verdict.fixes[0]
    assert f.what.startswith(f"`x - y` on the failing line materialises the broadcast shape (1, {2**20}, {2**20}, "
                             f"8), {format_bytes(want)}, from operands whose own storage is 32.0 MiB and 32.0 MiB")
    assert "torch.cdist(a, b)" in f.what and "torch.bmm" in f.code


def test_an_out_of_place_relu_module_with_gradients_off_gets_inplace(ip):
    run(ip, "import torch.nn as nn\nnet = nn.Sequential(nn.Identity(), nn.ReLU())\n"
            "x = torch.zeros(1).expand(2**50)")
    oom = _oom(ip, "with torch.no_grad():\n    y = net(x)")
    assert oom.state.requested == 2**50 * 4
    f = oom.verdict.fixes[0]
    assert f.what.startswith(f"ReLU at net[1] is out of place: it allocates its output, {format_bytes(2**50 * 4)}, "
                             f"beside its input of the same size ({2**50},)")
    assert f.code.startswith("net[1].inplace = True")
    # gradients on: a backward may need the input; nothing said
    run(ip, "w = torch.zeros(1, requires_grad=True).expand(2**50)")
    oom = _oom(ip, "y = net(w)")
    assert oom.state.context.transient is None


def test_an_out_of_place_functional_activation_with_gradients_off_gets_the_inplace_form(ip):
    run(ip, "h = torch.zeros(1).expand(2**50)")
    oom = _oom(ip, "with torch.no_grad():\n    y = torch.sigmoid(h)")
    f = oom.verdict.fixes[0]
    assert f.what.startswith(f"`torch.sigmoid(h)` on the failing line is out of place: it allocates a "
                             f"second tensor of {format_bytes(2**50 * 4)}")
    assert f.code == "h.sigmoid_()"
    # GELU has no in-place form in torch: nothing offered
    oom = _oom(ip, "with torch.no_grad():\n    y = torch.nn.functional.gelu(h)")
    assert oom.state.context.transient is None


class _FailAt(TorchDispatchMode):
    """Raises the CPU allocator's error at the first call of ``op``."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket is self.op:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory")
        return func(*args, **(kwargs or {}))


def _frame_at_failure(src, names, op):
    fn = f"<advice6-cell-{abs(hash(src))}>"
    linecache.cache[fn] = (len(src), None, src.splitlines(True), fn)
    g = {"torch": torch, **names}
    try:
        with _FailAt(op):
            exec(compile(src, fn, "exec"), g)
    except RuntimeError:
        tb = sys.exc_info()[2]
        while tb.tb_next is not None and tb.tb_next.tb_frame.f_code.co_filename == fn:
            tb = tb.tb_next
        return tb.tb_next.tb_frame if tb.tb_frame.f_code.co_filename != fn else tb.tb_frame
    raise AssertionError("no failure")


def test_a_conversion_of_a_fresh_concatenation_is_named_with_both_copies():
    parts = [torch.zeros(4, 8, dtype=torch.float16) for _ in range(3)]
    frame = _frame_at_failure("sample = torch.cat(sample).float()\n", {"sample": parts}, torch.ops.aten._to_copy)
    found = line_copy(frame, 12 * 8 * 4)
    assert found is not None
    what, code, grad_off = found
    assert what.startswith("`.float()` on the failing line converts the fresh result of `torch.cat(sample)` ((12, 8), "
                           "192 B in float16) into a second copy of 384 B in float32")
    assert "torch.cat([t.float() for t in sample])" in what
    assert code == "sample = torch.cat(sample)" and not grad_off
    assert line_copy(frame, 12 * 8 * 4 + 1) is None  # another request: nothing said


def test_boolean_mask_indexing_names_its_int64_indices_and_the_any_check():
    flat = torch.ones(1000)
    frame = _frame_at_failure("flat = flat[~torch.isinf(flat)]\n", {"flat": flat}, torch.ops.aten.index)
    found = line_copy(frame, 1000 * 8)
    assert found is not None
    assert found[0].startswith("boolean-mask indexing `flat[~torch.isinf(flat)]` on the failing line asked for its "
                               "int64 indices of the kept positions (8 bytes per element, up to 7.8 KiB here)")
    assert found[1] == "if (torch.isinf(flat)).any():\n    flat = flat[~torch.isinf(flat)]"
    assert line_copy(frame, 999 * 8) is None


_STEP_TECHNIQUES = ("autocast", "checkpoint", "compare", "smaller batch", "no_grad")


def test_a_model_built_while_the_old_one_is_bound_is_named_with_del_and_no_step_technique(ip):
    run(ip, "import torch.nn as nn\nmodel = nn.Linear(4, 4)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)")
    oom = _oom(ip, "for lr in (1.0, 2.0):\n    model = nn.Linear(2**31, 2**20)")
    assert oom.state.requested == 2**51 * 4
    assert oom.state.context.phase == "constructor"
    fixes = oom.verdict.fixes
    built = [f for f in fixes if f.what.startswith("the failure is in a constructor")]
    assert len(built) == 1
    assert built[0].what.startswith("the failure is in a constructor, building a new model into `model` while "
                                    "`model` still holds the previous Linear (80 B of parameters, buffers and "
                                    "gradients), and `opt` refers to its parameters (its state: 0 B)")
    assert built[0].code == "del model, opt  # before `model = nn.Linear(2**31, 2**20)` (at the end of each iteration)"
    assert not any(t in f.what + f.code for f in fixes for t in _STEP_TECHNIQUES)


def test_a_buffer_registered_in_every_layer_is_named_and_no_step_technique(ip):
    run(ip, "import torch.nn as nn\nclass Block(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
            "        self.register_buffer('mask', torch.ones(n, n, dtype=torch.bool))\n")
    oom = _oom(ip, "net = nn.Sequential(*[Block(2**26) for _ in range(4)])")
    assert oom.state.requested == 2**52
    fixes = oom.verdict.fixes
    buf = [f for f in fixes if f.what.startswith("the failure is in Block.__init__")]
    assert buf and buf[0].what.startswith(f"the failure is in Block.__init__, registering the buffer 'mask' of shape "
                                          f"({2**26}, {2**26}) ({format_bytes(2**52)}): every Block built registers "
                                          "its own copy")
    assert "persistent=False" in buf[0].code
    assert not any(t in f.what + f.code for f in fixes if f is not buf[0] for t in _STEP_TECHNIQUES)


def test_an_embedding_tables_dense_gradient_is_named_with_sparse_and_no_step_technique(ip):
    run(ip, "import torch.nn as nn\nemb = nn.Embedding(4, 4)\n"
            "emb.weight = nn.Parameter(torch.zeros(1).expand(2**30, 2**20))\nidx = torch.tensor([1, 2])")
    oom = _oom(ip, "emb(idx).sum().backward()")
    want = 2**50 * 4
    assert oom.state.requested == want
    fixes = oom.verdict.fixes
    assert fixes[0].what.startswith(f"the backward allocates the gradient of emb (Embedding ({2**30}, {2**20})) as a "
                                    f"dense tensor the size of the whole table, {format_bytes(want)}")
    assert "emb.sparse = True" in fixes[0].code
    assert not any(t in f.what + f.code for f in fixes for t in ("autocast", "checkpoint", "compare("))


def test_the_line_walk_builds_factories_on_meta_and_leaves_the_default_device():
    n = 2**40  # a real torch.ones(n, n) could never be allocated
    frame = _frame_at_failure("m = torch.ones(n, n, device='cpu').repeat(2, 1)\n", {"n": n}, torch.ops.aten.repeat)
    assert line_copy(frame, 2 * n * n * 4) is None  # repeating a dimension longer than 1: nothing offered
    assert torch.get_default_device() == torch.device("cpu")


def test_other_code_shapes_of_the_same_copies_are_named():
    q, k = torch.zeros(2, 4, 512, 8), torch.zeros(2, 4, 512, 8)
    scores = 2 * 4 * 512 * 512 * 4
    cases = [  # (line, op the dispatch mode fails, request from the shapes, start of the sentence)
        ("s = torch.einsum('bhid,bhjd->bhij', q, k).softmax(-1)\n", torch.ops.aten.bmm, scores,
         "`torch.einsum('bhid,bhjd->bhij', q, k)` on the failing line materialises a (512 x 512) matrix"),
        ("s = torch.matmul(q, k.transpose(-1, -2)).softmax(-1)\n", torch.ops.aten.bmm, scores,
         "`torch.matmul(q, k.transpose(-1, -2))` on the failing line materialises a (512 x 512) matrix"),
        ("s = torch.stack([q, k]).double()\n", torch.ops.aten._to_copy, 2 * q.numel() * 8,
         "`.double()` on the failing line converts the fresh result of `torch.stack([q, k])`"),
        ("s = (q[:, :, :, None, :] - k[:, :, None, :, :]).norm(dim=-1)\n", torch.ops.aten.sub, 2 * 4 * 512 * 512 * 8 * 4,
         "`q[:, :, :, None, :] - k[:, :, None, :, :]` on the failing line materialises the broadcast shape "
         "(2, 4, 512, 512, 8)"),
        ("s = q.unsqueeze(0).repeat(3, 1, 1, 1, 1)\n", torch.ops.aten.repeat, 3 * q.numel() * 4,
         "`.repeat(3, 1, 1, 1, 1)` on the failing line copies q.unsqueeze(0) (128.0 KiB) 3 times"),
    ]
    for src, op, req, start in cases:
        frame = _frame_at_failure(src, {"q": q, "k": k}, op)
        found = line_copy(frame, req)
        assert found is not None and found[0].startswith(start), (src, found)
    # softmax in the line: scaled_dot_product_attention with the line's names
    frame = _frame_at_failure(cases[0][0], {"q": q, "k": k}, torch.ops.aten.bmm)
    assert line_copy(frame, scores)[1].startswith("out = torch.nn.functional.scaled_dot_product_attention(q, k, v)")


def test_a_join_of_a_kept_list_is_named_with_a_preallocated_tensor_and_the_list_is_not_emptied(ip):
    """``parts = torch.cat(parts)`` after a loop that kept every part: the join needs the whole twice
    (the parts are alive while it is made); the fix fills one tensor as the parts are made, and
    emptying the list (which the join needs) is not offered. Expanded parts make the request
    enormous while the list holds 2 storages of 4 B."""
    run(ip, "jparts = []\nfor i in range(2):\n    jparts.append(torch.zeros(1).expand(2**40))")
    oom = _oom(ip, "jparts.append(torch.zeros(1).expand(2**40))\njoined = torch.cat(jparts)")
    want = 3 * 2**40 * 4
    assert oom.state.requested == want
    f = oom.verdict.fixes[0]
    assert f.what.startswith(f"`torch.cat(jparts)` on the failing line joins the 3 tensors of jparts (12 B) into a new "
                             f"tensor of {format_bytes(want)} while every part is alive: the join needs the whole twice")
    assert f.code.startswith(f"out = torch.empty(({3 * 2**40},), dtype=torch.float32)  # once, before the loop")
    assert not any(g.code == "jparts.clear()" for g in oom.verdict.fixes), oom.verdict.fixes
    run(ip, "del jparts")


def test_inplace_is_not_offered_where_the_next_layer_allocates_as_much(ip):
    """validation-10 (global_default_dtype_float64_oom, mc_dropout_passes_batched_by_repeat_oom): in an MLP of equal
    widths the Linear after the ReLU allocates an output of the same size while the ReLU's is its input, so an
    in-place ReLU lowers the memory for one step only and the peak comes back: no such fix. A narrower next layer
    (or none) keeps it."""
    run(ip, "import torch.nn as nn\nW = 1024\n"
            "equal = nn.Sequential(nn.Identity(), nn.ReLU(), nn.Linear(W, W))\n"
            "narrow = nn.Sequential(nn.Identity(), nn.ReLU(), nn.Linear(W, 1))\n"
            "x = torch.zeros(1, W).expand(2**38, W)")
    oom = _oom(ip, "with torch.no_grad():\n    y = equal(x)")
    assert oom.state.requested == 2**48 * 4
    assert not any("inplace" in (f.code or "") for f in oom.verdict.fixes)
    oom = _oom(ip, "with torch.no_grad():\n    y = narrow(x)")
    assert oom.verdict.fixes[0].code.startswith("narrow[1].inplace = True")


def test_a_float64_default_dtype_is_named_with_the_float32_fix(ip):
    """validation-10 global_default_dtype_float64_oom (pytorch#4588): a helper set the default dtype to float64."""
    try:
        run(ip, "torch.set_default_dtype(torch.float64)\nlin = torch.nn.Linear(8, 8)\n"
                "x = torch.zeros(1, 8).expand(2**46, 8)")
        oom = _oom(ip, "with torch.no_grad():\n    y = lin(x)")
        # (a request larger than any machine: halving it is no fix there, so the verdict reads the shapes first;
        # the fix itself, as any other verdict puts it first)
        [f] = _default_dtype_fixes(oom.state.context)
        assert f.what.startswith("the default dtype is float64 (torch.get_default_dtype(); set by "
                                 "torch.set_default_dtype, here or in a module imported before)")
        assert f"makes a float64 result ({format_bytes(2**46 * 8 * 8)})" in f.what
        assert f.code.startswith("torch.set_default_dtype(torch.float32)")
    finally:
        run(ip, "torch.set_default_dtype(torch.float32)")
    # float32 by default: not said
    run(ip, "lin = torch.nn.Linear(8, 8)\nx = torch.zeros(1, 8).expand(2**46, 8)")
    oom = _oom(ip, "with torch.no_grad():\n    y = lin(x)")
    assert _default_dtype_fixes(oom.state.context) == []


def test_a_repeat_of_the_first_dimension_viewed_as_copies_gets_reshape_and_expand(ip):
    """validation-10 attention_inputs_repeated_per_head_oom (allennlp#605): `inputs.repeat(h, 1, 1).view(h, B * T, D)`
    is h copies of one block: `inputs.reshape(1, B * T, D).expand(h, B * T, D)`, a view."""
    run(ip, "B, T, D = 2**20, 2**10, 2**6\nnum_heads = 8\ninputs = torch.zeros(1, 1, 1).expand(B, T, D)")
    oom = _oom(ip, "per_head = inputs.repeat(num_heads, 1, 1).view(num_heads, B * T, D)")
    f = oom.verdict.fixes[0]
    assert f.what.startswith("`.repeat(num_heads, 1, 1)` on the failing line copies inputs (")
    assert f"reads as 8 copies of the same ({2**30}, 64) block" in f.what
    assert f.code == "inputs.reshape(1, B * T, D).expand(num_heads, B * T, D)"
    # the code as printed, on small sizes: the same values as the repeat, as a view (no copy)
    ns = {"torch": torch, "B": 3, "T": 4, "D": 5, "num_heads": 2}
    ns["inputs"] = torch.arange(60.0).view(3, 4, 5)
    same = eval(f.code, ns)  # noqa: S307 - the printed fix
    assert torch.equal(same, ns["inputs"].repeat(2, 1, 1).view(2, 12, 5))
    assert same.untyped_storage().data_ptr() == ns["inputs"].untyped_storage().data_ptr()
