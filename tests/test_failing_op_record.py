"""The failing operator's one record (:class:`vramnb.diagnose._failing_op.FailedOp`): made once by the
CPU tracker where the operator raised, read by the call's reading (``failing call:``) and by the autocast
gate; the operator is run again at most once for its outputs' shapes (on ``meta`` tensors), never with
the user's code (a subclass's ``__torch_function__``/``__torch_dispatch__``, a custom operator's fake
kernel, a mode of theirs), never on real memory, and nothing of the user's is kept after the report."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from tests.conftest import measured_oom, run
from tests.test_oom_call_reading import _failing
from vramnb._units import format_bytes
from vramnb.diagnose import _failing_op
from vramnb.diagnose._failing_op import FailedOp, read_op, record


def _stand_in_runs(monkeypatch, packet):  # type: ignore[no-untyped-def]
    """Count the runs of ``packet``'s overloads called from Python on tensors that are no real memory
    (``meta`` or fake): every replay of the failing operator, whoever makes it."""
    from torch._subclasses.fake_tensor import FakeTensor

    runs = []
    real_call = torch._ops.OpOverload.__call__

    def call(self, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        if self.overloadpacket is packet and any(
                type(a) is FakeTensor or (type(a) is torch.Tensor and a.device.type == "meta") for a in args):
            runs.append(self)
        return real_call(self, *args, **kwargs)

    monkeypatch.setattr(torch._ops.OpOverload, "__call__", call)
    return runs


def test_the_failing_operator_is_replayed_once_for_both_readers(ip, monkeypatch):
    """A sort whose int64 indices were the request: the ``failing call:`` line and the autocast gate both
    know the result's shape, from one run on stand-in tensors (two before: one per reader)."""
    runs = _stand_in_runs(monkeypatch, torch.ops.aten.sort)
    n = 1000
    oom = _failing(ip, f"scores = torch.rand({n})", "values, _ = torch.sort(scores)", torch.ops.aten.sort, n * 8)
    ctx = oom.state.context
    assert ctx.call.startswith(f"`torch.sort(scores)` asked for {format_bytes(n * 8)} for one of its 2 outputs, "
                               f"({n},) int64")
    assert (ctx.op_name, ctx.request_shape, ctx.lowered) == ("sort", (n,), False)
    assert isinstance(ctx.op, FailedOp) and ctx.op.outputs == (((n,), "float32", n * 4), ((n,), "int64", n * 8))
    assert len(runs) == 1, runs


def test_autocast_is_asked_only_where_the_request_is_a_float32_result(ip, monkeypatch):
    """The values of the sort (float32) were the request: autocast's answer needs fake tensors under
    autocast (the input as given, then as a lowered operation would give it), besides the one meta run."""
    calls = []
    real = _failing_op._replay

    def counted(op, autocast, *a, **k):  # type: ignore[no-untyped-def]
        calls.append(autocast)
        return real(op, autocast, *a, **k)

    monkeypatch.setattr(_failing_op, "_replay", counted)
    n = 1000
    oom = _failing(ip, f"scores = torch.rand({n})", "values, _ = torch.sort(scores)", torch.ops.aten.sort, n * 4)
    # sort's values follow their input's precision: not known to be lowered (the record does not show the input's
    # origin); still asked of autocast twice (as given, then lowered)
    assert oom.state.context.lowered is None
    assert calls.count(None) == 1 and calls.count("cpu") == 2, calls


