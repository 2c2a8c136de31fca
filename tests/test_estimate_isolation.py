"""estimate() on what users' notebooks hold: batches sliced from a dataset, loss
functions that reach the notebook's own objects, hooks from helper modules,
modules holding locks, files and big arrays, tied weights under FSDP; and what
max_batch_size says at its search limit. On CPU, exact bytes from shapes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vramnb


def _lf(m, b):
    return nn.functional.cross_entropy(m(b[0]), b[1])


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 10))


# -- 16: a batch that is a view of a dataset --------------------------------------------
@pytest.mark.parametrize("view", ["rows", "rows from the middle", "columns"])
def test_a_batch_sliced_from_a_dataset_counts_the_slice_not_the_dataset(view):
    data = torch.randn(20_000, 256)  # 19.5 MiB "dataset"
    x = {"rows": data[:32], "rows from the middle": data[5000:5032], "columns": data[:32, :256].t().t()}[view]
    y = torch.randint(0, 10, (32,))
    model = _model()
    e_view = vramnb.estimate(model, (x, y), _lf, device="cpu")
    e_copy = vramnb.estimate(model, (x.clone(), y), _lf, device="cpu")
    assert e_view.steady.peak.sources["input batch"] == 32 * 256 * 4 + 32 * 8
    assert e_view.steady.peak.allocated == e_copy.steady.peak.allocated


def test_a_column_view_is_a_dense_copy_and_shared_tensors_count_once():
    data = torch.randn(4096, 256)
    x = data[:32, :128]  # reaches 31 rows and a half of its span: a copy to the device is 32 x 128
    model = nn.Sequential(nn.Linear(128, 10))
    e = vramnb.estimate(model, (x, torch.randint(0, 10, (32,))), _lf, device="cpu")
    assert e.steady.peak.sources["input batch"] == 32 * 128 * 4 + 32 * 8
    ids = torch.randint(0, 100, (8, 16))
    emb = nn.Sequential(nn.Embedding(100, 8), nn.Flatten(), nn.Linear(128, 100))
    buf = torch.randint(0, 100, (2, 8, 16))  # input_ids and labels: two halves of one buffer
    for batch in ({"input_ids": ids, "labels": ids}, {"input_ids": buf[0], "labels": buf[1]}):
        e = vramnb.estimate(emb, batch, lambda m, b: m(b["input_ids"]).sum() + b["labels"].sum() * 0, device="cpu")
        assert e.steady.peak.sources["input batch"] == (1 if batch["labels"] is ids else 2) * 8 * 16 * 8


# -- 21: max_batch_size at its search limit ---------------------------------------------
def test_max_batch_size_says_when_it_stopped_at_its_limit():
    model = nn.Linear(8, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    r = vramnb.max_batch_size(model, torch.randn(16, 8), lambda m, b: m(b).sum(), opt, target="RTX 4090",
                              limit=4096, progress=False)
    assert r.at_limit and r.batch_size == 4096 and r.limit == 4096
    assert "fits at least up to the search limit 4096" in repr(r) and "raise limit=" in repr(r)
    assert "largest batch that fits" not in repr(r)
    big = nn.Sequential(nn.Linear(8, 1 << 16), nn.ReLU(), nn.Linear(1 << 16, 3))  # ~0.5 MiB per example of activations
    r = vramnb.max_batch_size(big, torch.randn(16, 8), lambda m, b: m(b).sum(), target="8GiB", limit=1 << 20,
                              progress=False)
    assert not r.at_limit and 0 < r.batch_size < 1 << 20
    assert f"largest batch that fits: {r.batch_size}" in repr(r)


# -- 3, 9b: a loss_fn that reaches the notebook's own tensors ---------------------------
def _user_state(*mods, opt=None):
    """Everything of the user's, exactly: values, gradients (by identity and value), versions."""
    out = []
    for m in mods:
        for n, t in [*m.named_parameters(), *m.named_buffers()]:
            out.append((n, type(t), t.detach().clone(), t._version, t.grad, None if t.grad is None else t.grad.clone()))
    if opt is not None:
        out.append(("opt", repr(opt.state_dict())))
    return out


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if x[0] == "opt":
            assert x == y
            continue
        n, ty, v, ver, g, gv = x
        assert (n, ty, ver) == y[:2] + (y[3],) or False, (n, ty, ver, y[:2], y[3])
        assert torch.equal(v, y[2]) and g is y[4]
        assert (gv is None and y[5] is None) or torch.equal(gv, y[5])


