"""vramnb.profile_distributed on CPU: 2 ranks over gloo, exact bytes per rank, a rank that
raises, ranks that hang (one stopped, one killed), and no process left running.

Every launch forks this process: the ranks' functions are module-level so that the spawn
test can import them too. Timeouts are generous and nothing asserts a duration: the machine
may be loaded.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import types

import pytest
import torch
import torch._dynamo  # noqa: F401 - DDP's first construction imports it; forked ranks then inherit it
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import vramnb
from tests.conftest import F32, sq_loss
from vramnb import DistributedReport
from vramnb.distributed._launch import _parts, profile_distributed

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch built without distributed")

N = 256  # Linear(N, N)
BATCH = 8
PARAMS = (N * N + N) * F32  # weight and bias, bytes
# AdamW: exp_avg and exp_avg_sq (2 x parameter bytes) and a float32 step per parameter tensor (CPU)
ADAMW_STATE = 2 * PARAMS + 2 * F32


def _child_pids() -> set[int]:
    """Processes whose parent is this one (Linux /proc)."""
    me, out = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == me:
                out.add(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def assert_all_joined(report: DistributedReport, before: set[int]) -> None:
    """Every rank's process is gone (joined, not a zombie) and no other child was left behind."""
    assert all(r.pid is not None and r.exitcode is not None for r in report.ranks), [(r.pid, r.exitcode) for r in report.ranks]
    assert not [r.pid for r in report.ranks if _alive(r.pid or 0)]
    if sys.platform.startswith("linux"):
        assert _child_pids() - before == set()


# -- the ranks' functions ---------------------------------------------------------------
def check_environment(rank: int, world_size: int) -> None:
    """What every rank's environment holds (a failed check is that rank's error in the report)."""
    env = os.environ
    assert env["NCCL_NVLS_ENABLE"] == "0", env.get("NCCL_NVLS_ENABLE")
    assert env["MASTER_ADDR"] == "127.0.0.1" and int(env["MASTER_PORT"]) > 0
    assert (env["RANK"], env["WORLD_SIZE"]) == (str(rank), str(world_size))
    assert torch.distributed.get_rank() == rank and torch.distributed.get_world_size() == world_size


def ddp_linear(rank: int, world_size: int) -> tuple:
    check_environment(rank, world_size)
    torch.manual_seed(rank)  # each rank its own batch; DDP broadcasts rank 0's weights
    model = DDP(nn.Linear(N, N))
    return model, torch.randn(BATCH, N), sq_loss, torch.optim.AdamW(model.parameters(), foreach=False)


def _boom_on_rank_1(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    out = model(batch)
    if torch.distributed.get_rank() == 1:
        raise RuntimeError("boom on rank 1")
    return out.square().mean()


def ddp_rank_1_raises(rank: int, world_size: int) -> tuple:
    model, batch, _, opt = ddp_linear(rank, world_size)
    return model, batch, _boom_on_rank_1, opt


def _sleep_loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    out = model(batch)
    time.sleep(3600)  # hangs inside the step: vramnb's stop interrupts it
    return out.square().mean()


def hang(rank: int, world_size: int) -> tuple:
    """Rank 0 hangs inside its step; rank 1 ignores SIGTERM and hangs before it (as a rank
    stuck in C code would, where no Python signal handler runs)."""
    if rank == 1:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3600)
    torch.manual_seed(0)
    model = nn.Linear(N, N)
    return model, torch.randn(BATCH, N), _sleep_loss, torch.optim.AdamW(model.parameters(), foreach=False)