def test_a_sparse_input_is_counted_by_its_parts_and_not_replayed():
    """COO: indices and values; CSR: row pointers, column indices and values (not the dense size)."""
    n, nnz = 1000, 300
    idx = torch.stack([torch.arange(nnz), torch.arange(nnz)])
    coo = torch.sparse_coo_tensor(idx, torch.rand(nnz), (n, n)).coalesce()
    csr = coo.to_sparse_csr()
    dense = torch.zeros(n, 4)
    op = record(torch.ops.aten.mm.default, (coo, dense), {})
    assert op is not None and op.inputs == (((n, n), "float32", "sparse_coo", nnz * 2 * 8 + nnz * 4),
                                            ((n, 4), "float32", "strided", n * 4 * 4))
    assert op.args is None and op.outputs is None and read_op(op, n * 4 * 4, "cpu") == ("", None, None, "")
    op = record(torch.ops.aten.mm.default, (csr, dense), {})
    assert op is not None and op.inputs[0] == ((n, n), "float32", "sparse_csr", (n + 1) * 8 + nnz * 8 + nnz * 4)


class _Counting(torch.Tensor):
    calls = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        cls.calls += 1
        return super().__torch_function__(func, types, args, kwargs or {})


class _Wrapper(torch.Tensor):
    calls = 0

    @staticmethod
    def __new__(cls, elem):  # type: ignore[no-untyped-def]
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, strides=elem.stride(),
                                                   dispatch_sizes_strides_policy="sizes")

    def __init__(self, elem):  # type: ignore[no-untyped-def]
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        cls.calls += 1
        if func is torch.ops.aten.sym_size.default:
            return args[0].elem.shape
        raise NotImplementedError


def test_the_record_runs_no_subclass_code_and_keeps_no_argument():
    """A ``__torch_function__`` subclass and a wrapper subclass whose sizes are asked of its
    ``__torch_dispatch__``: the record reads neither (not listed, not replayed), keeps no reference."""
    sub = torch.ones(4, 4).as_subclass(_Counting)
    wrap = _Wrapper(torch.ones(4, 4))
    plain = torch.ones(4, 4)
    _Counting.calls = _Wrapper.calls = 0
    op = record(torch.ops.aten.mm.default, (sub, plain), {})
    op2 = record(torch.ops.aten.mm.default, (wrap, plain), {})
    assert op is not None and op2 is not None
    assert op.inputs == op2.inputs == (((4, 4), "float32", "strided", 64),) and op.args is None and op2.args is None
    assert op.outputs is None and read_op(op, 64, "cpu") == ("", None, None, "")
    assert _Counting.calls == 0 and _Wrapper.calls == 0
    refs = [weakref.ref(t) for t in (sub, wrap, plain)]
    del sub, wrap, plain
    gc.collect()
    assert all(r() is None for r in refs)


def test_a_custom_operator_is_named_but_its_fake_kernel_never_runs():
    """A ``torch.library`` operator of the user's: its fake kernel is their code (it could print, count,
    allocate): the record names the operator, its outputs stay unknown."""
    calls = []

    @torch.library.custom_op("vramnb_test::expand_rows", mutates_args=())
    def expand_rows(x: torch.Tensor, k: int) -> torch.Tensor:
        return x.repeat(k, 1)

    @expand_rows.register_fake
    def _(x, k):  # type: ignore[no-untyped-def]
        calls.append(1)
        return x.new_empty(x.shape[0] * k, x.shape[1])

    x = torch.ones(4, 4)
    op = record(torch.ops.vramnb_test.expand_rows.default, (x, 1000), {})
    assert op is not None and op.name == "vramnb_test::expand_rows" and op.packet == "expand_rows"
    assert op.outputs is None and read_op(op, 4000 * 4 * 4, "cpu") == ("expand_rows", None, None, "")
    assert calls == []


def test_an_operator_without_a_meta_kernel_is_never_run_on_real_memory(monkeypatch):
    """``aten::_add_relu.Scalar`` has a CPU kernel and no meta one: ``FakeTensorMode``'s default fallback
    runs the real kernel on zero-filled tensors of the arguments' sizes (allocating again, at an
    out-of-memory, what the failing operator was given and asked for). Its outputs stay unknown."""
    from torch._subclasses import fake_tensor

    fallbacks = []
    real = fake_tensor.run_fallback_kernel

    def spy(*a, **k):  # type: ignore[no-untyped-def]
        fallbacks.append(a[1])
        return real(*a, **k)

    monkeypatch.setattr(fake_tensor, "run_fallback_kernel", spy)
    x = torch.ones(256, 1024)
    op = record(torch.ops.aten._add_relu.Scalar, (x, 1.0), {})
    assert op is not None and op.args is not None
    assert read_op(op, x.nbytes, "cpu") == ("_add_relu.Scalar", None, None, "")
    with pytest.raises(Exception):  # noqa: B017 - whichever error the refusal raises
        _failing_op._replay(op, "cpu")
    assert fallbacks == []


