"""Adversary 2026-12-04 #16 and #20, and the gc callback after ``%unload_ext``: an interrupt (Ctrl-C) at
an entry point's start-up leaves nothing of vramnb's behind, and a cell interrupted before it ran does
not run."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

import vramnb
from vramnb.predict import _cuda_model

from .conftest import run


def _user_autocast_dtype() -> torch.dtype:
    """The dtype of the user's own ``F.linear`` under ``torch.autocast("cpu", bfloat16)`` (bfloat16 by PyTorch's kernels)."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return torch.nn.functional.linear(torch.randn(4, 4), torch.randn(4, 4)).dtype


def _impl_calls(monkeypatch: pytest.MonkeyPatch) -> int:
    """How many kernels the CUDA policy registers (counted on one estimate)."""
    orig = torch.library.Library.impl
    n = [0]

    def impl(self: object, *a: object, **k: object) -> object:
        n[0] += 1
        return orig(self, *a, **k)

    monkeypatch.setattr(torch.library.Library, "impl", impl)
    vramnb.estimate(torch.nn.Linear(8, 1), torch.randn(4, 8), lambda m, b: m(b).sum(), target="A100")
    monkeypatch.setattr(torch.library.Library, "impl", orig)
    return n[0]


def _interrupt(how: str) -> None:
    if how == "raised":
        raise KeyboardInterrupt
    signal.raise_signal(signal.SIGINT)  # as Ctrl-C: the handler in place decides where it is raised


POINTS = ["impl 1", "impl 150", "impl last", "autocast patch", "rnn patch"]


@pytest.mark.parametrize("how", ["raised", "signal"])
@pytest.mark.parametrize("point", POINTS)
def test_interrupt_while_the_cuda_policy_registers(monkeypatch: pytest.MonkeyPatch, point: str, how: str) -> None:
    """#16: the half-registered ``Library("aten", "IMPL")`` stayed alive in the traceback IPython keeps,
    and with it vramnb's AutocastCPU kernels: the user's ``torch.autocast("cpu", bfloat16)`` linear
    returned float32."""
    assert _user_autocast_dtype() == torch.bfloat16
    total = _impl_calls(monkeypatch)
    assert total > 150
    orig_impl = torch.library.Library.impl
    n = [0]

    def impl(self: object, *a: object, **k: object) -> object:
        n[0] += 1
        out = orig_impl(self, *a, **k)  # registered, then interrupted (the worst place)
        if point.startswith("impl") and n[0] == (total if point == "impl last" else int(point.split()[1])):
            _interrupt(how)
        return out

    monkeypatch.setattr(torch.library.Library, "impl", impl)
    for name, target in (("autocast patch", "_patch_user_autocast"), ("rnn patch", None)):
        if point != name:
            continue
        if target is not None:
            orig_patch = getattr(_cuda_model, target)

            def patched(*a: object, _orig: object = orig_patch, **k: object) -> object:
                undo = _orig(*a, **k)  # type: ignore[operator]
                _interrupt(how)
                return undo

            monkeypatch.setattr(_cuda_model, target, patched)
        else:
            orig_rnns = _cuda_model.CudaPolicy._patch_rnns

            def patched_rnns(self: object) -> object:
                undo = orig_rnns(self)  # type: ignore[arg-type]
                _interrupt(how)
                return undo

            monkeypatch.setattr(_cuda_model.CudaPolicy, "_patch_rnns", patched_rnns)
    rnn_forward = torch.nn.LSTM.forward
    autocast_cls = torch.amp.autocast_mode.autocast
    autocast_init = autocast_cls.__init__
    monkeypatch.setattr(autocast_cls, "__init__", autocast_init)  # put back by undo() whatever happens
    monkeypatch.setattr(autocast_cls, "__exit__", autocast_cls.__exit__)
    with pytest.raises(KeyboardInterrupt) as info:
        vramnb.estimate(torch.nn.Linear(8, 1), torch.randn(4, 8), lambda m, b: m(b).sum(), target="A100")
    kept = info.value.__traceback__  # as IPython keeps the last traceback (sys.last_traceback), its frames alive
    assert kept is not None
    patched_left = autocast_cls.__init__ is not autocast_init
    monkeypatch.undo()
    try:
        if (point, how) != ("autocast patch", "raised"):  # there the test's own raise drops the patch's undo
            assert not patched_left
        assert _user_autocast_dtype() == torch.bfloat16
        assert torch.nn.LSTM.forward is rnn_forward
        torch.nn.functional.dropout(torch.ones(4), 0.5)  # PyTorch's own kernel again
    finally:
        del kept