def _oom_on_rank_1(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    out = model(batch)
    if torch.distributed.get_rank() == 1:  # a real allocation failure, in this rank only
        import re
        import resource

        with open("/proc/self/status") as f:
            vm = int(re.search(r"VmData:\s+(\d+)", f.read()).group(1)) * 1024  # type: ignore[union-attr]
        resource.setrlimit(resource.RLIMIT_DATA, (vm + 64 * 2**20, resource.getrlimit(resource.RLIMIT_DATA)[1]))
        torch.empty(2**28)  # 1 GiB, over the limit: refused, nothing allocated
    return out.square().mean()


def rank_1_out_of_memory(rank: int, world_size: int) -> tuple:
    torch.manual_seed(0)
    model = nn.Linear(N, N)
    return model, torch.randn(BATCH, N), _oom_on_rank_1, torch.optim.AdamW(model.parameters(), foreach=False)


def rank_1_vanishes(rank: int, world_size: int) -> dict:
    if rank == 1:
        os._exit(3)  # no exception, no report: as a crash would end it
    return plain_linear(rank, world_size)


def plain_linear(rank: int, world_size: int) -> dict:
    check_environment(rank, world_size)
    torch.manual_seed(0)
    model = nn.Linear(N, N)
    return {"model": model, "batch": torch.randn(BATCH, N), "loss_fn": sq_loss}


# -- a DDP step on 2 ranks ----------------------------------------------------------------
@pytest.fixture(scope="module")
def ddp_report() -> tuple[DistributedReport, set[int]]:
    before = _child_pids() if sys.platform.startswith("linux") else set()
    env = {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NCCL_NVLS_ENABLE")}
    parents = torch.ones(1000)  # a tensor of the notebook's: the forked ranks hold it too (counted as other)
    report = profile_distributed(ddp_linear, 2, backend="gloo", timeout=240)
    assert {k: os.environ.get(k) for k in env} == env  # this process's environment is as it was
    del parents
    return report, before


def test_the_package_under_test_is_this_checkout() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    assert os.path.abspath(vramnb.__file__).startswith(os.path.join(root, "vramnb"))


def test_ddp_step_exact_bytes_per_rank(ddp_report: tuple[DistributedReport, set[int]]) -> None:
    report, before = ddp_report
    assert report.ok, report
    assert [r.rank for r in report.ranks] == [0, 1]
    assert report.backend == "gloo" and report.start_method == "fork"
    for r in report.ranks:
        assert r.status == "ok" and r.error is None and r.device == "cpu"
        assert r.step is not None
        first, steady = r.step.first, r.step.steady
        assert first.kind == "first step" and steady.kind == "steady state"
        # one bucket holds every gradient (263 KB < DDP's first bucket cap, 1 MiB)
        assert r.ddp_buckets == PARAMS
        batch = BATCH * N * F32
        for s in r.step.steps:
            assert s.mark("start")["parameters"] == PARAMS
            assert s.mark("start")["input batch"] == batch
            assert s.mark("after backward")["gradients"] == PARAMS
            assert s.mark("after zero_grad")["gradients"] == 0
            assert s.peak.allocated == s.peak.total  # on CPU the sources sum to the tracker's total
        assert first.mark("start")["optimizer state"] == 0
        assert first.mark("after optimizer step")["optimizer state"] == ADAMW_STATE
        assert steady.mark("start")["optimizer state"] == ADAMW_STATE
        # saved for backward: the Linear's output (square saves its input); its own input and
        # weight are the batch and the parameters
        assert first.mark("after forward")["activations"] == batch
        # the reducer's bucket: the one DDP made at construction is C++-only, never seen; the first
        # backward leaves one of the bucket's size (temporaries, alive until the next forward),
        # which the steady step's forward replaces by the rebuilt bucket. No source names
        # communication buffers yet: these pin where they are counted now, and the totals.
        # a forked rank also holds the tensors the parent had (a notebook's, or earlier tests' in this
        # worker), copy-on-write: "other" from its start, the same through every step
        inherited = first.mark("start").sources["other"]
        assert inherited >= 4000  # the fixture's tensor at least
        assert first.mark("start").allocated == PARAMS + batch + inherited
        assert first.mark("after backward").sources["temporaries"] == r.ddp_buckets
        assert first.mark("after backward").allocated == PARAMS + batch + PARAMS + r.ddp_buckets + inherited
        assert steady.mark("start").sources["other"] == r.ddp_buckets + inherited
        # the steady forward also keeps a few bytes more in some runs (4 and 12 seen), small tensors
        # made while it ran whose timing varies; not traced to their maker
        assert 0 <= steady.mark("after forward")["activations"] - (batch + r.ddp_buckets) < 64
        assert steady.mark("after backward").allocated == (PARAMS + batch + PARAMS + ADAMW_STATE + r.ddp_buckets
                                                           + inherited)
        # host memory: the process's own figures, in bytes, and the tensors within them
        assert r.rss is not None and r.peak_rss is not None and r.tensor_bytes is not None
        assert r.peak_rss >= r.rss > r.tensor_bytes >= PARAMS
        assert r.non_pytorch == r.rss - r.tensor_bytes
    assert_all_joined(report, before)
    assert all(r.exitcode == 0 for r in report.ranks)


def test_ranks_side_by_side(ddp_report: tuple[DistributedReport, set[int]]) -> None:
    report, _ = ddp_report
    text = repr(report)
    lines = text.splitlines()
    assert lines[0] == "vram distributed · 2 ranks · gloo · fork"
    assert lines[1].split() == ["rank", "0", "rank", "1"]
    assert [ln.split() for ln in lines if ln.strip().startswith("parameters")] == [["parameters", "257.0", "KiB", "257.0", "KiB"]]
    html = report._repr_mimebundle_()["text/html"]
    assert "rank 0" in html and "rank 1" in html and "host non-PyTorch" in html
    recs = report.to_records()
    assert [r["rank"] for r in recs] == [0, 1]
    for rec, r in zip(recs, report.ranks):
        assert rec["parameters"] == PARAMS and rec["status"] == "ok" and rec["ddp_buckets"] == PARAMS
        assert rec["allocated"] == r.step.peak.allocated  # type: ignore[union-attr]
        assert rec["non_pytorch"] == r.rss - r.tensor_bytes  # type: ignore[operator]


def test_ranks_plotted(ddp_report: tuple[DistributedReport, set[int]]) -> None:
    pytest.importorskip("matplotlib")
    report, _ = ddp_report
    fig = report.plot()
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1"]
    assert ax.get_xlabel().startswith("peak allocated")


# -- FSDP2 (full shard) on 2 ranks ----------------------------------------------------------
def fsdp_two_linears(rank: int, world_size: int) -> tuple:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(N, N), nn.Linear(N, N))
    mesh = init_device_mesh("cpu", (world_size,))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.randn(BATCH, N), sq_loss, torch.optim.AdamW(model.parameters(), foreach=False)


def test_fsdp_full_shard_exact_bytes_per_rank() -> None:
    """Each rank holds half of each layer (rows 128 of 256, half the bias): two layers' halves
    are one Linear's bytes; the all-gathered full layers are the step's temporaries."""
    before = _child_pids()
    report = profile_distributed(fsdp_two_linears, 2, backend="gloo", timeout=240)  # restore=False by default
    assert report.ok, report
    shard = 2 * (N // 2 * N + N // 2) * F32
    assert shard == PARAMS
    for r in report.ranks:
        assert r.step is not None and r.ddp_buckets is None
        first = r.step.first
        assert first.mark("start")["parameters"] == shard
        assert first.mark("after backward")["gradients"] == shard
        # exp_avg and exp_avg_sq of each shard, and a float32 step per parameter (4 of them)
        assert first.mark("after optimizer step")["optimizer state"] == 2 * shard + 4 * F32
        assert first.peak.sources["temporaries"] > 0  # the unsharded layers, gathered for forward and backward
    assert_all_joined(report, before)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="profile_step's snapshot cannot copy FSDP2's "
                   "parameters on a real process group: 'Attempted to access the data pointer on an invalid python "
                   "storage' (vramnb._storage_copy); restore=False (the default here) runs the step")
def test_fsdp_full_shard_with_restore() -> None:
    report = profile_distributed(fsdp_two_linears, 2, backend="gloo", timeout=240, restore=True)
    assert report.ok, [r.error for r in report.ranks]


def _three_linears() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(N, N), nn.Linear(N, N), nn.Linear(N, N))