@pytest.mark.parametrize("cell", ["y = x[1:].contiguous().repeat(1 << 40, 1)",  # a view with a storage offset
                                  "y = z.repeat(1 << 40, 1)"])  # complex
def test_a_real_failure_on_a_view_or_a_complex_tensor_reads_its_result(ip, cell):
    run(ip, "x = torch.ones(5, 4)\nz = torch.ones(4, 4, dtype=torch.complex64)")
    oom, _ = measured_oom(ip, cell)
    ctx = oom.state.context
    assert ctx.op is not None and ctx.op.packet == "repeat"
    assert [o for o in ctx.op.outputs if o[2] == oom.state.requested]


def test_a_users_modes_see_no_replay(ip):
    """A ``TorchDispatchMode`` and a ``TorchFunctionMode`` of the user's, active around the measured cell:
    they see the user's own operators, never the replay's stand-in tensors (neither the meta run at the
    failure nor autocast's fake ones after it)."""
    run(ip, """
from torch.utils._python_dispatch import TorchDispatchMode
from torch.overrides import TorchFunctionMode

class _SeesDispatch(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.stand_ins = []
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(isinstance(a, torch.Tensor) and (a.is_meta or type(a) is not torch.Tensor) for a in args):
            self.stand_ins.append(func)
        return func(*args, **(kwargs or {}))

class _SeesFunction(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []
    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))

_fn_mode, _dispatch_mode = _SeesFunction(), _SeesDispatch()
scores = torch.rand(1000)
_fn_mode.__enter__(); _dispatch_mode.__enter__()
""")
    try:
        oom, _ = measured_oom(ip, "values, _ = torch.sort(scores.expand(1 << 50, 1000))")
    finally:
        run(ip, "_dispatch_mode.__exit__(None, None, None); _fn_mode.__exit__(None, None, None)")
    ctx = oom.state.context
    assert ctx.op is not None and ctx.op.packet == "sort" and ctx.call is not None
    assert ctx.op.outputs is not None and ctx.request_shape is not None  # the replay ran, out of their sight
    assert ip.user_ns["_dispatch_mode"].stand_ins == []
    assert ip.user_ns["_fn_mode"].calls.count("empty_strided") == 0, ip.user_ns["_fn_mode"].calls


@pytest.mark.parametrize("cell, packet", [
    ("q = torch.quantize_per_tensor(x.expand(1 << 50, 1000), 0.1, 0, torch.qint8)", "quantize_per_tensor"),
    ("r = qx.repeat(1 << 48, 1)", "repeat"),
])
def test_a_quantized_result_is_not_read_from_a_meta_run(ip, cell, packet):
    """PyTorch's meta kernel of ``quantize_per_tensor`` returns its input's dtype (float32), and a meta
    tensor holds no quantizer: the reading says which operator asked, never that the request was "a
    buffer inside it, not one of its outputs" (it was its qint8 output)."""
    run(ip, "x = torch.rand(1000)\nqx = torch.quantize_per_tensor(torch.rand(1024, 4), 0.1, 0, torch.qint8)")
    oom, _ = measured_oom(ip, cell)
    ctx = oom.state.context
    assert ctx.op is not None and ctx.op.packet == packet and ctx.op.outputs is None
    assert f"asked for {format_bytes(oom.state.requested)} inside aten::{packet}" in ctx.call
    assert "not one of its outputs" not in ctx.call