def test_vram_on_cell_interrupted_at_its_start_does_not_run(ip: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """#20: Ctrl-C during ``%vram on``'s start-of-cell scan was printed by IPython as an "Error in callback",
    the cell ran anyway, and post_run_cell raised AttributeError."""
    from vramnb import _tracker

    run(ip, "%vram on -d cpu")
    run(ip, "x = torch.ones(10)")
    orig = _tracker.StorageTracker.scan
    armed = [True]

    def scan(self: object, *a: object, **k: object) -> object:
        if armed[0] and k.get("block_starts"):
            armed[0] = False
            signal.raise_signal(signal.SIGINT)  # Ctrl-C lands in the scan
        return orig(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(_tracker.StorageTracker, "scan", scan)
    n = len(vramnb.history())
    result, cap = run(ip, "ran = 'the interrupted cell ran'")
    assert "ran" not in ip.user_ns  # type: ignore[attr-defined]
    assert isinstance(result.error_before_exec, KeyboardInterrupt) and not result.success
    assert "Error in callback" not in cap.stdout and "AttributeError" not in cap.stdout + cap.stderr
    assert len(vramnb.history()) == n  # no report for a cell that did not run
    result, _ = run(ip, "ran2 = torch.ones(25)")  # the next cell runs, measured
    assert result.success and ip.user_ns["ran2"].numel() == 25  # type: ignore[attr-defined]
    assert len(vramnb.history()) == n + 1 and vramnb.history()[-1].delta_allocated == 100
    result, _ = run(ip, "ran3 = 1 +")  # a syntax error after an interrupt: nothing carried over
    run(ip, "ran4 = 4")
    assert ip.user_ns["ran4"] == 4  # type: ignore[attr-defined]


def test_unload_removes_the_gc_callback(shell: object) -> None:
    """The tracker's ``gc.callbacks`` entry (YoungWatch) stayed after ``%unload_ext vramnb`` and ran at every
    collection."""
    def ours() -> list:
        return [cb for cb in gc.callbacks if getattr(cb, "__name__", "") == "vramnb_young_watch"]

    shell.run_cell("import torch", store_history=False)  # type: ignore[attr-defined]
    shell.extension_manager.load_extension("vramnb")  # type: ignore[attr-defined]
    shell.run_cell("%vram on -d cpu -q", store_history=False)  # type: ignore[attr-defined]
    assert shell.run_cell("y = torch.ones(3)", store_history=False).success  # type: ignore[attr-defined]
    assert len(ours()) == 1
    shell.extension_manager.unload_extension("vramnb")  # type: ignore[attr-defined]
    assert ours() == []
    shell.extension_manager.load_extension("vramnb")  # type: ignore[attr-defined]
    shell.run_cell("%vram on -d cpu -q", store_history=False)  # type: ignore[attr-defined]
    result = shell.run_cell("z = torch.ones(7)", store_history=False)  # type: ignore[attr-defined]
    assert result.success and vramnb.history()[-1].delta_allocated == 28  # measured right after a reload
    shell.extension_manager.unload_extension("vramnb")  # type: ignore[attr-defined]
    assert ours() == []


def test_vram_on_cell_interrupted_at_its_end_reports_nothing_and_raises_nothing(ip: object,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during the end-of-cell measurement (post_run_cell, after the cell ran): IPython printed a
    KeyboardInterrupt traceback into vramnb's code; the cell's result stays, no report, the next cell is measured."""
    from vramnb import _tracker

    run(ip, "%vram on -d cpu")
    orig = _tracker.StorageTracker.scan
    armed = [True]

    def scan(self: object, *a: object, **k: object) -> object:
        if armed[0] and k.get("full") is False:
            armed[0] = False
            signal.raise_signal(signal.SIGINT)
        return orig(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(_tracker.StorageTracker, "scan", scan)
    n = len(vramnb.history())
    result, cap = run(ip, "done = torch.ones(3)")
    assert not armed[0] and result.success and ip.user_ns["done"].numel() == 3  # type: ignore[attr-defined]
    assert "Traceback" not in cap.stdout + cap.stderr and "KeyboardInterrupt" not in cap.stdout + cap.stderr
    assert "no report for this cell" in cap.stderr
    assert torch._C._len_torch_dispatch_stack() == 0
    result, _ = run(ip, "more = torch.ones(25)")
    assert result.success and vramnb.history()[-1].delta_allocated == 100
    assert len(vramnb.history()) <= n + 2


def test_interrupt_in_a_dispatch_of_prim_device_does_not_abort_the_process() -> None:
    """Ctrl-C landing in a dispatch mode while it handles ``prim.device`` under the estimate's fake mode:
    the KeyboardInterrupt could not unwind through PyTorch's C++ and the process aborted
    ("terminate called after throwing an instance of 'python_error'"). Run in a fresh interpreter:
    before the fix it dies."""
    code = textwrap.dedent("""
        import signal, time, torch, vramnb
        from vramnb.predict import _fake
        orig = _fake.KernelFixes.__torch_dispatch__
        seen, at = [0], [0]
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if str(func) == "prim.device.default":
                seen[0] += 1
                if seen[0] == at[0]:  # the interrupt lands in this prim.device dispatch
                    signal.raise_signal(signal.SIGINT)
            return orig(self, func, types, args, kwargs)
        _fake.KernelFixes.__torch_dispatch__ = __torch_dispatch__
        model = torch.nn.Linear(8, 8)
        got = 0
        for k in (1, 4, 5, 7):
            seen[0], at[0] = 0, k
            try:
                vramnb.estimate(model, torch.randn(4, 8), lambda m, b: m(b).sum(), target="24GiB")
                time.sleep(0.1)  # an interrupt delivered again after the estimate lands here
            except KeyboardInterrupt:
                got += 1
        print("alive", got, torch._C._len_torch_dispatch_stack())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (out.returncode, out.stderr[-1500:])
    alive, got, stack = out.stdout.split()
    # no mode left on the stack; each interrupt raised at most once (Python itself may still lose one that
    # lands in a weakref callback it runs: "Exception ignored", printed on stderr)
    assert alive == "alive" and stack == "0" and 1 <= int(got) <= 4, out.stdout
    assert int(got) == 4 or "Exception ignored" in out.stderr, out.stderr[-1500:]


def test_interrupt_while_a_step_sets_up_its_recording(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C between the tracker's mode and its listener (an estimate holds no interrupt back): the
    mode stayed on the dispatch stack and ``UntypedStorage.resize_`` patched; the next estimate aborted
    the process."""
    from vramnb import _tracker

    orig = _tracker.StorageTracker.listening
    calls = [0]

    def listening(self: object, *a: object, **k: object) -> object:
        caller = sys._getframe(1).f_code
        if caller.co_name == "run" and caller.co_filename.endswith("_step.py"):  # the step's own listener
            calls[0] += 1
            raise KeyboardInterrupt
        return orig(self, *a, **k)  # type: ignore[arg-type]

    resize = torch.UntypedStorage.resize_
    monkeypatch.setattr(_tracker.StorageTracker, "listening", listening)
    model = torch.nn.Linear(8, 1)
    with pytest.raises(KeyboardInterrupt) as info:
        vramnb.estimate(model, torch.randn(4, 8), lambda m, b: m(b).sum(), target="24GiB")
    kept = info.value.__traceback__  # as IPython keeps the last traceback: the frames (and their generators) alive
    monkeypatch.undo()
    assert calls[0] == 1 and kept is not None
    assert torch._C._len_torch_dispatch_stack() == 0 and torch.UntypedStorage.resize_ is resize
    assert all(not p._post_accumulate_grad_hooks for p in model.parameters())  # type: ignore[attr-defined]
    est = vramnb.estimate(model, torch.randn(4, 8), lambda m, b: m(b).sum(), target="24GiB")
    assert est.peak_allocated > 0


def test_interrupt_in_the_trackers_free_callback_is_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C landing in the tracker's weakref callback: Python only printed it ("Exception ignored"), the
    interrupt was lost and the freed storage stayed counted."""
    import time

    from vramnb._tracker import StorageTracker

    tracker = StorageTracker("cpu")
    t = torch.empty(1000, dtype=torch.uint8)
    tracker.add_tensor(t)
    assert tracker.current == 1000
    orig = StorageTracker._drop
    armed = [True]

    def _drop(self: StorageTracker, key: int) -> None:
        if armed[0] and self is tracker:  # this tracker's only (the process-wide one frees storages too)
            armed[0] = False
            raise KeyboardInterrupt  # as a Ctrl-C landing at the callback's start
        orig(self, key)

    monkeypatch.setattr(StorageTracker, "_drop", _drop)
    with pytest.raises(KeyboardInterrupt):
        del t
        time.sleep(0.5)  # the interrupt, delivered again, lands here
    assert not armed[0] and tracker.current == 0


def _vram_block_state() -> tuple[object, ...]:
    """What a ``vramnb.vram("cpu")`` block changes while it is open: the dispatch mode stack, the patched
    ``UntypedStorage.resize_``, the tracker's per-thread count, its watches, the open measurements."""
    from vramnb import _measure
    from vramnb._tracker import cpu_tracker

    t = cpu_tracker()
    return (torch._C._len_torch_dispatch_stack(), torch.UntypedStorage.resize_, dict(t._tracking),
            len(t.watches), len(t._listeners), len(_measure._ACTIVE), signal.getsignal(signal.SIGINT))


@pytest.mark.parametrize("at", [("_patch_acquire", "tracking"), ("_reset_watch", None), ("__init__", "vram"),
                                ("__enter__", "vram"), ("_unwatch", None), ("scan", None)])
def test_a_ctrl_c_as_a_measured_block_starts_or_ends_leaves_nothing_open(at: tuple[str, str | None]) -> None:
    """Adversary 2026-12-04c 08: a real SIGINT landing while ``vram()`` (every ``%%vram`` cell, ``%vram on``)
    set up or took down its block left the tracker counting the thread as tracking (each time one more),
    its dispatch mode and ``resize_`` patch installed, a watch per cell in the tracker, or raised an
    ``UnboundLocalError`` ('resets') in place of the interrupt."""
    name, caller = at
    with vramnb.vram("cpu", warn=False):
        torch.ones(10)
    before = _vram_block_state()
    sent: list[str] = []

    def tracer(frame, event, arg):
        if (event == "call" and not sent and frame.f_code.co_name == name and "/vramnb/" in frame.f_code.co_filename
                and (caller is None or (frame.f_back is not None and frame.f_back.f_code.co_name == caller))):
            sent.append(name)
            signal.raise_signal(signal.SIGINT)  # a real Ctrl-C
        return None

    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            with vramnb.vram("cpu", warn=False):
                torch.ones(1000)
    finally:
        sys.settrace(None)
    assert sent == [name]
    assert _vram_block_state() == before
    with vramnb.vram("cpu", warn=False) as m:  # and the next block measures as usual
        x = torch.ones(1024)
    assert m.report.delta_allocated == 4096 and x.numel() == 1024


def test_vram_on_cell_interrupted_just_after_its_block_opened_closes_it(ip: object) -> None:
    """Adversary 2026-12-04c 09: ``%vram on`` kept the cell's open block only after the next call: a Ctrl-C
    landing there stopped the cell, but the block was never closed (its dispatch mode stayed on the stack,
    the measurement stayed open, every later cell nested inside it)."""
    run(ip, "%vram on -d cpu")
    try:
        run(ip, "x = torch.ones(10)")
        before = _vram_block_state()
        sent: list[str] = []

        def tracer(frame, event, arg):
            if (event == "call" and not sent and frame.f_code.co_name == "__init__" and frame.f_back is not None
                    and frame.f_back.f_code.co_name == "_start_auto"):
                sent.append("after the block opened")
                signal.raise_signal(signal.SIGINT)  # a real Ctrl-C
            return None

        n = len(vramnb.history())
        sys.settrace(tracer)
        try:
            result, _ = run(ip, "ran = 'the interrupted cell ran'")
        finally:
            sys.settrace(None)
        assert sent == ["after the block opened"]
        assert "ran" not in ip.user_ns and not result.success  # type: ignore[attr-defined]
        assert _vram_block_state() == before and len(vramnb.history()) == n
        result, _ = run(ip, "ran2 = torch.ones(25)")
        assert result.success and vramnb.history()[-1].delta_allocated == 100
    finally:
        run(ip, "%vram off")