def _sharded_three_linears(world_size: int, reshard: bool) -> tuple:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = _three_linears()
    mesh = init_device_mesh("cpu", (world_size,))
    for layer in model:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    return model, torch.randn(BATCH, N), sq_loss, torch.optim.AdamW(model.parameters(), foreach=False)


def fsdp_three_linears(rank: int, world_size: int) -> tuple:
    return _sharded_three_linears(world_size, True)


def zero2_three_linears(rank: int, world_size: int) -> tuple:
    return _sharded_three_linears(world_size, False)


@pytest.mark.parametrize("parallel", ["fsdp", "zero2"])
def test_sharded_estimate_is_each_real_ranks_step(parallel: str) -> None:
    """``estimate(world_size=2, parallel=...)`` against two real FSDP2 ranks over gloo, both on
    CPU (exact storage sizes), on the steady step. Parameters, gradients, optimizer state and the
    batch are the same bytes at every mark. What gloo runs is not quite synchronous: its worker
    thread releases a collective's buffer (one block's all-gather or reduce-scatter, 263,168 B
    here) when it is done with it, sometimes after the mark that follows, so a rank may hold one
    such buffer more than the estimate at a mark or a phase's peak, never less. The real ranks'
    ``other`` is held before the step and through it: the device mesh's tensor of rank numbers
    (the estimate makes its mesh outside the fake step) and what a forked rank inherits. Before,
    the estimate kept the sharded gradients after ``zero_grad(set_to_none=True)`` (a byte view
    of each DTensor gradient's storage, made under the fake mode, was kept by its dispatch cache)
    and the real ranks missed the unsharded parameters re-allocated by ``resize_``
    from the second step on (storages owned by no thread): 263,168 B under at the forward's peak."""
    fn = fsdp_three_linears if parallel == "fsdp" else zero2_three_linears
    report = profile_distributed(fn, 2, backend="gloo", timeout=240, steps=2)
    assert report.ok, [r.error for r in report.ranks]
    est = vramnb.estimate(_three_linears(), torch.randn(BATCH, N), sq_loss,
                          lambda p: torch.optim.AdamW(p, foreach=False), device="cpu", world_size=2,
                          parallel=parallel, steps=2)
    shard = 3 * PARAMS // 2
    block = PARAMS  # one Linear unsharded: what one all-gather brings in
    e = est.steady
    assert e.mark("after backward")["gradients"] == shard
    assert e.mark("after zero_grad")["gradients"] == 0
    assert e.mark("start")["other"] == 0
    exact = ("parameters", "buffers", "input batch", "gradients", "optimizer state")
    for r in report.ranks:
        assert r.step is not None
        s = r.step.steady
        # held before the step and through it: the device mesh's rank numbers (2 x int32) and what the
        # forked rank inherited from this process (earlier tests' tensors, earlier estimates' meshes
        # that torch's DTensor caches keep), none of which is this step's
        mesh = s.mark("start")["other"]
        assert mesh >= 2 * 4 and all(s.mark(m)["other"] == mesh for m, _ in s.marks), mesh
        for mark in ("start", "after forward", "after backward", "after optimizer step", "after zero_grad"):
            real, want = s.mark(mark), e.mark(mark)
            assert {k: real[k] for k in exact} == {k: want[k] for k in exact}, (r.rank, mark)
            assert 0 <= real.allocated - mesh - want.allocated <= block, (r.rank, mark)
        assert s.mark("after zero_grad")["gradients"] == 0
        for phase, bd in s.phase_peaks.items():
            assert 0 <= bd.allocated - mesh - e.phase_peaks[phase].allocated <= block, (r.rank, phase)
        # the steady forward holds a block's all-gather output and its unsharded parameters. Which
        # of them its peak falls on depends on when gloo's thread lets go of a buffer (the peak can
        # move to a later op, where a gathered weight is already saved for backward): 1 or 2 blocks
        # labelled "temporaries" under load (CI at 12fbedf: 1), the rest "activations"
        fwd = s.phase_peaks["forward"].sources
        assert fwd["temporaries"] >= block and fwd["temporaries"] + fwd["activations"] >= 3 * block, fwd