def _bn_model_with_state():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 8)).mean().backward()
    opt.step()
    model(torch.randn(4, 8)).mean().backward()  # pending gradients, not yet applied
    return model, opt


@pytest.mark.parametrize("where", [{"target": "A100"}, {"device": "cpu"}])
def test_a_loss_fn_using_the_notebooks_model_is_refused_and_changes_nothing(where, monkeypatch):
    # the step runs alone here: a thread an earlier test file left alive in this process must not
    # count as the user's (with another user thread running, only fakes are put back: test_user_threads)
    from vramnb.predict import _fake_guard

    monkeypatch.setattr(_fake_guard, "_user_threads", lambda: [])
    model, opt = _bn_model_with_state()
    x = torch.randn(4, 8)
    before = _user_state(model, opt=opt)
    with pytest.raises(ValueError, match="loss_fn uses the notebook's model, not its first argument: write lambda m, b: m"):
        vramnb.estimate(model, x, lambda m, b: model(b).mean(), opt, **where)
    _same(before, _user_state(model, opt=opt))
    with pytest.raises(ValueError, match="loss_fn uses the notebook's batch, not its second argument"):
        vramnb.estimate(model, x, lambda m, b: m(x).mean(), opt, **where)
    with pytest.raises(ValueError, match="optimizer factory"):
        vramnb.estimate(model, x, lambda m, b: m(b).mean(), lambda p: torch.optim.Adam(model.parameters()), **where)
    # a .grad set in Python reaches no operator: put back, and refused
    with pytest.raises(ValueError, match="replaced a parameter's .grad"):
        vramnb.estimate(model, x, lambda m, b: (setattr(model[0].weight, "grad", None), m(b).mean())[1], opt, **where)
    _same(before, _user_state(model, opt=opt))


def test_a_second_model_in_the_step_is_refused_and_a_frozen_one_is_read():
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    D = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
    z = torch.randn(32, 8)
    (-D(G(z).detach()).mean()).backward()
    before = _user_state(G, D)
    with pytest.raises(ValueError, match="requires grad and is not part of the estimated model"):
        vramnb.estimate(G, z, lambda g, b: -D(g(b)).mean(), torch.optim.Adam(G.parameters()), target="A100")
    _same(before, _user_state(G, D))
    D.requires_grad_(False)  # frozen but in train mode: BatchNorm would still update its statistics
    with pytest.raises(ValueError, match="writes into a real tensor of yours"):
        vramnb.estimate(G, z, lambda g, b: -D(g(b)).mean(), torch.optim.Adam(G.parameters()), target="A100")
    D.eval()
    frozen = _user_state(G, D)
    e = vramnb.estimate(G, z, lambda g, b: -D(g(b)).mean(), torch.optim.Adam(G.parameters()), device="cpu")
    _same(frozen, _user_state(G, D))
    assert e.steady.peak.sources["parameters"] == sum(p.numel() * 4 for p in G.parameters())


# -- 24: tied weights under FSDP --------------------------------------------------------
class _TiedLM(nn.Module):
    def __init__(self, layers=0):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.blocks = nn.ModuleList(nn.Linear(16, 16) for _ in range(layers))
        self.mid = nn.Linear(16, 16)
        self.head = nn.Linear(16, 50, bias=False)
        self.head.weight = self.emb.weight
        if layers:  # a block's weight tied to one outside the block list
            self.mid.weight = self.blocks[-1].weight

    def forward(self, x):
        h = self.emb(x)
        for b in self.blocks:
            h = torch.relu(b(h))
        return self.head(torch.relu(self.mid(h)))


@pytest.mark.parametrize("layers, tie", [(0, "emb.weight = head.weight"), (3, "blocks.2.weight = mid.weight")],
                         ids=["tie across the model's children", "a block tied to the rest"])
