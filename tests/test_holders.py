"""What a name holds: a result that requires grad keeps its autograd graph alive."""

from __future__ import annotations

import torch

from vramnb._holders import find_holders, storages_held
from vramnb._units import format_bytes

CPU = torch.device("cpu")


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def test_a_result_holds_the_tensors_saved_in_its_graph() -> None:
    lin = torch.nn.Linear(256, 256)
    x = torch.randn(64, 256)
    hidden = torch.tanh(lin(x))  # tanh saves its output for backward; the matmul saves x (for the weight's gradient)
    loss = hidden.sum()
    key = _key(hidden)
    del hidden  # now only the graph of `loss` keeps it alive
    held = storages_held(loss, CPU)
    assert held[key] == 64 * 256 * 4
    assert _key(x) in held
    loss.backward()  # frees the saved tensors: the graph keeps only its leaves (the parameters) and their gradients
    after = storages_held(loss, CPU)
    params = (256 * 256 + 256) * 4
    assert sorted(after.values()) == sorted([4, 256 * 256 * 4, 256 * 4, 256 * 256 * 4, 256 * 4])
    assert sum(after.values()) == 4 + 2 * params


def test_a_list_of_losses_is_named_as_the_holder_of_their_graphs() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    losses = [model(torch.randn(256, 128)).mean() for _ in range(3)]  # no backward, no no_grad: three graphs
    rows = {h.name: h for h in find_holders({"model": model, "losses": losses}, CPU)}
    # each graph saves its input (addmm's mat1) and the ReLU output (also the second addmm's mat1)
    saved_per_graph = 256 * 128 * 4 + 256 * 512 * 4
    params = sum(p.numel() * 4 for p in model.parameters())
    assert rows["losses"].unique == 3 * (saved_per_graph + 4)  # + the three scalar losses
    # the graphs keep the parameters alive too: deleting `model` would free nothing
    assert rows["model"].unique == 0 and rows["model"].nbytes == params
    assert rows["losses"].nbytes == 3 * (saved_per_graph + 4) + params


def test_no_grad_results_and_leaves_hold_only_themselves() -> None:
    lin = torch.nn.Linear(64, 64)
    with torch.no_grad():
        out = lin(torch.randn(8, 64))
    assert storages_held(out, CPU) == {_key(out): 8 * 64 * 4}
    assert set(storages_held(lin.weight, CPU)) == {_key(lin.weight)}


def test_module_parameters_do_not_include_their_gradients() -> None:
    lin = torch.nn.Linear(1024, 1024)
    lin(torch.randn(8, 1024)).sum().backward()
    rows = {h.name: h for h in find_holders({"lin": lin}, CPU)}
    p = (1024 * 1024 + 1024) * 4
    assert rows["lin"].detail == f"parameters {format_bytes(p)} · gradients {format_bytes(p)}"
    assert rows["lin"].nbytes == 2 * p


def test_not_shared_is_what_deleting_the_name_frees() -> None:
    x = torch.randn(2**20, requires_grad=True)
    z = x**2  # z's graph saves x
    found = find_holders({"x": x, "z": z}, CPU)
    rows = {h.name: h for h in found}
    n = 2**20 * 4
    assert rows["z"].unique == n  # `del z` frees z's own storage; x stays (its name)
    assert rows["x"].unique == 0  # `del x` frees nothing: z's graph keeps x
    assert rows["z"].nbytes == 2 * n and rows["x"].nbytes == n
    assert found.total == 2 * n  # both together, each storage once


def test_a_leaf_kept_only_by_a_graph_is_credited_to_that_graph() -> None:
    w = torch.randn(2**18, requires_grad=True)
    y = (w * 2).sum()  # mul saves only the number 2 (a float64 scalar): only AccumulateGrad keeps w
    del w
    rows = find_holders({"y": y}, CPU)
    n = 4 + 8 + 2**18 * 4  # y, the saved scalar, w
    assert [(h.name, h.nbytes, h.unique) for h in rows] == [("y", n, n)]
    assert rows.total == n


def test_names_ipython_hides_still_keep_memory_alive() -> None:
    t = torch.ones(1000)
    rows = {h.name: h for h in find_holders({"t": t, "_3": t}, CPU, skip={"_3"})}
    assert list(rows) == ["t"] and rows["t"].nbytes == 4000 and rows["t"].unique == 0


def test_a_bare_storage_is_held() -> None:
    s = torch.UntypedStorage(1234)
    assert sum(storages_held({"s": s}, CPU).values()) == 1234


def test_a_module_is_credited_with_tensors_in_its_plain_attributes() -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = torch.nn.Linear(16, 16)
            self.acts: list[torch.Tensor] = []
            self.kv_cache = torch.zeros(1024)
            self.extra = {"mask": torch.ones(512)}
            self._private = torch.ones(256)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.l(x)

    net = Net()
    net.register_forward_hook(lambda m, i, o: m.acts.append(o.detach()))
    with torch.no_grad():
        for _ in range(3):
            net(torch.randn(8, 16))
    attrs = (3 * 8 * 16 + 1024 + 512 + 256) * 4
    params = (16 * 16 + 16) * 4
    (row,) = find_holders({"net": net}, CPU)
    assert row.nbytes == row.unique == params + attrs
    assert row.detail == f"parameters {format_bytes(params)} · other attributes {format_bytes(attrs)}"