# -- failures -------------------------------------------------------------------------------
def test_a_rank_that_raises_reports_what_it_had_and_the_others_stop() -> None:
    before = _child_pids()
    report = profile_distributed(ddp_rank_1_raises, 2, backend="gloo", timeout=240, grace=5)
    assert not report.ok
    bad = report.ranks[1]
    assert bad.status == "raised" and bad.error == "RuntimeError: boom on rank 1"
    assert bad.traceback is not None and "boom on rank 1" in bad.traceback
    assert report.first_failure == 1
    # what it had: the partial report of its step, the breakdown at the failure
    assert bad.step is not None and bad.step.error == "RuntimeError"
    assert bad.step.first.mark("start")["parameters"] == PARAMS
    assert bad.step.first.peak_phase == "forward"
    # rank 0 waited in backward's all-reduce for a peer that had gone: gloo raises there,
    # or vramnb stopped it (SIGTERM) or killed it
    assert report.ranks[0].status in ("raised", "stopped", "killed")
    assert "rank 1 failed first" in repr(report)
    assert_all_joined(report, before)


def test_hanging_ranks_are_stopped_then_killed_at_the_timeout() -> None:
    before = _child_pids()
    # a forked rank without DDP reaches its step in about a second here: 10 s leave a wide margin
    report = profile_distributed(hang, 2, backend="gloo", timeout=10, grace=2)
    stopped, killed = report.ranks
    # rank 0 was interrupted in its step (SIGTERM: profile_step restored, then it reported)
    assert stopped.status == "stopped" and stopped.error == "KeyboardInterrupt"
    assert stopped.step is not None and stopped.step.first.mark("start")["parameters"] == PARAMS
    assert stopped.step.first.peak_phase == "forward"
    # rank 1 ignored SIGTERM: killed, no report
    assert killed.status == "killed" and killed.step is None and killed.exitcode == -signal.SIGKILL
    assert any("still running at the timeout (10 s)" in n for n in report.notes)
    assert_all_joined(report, before)


