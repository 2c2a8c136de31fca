"""``vramnb.profile_distributed``: a training step profiled on each rank of a process group.

The parent (the notebook) checks its inputs, picks a free port and starts ``nprocs``
processes through ``torch.multiprocessing.start_processes``; each child sets up its process
group (``gloo`` on CPU, ``nccl`` on CUDA, ``env://`` on ``127.0.0.1``), calls the user's
``train_fn(rank, world_size, *args)`` for its model, batch, loss and optimizer, profiles one
step with :func:`vramnb.profile_step` and sends its :class:`~vramnb.StepReport` and its host
memory back through its own pipe. The parent waits on the pipes and the processes' sentinels
together: a rank that fails gives the others ``grace`` seconds to finish or fail on their own;
then, or when ``timeout`` runs out, the rest get SIGTERM (which each child turns into the
interrupt :func:`vramnb.profile_step` restores on, so that it reports what it had), and SIGKILL
``grace`` seconds later. Every child is joined before the call returns or raises.

Start methods. ``fork`` (the default, as in ``accelerate.notebook_launcher``) runs a function
defined in a notebook cell: the child is a copy of the kernel, nothing is pickled. It cannot use
CUDA once the parent has initialised it (CUDA refuses a forked child), so ``nccl`` is refused then;
CPU ranks (``gloo``) forked after the parent started the CUDA driver are told CUDA is unavailable
(:mod:`._fork_cuda`: torch's optimizers would otherwise fail there) and the report says so.
``spawn`` starts a fresh interpreter that imports ``train_fn`` by its module and name: a function
defined in a notebook cell (module ``__main__`` without a file), a lambda or a closure cannot be
found there, so it is refused before anything starts; move the function to a ``.py`` file.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import pickle
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from multiprocessing.connection import Connection, wait
from typing import Any

from .._breakdown import StepReport
from .._code_state import CodeState  # here, not in the call: its imports add warnings filters (module import time)
from .._file_offsets import offsets, put_offsets_back, unshare_offsets
from ._fork_cuda import NOTE as _FORK_CUDA_NOTE, cuda_unavailable_in_this_child, driver_started_here
from ._report import DistributedReport, RankReport
from .._global_state import kept_as_found

__all__ = ["profile_distributed", "BACKENDS", "START_METHODS"]

BACKENDS = ("gloo", "nccl")
START_METHODS = ("fork", "spawn")
#: keys of the dict ``train_fn`` may return, in the order of a returned tuple
_PARTS = ("model", "batch", "loss_fn", "optimizer")
#: set in every process vramnb starts (NVLink multicast off)
_ENV = {"NCCL_NVLS_ENABLE": "0"}


@kept_as_found
def profile_distributed(
    train_fn: Callable[..., Any],
    nprocs: int = 2,
    *,
    args: tuple[Any, ...] = (),
    backend: str | None = None,
    start_method: str = "fork",
    timeout: float = 300.0,
    grace: float = 10.0,
    **profile_kwargs: Any,
) -> DistributedReport:
    """Profile a training step on each of ``nprocs`` ranks and report them side by side.

    Each rank is a new process with its process group set up (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR=127.0.0.1`` and a free ``MASTER_PORT`` in its environment, and
    ``NCCL_NVLS_ENABLE=0``); on ``nccl`` its CUDA device is ``cuda:<rank>``. It calls
    ``train_fn(rank, world_size, *args)``, which builds that rank's model (wrapped in DDP or
    FSDP as you train it), batch, loss and optimizer and returns them as
    ``(model, batch, loss_fn, optimizer)`` (``loss_fn`` and ``optimizer`` may be ``None`` or
    left off) or a dict with those keys; vramnb then runs :func:`vramnb.profile_step` on them
    with ``profile_kwargs``. A ``train_fn`` that calls ``vramnb.profile_step`` itself may
    return its :class:`~vramnb.StepReport` instead. On ``gloo``, each rank runs
    ``max(1, cpu_count // nprocs)`` intra-op threads.

    Args:
        train_fn: the function each rank runs (see above).
        nprocs: the number of ranks (processes), at least 1.
        args: further positional arguments to ``train_fn`` (pickled for ``spawn``).
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (one CUDA device per rank); ``None``: ``nccl``
            when at least ``nprocs`` CUDA devices are visible, else ``gloo``.
        start_method: ``"fork"`` (a function defined in a notebook cell works; not once this
            process has initialised CUDA) or ``"spawn"`` (``train_fn`` must be importable from
            a ``.py`` module). See the module's documentation.
        timeout: seconds for the whole run, from the start of the processes; ranks still
            running then are stopped (and the process group's own timeout).
        grace: seconds the other ranks get after one fails, and a stopped rank gets to report
            before it is killed.
        profile_kwargs: options of :func:`vramnb.profile_step` (``steps``, ``module_depth``,
            ``recipe``, ``label``, ``restore``, ``set_to_none``, ``diagnose``). Two defaults
            differ here: ``diagnose=False`` (the savings estimates would run in every rank) and
            ``restore=False`` (a rank's model ends with its process; the snapshot's host copies
            would count in its RSS, and it cannot copy FSDP2's parameters yet).

    Returns:
        a :class:`~vramnb.DistributedReport`: one :class:`RankReport` per rank with its status,
        its step report (the breakdown by source in bytes, partial where the step failed), its
        error and traceback, its host RSS and peak RSS (bytes) and the CPU tensor bytes at the
        end, from which ``non_pytorch`` (RSS minus tensor bytes) is computed.
        ``report.plot()`` draws the ranks' peaks side by side. A rank's failure is reported,
        not raised: check ``report.ok``.

    Raises:
        TypeError: ``train_fn`` is not callable, or ``args`` is not a tuple.
        ValueError: ``nprocs`` is not an int of at least 1; an unknown ``backend``,
            ``start_method`` or ``profile_step`` option; ``timeout``/``grace`` not positive;
            ``nccl`` with fewer CUDA devices than ``nprocs``; ``fork`` after this process
            initialised CUDA (with ``nccl``) or a process group; ``spawn`` with a ``train_fn``
            a new interpreter cannot import; a CPU tensor in shared memory in ``args`` or reached by
            ``train_fn`` (a model after ``model.share_memory()``: the ranks would train the notebook's
            weights in place). All before any process starts.
        KeyboardInterrupt: an interrupt while waiting stops and joins every rank first.
    """
    import torch
    import torch.multiprocessing as tmp

    backend = _check(train_fn, nprocs, args, backend, start_method, timeout, grace, profile_kwargs)
    profile_kwargs.setdefault("diagnose", False)
    profile_kwargs.setdefault("restore", False)  # a rank's model ends with its process
    readers, writers = zip(*[_pipe(start_method) for _ in range(nprocs)])
    env = {**_ENV, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": str(nprocs)}
    # CPU ranks forked from a process that started the CUDA driver cannot use it: they are told so (_fork_cuda)
    no_cuda = (start_method == "fork" and backend == "gloo" and torch.cuda.device_count() > 0
               and (torch.cuda.is_initialized() or driver_started_here()))
    t0 = time.monotonic()
    context = None
    results: dict[int, RankReport] = {}
    report = DistributedReport([], backend, start_method)
    if no_cuda:
        report.notes.append(_FORK_CUDA_NOTE)
    found = offsets()  # a forked rank shares this process's open files: offsets it could not unshare come back
    try:
        with _environment(env), _main_spec():  # the children start with env (spawn: a fresh interpreter's)
            context = tmp.start_processes(
                _rank_main, args=(nprocs, backend, train_fn, args, profile_kwargs, list(writers), timeout, env, no_cuda),
                nprocs=nprocs, join=False, daemon=False, start_method=start_method)
        for w in writers:  # the children hold theirs: a child gone closes its pipe
            w.close()
        _collect(context.processes, list(readers), results, report, timeout, grace)
    finally:
        if context is not None:
            _stop(context.processes, list(readers), results, grace)
            for f in context.error_files:
                with contextlib.suppress(OSError):
                    os.unlink(f)
        for c in (*readers, *writers):
            c.close()
        put_offsets_back(found)
    for r in range(nprocs):
        rank = results.get(r) or RankReport(r, "killed")
        if context is not None:
            rank.exitcode, rank.pid = context.processes[r].exitcode, context.processes[r].pid
        report.ranks.append(rank)
    report.wall = time.monotonic() - t0
    return report


def _check(train_fn: Any, nprocs: Any, args: Any, backend: Any, start_method: Any, timeout: Any, grace: Any,
           profile_kwargs: Mapping[str, Any]) -> str:
    """Every check, before any process starts; returns the backend."""
    import torch

    if not callable(train_fn):
        raise TypeError(f"train_fn must be callable (a function train_fn(rank, world_size, *args) returning "
                        f"(model, batch, loss_fn, optimizer)), not {type(train_fn).__name__}")
    if not isinstance(nprocs, int) or isinstance(nprocs, bool) or nprocs < 1:
        raise ValueError(f"nprocs must be an int of at least 1 (the number of ranks), not {nprocs!r}")
    if not isinstance(args, tuple):
        raise TypeError(f"args must be a tuple of train_fn's further arguments, not {type(args).__name__}")
    for name, value in (("timeout", timeout), ("grace", grace)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
    if start_method not in START_METHODS:
        raise ValueError(f"unknown start_method {start_method!r}; valid: {', '.join(map(repr, START_METHODS))}")
    gpus = torch.cuda.device_count()  # NVML where it can: no CUDA context
    if backend is None:
        backend = "nccl" if gpus >= nprocs else "gloo"
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid: {', '.join(map(repr, BACKENDS))} or None (nccl when "
                         "there is a CUDA device per rank, else gloo)")
    if backend == "nccl" and gpus < nprocs:
        raise ValueError(f"backend 'nccl' needs one CUDA device per rank: {nprocs} ranks, {gpus} visible; "
                         "use backend='gloo' (CPU) or fewer ranks")
    from .._profile_step import profile_step

    allowed = [p for p in inspect.signature(profile_step).parameters if p not in _PARTS]
    unknown = sorted(set(profile_kwargs) - set(allowed))
    if unknown:
        raise ValueError(f"unknown profile_step option(s) {', '.join(map(repr, unknown))}; valid: {', '.join(allowed)}")
    shared = _shared_tensors(train_fn, args)
    if shared:
        raise ValueError(
            f"{'; '.join(shared[:3])}{f' (and {len(shared) - 3} more)' if len(shared) > 3 else ''}: in shared memory "
            "(model.share_memory(), tensor.share_memory_(), or received from another process), which every rank "
            "writes into as it trains: the notebook's tensors would change. Pass a private copy "
            "(copy.deepcopy(model): its tensors are not shared) or build the model inside train_fn")
    if start_method == "fork":
        if backend == "nccl" and torch.cuda.is_initialized():
            raise ValueError(
                "start_method='fork' cannot give the ranks CUDA: this process has initialised CUDA already (a cell "
                "used torch.cuda), and CUDA refuses a forked child. Restart the kernel and keep every CUDA call inside "
                "train_fn, or use start_method='spawn' with train_fn in an importable .py module")
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            raise ValueError("start_method='fork' would copy this process's own process group into every rank: "
                             "call torch.distributed.destroy_process_group() first, or use start_method='spawn'")
    else:
        _check_spawnable(train_fn, args)
    return str(backend)


def _shared_tensors(train_fn: Any, args: tuple[Any, ...]) -> list[str]:
    """The CPU tensors in shared memory that the ranks reach: in ``args`` (a module's parameters and buffers, an
    optimizer's state, tensors in containers), named by where they are, and those ``train_fn``'s code reaches by
    name (:class:`vramnb._code_state.CodeState`), by shape."""
    import torch

    out: list[str] = []
    seen: set[int] = set()

    def shared(t: Any) -> bool:
        if not isinstance(t, torch.Tensor) or id(t) in seen:
            return False
        seen.add(id(t))
        try:
            return t.device.type == "cpu" and t.layout == torch.strided and t.is_shared()
        except (RuntimeError, NotImplementedError):  # a tensor without storage (a subclass, a meta or fake one)
            return False

    def walk(v: Any, where: str, depth: int = 0) -> None:
        if depth > 4:
            return
        if isinstance(v, torch.nn.Module):
            for n, t in [*v.named_parameters(), *v.named_buffers()]:
                if shared(t):
                    out.append(f"{where}'s {'parameter' if isinstance(t, torch.nn.Parameter) else 'buffer'} {n!r}")
        elif isinstance(v, torch.optim.Optimizer):
            for i, st in enumerate(v.state.values()):
                for k, t in st.items():
                    if shared(t):
                        out.append(f"{where}'s state {k!r} of parameter {i}")
        elif isinstance(v, torch.Tensor):
            if shared(v):
                out.append(f"{where} (a tensor of shape {tuple(v.shape)})")
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(x, f"{where}[{i}]", depth + 1)
        elif isinstance(v, dict):
            for k, x in list(v.items()):
                walk(x, f"{where}[{k!r}]", depth + 1)

    walk(tuple(args), "args")
    reached: list[torch.Tensor] = []
    CodeState.take(None, [train_fn], add_tensor=reached.append)
    out += [f"a tensor of shape {tuple(t.shape)} that train_fn reaches by name" for t in reached if shared(t)]
    return out


def _check_spawnable(train_fn: Any, args: tuple[Any, ...]) -> None:
    """A spawned interpreter imports ``train_fn`` by module and name: refuse what it cannot find."""
    module = getattr(train_fn, "__module__", None)
    main = sys.modules.get("__main__")
    name = getattr(train_fn, "__qualname__", "")
    # a notebook's or IPython's __main__ has no file; a script's has one, and there the function
    # must be one of its top-level names (a spawned interpreter runs the script as __mp_main__)
    if module == "__main__" and (getattr(main, "__file__", None) is None or getattr(main, name, None) is not train_fn):
        raise ValueError(
            f"start_method='spawn' cannot run {name or train_fn!r}: it is defined in a notebook cell or "
            "interactively (module __main__, no file to import it from), which a spawned interpreter cannot "
            "import. Use start_method='fork', or define train_fn in a .py module and import it")
    try:
        pickle.dumps((train_fn, args))  # a function pickles by reference: dumps checks that its name finds it
    except Exception as e:  # noqa: BLE001 - any pickling failure is the same refusal
        raise ValueError(
            f"start_method='spawn' pickles train_fn and args for the new interpreter, and that failed "
            f"({type(e).__name__}: {e}): a lambda, a closure or a nested function cannot be pickled. Use "
            "start_method='fork', or a module-level function of a .py module") from None


def _pipe(start_method: str) -> tuple[Connection, Connection]:
    import multiprocessing

    reader, writer = multiprocessing.get_context(start_method).Pipe(duplex=False)
    return reader, writer


def _free_port() -> int:
    """A TCP port free on 127.0.0.1 now (another process may take it before the ranks bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _main_spec() -> Iterator[None]:
    """While the ranks start, a ``__main__`` without ``__spec__`` gets ``__spec__ = None``.
    IPython puts its user namespace's module in ``sys.modules["__main__"]`` with no
    ``__spec__``, and spawn's preparation (CPython's ``multiprocessing.spawn.get_preparation_data``)
    reads it and raises ``AttributeError``; ``None`` is what an interactive ``__main__`` has,
    which spawn treats as nothing to re-import. Removed again afterwards."""
    main = sys.modules.get("__main__")
    added = main is not None and not hasattr(main, "__spec__")
    if added:
        main.__spec__ = None  # type: ignore[union-attr]
    try:
        yield
    finally:
        if added:
            with contextlib.suppress(AttributeError):
                del main.__spec__  # type: ignore[union-attr]


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# -- the parent ---------------------------------------------------------------------
def _receive(rank: int, conn: Connection, proc: Any) -> RankReport | None:
    """The rank's report if it sent one; a report of its end if it exited without; else ``None``."""
    if conn.poll():
        try:
            got = conn.recv()
        except (EOFError, OSError, pickle.UnpicklingError):  # the pipe closed with nothing (or half a message)
            got = None
        if isinstance(got, RankReport):
            return got
        proc.join(timeout=1.0)
        return RankReport(rank, "exited", error=None if proc.is_alive() else f"ended with exit code {proc.exitcode} "
                          "before it reported")
    if not proc.is_alive():
        return RankReport(rank, "exited", error=f"ended with exit code {proc.exitcode} before it reported")
    return None


def _collect(procs: list[Any], readers: list[Connection], results: dict[int, RankReport], report: DistributedReport,
             timeout: float, grace: float) -> None:
    """Wait for every rank's report, for ``timeout`` seconds at most, and ``grace`` seconds after the
    first failure."""
    deadline = time.monotonic() + timeout
    stop_at: float | None = None
    while len(results) < len(procs):
        now = time.monotonic()
        end = deadline if stop_at is None else min(deadline, stop_at)
        if now >= end:
            waiting = [r for r in range(len(procs)) if r not in results]
            if stop_at is not None and stop_at <= deadline:
                report.notes.append(f"rank(s) {', '.join(map(str, waiting))} still running {grace:g} s after rank "
                                    f"{report.first_failure} failed: stopped")
            else:
                report.notes.append(f"rank(s) {', '.join(map(str, waiting))} still running at the timeout "
                                    f"({timeout:g} s): stopped")
            return
        pending = [r for r in range(len(procs)) if r not in results]
        wait([readers[r] for r in pending] + [procs[r].sentinel for r in pending], timeout=end - now)
        for r in pending:
            got = _receive(r, readers[r], procs[r])
            if got is None:
                continue
            results[r] = got
            if got.status != "ok" and report.first_failure is None:
                report.first_failure = r
                stop_at = time.monotonic() + grace


def _stop(procs: list[Any], readers: list[Connection], results: dict[int, RankReport], grace: float) -> None:
    """Ranks that reported get ``grace`` seconds to exit on their own; then SIGTERM to every rank
    still running, ``grace`` seconds to report, then SIGKILL; join all."""
    end = time.monotonic() + grace
    for r in results:
        procs[r].join(timeout=max(0.0, end - time.monotonic()))
    running = [r for r, p in enumerate(procs) if p.is_alive()]
    for r in running:
        with contextlib.suppress(Exception):
            procs[r].terminate()
    end = time.monotonic() + grace
    while any(p.is_alive() for p in procs) and time.monotonic() < end:
        waiting = [r for r in running if r not in results]
        alive = [procs[r].sentinel for r in running if procs[r].is_alive()]  # an ended one's is always ready
        wait([readers[r] for r in waiting if not readers[r].closed] + alive, timeout=max(0.0, end - time.monotonic()))
        for r in waiting:
            got = _receive(r, readers[r], procs[r]) if not readers[r].closed else None
            if got is not None and got.status == "exited" and (procs[r].exitcode or 0) < 0:
                got = RankReport(r, "killed", error=f"ended by signal {-(procs[r].exitcode or 0)} from vramnb's stop "
                                 "before it reported")
            if got is not None:
                results[r] = got
    for r in range(len(procs)):
        if r not in results and not readers[r].closed and readers[r].poll():
            results[r] = _receive(r, readers[r], procs[r]) or RankReport(r, "killed")
    for p in procs:
        if p.is_alive():
            with contextlib.suppress(Exception):
                p.kill()
        p.join(timeout=max(grace, 5.0))
    for r, p in enumerate(procs):
        if r not in results and p.exitcode is not None and p.exitcode < 0:
            results[r] = RankReport(r, "killed", error=f"killed by signal {-p.exitcode}")


# -- a rank ---------------------------------------------------------------------------
def _rank_main(rank: int, world_size: int, backend: str, train_fn: Callable[..., Any], args: tuple[Any, ...],
               profile_kwargs: dict[str, Any], writers: list[Connection], timeout: float, env: dict[str, str],
               no_cuda: bool = False) -> None:
    """A child's whole life: process group, ``train_fn``, the profiled step, the report sent. ``no_cuda``: a
    forked CPU rank whose parent had started the CUDA driver (:mod:`._fork_cuda`)."""
    import datetime

    import torch
    import torch.distributed as dist

    unshare_offsets()  # (fork) the user's code here must move no offset of the notebook's open files
    conn = writers[rank]
    for i, w in enumerate(writers):  # only its own pipe: a rank gone closes exactly its pipe
        if i != rank:
            w.close()
    os.environ.update({**env, "RANK": str(rank), "LOCAL_RANK": str(rank)})
    stopping = []

    def on_sigterm(signum: int, frame: Any) -> None:  # vramnb's stop: the interrupt profile_step restores on
        import _thread

        stopping.append(signum)
        _thread.interrupt_main()

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, on_sigterm)
    out = RankReport(rank, "ok")
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
            out.device = f"cuda:{rank}"
        else:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
            if no_cuda:
                cuda_unavailable_in_this_child()
            out.device = "cpu"
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout))
        got = train_fn(rank, world_size, *args)
        if isinstance(got, StepReport):
            out.step = got
        else:
            from .._profile_step import profile_step

            parts = _parts(got)
            out.ddp_buckets = _ddp_bucket_bytes(parts["model"])
            out.step = profile_step(**parts, **profile_kwargs)
        out.device = out.step.device
    except BaseException as e:  # noqa: BLE001 - every failure is this rank's report
        from .._oom import is_oom

        out.status = "stopped" if stopping else "out of memory" if is_oom(e) else "raised"
        out.error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        out.traceback = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        out.step = getattr(e, "vramnb_report", None)
        del e
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # from here on, a stop ends the process
    _host_memory(out)
    _send(conn, out)
    with contextlib.suppress(Exception):
        if dist.is_initialized():
            dist.destroy_process_group()


def _parts(got: Any) -> dict[str, Any]:
    """``train_fn``'s return as ``profile_step``'s arguments."""
    if isinstance(got, Mapping):
        extra = sorted(set(got) - set(_PARTS))
        if extra or "model" not in got or "batch" not in got:
            raise TypeError(f"train_fn returned a dict with keys {sorted(got)}; it needs 'model' and 'batch', and may "
                            f"have 'loss_fn' and 'optimizer' (valid keys: {', '.join(_PARTS)})")
        return dict(got)
    if isinstance(got, tuple) and 2 <= len(got) <= 4:
        return dict(zip(_PARTS, got))
    raise TypeError(f"train_fn must return (model, batch, loss_fn, optimizer) (loss_fn and optimizer optional), a dict "
                    f"with those keys, or a vramnb StepReport; it returned {type(got).__name__}")


def _ddp_bucket_bytes(model: Any) -> int | None:
    """Bytes of the gradient buckets of the DDP modules in ``model`` (DDP's own logging data:
    ``bucket_sizes``, a comma-separated list of bytes), or ``None`` without DDP."""
    from torch.nn.parallel import DistributedDataParallel

    total, found = 0, False
    for m in model.modules() if hasattr(model, "modules") else ():
        if isinstance(m, DistributedDataParallel):
            with contextlib.suppress(Exception):
                sizes = m._get_ddp_logging_data().get("bucket_sizes")
                total += sum(int(x) for x in str(sizes).split(",") if x.strip())
                found = True
    return total if found else None


def _host_memory(out: RankReport) -> None:
    """The process's RSS and peak RSS (``/proc/self/status``, Linux; peak only elsewhere) and the
    CPU tensor bytes alive now (the storage tracker, after a scan), bytes."""
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        out.rss = int(fields["VmRSS"].split()[0]) * 1024
        out.peak_rss = int(fields["VmHWM"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        with contextlib.suppress(Exception):
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            out.peak_rss = peak if sys.platform == "darwin" else peak * 1024
    with contextlib.suppress(Exception):
        from .._tracker import cpu_tracker

        tracker = cpu_tracker()
        tracker.scan(True)
        out.tensor_bytes = tracker.current


def _send(conn: Connection, out: RankReport) -> None:
    """Send the report; what cannot be pickled (a recipe's objects, the post-mortem) is left out, said in a note."""
    try:
        data = pickle.dumps(out)
    except Exception as e:  # noqa: BLE001
        if out.step is not None:
            out.step.recipe = None
            out.step.oom = None
            out.step.notes.append(f"the recipe and post-mortem were left out of this rank's report ({type(e).__name__})")
        try:
            data = pickle.dumps(out)
        except Exception as e2:  # noqa: BLE001
            data = pickle.dumps(RankReport(out.rank, out.status, None, out.error or f"report not sendable: {e2}",
                                           out.traceback, rss=out.rss, peak_rss=out.peak_rss,
                                           tensor_bytes=out.tensor_bytes, device=out.device))
    with contextlib.suppress(OSError):
        conn.send_bytes(data)
        conn.close()
