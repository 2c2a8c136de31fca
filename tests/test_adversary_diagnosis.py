"""Adversarial tests of the out-of-memory post-mortem and the holders walk it shares.

Each test attacks one way the diagnosis could change the user's objects, results or
exceptions: references kept through the failing frames' locals, user code run while
inspecting (``__torch_function__``, overridden ``values``/``__getitem__``/``__iter__``,
``__str__``), an exception of vramnb's replacing the user's, a report describing an
earlier failure than the one that ended the block. Bytes are exact, from shapes."""

from __future__ import annotations

import gc
import weakref
from unittest import mock

import pytest
import torch
from torch.utils._pytree import tree_map

import vramnb
from tests.conftest import Counted, LazyDict, LazyList, LazyTuple, Tally, run
from vramnb._holders import find_holders

MiB = 2**20
EIB = 1 << 60  # the CPU allocator refuses this


def _fail() -> None:
    torch.empty(EIB, dtype=torch.uint8)


# -- the failing frames' locals ------------------------------------------------------------
def test_postmortem_keeps_no_reference_through_a_frames_locals():
    """A function that catches the error, deletes a tensor and retries (a batch search): the
    post-mortem read its locals at the failure, and must not keep them alive (on Python < 3.13
    ``frame.f_locals`` is a snapshot dict stored on the frame)."""
    refs: list = []

    def search() -> bool:
        a = torch.ones(1 << 18)
        refs.append(weakref.ref(a))
        try:
            _fail()
        except RuntimeError:
            del a
            gc.collect()
            return refs[0]() is None  # freed while this frame still runs

    with vramnb.vram("cpu", record=False) as m:
        freed = search()
    assert freed
    assert m.report.oom is None  # caught: the block itself did not fail


def test_postmortem_runs_no_user_code_and_counts_every_layout():
    """Locals holding a ``__torch_function__`` subclass, a sparse tensor, a wrapper subclass,
    a mock that claims to be a tensor, a dict/list subclass with overridden accessors: none of
    their code runs, and each is counted by the storages that hold its data."""

    class Counting(torch.Tensor):
        calls = 0

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            Counting.calls += 1
            return super().__torch_function__(func, types, args, kwargs or {})

    nnz = 1 << 16

    def frame() -> None:
        sub = torch.ones(1 << 18).as_subclass(Counting)  # 1 MiB
        sp = torch.sparse_coo_tensor(torch.zeros(2, nnz, dtype=torch.int64), torch.ones(nnz), (4, 4))
        mk = mock.MagicMock(spec=torch.Tensor)
        d = LazyDict(a=torch.ones(1 << 17))  # 512 KiB
        lst = LazyList([torch.ones(1 << 16)])  # 256 KiB
        Counting.calls = Counted.calls = 0
        _fail()
        del sub, sp, mk, d, lst

    with pytest.raises(RuntimeError, match="can't allocate memory"):
        with vramnb.vram("cpu", record=False) as m:
            frame()
    got = {var: n for _, var, n, *_ in m.report.oom.state.frames}
    assert got == {"sub": MiB, "sp": 2 * nnz * 8 + nnz * 4, "d": MiB // 2, "lst": MiB // 4}
    assert (Counting.calls, Counted.calls) == (0, 0)


# -- the user's exception stays theirs ------------------------------------------------------
class _StrRaises(RuntimeError):
    def __str__(self) -> str:
        raise ValueError("the user's __str__ fails")


def test_an_error_whose_str_raises_is_not_replaced_at_the_end_of_the_block():
    with pytest.raises(_StrRaises):
        with vramnb.vram("cpu", record=False) as m:
            raise _StrRaises()
    assert m.report.exception == "_StrRaises" and m.report.oom is None


class _Raising(torch.Tensor):
    """A ``__torch_dispatch__`` subclass whose operators raise the user's own error."""

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype)

    def __init__(self, elem):
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.add.Tensor:
            raise _StrRaises()

        def unwrap(t):
            return t.elem if isinstance(t, _Raising) else t

        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))


def test_an_error_whose_str_raises_is_not_replaced_at_the_failing_operator():
    x = _Raising(torch.ones(4))
    with pytest.raises(_StrRaises):
        with vramnb.vram("cpu", record=False):
            torch.add(x, x)