def test_fsdp_with_tied_weights_shards_the_tie_with_the_root(layers, tie):
    m = _TiedLM(layers)
    x = torch.randint(0, 50, (4, 8))
    e = vramnb.estimate(m, x, lambda mm, b: mm(b).mean(), torch.optim.AdamW(m.parameters()), device="cpu",
                        world_size=4, parallel="fsdp")
    # each parameter once (the tie is one tensor), its first dimension padded to a multiple of 4, then split in 4
    shard = sum(-(-p.shape[0] // 4) * (p.numel() // p.shape[0]) * 4 for p in m.parameters())
    assert e.steady.peak.sources["parameters"] == shard
    assert any(f"tied weights ({tie})" in n for n in e.notes)


# -- 23: what the model holds besides tensors -------------------------------------------
class _Cache:
    def __init__(self):
        self.k = torch.zeros(4, 3)
        self.calls = []


class _Holder(nn.Module):
    def __init__(self, extra):
        super().__init__()
        self.lin = nn.Linear(8, 3)
        self.extra = extra
        self.history = []
        self.seen = {}
        self.cache = _Cache()

    def forward(self, x):
        out = self.lin(x)
        self.history.append(len(self.history))
        self.seen["last"] = out
        self.cache.k = out.detach()
        self.cache.calls.append(1)
        return out.sum()


def test_modules_holding_locks_files_and_arrays_are_estimated_without_copying_them(tmp_path):
    import threading

    np = pytest.importorskip("numpy")
    copies = []

    class Table(np.ndarray):  # a NumPy array that says when it is copied
        def __deepcopy__(self, memo):
            copies.append(1)
            return super().__deepcopy__(memo)

        def __copy__(self):
            copies.append(1)
            return super().__copy__()

    arr = np.ones(4 * 2**20, dtype=np.float32).view(Table)  # 16 MiB outside PyTorch
    f = open(tmp_path / "log.txt", "w")
    extra = {"lock": threading.Lock(), "file": f, "table": arr}
    m = _Holder(extra)
    k0 = m.cache.k
    try:
        e = vramnb.estimate(m, torch.randn(4, 8), None, None, device="cpu")
    finally:
        f.close()
    assert copies == []  # the array was not copied
    note = next(n for n in e.notes if n.startswith("shared with your model"))
    assert "extra.lock: _thread.lock" in note and "extra.file: _io.TextIOWrapper" in note
    assert "extra.table: " in note and "Table, 16.0 MiB" in note
    # what the fake step changed on its copy is not the user's
    assert m.history == [] and m.seen == {} and m.cache.k is k0 and m.cache.calls == []
    assert m.extra is extra and extra["table"] is arr
    assert e.steady.peak.sources["parameters"] == (8 * 3 + 3) * 4


# -- 9: hooks from the user's helper modules ---------------------------------------------
def test_hooks_from_a_helper_module_and_optimizer_hooks_of_the_user_are_not_run(monkeypatch):
    import sys
    import types

    helpers = types.ModuleType("myhelpers")  # a helper file of the user's, imported by the notebook
    exec("ACTS = {}\nSTEPS = []\n"
         "def record(name):\n    def hook(mod, inp, out):\n        ACTS[name] = out.detach()\n    return hook\n"
         "def count(opt, args, kwargs):\n    STEPS.append(1)\n", helpers.__dict__)
    monkeypatch.setitem(sys.modules, "myhelpers", helpers)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    for n, mod in model.named_children():
        mod.register_forward_hook(helpers.record(n))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.register_step_post_hook(helpers.count)
    x = torch.randn(4, 8)
    model(x)
    acts = dict(helpers.ACTS)
    e = vramnb.estimate(model, x, lambda m, b: m(b).sum(), opt, device="cpu")
    assert helpers.ACTS.keys() == acts.keys() and all(helpers.ACTS[k] is v for k, v in acts.items())
    assert helpers.STEPS == []
    note = next(n for n in e.notes if "hook(s) of your own were not run" in n)
    assert note.startswith("4 hook(s)") and "0: record.<locals>.hook (myhelpers)" in note
    assert "optimizer step post hook: count (myhelpers)" in note
    # PyTorch's own hooks (pruning's forward pre-hook computes the weight) stay on the copy
    pruned = nn.Linear(8, 3)
    from torch.nn.utils import prune

    prune.l1_unstructured(pruned, "weight", 0.5)
    e = vramnb.estimate(pruned, x, lambda m, b: m(b).sum(), None, device="cpu")
    assert not any("hook(s) of your own" in n for n in e.notes)
    real = vramnb.profile_step(pruned, x, lambda m, b: m(b).sum(), None, module_depth=None)
    assert e.steady.peak.allocated - e.steady.peak.sources["other"] == \
        real.steady.peak.allocated - real.steady.peak.sources["other"]


def test_max_batch_size_says_when_not_even_one_fits():
    big = lambda: nn.Linear(1 << 14, 1 << 14)  # noqa: E731  1 GiB of parameters on a 1 GiB card (built on meta)
    r = vramnb.max_batch_size(big, torch.empty(2, 1 << 14, device="meta"), lambda m, b: m(b).sum(), target="1GiB",
                              progress=False)
    assert r.batch_size == 0 and not r.at_limit
    assert "not even a batch of 1 fits" in repr(r)


class _Cycle(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = self.a  # one module under two names
        self.__dict__["me"] = self  # a reference back to itself
        self.pair = (torch.ones(3), {"deep": [torch.ones(5)]})  # tensors at depth: fakes, not copies

    def forward(self, x):
        return self.b(self.a(x)).sum() + self.pair[0].sum() * 0 + self.pair[1]["deep"][0].sum() * 0


def test_shared_modules_cycles_deep_tensors_and_compiled_modules_are_copied_faithfully():
    m = _Cycle()
    pair = m.pair
    e = vramnb.estimate(m, torch.randn(2, 4), None, torch.optim.SGD(m.parameters(), lr=0.1), device="cpu")
    assert e.steady.peak.sources["parameters"] == (16 + 4) * 4
    assert m.pair is pair and type(m.pair[1]["deep"][0]) is torch.Tensor
    lin = nn.Linear(4, 4)
    e = vramnb.estimate(torch.compile(lin), torch.randn(2, 4), lambda mm, b: mm(b).sum(), device="cpu")
    assert e.steady.peak.sources["parameters"] == 20 * 4 and lin.weight.grad is None


def test_a_teacher_run_under_no_grad_is_read_and_one_in_train_mode_is_refused():
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 3))  # requires grad, as built
    student = nn.Linear(8, 3)
    x = torch.randn(4, 8)

    def distill(m, b):
        with torch.no_grad():
            t = teacher(b)
        return ((m(b) - t) ** 2).mean()

    before = _user_state(teacher)
    with pytest.raises(ValueError, match="writes into a real tensor of yours"):  # train mode: BatchNorm statistics
        vramnb.estimate(student, x, distill, torch.optim.SGD(student.parameters(), lr=0.1), device="cpu")
    _same(before, _user_state(teacher))
    teacher.eval()
    e = vramnb.estimate(student, x, distill, torch.optim.SGD(student.parameters(), lr=0.1), device="cpu")
    _same(before, _user_state(teacher))
    assert e.steady.peak.sources["parameters"] == (8 * 3 + 3) * 4


def test_global_hooks_of_the_user_are_set_aside_for_the_step_and_put_back(monkeypatch):
    import sys
    import types

    from torch.nn.modules.module import _global_forward_hooks, register_module_forward_hook

    helpers = types.ModuleType("myglobalhooks")
    exec("SEEN = []\ndef hook(mod, inp, out):\n    SEEN.append(out)\n", helpers.__dict__)
    monkeypatch.setitem(sys.modules, "myglobalhooks", helpers)
    before = dict(_global_forward_hooks)
    h = register_module_forward_hook(helpers.hook)
    try:
        e = vramnb.estimate(nn.Linear(8, 3), torch.randn(4, 8), lambda m, b: m(b).sum(), device="cpu")
        assert helpers.SEEN == []
        assert list(_global_forward_hooks) == [*before, h.id] and _global_forward_hooks[h.id] is helpers.hook
        assert any("global forward hooks: hook (myglobalhooks)" in n for n in e.notes)
    finally:
        h.remove()
    assert dict(_global_forward_hooks) == before