def test_a_rank_out_of_memory_reports_what_it_had() -> None:
    before = _child_pids()
    report = profile_distributed(rank_1_out_of_memory, 2, backend="gloo", timeout=240, grace=5)
    ok, oom = report.ranks
    assert ok.status == "ok" and ok.step is not None
    assert oom.status == "out of memory" and oom.error is not None and "can't allocate memory" in oom.error
    assert oom.step is not None and oom.step.first.mark("start")["parameters"] == PARAMS
    assert oom.step.first.peak_phase == "forward"
    # the post-mortem travelled with the report: the state at the failure and the verdict
    assert oom.step.oom is not None and oom.step.oom.verdict.kind == "per-process cap"
    assert report.first_failure == 1
    assert_all_joined(report, before)


def test_a_rank_that_exits_without_a_report() -> None:
    before = _child_pids()
    report = profile_distributed(rank_1_vanishes, 2, backend="gloo", timeout=240, grace=5)
    gone = report.ranks[1]
    assert gone.status == "exited" and gone.step is None and gone.exitcode == 3
    assert gone.error == "ended with exit code 3 before it reported"
    assert report.ranks[0].status in ("ok", "raised", "stopped", "killed")
    assert_all_joined(report, before)


def test_an_interrupt_of_the_notebook_stops_every_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    from vramnb.distributed import _launch

    before = _child_pids()
    started: list[list[int]] = []
    real = _launch._collect

    def interrupted(procs, *args, **kwargs):  # type: ignore[no-untyped-def]
        started.append([p.pid for p in procs])
        raise KeyboardInterrupt  # as Jupyter's "Interrupt kernel" while the ranks run

    monkeypatch.setattr(_launch, "_collect", interrupted)
    with pytest.raises(KeyboardInterrupt):
        profile_distributed(hang, 2, backend="gloo", timeout=240, grace=2)
    monkeypatch.setattr(_launch, "_collect", real)
    assert len(started) == 1 and len(started[0]) == 2
    assert not [pid for pid in started[0] if _alive(pid)]
    assert _child_pids() - before == set()


# -- spawn ----------------------------------------------------------------------------------
def test_spawn_runs_an_importable_function(monkeypatch: pytest.MonkeyPatch) -> None:
    before = _child_pids()
    # as in IPython and Jupyter, __main__ is the user namespace's module, which has no __spec__
    # (CPython's spawn preparation read it and raised AttributeError once a shell had been made)

    main = types.ModuleType("__main__")
    del main.__spec__
    monkeypatch.setitem(sys.modules, "__main__", main)
    # one rank: each spawned interpreter imports torch afresh (seconds on a loaded machine)
    report = profile_distributed(plain_linear, 1, backend="gloo", start_method="spawn", timeout=240, steps=1)
    assert not hasattr(main, "__spec__")  # left as it was
    assert report.ok, report
    assert report.start_method == "spawn" and len(report) == 1
    for r in report.ranks:
        assert r.step is not None and r.step.first.mark("start")["parameters"] == PARAMS
        assert r.step.first.mark("after backward")["gradients"] == PARAMS
    # a spawn start leaves multiprocessing's resource tracker running (one per interpreter, not a rank)
    assert all(not _alive(r.pid or 0) for r in report.ranks)
    left = _child_pids() - before
    assert all("resource_tracker" in _cmdline(p) for p in left), [_cmdline(p) for p in left]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