def test_an_optimizer_is_credited_with_tensors_in_its_plain_attributes() -> None:
    lin = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    opt.ema = [torch.zeros(100)]  # type: ignore[attr-defined]
    (row,) = find_holders({"opt": opt}, CPU)
    assert row.nbytes == (8 * 8 + 8) * 4 + 100 * 4


def test_a_gradient_with_a_graph_create_graph_is_held_by_its_parameter_and_named() -> None:
    import warnings

    from vramnb._holder_entries import GRAD_GRAPH
    from vramnb.diagnose._kept_graphs import grad_graph_note

    n = 1 << 16
    net = torch.nn.Linear(n, 1, bias=False)
    batch = torch.randn(8, n)
    inp = batch.clone().requires_grad_(True)  # named: the graph's leaf is inp's, not the graph's
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's own create_graph cycle warning
        net(inp).square().sum().backward(create_graph=True)
    # net.weight.grad = (2·out)^T·inp: its graph keeps `out` and 2·out (8×1 each, saved by square's
    # backward and by the matmul's) and the sum's grad (a 0-d one expanded: 4 B); inp is inp's
    rows = {h.name: h for h in find_holders({"net": net, "inp": inp}, CPU)}
    assert f"{GRAD_GRAPH} " in rows["net"].detail
    note = grad_graph_note({"net": net, "inp": inp}, CPU)
    assert note is not None and note.startswith(
        f"net.weight.grad, inp.grad keep autograd graphs of {format_bytes(2 * 8 * 4 + 4)} ")
    assert note.endswith("(a .grad carries a graph where backward ran with create_graph=True, or where code "
                         "assigned a tensor with a graph to .grad): set the gradients to None after use "
                         "(`net.zero_grad(set_to_none=True)` / `inp.grad = None`); assign detached tensors to .grad "
                         "(`.detach()`), and for a second-order gradient use `torch.autograd.grad(..., "
                         "create_graph=True)`, which returns the gradients instead of storing them")
    # the cycle (parameter -> .grad -> graph -> parameter) outlives the test otherwise: gc cannot free it,
    # and a later test in this process would count net's 256 KiB
    net.weight.grad = None
    inp.grad = None
    # a leaf's gradient: x.grad = ones·(1 - y²): its graph keeps the tanh result y and the ones
    x = torch.randn(n, requires_grad=True)
    y = x.tanh()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y.backward(torch.ones_like(y), create_graph=True)
    del y
    rows = {h.name: h for h in find_holders({"x": x}, CPU)}
    assert rows["x"].nbytes == 4 * n * 4  # x, x.grad, y and the ones: all reached from x
    assert grad_graph_note({"x": x}, CPU) == (
        f"x.grad keeps an autograd graph of {format_bytes(2 * n * 4)} (a .grad carries a graph where backward ran "
        "with create_graph=True, or where code assigned a tensor with a graph to .grad): set the gradients to None "
        "after use (`x.grad = None`); assign detached tensors to .grad (`.detach()`), and for a second-order gradient "
        "use `torch.autograd.grad(..., create_graph=True)`, which returns the gradients instead of storing them")
    x.grad = None
    assert grad_graph_note({"x": x}, CPU) is None


def test_vram_runs_no_code_of_the_users_objects(ip):
    """%vram only reads: a lazy proxy whose ``__class__`` builds the model it stands for, and a
    ``MagicMock(spec=nn.Module)`` that records calls, are left alone (the graph notes asked
    ``isinstance`` of every value and called a module's ``parameters()``; adversary case 09)."""
    from tests.conftest import run

    run(ip, "from unittest import mock\nLOADS = []\n"
            "class Lazy:\n"
            "    def __init__(self, factory):\n        object.__setattr__(self, '_f', factory)\n"
            "    @property\n    def __class__(self):\n"
            "        LOADS.append('built')\n        return type(object.__getattribute__(self, '_f')())\n"
            "lazy_model = Lazy(lambda: torch.nn.Linear(4, 4))\n"
            "m = mock.MagicMock(spec=torch.nn.Module)\nx = torch.ones(10)")
    # memory no name holds (a leaf .grad cycle gc cannot free), so that every note about it runs too
    # (the cache and buffer-graph notes asked isinstance of every value: failed only after other files)
    run(ip, "_c = torch.ones(1024, requires_grad=True)\n(_c * _c).sum().backward(create_graph=True)\n"
            "import weakref\n_cycle = weakref.ref(_c)\ndel _c")
    try:
        run(ip, "%vram")
    finally:
        run(ip, "_cycle().grad = None\ndel _cycle")
    assert ip.user_ns["LOADS"] == [] and ip.user_ns["m"].mock_calls == []
