"""Shared fixtures: one base InteractiveShell for the session (see STYLE.md),
with vramnb loaded fresh for each test that asks for ``ip``."""

from __future__ import annotations

import contextlib
import gc

import pytest
import torch


def pytest_configure(config):  # type: ignore[no-untyped-def]
    """Ctrl-C raises ``KeyboardInterrupt`` here, as in a Jupyter kernel or a terminal Python: a
    process started in the background, or a pytest-xdist worker, inherits SIGINT ignored, and the
    interrupt tests (tests/test_restore.py) send real SIGINTs."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the GPU machine; see benchmarks/results/)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _code_outside_cells():  # type: ignore[no-untyped-def]
    """A test's own code runs outside any cell, where the magics cannot vouch that the CPU
    tracker saw it (vramnb._young): each test starts with the tracker marked stale, as code
    that ran unmeasured leaves it."""
    from vramnb import _tracker

    if _tracker._CPU_TRACKER is not None:
        _tracker._CPU_TRACKER.stale = True
    yield


@pytest.fixture(scope="session")
def shell():  # type: ignore[no-untyped-def]
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance()


@pytest.fixture
def ip(shell):  # type: ignore[no-untyped-def]
    """The shell with vramnb loaded, a clean namespace and history; unloaded after."""
    import builtins

    import vramnb

    # sys.displayhook (run by doctests) sets builtins._, after which IPython
    # stops maintaining _/__/___; a notebook kernel never has it.
    builtins.__dict__.pop("_", None)
    import sys

    # a fresh notebook has no last exception: an earlier test's error (its frames, their tensors)
    # would be listed by %vram as "(last exception)"
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    shell.run_cell("%reset -f", store_history=False)
    shell.run_cell("import torch", store_history=False)
    vramnb.clear_history()
    shell.extension_manager.load_extension("vramnb")
    yield shell
    shell.extension_manager.unload_extension("vramnb")
    shell.run_cell("%reset -f", store_history=False)
    gc.collect()


def run(shell, cell):  # type: ignore[no-untyped-def]
    """Run a cell as a notebook would (stored in history), capturing its display
    output; return (ExecutionResult, captured)."""
    from IPython.utils.capture import capture_output

    with capture_output() as cap:
        result = shell.run_cell(cell, store_history=True)
    return result, cap


# tests/browser/ holds the notebook that tests/test_browser.py opens in JupyterLab;
# it is not a tutorial for nbval to check.
collect_ignore_glob = ["browser/*.ipynb"]


def interrupt_during_restore(monkeypatch, how: str = "signal", at: int = 2) -> dict:  # type: ignore[no-untyped-def]
    """Make the next snapshot restores raise an interrupt at the ``at``-th tensor they put back
    (``how``: a real SIGINT, or ``_thread.interrupt_main``). Returns the call counter."""
    import _thread
    import signal

    from vramnb import _restore

    calls = {"n": 0, "restoring": False}
    real_load, real_restore = _restore._load_bytes, _restore.Snapshot.restore

    def restore(self):  # type: ignore[no-untyped-def]
        calls["restoring"] = True
        try:
            real_restore(self)
        finally:
            calls["restoring"] = False

    def load(t, buf):  # type: ignore[no-untyped-def]
        if calls["restoring"]:
            calls["n"] += 1
            if calls["n"] == at:  # most of the restore still to do
                if how == "signal":
                    signal.raise_signal(signal.SIGINT)
                else:
                    _thread.interrupt_main()
                    for _ in range(1000):  # give the interpreter a chance to run the handler here
                        pass
        real_load(t, buf)

    monkeypatch.setattr(_restore, "_load_bytes", load)
    monkeypatch.setattr(_restore.Snapshot, "restore", restore)
    return calls


F32 = 4  # bytes of a float32


def sq_loss(model, batch):  # type: ignore[no-untyped-def]
    """The loss the step tests train with: the mean square of the output."""
    return model(batch).square().mean()


def _entry(name: str, **options):  # type: ignore[no-untyped-def]
    """``vramnb.<name>(model, batch, sq_loss, optimizer, **options)`` as ``entry(model, batch, optimizer)``
    (vramnb imported when called, as the fixtures here do)."""
    def entry(m, b, o):  # type: ignore[no-untyped-def]
        import vramnb

        return getattr(vramnb, name)(m, b, sq_loss, o, **options)

    return entry


#: the entry points that run real steps on the user's model, each called as ``entry(model, batch, optimizer)``
#: with :func:`sq_loss` (compare with a precision toggle: two recipes)
REAL_STEPS = {
    "profile_step": _entry("profile_step"),
    "compare": _entry("compare", toggles={"precision": ["fp32", "bf16"]}, progress=False),
}
#: every entry point that runs the user's step, real or fake (estimate, max_batch_size and fit on made-up
#: cards large enough for the small test models), called as the entries of :data:`REAL_STEPS` are
ENTRY_POINTS = {
    **REAL_STEPS,
    "estimate": _entry("estimate", target="8GiB"),
    "max_batch_size": _entry("max_batch_size", target="1GiB", limit=16, progress=False),
    "fit": _entry("fit", target="8GiB", progress=False),
}


def assert_same_steps(est, real, steps: int) -> None:  # type: ignore[no-untyped-def]
    """An estimate's ``steps`` steps and a CPU measurement's of the same steps agree byte for byte: the
    peak and every mark by source (all but "other", which counts the rest of the test process), the
    peak's phase and the marks' order."""
    def mine(bd):  # type: ignore[no-untyped-def]
        return {k: v for k, v in bd.sources.items() if k != "other"}

    assert len(est.steps) == len(real.steps) == steps
    for e, r in zip(est.steps, real.steps):
        assert mine(e.peak) == mine(r.peak)
        assert e.peak_phase == r.peak_phase
        assert [m for m, _ in e.marks] == [m for m, _ in r.marks]
        for (_, b1), (_, b2) in zip(e.marks, r.marks):
            assert mine(b1) == mine(b2)


def mlp():  # type: ignore[no-untyped-def]
    """The small model of the step tests (64 -> 128 -> 10), the same weights every time."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