# -- refused before anything starts -----------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"nprocs": 0}, ValueError, r"nprocs must be an int of at least 1.*0"),
    ({"nprocs": "2"}, ValueError, "nprocs must be an int of at least 1"),
    ({"nprocs": True}, ValueError, "nprocs must be an int of at least 1"),
    ({"backend": "mpi"}, ValueError, r"unknown backend 'mpi'; valid: 'gloo', 'nccl'"),
    ({"start_method": "forkserver"}, ValueError, r"unknown start_method 'forkserver'; valid: 'fork', 'spawn'"),
    ({"timeout": 0}, ValueError, "timeout must be a positive number of seconds"),
    ({"grace": -1}, ValueError, "grace must be a positive number of seconds"),
    ({"args": [1]}, TypeError, "args must be a tuple"),
    ({"stepz": 2}, ValueError, r"unknown profile_step option\(s\) 'stepz'; valid: steps, "),
    ({"start_method": "spawn", "train_fn": lambda rank, world: None}, ValueError, "a lambda, a closure"),
])
def test_bad_input_is_refused_with_the_valid_choices(kwargs: dict, error: type, match: str) -> None:
    before = _child_pids()
    kwargs = {"train_fn": plain_linear, "nprocs": 2, "backend": "gloo", **kwargs}
    with pytest.raises(error, match=match):
        profile_distributed(**kwargs)
    assert _child_pids() == before


def test_a_non_callable_is_refused() -> None:
    with pytest.raises(TypeError, match="train_fn must be callable"):
        profile_distributed(nn.Linear(2, 2).weight, 2)


def test_nccl_needs_a_device_per_rank() -> None:
    if torch.cuda.device_count() >= 2:
        pytest.skip("2 or more CUDA devices visible: nccl is possible here")
    with pytest.raises(ValueError, match=r"backend 'nccl' needs one CUDA device per rank: 2 ranks, \d visible"):
        profile_distributed(plain_linear, 2, backend="nccl")


def test_spawn_refuses_a_function_of_a_notebook_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    main = types.ModuleType("__main__")  # a kernel's __main__: no file to import it from

    def train(rank: int, world_size: int) -> None:
        pass

    train.__module__ = "__main__"
    monkeypatch.setitem(sys.modules, "__main__", main)
    with pytest.raises(ValueError, match="defined in a notebook cell or interactively .* Use start_method='fork'"):
        profile_distributed(train, 2, backend="gloo", start_method="spawn")


def test_from_a_notebook_cell_inside_a_vram_cell(ip) -> None:  # type: ignore[no-untyped-def]
    """The notebook case: train_fn defined in a cell (module __main__, no file), launched by
    fork from a %%vram cell; spawn refuses it with the reason."""
    from tests.conftest import run

    before = _child_pids()
    res, _ = run(ip, "import vramnb\n"
                     "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                     "def train_fn(rank, world_size):\n"
                     "    model = DDP(torch.nn.Linear(256, 256))\n"
                     "    return model, torch.randn(8, 256), lambda m, b: m(b).square().mean(), None\n")
    assert res.error_in_exec is None
    assert ip.user_ns["train_fn"].__module__ == "__main__"
    res, _ = run(ip, "%%vram\nrep = vramnb.profile_distributed(train_fn, 2, backend='gloo', timeout=240)")
    assert res.error_in_exec is None, res.error_in_exec
    rep = ip.user_ns["rep"]
    assert rep.ok, rep
    assert [r.step.first.mark("start")["parameters"] for r in rep.ranks] == [PARAMS, PARAMS]
    assert_all_joined(rep, before)
    res, _ = run(ip, "vramnb.profile_distributed(train_fn, 2, backend='gloo', start_method='spawn')")
    assert isinstance(res.error_in_exec, ValueError)
    assert "defined in a notebook cell or interactively" in str(res.error_in_exec)