# -- the report describes the failure that ended the block ----------------------------------
def test_report_is_of_the_failure_that_ended_the_block_not_an_earlier_caught_one():
    def build_and_fail():
        keep = [torch.ones(1 << 18) for _ in range(2)]  # 2 MiB at the final failure
        torch.empty(1 << 61, dtype=torch.uint8)
        return keep

    with pytest.raises(RuntimeError, match="2305843009213693952 bytes"):
        with vramnb.vram("cpu", record=False) as m:
            try:  # a batch search: the first try fails and is caught
                _fail()
            except RuntimeError:
                pass
            build_and_fail()
    oom = m.report.oom
    assert oom.requested == oom.state.requested == 1 << 61
    assert [(var, n) for _, var, n, *_ in oom.state.frames] == [("keep", 2 * MiB)]


# -- the holders walk (%vram, the re-run verdict, the holders at a failure) ------------------
def test_holders_walk_runs_no_overridden_container_accessor():
    Counted.calls = 0
    ns = {"d": LazyDict(a=torch.ones(1 << 18)), "l": LazyList([torch.ones(1 << 17)]),
          "t": LazyTuple((torch.ones(1 << 16),))}
    rows = find_holders(ns, torch.device("cpu"))
    assert {r.name: r.nbytes for r in rows} == {"d": MiB, "l": MiB // 2, "t": MiB // 4}
    assert {e.name: e.nbytes for r in rows for e in r.entries} == {"d['a']": MiB, "l[0]": MiB // 2,
                                                                    "t[0]": MiB // 4}
    assert Counted.calls == 0


def test_holders_walk_does_not_touch_mocks_or_run_torch_function():
    """Mocks that claim to be a tensor, a module or a dict (``spec=``) record every call and
    create a child on every attribute read; a ``__torch_function__`` subclass counts its calls;
    a ``weakref.proxy`` claims its referent's class but keeps nothing alive: the walk
    (``%vram``, the re-run verdict) reads through none of them."""

    class Counting(torch.Tensor):
        calls = 0

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            Counting.calls += 1
            return super().__torch_function__(func, types, args, kwargs or {})

    mocks = {"mt": mock.MagicMock(spec=torch.Tensor), "mm": mock.MagicMock(spec=torch.nn.Module),
             "md": mock.MagicMock(spec=dict)}
    holder = mock.MagicMock(spec=torch.nn.Module)
    holder.cache = torch.ones(1 << 18)  # a mock that does hold a tensor: 1 MiB
    sub = torch.ones(1 << 17).as_subclass(Counting)  # 512 KiB
    Counting.calls = 0
    ns = {**mocks, "holder": holder, "box": [mocks["mt"], sub], "proxy": weakref.proxy(sub)}  # a proxy keeps nothing
    rows = find_holders(ns, torch.device("cpu"))
    assert {r.name: r.nbytes for r in rows} == {"holder": MiB, "box": MiB // 2}
    assert Counting.calls == 0
    for m in [*mocks.values(), holder]:
        assert m.mock_calls == [] and not m._mock_children, m


# -- profile_step's global module hooks (the no-effect checks) -------------------------------
def test_no_effect_hooks_run_no_user_code_on_module_outputs():
    """Under autocast the global forward hook reads every module's output: a
    ``__torch_function__`` subclass and a dict subclass with an overridden ``values`` (the
    user's code) are read without running either."""
    import traceback

    hits: list[str] = []

    class Counting(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if any(f.filename.endswith("_no_effect.py") for f in traceback.extract_stack()):
                hits.append(str(func))
            return super().__torch_function__(func, types, args, kwargs or {})

    class LazyOut(dict):
        def values(self):
            hits.append("values")
            return super().values()

    class Scale(torch.nn.Module):  # elementwise only: autocast lowers nothing, every output is read
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(8))

        def forward(self, x):
            return LazyOut(y=(x * self.w).as_subclass(Counting))

    model = torch.nn.Sequential()
    model.add_module("s", Scale())

    def loss_fn(m, b):
        with torch.autocast("cpu", torch.bfloat16):
            return m.s(b)["y"].float().sum()

    rep = vramnb.profile_step(model, torch.randn(4, 8), loss_fn, None, steps=1)
    assert hits == []
    assert any("torch.autocast('cpu', bfloat16) changed nothing" in w for w in rep.warnings)


# -- in a notebook ------------------------------------------------------------------------


def test_batch_search_cell_keeps_its_result_and_frees_what_it_deleted(ip):
    """A %%vram cell that tries a batch too big, catches the error, frees and retries: its
    result, Out[n] and the freed tensor are as without vramnb."""
    run(ip, "import gc, weakref\n"
            "def search(sizes):\n"
            "    held = torch.ones(1 << 18)\n"
            "    ref = weakref.ref(held)\n"
            "    for n in sizes:\n"
            "        try:\n"
            "            return torch.empty(n, dtype=torch.uint8).numel(), None\n"
            "        except RuntimeError:\n"
            "            del held\n"
            "            gc.collect()\n"
            "            freed = ref() is None\n"
            "    return None, None")
    run(ip, "def search2(sizes):\n"
            "    held = torch.ones(1 << 18)\n"
            "    ref = weakref.ref(held)\n"
            "    out = []\n"
            "    for n in sizes:\n"
            "        try:\n"
            "            out.append(torch.empty(n, dtype=torch.uint8).numel())\n"
            "        except RuntimeError:\n"
            "            del held\n"
            "            gc.collect()\n"
            "            out.append(ref() is None)\n"
            "    return out")
    res, _ = run(ip, f"%%vram -d cpu\nsearch2([{EIB}, 1 << 20])")
    assert res.error_in_exec is None and res.result == [True, 1 << 20]
    assert vramnb.history()[-1].oom is None and vramnb.history()[-1].exception is None


def test_vram_on_cell_whose_error_str_raises_keeps_the_users_error(ip):
    run(ip, "class StrRaises(RuntimeError):\n    def __str__(self):\n        raise ValueError('no str')")
    run(ip, "%vram on -d cpu -q")
    try:  # not stored in history: IPython's own storing of the error calls str() and fails
        res = ip.run_cell("raise StrRaises()", store_history=False)
    finally:
        run(ip, "%vram off")
    assert type(res.error_in_exec).__name__ == "StrRaises"


def test_regrowth_verdict_and_vram_touch_no_lazy_attribute(ip):
    """The re-run verdict and ``%vram`` (with a last exception, whose frames are looked for
    among the notebook's variables) scan the namespace: lazy properties that allocate,
    ``__getattr__`` counters and a dict subclass loading its values lazily stay untouched;
    the verdict names the list that grew by exactly the bytes each run adds."""
    run(ip, "class Lazy:\n"
            "    reads = 0\n"
            "    def __init__(self):\n        self.small = torch.ones(4)\n"
            "    @property\n"
            "    def big(self):\n        Lazy.reads += 1\n        return torch.ones(1 << 20)\n"
            "    def __getattr__(self, name):\n        Lazy.reads += 1\n        return torch.ones(1 << 20)\n"
            "class LazyMap(dict):\n"
            "    def values(self):\n        Lazy.reads += 1\n        return super().values()\n"
            "    def items(self):\n        Lazy.reads += 1\n        return super().items()\n"
            "    def __iter__(self):\n        Lazy.reads += 1\n        return super().__iter__()\n"
            "lazy, lmap, grow = Lazy(), LazyMap(t=torch.ones(8)), []")
    cell = "%%vram -d cpu\ngrow.append(torch.ones(1 << 16))"  # 256 KiB more each run
    for _ in range(3):
        run(ip, cell)
    notes = vramnb.history()[-1].notes
    assert any(n.startswith("each run of this cell leaves 256.0 KiB more (3 runs in a row): grow grew by 256.0 KiB")
               for n in notes), notes
    assert ip.user_ns["Lazy"].reads == 0
    ip.run_cell("def fails():\n    x = torch.ones(1 << 16)\n    1 / 0\nfails()")  # a last exception
    res, _ = run(ip, "%vram")
    assert res.error_in_exec is None
    assert ip.user_ns["Lazy"].reads == 0


def test_a_class_with_an_unhashable_metaclass_breaks_no_measurement():
    """A metaclass defining ``__eq__`` without ``__hash__`` makes its classes unhashable; one
    instance anywhere in the process must not break a CPU measurement (its storage scan
    groups the live objects by type) or ``%vram``'s holders."""

    class Meta(type):
        def __eq__(cls, other):
            return cls is other

    obj = Meta("C", (), {})()
    with vramnb.vram("cpu", record=False) as m:
        x = torch.ones(1 << 18)
    assert m.report.delta_allocated == MiB
    rows = find_holders({"obj": obj, "x": x}, torch.device("cpu"))
    assert [(r.name, r.nbytes) for r in rows] == [("x", MiB)]


def test_profile_step_leaves_the_users_global_module_hooks_firing_as_before():
    from torch.nn.modules import module as mod

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    x = torch.randn(4, 8)
    log = Tally()  # a list the hooks append to would be put back as found after the steps (vramnb._code_state)
    handles = [mod.register_module_forward_pre_hook(lambda m, a: log.append(("pre", type(m).__name__))),
               mod.register_module_forward_hook(lambda m, a, o: log.append(("post", type(m).__name__))),
               mod.register_module_forward_hook(lambda m, a, o: o * 2 if isinstance(m, torch.nn.ReLU) else None)]
    try:
        before = (dict(mod._global_forward_pre_hooks), dict(mod._global_forward_hooks))
        model(x)
        one_forward = log.items()
        log.clear()

        def loss_fn(m, b):
            return m(b).sum()

        vramnb.profile_step(model, x, loss_fn, None, steps=2)
        assert log.items() == one_forward * 2  # the user's hooks fired for each step's forward, in order
        assert (dict(mod._global_forward_pre_hooks), dict(mod._global_forward_hooks)) == before

        def raising(m, a, o):
            raise ValueError("the user's hook")

        handles.append(mod.register_module_forward_hook(raising))
        with pytest.raises(ValueError, match="the user's hook"):
            vramnb.profile_step(model, x, loss_fn, None, steps=1)
        assert list(mod._global_forward_hooks) == [*before[1], handles[-1].id]
        assert dict(mod._global_forward_pre_hooks) == before[0]
    finally:
        for h in handles:
            h.remove()


def test_a_failure_not_seen_where_it_failed_is_not_given_an_earlier_ones_state():
    """The block catches one failure (seen at the failing operator), then ends with another
    one that no operator under the tracker raised (re-raised from a worker thread): the
    report must not describe the first as if it were the second."""
    import threading

    box: list = []

    def worker():
        try:
            torch.empty(1 << 61, dtype=torch.uint8)  # not under this thread's tracker
        except RuntimeError as e:
            box.append(e)

    with pytest.raises(RuntimeError, match="2305843009213693952 bytes"):
        with vramnb.vram("cpu", record=False) as m:
            try:
                _fail()
            except RuntimeError:
                pass
            t = threading.Thread(target=worker)
            t.start()
            t.join()
            raise box[0]
    oom = m.report.oom
    assert oom.requested == oom.state.requested == 1 << 61 and not oom.state.at_failure


def test_holders_walk_does_not_call_a_dict_property():
    """A lazy proxy whose class defines ``__dict__`` as a property (it loads what it wraps):
    the walk never calls it, so nothing is loaded and its made-up contents are not reported."""

    class LazyProxy:
        loads = 0

        @property
        def __dict__(self):
            LazyProxy.loads += 1
            return {"loaded": torch.ones(1 << 18)}

    rows = find_holders({"p": LazyProxy(), "x": torch.ones(1 << 16)}, torch.device("cpu"))
    assert [(r.name, r.nbytes) for r in rows] == [("x", MiB // 4)]
    assert LazyProxy.loads == 0


def test_frames_of_code_beside_torch_are_the_users():
    """Code in a folder whose name starts like torch's (``torchvision``, ``torch_geometric``,
    a user's ``torch_experiments``) is not torch's own: its frames are looked at."""
    import os

    where = os.path.dirname(torch.__file__) + "_experiments" + os.sep + "train.py"
    ns: dict = {"torch": torch}
    exec(compile("def step():\n    acts = torch.ones(1 << 18)\n    torch.empty(1 << 60, dtype=torch.uint8)\n",
                 where, "exec"), ns)
    with pytest.raises(RuntimeError, match="can't allocate memory"):
        with vramnb.vram("cpu", record=False) as m:
            ns["step"]()
    assert [(var, n) for _, var, n, *_ in m.report.oom.state.frames] == [("acts", MiB)]


# -- round 2: the autocast cache's watch, the bounded walks, the start that fails ------------------

def test_a_cast_copy_freed_by_a_collection_inside_the_watch_does_not_deadlock():
    import gc
    import threading

    lin = torch.nn.Linear(8, 8)
    done = []

    def cell():
        # copies in reference cycles die only in a collection, which some allocation inside the
        # watch's own bookkeeping starts: every gc threshold and offset, so one lands there
        with vramnb.vram("cpu", record=False):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                for threshold in range(3, 60):
                    gc.set_threshold(threshold)
                    for k in range(threshold + 3):
                        for _ in range(3):
                            junk = [[] for _ in range(k)]  # noqa: F841 - shifts where the collection lands
                            c = [lin.weight.to(torch.bfloat16)]
                            c.append(c)
                            del c
        done.append(True)

    old = gc.get_threshold()
    try:
        t = threading.Thread(target=cell, daemon=True)
        t.start()
        t.join(60)
    finally:
        gc.set_threshold(*old)
    assert done, "the measured cell hung"


def test_the_post_mortem_walks_aliased_lists_and_a_shared_module_tree_once(ip):
    import time

    run(ip, "def grid_step():\n    grid = [[[torch.ones(1)] * 300] * 300] * 300\n"
            "    return torch.empty(1 << 60, dtype=torch.uint8)\n"
            "m = torch.nn.Linear(4, 4)\nfor _ in range(24):\n    m = torch.nn.Sequential(m, m)\n"
            "def tree_step(model):\n    return torch.empty(1 << 60, dtype=torch.uint8)")
    for cell in ("grid_step()", "tree_step(m)"):
        t0 = time.perf_counter()
        res, _ = run(ip, "%%vram -d cpu\n" + cell)
        assert res.error_in_exec is not None and time.perf_counter() - t0 < 20, cell  # was 2**24 visits
    frames = {var: n for _, var, n, *_ in vramnb.history()[-1].oom.state.frames}
    assert frames["model"] == (4 * 4 + 4) * 4  # the one Linear, counted once


def test_the_failing_codes_walk_runs_no_getattr_of_the_users(ip):
    run(ip, "calls = []\nclass Wrapper(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.inner = torch.nn.Linear(2, 2)\n    def __getattr__(self, name):\n"
            "        calls.append(name)\n        return super().__getattr__(name)\n"
            "w = Wrapper()\ndef step():\n    w.inner(torch.ones(1, 2))\n    return torch.empty(1 << 60, dtype=torch.uint8)")
    run(ip, "calls.clear()")
    res, _ = run(ip, "%%vram -d cpu\nstep()")
    assert res.error_in_exec is not None and vramnb.history()[-1].oom.state.context.model == "w"
    assert "is_gradient_checkpointing" not in ip.user_ns["calls"]


def test_a_start_that_fails_leaves_no_watch_and_no_measurement_behind(ip, monkeypatch):
    from vramnb import _measure
    from vramnb._tracker import cpu_tracker

    def fails(*a, **k):
        raise MemoryError("no memory left")

    monkeypatch.setattr(_measure, "listening", fails)
    res, cap = run(ip, "%%vram -d cpu\ny = torch.ones(10)")
    assert res.error_in_exec is None and "the cell ran unmeasured" in cap.stderr
    assert not cpu_tracker().watches and not _measure._ACTIVE


def test_a_list_the_failing_code_adds_to_is_emptied_not_deleted_and_its_model_kept():
    from vramnb.diagnose import OOMState, verdict
    from vramnb.diagnose._postmortem import FailingCode

    MiB = 2**20
    ctx = FailingCode(in_use={"losses", "gpt", "adam"}, model="gpt", optimizer="adam", trains=True,
                      mutated={"losses"})
    s = OOMState("cpu", True, 100 * MiB, 900 * MiB, available=50 * MiB, context=ctx,
                 holders=[("losses", 856 * MiB, 701 * MiB, "list"), ("gpt", 14 * MiB, 14 * MiB, "Module"),
                          ("out", 154 * MiB, 140 * MiB, "Tensor")])
    fixes = verdict(s).fixes
    assert fixes[0].code == "losses.clear()" and "keep numbers or reduced values, not whole tensors" in fixes[0].what
    assert not any(f.code == "del gpt" for f in fixes)
    assert [f.code for f in fixes].index("del out") > 0


def test_memory_out_of_sight_that_covers_the_shortfall_is_the_verdict_under_a_process_limit():
    from vramnb.diagnose import OOMState, verdict

    MiB = 2**20
    s = OOMState("cpu", True, 100 * MiB, 700 * MiB, available=20 * 2**30, cap=2**30, cap_room=40 * MiB,
                 cap_name="RLIMIT_AS", hidden=600 * MiB, hidden_by=[("last exception", 600 * MiB)])
    v = verdict(s)
    assert v.kind == "held out of sight" and v.fixes[0].code == "%vram free"
    assert "gc.collect()" in v.fixes[0].what