class Tally:
    """A list the code a step runs can append to and the test can read after the call: vramnb puts back
    what the step's code changes by name (vramnb/_code_state.py), so a test that observes the user's code
    from inside keeps its record in a C object, which that restore does not record (a SimpleQueue)."""

    __slots__ = ("_q",)

    def __init__(self) -> None:
        import queue

        self._q: queue.SimpleQueue[object] = queue.SimpleQueue()

    def append(self, x: object) -> None:
        self._q.put(x)

    def items(self) -> list[object]:
        out = []
        while not self._q.empty():
            out.append(self._q.get_nowait())
        for x in out:
            self._q.put(x)
        return out

    def count(self, x: object) -> int:
        return self.items().count(x)

    def clear(self) -> None:
        while not self._q.empty():
            self._q.get_nowait()

    def __len__(self) -> int:
        return len(self.items())

    def __setitem__(self, key: object, value: object) -> None:  # used as a dict: the last value set wins
        self.append((key, value))

    def __getitem__(self, key: object) -> object:
        found = [kv[1] for kv in self.items() if isinstance(kv, tuple) and kv[0] == key]
        if not found:
            raise KeyError(key)
        return found[-1]


def measured_oom(shell, cell):  # type: ignore[no-untyped-def]
    """Run ``cell`` under ``%%vram -d cpu`` (it must fail); return its out-of-memory post-mortem
    (``vramnb.history()[-1].oom``) and the captured output."""
    import vramnb

    res, cap = run(shell, "%%vram -d cpu\n" + cell)
    assert res.error_in_exec is not None
    return vramnb.history()[-1].oom, cap


def while_the_step_waits(work):  # type: ignore[no-untyped-def]
    """A loss function ``m(b).sum()`` that, once the step runs it, waits (30 s at most) for a started
    thread of the user's to run ``work()`` meanwhile; returns (loss_fn, thread): join it after the call."""
    import threading

    in_step, done = threading.Event(), threading.Event()

    def loss_fn(m, b):  # type: ignore[no-untyped-def]
        in_step.set()
        assert done.wait(30)
        return m(b).sum()

    def user_thread():  # type: ignore[no-untyped-def]
        assert in_step.wait(30)
        work()
        done.set()

    t = threading.Thread(target=user_thread)
    t.start()
    return loss_fn, t


@contextlib.contextmanager
def another_user_thread(poll=None):  # type: ignore[no-untyped-def]
    """A thread of the user's alive for the block (a daemon that calls ``poll()`` every 10 ms, as tqdm's
    monitor reads its bars, or only waits); stopped and joined after."""
    import threading

    stop = threading.Event()

    def body():  # type: ignore[no-untyped-def]
        while not stop.wait(0.01):
            if poll is not None:
                poll()

    t = threading.Thread(target=body, daemon=True)
    t.start()
    try:
        yield t
    finally:
        stop.set()
        t.join()


class Counted:
    """Calls of the accessors the classes below override (a walk that must run none of the user's code)."""

    calls = 0


class LazyDict(dict):  # type: ignore[type-arg]
    def values(self):  # type: ignore[no-untyped-def]
        Counted.calls += 1
        return super().values()

    def items(self):  # type: ignore[no-untyped-def]
        Counted.calls += 1
        return super().items()


class LazyList(list):  # type: ignore[type-arg]
    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        Counted.calls += 1
        return super().__getitem__(i)

    def __iter__(self):  # type: ignore[no-untyped-def]
        Counted.calls += 1
        return super().__iter__()


class LazyTuple(tuple):  # type: ignore[type-arg]
    def __iter__(self):  # type: ignore[no-untyped-def]
        Counted.calls += 1
        return super().__iter__()


def flat_grads(model):  # type: ignore[no-untyped-def]
    """Give each parameter of ``model`` a gradient that is a view of one zero flat buffer (as a flattening
    optimizer or DDP's gradient-as-bucket-view leaves them); returns the buffer."""
    params = list(model.parameters())
    flat = torch.zeros(sum(p.numel() for p in params))
    offset = 0
    for p in params:
        p.grad = flat[offset:offset + p.numel()].view_as(p)
        offset += p.numel()
    return flat
