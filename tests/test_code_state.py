"""The user's code that vramnb runs changes nothing of the user's outside the model
(issue 28, adversary defects 04, 05, 06, 15, 18, 22; vramnb/_code_state.py).

Every entry point that runs a step (estimate, max_batch_size, fit, the out-of-memory
post-mortem's fake re-runs; profile_step, compare) runs the model's forwards, its hooks,
PyTorch's global module hooks and the loss function. What that code writes by name outside
the model (a notebook dict, a log list, a global or class counter, a NumPy array attribute,
a closure cell, a helper module's list) is put back as found: the same objects (identity)
holding the same values.

Counters that must survive a call (to prove the user's code ran) are kept where no code
vramnb runs reaches them by name: ``itertools.count`` objects read by the test only.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import sys

import numpy as np
import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor

import vramnb
from vramnb import Recipe

# -- the user's notebook state --------------------------------------------------------------
ACTS: dict[str, torch.Tensor] = {}
LOG: list[float] = []
CALLS = 0
HOOK_LOG: list[float] = []
GRAD_LOG: list[float] = []
GLOBAL_CALLS = [0]
REAL_RUNS = itertools.count()  # how often the forward ran on real tensors (read by the test only)
FAKE_RUNS = itertools.count()


def record(name: str, y: torch.Tensor) -> None:
    """A helper the forward calls by name, writing a module-level list and dict."""
    LOG.append(float(y.shape[0]))
    ACTS[name] = y.detach()


class Net(nn.Module):
    seen = 0  # a class-level counter

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(8, 16)
        self.l2 = nn.Linear(16, 1)
        self.calls = np.zeros(1)  # a NumPy attribute updated in place

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        global CALLS
        CALLS += 1
        Net.seen += 1
        self.calls += 1
        counter = FAKE_RUNS if isinstance(x, FakeTensor) else REAL_RUNS
        next(counter)
        y = self.l1(x)
        record("l1", y)
        return self.l2(y).sum()


class Recorder:
    """A hook that is a bound method of the user's object."""

    def __init__(self) -> None:
        self.n = 0
        self.last: torch.Tensor | None = None

    def hook(self, mod: nn.Module, inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        self.n += 1
        self.last = out.detach()


def _partial_hook(store: dict[str, int], mod: nn.Module, inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
    store["n"] = store.get("n", 0) + 1


def _user_state(rec: Recorder, store: dict[str, int]) -> dict[str, object]:
    """Everything of the user's the step's code can reach by name, by identity and value."""
    return {"ACTS": dict(ACTS), "ACTS id": id(ACTS), "LOG": list(LOG), "CALLS": CALLS, "seen": Net.seen,
            "HOOK_LOG": list(HOOK_LOG), "GRAD_LOG": list(GRAD_LOG), "GLOBAL_CALLS": list(GLOBAL_CALLS),
            "rec": dict(vars(rec)), "store": dict(store)}


def _linear_running(forward):  # type: ignore[no-untyped-def]
    """A module with one ``nn.Linear(8, 8)`` as ``self.l`` whose forward is ``forward`` (code compiled in a
    namespace of the test's, whose globals the forward reaches by name)."""
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(8, 8)

    M.forward = forward
    return M()


@pytest.fixture
def setup():
    torch.manual_seed(0)
    keep = torch.ones(2)
    ACTS.clear()
    ACTS["l1"] = keep  # a real tensor of the user's, there before the call
    LOG[:] = [1.0]
    HOOK_LOG.clear()
    GRAD_LOG.clear()
    GLOBAL_CALLS[:] = [0]
    model = Net()
    rec, store = Recorder(), {"n": 0}
    handles = [model.l1.register_forward_hook(rec.hook),
               model.l1.register_forward_hook(functools.partial(_partial_hook, store)),
               model.l2.register_forward_hook(lambda m, i, o: HOOK_LOG.append(o.detach().abs().mean().item())),
               model.l1.weight.register_hook(lambda g: GRAD_LOG.append(g.norm().item())),
               nn.modules.module.register_module_forward_hook(
                   lambda m, i, o: GLOBAL_CALLS.__setitem__(0, GLOBAL_CALLS[0] + 1))]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = _user_state(rec, store)
    yield model, opt, rec, store, keep, before
    for h in handles:
        h.remove()


def _unchanged(model: Net, rec: Recorder, store: dict[str, int], keep: torch.Tensor, before: dict[str, object]) -> None:
    now = _user_state(rec, store)
    assert now == before, {k: (before[k], now[k]) for k in now if now[k] != before[k]}
    assert ACTS["l1"] is keep and type(ACTS["l1"]) is torch.Tensor and torch.equal(keep, torch.ones(2))
    assert model.calls.tolist() == [0.0]
    assert rec.last is None


def _ran(counter: itertools.count, since: int) -> int:
    return next(counter) - since - 1


# -- the fake steps ---------------------------------------------------------------------------
def test_estimate_puts_back_what_the_forward_changed_and_says_so(setup):
    model, opt, rec, store, keep, before = setup
    fake0 = next(FAKE_RUNS)
    e = vramnb.estimate(model, torch.randn(4, 8), None, opt, target="24GiB")
    assert _ran(FAKE_RUNS, fake0) == 2  # the forward ran on fake tensors (2 steps)
    _unchanged(model, rec, store, keep, before)
    last = next(n for n in e.notes if n.startswith("predicted for 24GiB"))
    assert "nothing of yours was allocated or changed" not in last  # (defect 18: untrue before)
    assert "put back as found: " in last
    for name in ("ACTS", "LOG", "CALLS", "Net.calls", "Net"):
        assert name in last, last


def test_estimate_of_code_that_changes_nothing_says_nothing_changed():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    e = vramnb.estimate(model, torch.randn(4, 8), lambda m, b: m(b).sum(), None, target="24GiB")
    assert any(n == "predicted for 24GiB without running on it: nothing of yours was allocated or changed"
               for n in e.notes), e.notes


def test_max_batch_size_puts_back_what_the_forward_changed(setup):
    model, opt, rec, store, keep, before = setup
    fake0 = next(FAKE_RUNS)
    vramnb.max_batch_size(model, torch.randn(4, 8), None, opt, target="1GiB", progress=False)
    assert _ran(FAKE_RUNS, fake0) > 2
    _unchanged(model, rec, store, keep, before)


def test_fit_puts_back_what_the_forward_changed(setup):
    model, opt, rec, store, keep, before = setup
    fake0 = next(FAKE_RUNS)
    vramnb.fit(model, torch.randn(4, 8), None, opt, target="24GiB", allow={"precision": ["bf16"]}, progress=False)
    assert _ran(FAKE_RUNS, fake0) > 2
    _unchanged(model, rec, store, keep, before)


def test_a_factory_models_code_is_put_back_too(setup):
    _, _, rec, store, keep, before = setup
    fake0 = next(FAKE_RUNS)
    vramnb.estimate(Net, torch.randn(4, 8), None, lambda p: torch.optim.AdamW(p), target="24GiB")
    assert _ran(FAKE_RUNS, fake0) == 2
    now = _user_state(rec, store)
    assert now == before and ACTS["l1"] is keep


# -- the real steps ---------------------------------------------------------------------------
def test_profile_step_puts_back_what_the_code_and_hooks_changed(setup):
    model, opt, rec, store, keep, before = setup
    real0 = next(REAL_RUNS)
    r = vramnb.profile_step(model, torch.randn(4, 8), None, opt)
    assert _ran(REAL_RUNS, real0) == 2
    _unchanged(model, rec, store, keep, before)  # (defects 06 and 22: changed before)
    note = next(n for n in r.notes if n.startswith("also put back"))
    assert "CALLS" in note and "HOOK_LOG" in note and "GRAD_LOG" in note and "Net.seen" in note, note


def test_compare_puts_back_what_the_code_and_hooks_changed(setup):
    model, opt, rec, store, keep, before = setup
    real0 = next(REAL_RUNS)
    vramnb.compare(model, torch.randn(4, 8), None, opt, recipes=[Recipe(), Recipe(checkpointing="every block")])
    assert _ran(REAL_RUNS, real0) >= 4
    _unchanged(model, rec, store, keep, before)


def test_the_out_of_memory_post_mortem_re_runs_put_back_what_the_forward_changed():
    """Defect 15: the post-mortem's fake re-runs of the user's forward."""
    keep = torch.ones(2)
    acts = {"l": keep}
    real, fake = itertools.count(), itertools.count()

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.l(x)
            if isinstance(y, FakeTensor):
                next(fake)
            elif next(real) == 1:  # the second real step runs out of memory (as on a GPU)
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                                             "capacity of 23.6 GiB of which 1.1 GiB is free.")
            acts["l"] = y.detach()
            return y.sum()

    m = M()
    with pytest.raises(torch.OutOfMemoryError):
        vramnb.profile_step(m, torch.randn(4, 8), None, torch.optim.SGD(m.parameters(), lr=0.1))
    assert next(fake) > 0  # the diagnosis ran the forward on fake tensors
    assert list(acts) == ["l"] and acts["l"] is keep and torch.equal(keep, torch.ones(2))


# -- more of the kind -------------------------------------------------------------------------
def test_a_helper_module_a_closure_cell_and_a_new_global(tmp_path, monkeypatch):
    (tmp_path / "my_helpers.py").write_text("SEEN = []\ndef note(y):\n    SEEN.append(tuple(y.shape))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    helpers = importlib.import_module("my_helpers")
    total = 0
    last = {"y": None}
    ns: dict[str, object] = {"helpers": helpers, "torch": torch, "nn": nn}
    exec("def fwd(self, x):\n    global MADE\n    MADE = 1\n    helpers.note(x)\n    return self.l(x).sum()\n", ns)

    def make_loss():
        def loss(m, b):
            nonlocal total
            total += 1
            last["y"] = b
            return m(b)
        return loss

    m = _linear_running(ns["fwd"])
    loss = make_loss()
    for run in (lambda: vramnb.estimate(m, torch.randn(4, 8), loss, None, target="24GiB"),
                lambda: vramnb.profile_step(m, torch.randn(4, 8), loss, None)):
        run()
        assert helpers.SEEN == [] and "MADE" not in ns and last == {"y": None}
        cells = dict(zip(loss.__code__.co_freevars, loss.__closure__))
        assert cells["total"].cell_contents == 0 and cells["last"].cell_contents is last  # the nonlocal counter
    sys.modules.pop("my_helpers", None)


def test_a_numpy_array_attribute_is_put_back_on_every_path():
    """Defect 05: the fake copy shares the array with the user's model."""
    m = nn.Sequential(nn.Linear(8, 8))
    m.table = np.arange(6.0)

    def loss(mod, b):
        mod.table *= 2
        mod.table[0] = 7
        return mod(b).sum()

    data = m.table
    vramnb.estimate(m, torch.randn(4, 8), loss, None, target="24GiB")
    assert m.table is data and m.table.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    vramnb.profile_step(m, torch.randn(4, 8), loss, None)
    assert m.table is data and m.table.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


# -- attacked beyond the adversary's cases ---------------------------------------------------------
class _Slotted:
    __slots__ = ("n", "last")

    def __init__(self) -> None:
        self.n = 0


class _CountingHook:
    """A hook that is a callable object of the user's class."""

    def __init__(self) -> None:
        self.calls = 0
        self.shapes: list[tuple[int, ...]] = []

    def __call__(self, mod: nn.Module, inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        self.calls += 1
        self.shapes.append(tuple(out.shape))


TRACKER_SEEN: list[int] = []


class _Tracker:
    """An object of the user's the forward calls a method of; the method writes a module-level list."""

    def __init__(self) -> None:
        self.total = 0

    def update(self, y: torch.Tensor) -> None:
        self.total += 1
        TRACKER_SEEN.append(1)


TRACKER = _Tracker()
SLOTTED = _Slotted()


def test_slots_objects_callable_object_hooks_defaults_and_a_trackers_method():
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor, cache: dict = {}) -> torch.Tensor:  # noqa: B006 - the case
            y = self.l(x)
            cache["y"] = y
            SLOTTED.n += 1
            SLOTTED.last = y
            TRACKER.update(y)
            return y.sum()

    m = M()
    hook = _CountingHook()
    h = m.l.register_forward_hook(hook)
    default = M.forward.__defaults__[0]
    try:
        for run in (lambda: vramnb.estimate(m, torch.randn(4, 8), None, None, target="24GiB"),
                    lambda: vramnb.profile_step(m, torch.randn(4, 8), None, None)):
            run()
            assert default == {} and M.forward.__defaults__[0] is default
            assert SLOTTED.n == 0 and not hasattr(SLOTTED, "last")
            assert TRACKER.total == 0 and TRACKER_SEEN == []
            assert hook.calls == 0 and hook.shapes == []
    finally:
        h.remove()


def test_a_global_tensor_written_in_place_by_the_real_step_is_put_back():
    running = torch.zeros(8)
    seen = {"n": torch.zeros(())}

    def loss(m, b):
        y = m(b)
        with torch.no_grad():
            running.mul_(0.9).add_(y.mean(0))
            seen["n"] += 1
        return y.sum()

    m = nn.Linear(8, 8)
    keep = seen["n"]
    vramnb.profile_step(m, torch.randn(4, 8), loss, torch.optim.SGD(m.parameters(), lr=0.1))
    assert torch.equal(running, torch.zeros(8)) and seen["n"] is keep and float(keep) == 0.0


def test_what_cannot_be_recorded_is_named_and_the_estimate_claims_no_change():
    import io

    buf = io.StringIO()
    ticks = itertools.count()

    def loss(m, b):
        buf.write("step\n")  # a StringIO's buffer lives in C, outside its attributes
        next(ticks)
        return m(b).sum()

    e = vramnb.estimate(nn.Linear(8, 8), torch.randn(4, 8), loss, None, target="24GiB")
    last = next(n for n in e.notes if n.startswith("predicted for 24GiB"))
    assert "or changed" not in last and "not checked for changes" in last
    assert "buf (_io.StringIO" in last and "ticks (itertools.count" in last, last
    r = vramnb.profile_step(nn.Linear(8, 8), torch.randn(4, 8), loss, None)
    assert any(n.startswith("not checked for changes") and "buf (_io.StringIO" in n for n in r.notes), r.notes


def test_a_library_objects_state_is_left_to_the_library():
    """A bound method of a library object (torch's ModTracker, vramnb's own hooks) is not the user's: the walk
    neither records nor puts back its object (a GAN step reaching another module is restored by the snapshot)."""
    from vramnb._code_state import CodeState

    log: list[int] = []
    d = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    state = CodeState.take(None, [d.zero_grad, functools.partial(list.append, log)])
    assert [w for *_, w in state.containers] == ["list.append (partial's argument 0)"]


def test_a_chain_of_helpers_and_deep_values_are_put_back_and_what_is_too_deep_is_named():
    ns: dict[str, object] = {}
    exec("DEEP = {'a': {'b': {'c': {'d': []}}}}\n"  # a notebook's globals: the loss names h5 or h0 only
         + "".join(f"def h{i}(y):\n    return h{i + 1}(y)\n" for i in range(12))
         + "def h12(y):\n    DEEP['a']['b']['c']['d'].append(1)\n    return y\n"
         + "def loss(m, b):\n    h5(b)\n    return m(b).sum()\n"  # 7 calls down to the write: walked
         + "def deeper(m, b):\n    h0(b)\n    return m(b).sum()\n", ns)  # 12 calls down: past DEPTH

    e = vramnb.estimate(nn.Linear(8, 8), torch.randn(4, 8), ns["loss"], None, target="24GiB")
    assert ns["DEEP"] == {"a": {"b": {"c": {"d": []}}}}
    assert any("put back as found: DEEP['a']['b']['c']['d']" in n for n in e.notes), e.notes

    e = vramnb.estimate(nn.Linear(8, 8), torch.randn(4, 8), ns["deeper"], None, target="24GiB")
    last = next(n for n in e.notes if n.startswith("predicted for 24GiB"))
    assert "allocated or changed" not in last and "h8 (a function 9 calls deep: not walked)" in last, last


@pytest.mark.parametrize("raised", [KeyboardInterrupt, RuntimeError])
def test_put_back_when_the_users_code_raises_or_is_interrupted(raised):
    keep = torch.ones(2)
    acts = {"l": keep}
    log: list[int] = []

    def loss(m, b):
        y = m(b)
        acts["l"] = y.detach()
        log.append(1)
        raise raised("stop")

    for run in (lambda: vramnb.estimate(nn.Linear(8, 8), torch.randn(4, 8), loss, None, target="24GiB"),
                lambda: vramnb.profile_step(nn.Linear(8, 8), torch.randn(4, 8), loss, None)):
        with pytest.raises(raised):
            run()
        assert list(acts) == ["l"] and acts["l"] is keep and log == []


def test_a_logger_the_forward_uses_is_left_to_logging():
    """Walking a logger reached its manager's registry of every logger, and the put-back then removed the
    loggers torch made during the step: library objects are not recorded (loggers: output, not state)."""
    import io
    import logging

    buf = io.StringIO()
    log = logging.getLogger("vramnb_test_user")
    handler = logging.StreamHandler(buf)
    log.addHandler(handler)
    log.setLevel(logging.INFO)

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            log.info("forward")
            logging.getLogger("vramnb_test_user.made_in_forward")
            return self.l(x).sum()

    try:
        e = vramnb.estimate(M(), torch.randn(2, 4), None, None, target="24GiB")
        assert "vramnb_test_user.made_in_forward" in logging.Logger.manager.loggerDict
        assert "predicted for 24GiB without running on it: nothing of yours was allocated or changed" in e.notes
        vramnb.profile_step(M(), torch.randn(2, 4), None, None)
        assert buf.getvalue() == "forward\n" * 4  # the output stays output
    finally:
        log.removeHandler(handler)


def test_a_library_object_of_plain_data_is_put_back():
    """A library's object whose attributes are plain data (a model config a factory names: building
    GPT2LMHeadModel(cfg) sets cfg._attn_implementation_internal, notebook 14) is recorded and put back
    like the user's own objects, and the estimate says what it put back."""
    import json

    enc = json.JSONEncoder(indent=2)  # the standard library's object; its attributes are plain data

    def reads(m, b):
        assert enc.indent == 2
        return m(b).sum()

    e = vramnb.estimate(nn.Linear(8, 8), torch.randn(4, 8), reads, None, target="24GiB")
    last = next(n for n in e.notes if n.startswith("predicted for 24GiB"))
    assert last.endswith("nothing of yours was allocated or changed"), last

    def writes(m, b):
        enc.indent = 4
        return m(b).sum()

    e = vramnb.estimate(nn.Linear(8, 8), torch.randn(4, 8), writes, None, target="24GiB")
    last = next(n for n in e.notes if n.startswith("predicted for 24GiB"))
    assert "put back as found: enc" in last and "not checked" not in last, last
    assert enc.indent == 2


def test_a_module_imported_inside_forward_and_state_reached_through_weak_references(tmp_path, monkeypatch):
    """Adversary round d: ``import m`` / ``from m import X`` inside a forward (a user module's list, dict and
    object), a submodule reached through a package, a ``weakref.ref`` called and a ``WeakValueDictionary``
    indexed were not recorded (a weak reference is hashable, so it was taken as unchanging): every entry point
    left the forward's writes there."""
    import weakref

    pkg = tmp_path / "adv_pkg_d"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sub.py").write_text("LOG = []\n")
    (tmp_path / "adv_reg_d.py").write_text(
        "CALLS = []\nCACHE = {}\nclass T:\n    def __init__(self):\n        self.n = 0\nTRACK = T()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("adv_reg_d")
    importlib.import_module("adv_pkg_d.sub")
    import adv_reg_d
    from adv_pkg_d import sub

    class Box:
        def __init__(self) -> None:
            self.n = 0

    box, box2 = Box(), Box()
    ref, weak = weakref.ref(box), weakref.WeakValueDictionary({"b": box2})
    ns: dict[str, object] = {"ref": ref, "weak": weak}
    exec("def fwd(self, x):\n"
         "    import adv_reg_d\n"
         "    import adv_pkg_d.sub\n"
         "    from adv_reg_d import CACHE, TRACK\n"
         "    adv_reg_d.CALLS.append(1)\n"
         "    adv_pkg_d.sub.LOG.append(1)\n"
         "    CACHE['y'] = x\n"
         "    TRACK.n += 1\n"
         "    ref().n += 1\n"
         "    weak['b'].n += 1\n"
         "    return self.l(x)\n", ns)

    m = _linear_running(ns["fwd"])
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    loss = lambda mm, b: mm(b).sum()  # noqa: E731
    runs = {"estimate": lambda: vramnb.estimate(m, torch.randn(4, 8), loss, opt, target="24GiB"),
            "profile_step": lambda: vramnb.profile_step(m, torch.randn(4, 8), loss, opt)}
    try:
        for name, run in runs.items():
            run()
            state = (adv_reg_d.CALLS, adv_reg_d.CACHE, adv_reg_d.TRACK.n, sub.LOG, box.n, box2.n)
            assert state == ([], {}, 0, [], 0, 0), (name, state)
    finally:
        for name in ("adv_reg_d", "adv_pkg_d.sub", "adv_pkg_d"):
            sys.modules.pop(name, None)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before:UserWarning")
def test_an_lr_scheduler_a_grad_scaler_and_an_optimizers_settings_the_loss_changes_are_put_back():
    """Adversary round d: a loss function that steps an LR scheduler (of the profiled optimizer and of another),
    sets an optimizer's ``lr`` and uses a ``GradScaler``: library objects were only named as not checked, and
    ``estimate`` left the user's optimizer at the loss's ``lr`` (0.1 -> 5.0) and the schedulers advanced
    (last_epoch 0 -> 2, the other optimizer's lr 1.0 -> 0.25); ``profile_step`` left the schedulers advanced and
    the scaler's lazily made scale tensor."""
    torch.manual_seed(0)
    m = nn.Linear(8, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    other = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    sched2 = torch.optim.lr_scheduler.StepLR(other, step_size=1, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=256.0)
    calls = np.zeros(1)  # an array beside them: both kinds are put back in one restore

    def loss(mm, b):
        calls[0] += 1
        out = scaler.scale(mm(b).sum())
        sched.step()
        sched2.step()
        opt.param_groups[0]["lr"] = 5.0
        opt.param_groups[0]["new_key"] = 1
        return out

    def state():
        return (sched.state_dict(), sched2.state_dict(), dict(scaler.__dict__),
                [{k: v for k, v in g.items() if k != "params"} for o in (opt, other) for g in o.param_groups])

    found = state()
    for name, run in {"estimate": lambda: vramnb.estimate(m, torch.randn(4, 8), loss, opt, target="24GiB"),
                      "profile_step": lambda: vramnb.profile_step(m, torch.randn(4, 8), loss, opt)}.items():
        r = run()
        assert state() == found, name
        assert "sched2;" in " ".join(r.notes), (name, r.notes)  # named among what was put back
    assert scaler._scale is None and sched.last_epoch == 0 and other.param_groups[0]["lr"] == 1.0 and calls[0] == 0


def test_a_functools_cache_and_a_module_named_by_the_loss_are_put_back():
    """Adversary round d: an ``lru_cache``'d mask helper the forward calls kept the estimate's fake tensor
    (the user's next call got a ``FakeTensor``) and the real step's entry; a tracker module the loss updates
    through a method (not its forward) kept the profiled steps' sum and count."""

    @functools.lru_cache(maxsize=None)
    def causal_mask(n):
        return torch.ones(n, n).triu(1).bool()

    class Tracker(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("total", torch.zeros(()))
            self.count = 0

        def update(self, v):
            self.total += v.detach()
            self.count += 1

    tracker = Tracker()

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(8, 8)

        def forward(self, x):
            return self.l(x).masked_fill(causal_mask(x.shape[0])[:, :1], 0)

    def loss(mm, b):
        y = mm(b).sum()
        tracker.update(y)
        return y

    def plain_loss(mm, b):
        return mm(b).sum()

    m, x = Net(), torch.randn(5, 8)
    vramnb.estimate(m, x, plain_loss, None, target="24GiB")
    assert causal_mask.cache_info().currsize == 0 and type(causal_mask(5)) is torch.Tensor
    causal_mask.cache_clear()
    r = vramnb.profile_step(m, x, loss, torch.optim.SGD(m.parameters(), lr=0.1))
    assert causal_mask.cache_info().currsize == 0
    assert tracker.count == 0 and tracker.total.item() == 0.0 and tracker.total._version == 0
    assert any("functools cache" in n for n in r.notes), r.notes


def test_the_object_of_a_builtin_bound_method_the_loss_calls_is_put_back():
    """Adversary round d: ``record = losses.append`` / ``store = cache.__setitem__`` are built-in methods, taken as
    unchanging atoms, and ``counts.update`` a library's method, not walked: the list, dict and Counter behind them
    kept the estimate's fake tensors and the real step's."""
    import collections

    losses: list = []
    cache: dict = {}
    counts: collections.Counter = collections.Counter()
    record, store, bump = losses.append, cache.__setitem__, counts.update  # the last: a library's Python method

    def loss(mm, b):
        y = mm(b).sum()
        record(y.detach())
        store("last", y.detach())
        bump(["step"])
        return y

    m = nn.Linear(8, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for run in (lambda: vramnb.estimate(m, torch.randn(4, 8), loss, opt, target="24GiB"),
                lambda: vramnb.profile_step(m, torch.randn(4, 8), loss, opt)):
        run()
        assert losses == [] and cache == {} and counts == {}