def test_what_train_fn_may_return() -> None:
    model, batch = nn.Linear(2, 2), torch.zeros(1, 2)
    assert _parts((model, batch)) == {"model": model, "batch": batch}
    assert _parts({"model": model, "batch": batch, "optimizer": None}) == {"model": model, "batch": batch, "optimizer": None}
    with pytest.raises(TypeError, match="valid keys: model, batch, loss_fn, optimizer"):
        _parts({"model": model, "batch": batch, "opt": None})
    with pytest.raises(TypeError, match=r"must return \(model, batch, loss_fn, optimizer\).*it returned Linear"):
        _parts(model)


# -- 2 GPUs -------------------------------------------------------------------------------------
def ddp_linear_cuda(rank: int, world_size: int) -> tuple:
    torch.manual_seed(rank)
    model = DDP(nn.Linear(N, N).cuda(), device_ids=[rank])
    return model, torch.randn(BATCH, N, device="cuda"), sq_loss, torch.optim.AdamW(model.parameters(), foreach=False)


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (nccl, one device per rank)")
def test_ddp_on_two_gpus_over_nccl() -> None:
    assert os.environ.get("NCCL_NVLS_ENABLE", "0") == "0"
    # spawn: another test may have initialised CUDA in this process, which a forked rank could not use
    report = profile_distributed(ddp_linear_cuda, 2, backend="nccl", start_method="spawn", timeout=300)
    assert report.ok, report
    for r in report.ranks:
        assert r.device == f"cuda:{r.rank}" and r.step is not None
        assert r.step.first.mark("start")["parameters"] == PARAMS
        # AdamW's step counters stay on the CPU (not capturable, not fused): only the moments are on the device
        assert r.step.first.mark("after optimizer step")["optimizer state"] == 2 * PARAMS
        peak = r.step.peak
        assert peak.reserved is not None and peak.non_pytorch is not None and peak.non_pytorch > 0


# -- CPU ranks forked after the notebook started the CUDA driver ------------------------------------------------
def adam_asking_for_cuda(rank: int, world_size: int) -> tuple:
    """A rank whose train_fn checks that CUDA is said unavailable, with torch's own Adam (which asks)."""
    assert not torch.cuda.is_available() and not torch.accelerator.is_available()
    model = DDP(nn.Linear(N, N))
    return model, torch.randn(BATCH, N), sq_loss, torch.optim.Adam(model.parameters(), foreach=False)


def test_cpu_ranks_forked_after_the_driver_started_are_told_cuda_is_unavailable(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """On a GPU machine, torch.cuda.is_available() in the notebook starts the CUDA driver, and a forked child
    cannot start it again: torch's Adam then fails in every CPU rank (CUDA error: initialization error, seen
    on the H200 with torch 2.11). Here the machine and the started driver are stood in for: the ranks are told
    CUDA is unavailable and the report says why; the notebook's torch.cuda.is_available is untouched."""
    import vramnb.distributed._launch as launch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(launch, "driver_started_here", lambda: True)
    mine = torch.cuda.is_available
    before = _child_pids()
    report = profile_distributed(adam_asking_for_cuda, 2, backend="gloo", timeout=240)
    assert report.ok, report
    assert torch.cuda.is_available is mine
    assert any(n.startswith("this process had started the CUDA driver before the ranks were forked") for n in report.notes)
    assert "in each rank torch.cuda.is_available() returned False" in " ".join(repr(report).split())
    for r in report.ranks:
        assert r.step is not None and r.step.first.mark("start")["parameters"] == PARAMS
    assert_all_joined(report, before)


def test_without_the_driver_started_ranks_see_cuda_as_the_machine_has_it() -> None:
    report = profile_distributed(ddp_linear, 2, backend="gloo", timeout=240)
    assert report.ok, report
    assert not any("CUDA driver" in n for n in report.notes)


@pytest.mark.cuda
def test_cpu_ranks_after_is_available_run_torchs_adam_on_a_gpu_machine() -> None:
    """The real case: this process asked torch.cuda.is_available() (pytest's conftest does), which starts the
    driver; the probe finds that a forked child cannot start it, and the gloo ranks' Adam steps run."""
    from vramnb.distributed._fork_cuda import driver_started_here

    assert torch.cuda.is_available() and driver_started_here()
    report = profile_distributed(adam_asking_for_cuda, 2, backend="gloo", timeout=240)
    assert report.ok, report
    assert any("CUDA driver" in n for n in report.notes)
