"""Every process-wide state a vramnb entry point could change, kept as found.

One guard (:func:`kept_as_found`, also a decorator) wraps each public entry point
(``estimate``, ``max_batch_size``, ``fit``, ``compare``, ``panel``, ``profile_step``,
``profile_distributed``): whatever runs inside (the user's model, loss, a
``DataLoader`` whose dataset draws from ``random`` or ``numpy.random``, vramnb's own
code), on return or on error the process is left as it was found:

* random number generators: PyTorch's default CPU generator, each CUDA device's
  (where CUDA was initialised before the call), Python's global ``random`` and
  NumPy's global (legacy) state (:class:`vramnb._rng_state.RngStates`);
* defaults and modes: default dtype, default device, grad mode, anomaly detection,
  deterministic algorithms (and their warn-only setting), the number of intra-op
  threads, ``float32`` matmul precision, and the cuDNN / CUDA matmul flags
  (``enabled``, ``benchmark``, ``deterministic``, ``allow_tf32``, reduced-precision
  reductions);
* what the user's code run in the step may set for the whole process: scaled-dot-product
  attention's kernel switches, ``mkldnn`` and ``opt_einsum`` switches, torch's print options,
  environment variables (``os.environ``), each logger's level, handlers, ``disabled`` and
  ``propagate`` (a logger made meanwhile is left as it is);
* hooks and filters a library vramnb imports installs at import (``torch.distributed``'s
  process group sets ``sys.excepthook``, ``accelerate`` adds a ``warnings`` filter through
  peft; PyTorch's ``ModTracker`` replaces ``warnings.formatwarning`` as it warns): ``sys.excepthook``,
  ``threading.excepthook``, ``warnings.filters``, ``formatwarning`` and ``showwarning`` (a warning raised
  inside is shown as the filters found decide: ``warnings.catch_warnings`` does not carry
  the registry of what was already shown, so that is left alone);
* compiled code: inside, ``torch.compile``'d code runs eagerly and dynamo's caches and
  recompile budgets stay as found (:mod:`vramnb._compiled`).

A value is written back only where it differs from the one found. The state is the process's:
where entry points overlap in several threads, the state found before the first started is put
back when the last one ends (another thread of the user's that changes it meanwhile, e.g. draws
from torch's generator, sees that change undone then).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

from ._compiled import compiled_eagerly
from ._interrupt import held_back
from ._rng_state import RngStates

__all__ = ["kept_as_found", "snapshot"]

F = TypeVar("F", bound=Callable[..., Any])


def _flag(get: Callable[[], Any], set_: Callable[[Any], Any]) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    return get, set_


def _set_attr(obj: Any, name: str) -> Callable[[Any], None]:
    return lambda v: setattr(obj, name, v)


def _flags() -> dict[str, tuple[Callable[[], Any], Callable[[Any], Any]]]:
    cudnn = torch.backends.cudnn
    matmul = torch.backends.cuda.matmul
    out = {
        "default dtype": _flag(torch.get_default_dtype, torch.set_default_dtype),
        "grad mode": _flag(torch.is_grad_enabled, lambda v: torch.set_grad_enabled(v)),
        "anomaly detection": _flag(lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
                                   lambda v: torch.set_anomaly_enabled(*v)),
        "deterministic algorithms": _flag(
            lambda: (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled()),
            lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1])),
        "intra-op threads": _flag(torch.get_num_threads, torch.set_num_threads),
        # before the per-backend fp32 precisions below: setting it rewrites some of them
        "float32 matmul precision": _flag(_matmul_precision, _set_matmul_precision),
        **_fp32_precisions(),
        "warn always": _flag(torch.is_warn_always_enabled, torch.set_warn_always),
        "autograd multithreading": _flag(torch.autograd.is_multithreading_enabled,
                                         torch.autograd.set_multithreading_enabled),
        "flush denormal": _flag(_flushes_denormals, torch.set_flush_denormal),
        "recursion limit": _flag(sys.getrecursionlimit, sys.setrecursionlimit),
        "working directory": _flag(_cwd, _chdir),
    }
    for dev in ("cpu", "cuda"):
        out[f"autocast dtype ({dev})"] = _flag(functools.partial(torch.get_autocast_dtype, dev),
                                               functools.partial(torch.set_autocast_dtype, dev))
    out["autocast cache"] = _flag(torch.is_autocast_cache_enabled, torch.set_autocast_cache_enabled)
    mha = getattr(torch.backends, "mha", None)
    if mha is not None:
        out["multi-head attention fast path"] = _flag(mha.get_fastpath_enabled, mha.set_fastpath_enabled)
    for name in ("preferred_linalg_library", "preferred_blas_library"):
        lib = getattr(torch.backends.cuda, name, None)
        if lib is not None:  # each both reads (no argument) and sets
            out[name.replace("_", " ")] = _flag(lib, lib)
    np = sys.modules.get("numpy")
    if np is not None:  # set by the user's code only where NumPy is imported
        out["numpy error handling"] = _flag(np.geterr, lambda v: np.seterr(**v))
        out["numpy print options"] = _flag(np.get_printoptions, lambda v: np.set_printoptions(**v))
    dynamo = sys.modules.get("torch._dynamo.config")
    if dynamo is not None:  # read only where dynamo is imported (importing it takes seconds)
        out["dynamo config"] = _flag(dynamo.get_config_copy, _set_config(dynamo))
    if hasattr(torch, "_GLOBAL_DEVICE_CONTEXT"):
        out["default device"] = _flag(_default_device, torch.set_default_device)
    for name in ("enabled", "benchmark", "deterministic", "allow_tf32"):
        out[f"cudnn.{name}"] = _flag(functools.partial(getattr, cudnn, name), _set_attr(cudnn, name))
    for name in ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        out[f"cuda.matmul.{name}"] = _flag(functools.partial(getattr, matmul, name), _set_attr(matmul, name))
    cuda = torch.backends.cuda
    for kind in ("flash", "mem_efficient", "math", "cudnn"):  # scaled_dot_product_attention's kernels
        get, enable = getattr(cuda, f"{kind}_sdp_enabled", None), getattr(cuda, f"enable_{kind}_sdp", None)
        if get is not None and enable is not None:
            out[f"{kind} sdp"] = _flag(get, enable)
    for mod, name in ((torch.backends.mkldnn, "enabled"), (torch.backends.opt_einsum, "enabled"),
                      (torch.backends.opt_einsum, "strategy")):
        label = f"{mod.__name__.rsplit('.', 1)[-1]}.{name}"
        out[label] = _flag(functools.partial(getattr, mod, name), _set_attr(mod, name))
    out["print options"] = _flag(lambda: dict(vars(torch._tensor_str.PRINT_OPTS)),
                                 lambda v: vars(torch._tensor_str.PRINT_OPTS).update(v))
    return out


_UNREADABLE = "unreadable: the legacy and the per-backend fp32 precision APIs were mixed"

# PyTorch's per-backend fp32 precisions (``torch.backends.fp32_precision``,
# ``torch.backends.cuda.matmul.fp32_precision``, ``torch.backends.mkldnn.conv.fp32_precision``, ...), as
# (backend, operation) pairs of ``torch._C._get_fp32_precision_getter``, which those attributes read: a
# parent first, as setting ``("generic", "all")`` or a backend's ``"all"`` rewrites its children
_FP32 = (("generic", "all"), ("cuda", "all"), ("mkldnn", "all"), ("cuda", "matmul"), ("cuda", "conv"),
         ("cuda", "rnn"), ("mkldnn", "matmul"), ("mkldnn", "conv"), ("mkldnn", "rnn"))


def _fp32_precisions() -> dict[str, tuple[Callable[[], Any], Callable[[Any], Any]]]:
    get = getattr(torch._C, "_get_fp32_precision_getter", None)
    set_ = getattr(torch._C, "_set_fp32_precision_setter", None)
    if get is None or set_ is None:  # PyTorch before 2.9
        return {}
    return {f"fp32 precision ({b}, {op})": _flag(functools.partial(get, b, op), functools.partial(set_, b, op))
            for b, op in _FP32}


def _matmul_precision() -> str:
    """``torch.get_float32_matmul_precision()``; it raises once the user mixed it with the per-backend API
    (``torch.backends.mkldnn.matmul.fp32_precision = "bf16"``), which is theirs to do: then a marker."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        return _UNREADABLE


def _set_matmul_precision(v: str) -> None:
    if v != _UNREADABLE:  # where it could not be read, the per-backend values put it back
        torch.set_float32_matmul_precision(v)


def _flushes_denormals() -> bool:
    """Whether this thread flushes denormal floats to zero (``torch.set_flush_denormal``, which has no
    getter, sets the CPU's flush-to-zero and denormals-are-zero bits, which Python's own float arithmetic
    obeys too): a denormal double times one reads zero then. No tensor is made."""
    denormal = float("1e-310")
    return denormal * 1.0 == 0.0


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the working directory was removed
        return None


def _chdir(path: str | None) -> None:
    if path is not None:
        os.chdir(path)


def _set_config(config: Any) -> Callable[[dict[str, Any]], None]:
    """Put back the entries of a ``torch`` config module (dynamo's) that differ from those found: one by
    one, as ``load_config`` of all of them warns about each deprecated entry."""
    def set_(found: dict[str, Any]) -> None:
        now = config.get_config_copy()
        for k, v in found.items():
            if k in now and not _same(now[k], v):
                setattr(config, k, v)
    return set_


def _default_device() -> Any:
    """The device ``torch.set_default_device`` set (``None`` where none is), read from the
    context torch keeps for it: ``torch.get_default_device()`` resolves a ``"cuda"`` default to
    an index by making a tensor there, which would create a CUDA context (and fails on a CPU build)."""
    ctx = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    return None if ctx is None else ctx.device


def snapshot() -> dict[str, Any]:
    """The values of the flags and defaults :func:`kept_as_found` keeps (name → value; for tests)."""
    return {name: get() for name, (get, _) in _flags().items()}


def _hooks() -> dict[str, tuple[Callable[[], Any], Callable[[Any], Any]]]:
    """Process-wide hooks and filters, compared by identity (a filter list by its entries)."""
    return {
        "sys.excepthook": _flag(lambda: sys.excepthook, _set_attr(sys, "excepthook")),
        "threading.excepthook": _flag(lambda: threading.excepthook, _set_attr(threading, "excepthook")),
        "warnings.filters": _flag(lambda: list(warnings.filters), _set_filters),
        # PyTorch's ModTracker (the step's per-module tracking) replaces warnings.formatwarning as it warns
        "warnings.formatwarning": _flag(lambda: warnings.formatwarning, _set_attr(warnings, "formatwarning")),
        "warnings.showwarning": _flag(lambda: warnings.showwarning, _set_attr(warnings, "showwarning")),
        "environment variables": _flag(lambda: dict(os.environ), _set_environ),
        "loggers": _flag(_loggers, _set_loggers),
    }


def _loggers() -> dict[str, Any]:
    """Each logger's level, handlers, ``disabled`` and ``propagate`` (the root's too)."""
    found = [("", logging.getLogger())] + [(n, lg) for n, lg in list(logging.Logger.manager.loggerDict.items())
                                          if isinstance(lg, logging.Logger)]
    return {n: (lg, lg.level, list(lg.handlers), lg.disabled, lg.propagate) for n, lg in found}


def _set_loggers(found: dict[str, Any]) -> None:
    """Put back the loggers found (a logger made since is left as it is: a library imported meanwhile made it)."""
    for lg, level, handlers, disabled, propagate in found.values():
        if lg.level != level:
            lg.setLevel(level)
        if lg.handlers != handlers:
            lg.handlers[:] = handlers
        lg.disabled, lg.propagate = disabled, propagate


def _set_environ(found: dict[str, str]) -> None:
    for k in [k for k in os.environ if k not in found]:
        del os.environ[k]
    for k, v in found.items():
        if os.environ.get(k) != v:
            os.environ[k] = v


def _set_filters(found: list[Any]) -> None:
    warnings.filters[:] = found  # type: ignore[index]  # a list at run time (typeshed says Sequence)
    warnings._filters_mutated()  # type: ignore[attr-defined]  # as warnings.filterwarnings does: caches re-read


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b))
    return a is b or bool(a == b)


class _Found:
    """The global state as found (RNGs, flags, hooks), and :meth:`restore` to put it back where it differs."""

    def __init__(self) -> None:
        self.rng = RngStates()
        self.flags = {**_flags(), **_hooks()}
        self.values = {name: get() for name, (get, _) in self.flags.items()}

    def restore(self) -> None:
        for name, (get, set_) in self.flags.items():
            if not _same(get(), self.values[name]):
                set_(self.values[name])
        self.rng.restore()


_LOCK = threading.RLock()
_OPEN: dict[int, int] = {}  # thread id -> how many guards it has open
_FIRST: list[_Found | None] = [None]  # what the first guard open in the process found


@contextlib.contextmanager
def _guard() -> Iterator[None]:
    """Keep the global state as found around the block.

    The state is process-wide, and two threads' entry points need not end in the order they started:
    one that started inside another thread's would find that thread's state mid-step (its RNG after a
    dropout, the ``force_eager`` stance) and put it back after the other thread restored. So the first
    guard open in the process records the state, and the last one to close puts it back; a guard nested
    in its own thread's (``compare`` running ``profile_step``) records and puts back its own, as a
    ``with`` block does."""
    me = threading.get_ident()
    opened, nested, found = False, False, None
    try:
        with held_back(), _LOCK:  # an interrupt held back here is raised inside the try, once this guard is counted
            nested = _OPEN.get(me, 0) > 0
            found = _Found() if nested or not _OPEN else None
            if not _OPEN:
                _FIRST[0] = found
            _OPEN[me] = _OPEN.get(me, 0) + 1
            opened = True
        with compiled_eagerly():
            yield
    finally:
        if opened:
            with held_back(), _LOCK:  # put back whole: an interrupt here is raised once all is as found
                _OPEN[me] -= 1
                if not _OPEN[me]:
                    del _OPEN[me]
                if nested:
                    assert found is not None
                    found.restore()
                elif not _OPEN:
                    first, _FIRST[0] = _FIRST[0], None
                    if first is not None:
                        first.restore()


def _subclasses(values: Any) -> list[type]:
    """The user's own tensor subclasses among the tensors of the call's arguments (a model's parameters and
    buffers, a tensor, the tensors in a list, tuple or dict one level down)."""
    from ._code_state import users_class

    tensors: list[Any] = []
    for v in values:
        if isinstance(v, torch.nn.Module):
            tensors += [*v.parameters(), *v.buffers()]
        elif isinstance(v, (list, tuple)):
            tensors += [t for t in v if isinstance(t, torch.Tensor)]
        elif isinstance(v, dict):
            tensors += [t for t in v.values() if isinstance(t, torch.Tensor)]
        elif isinstance(v, torch.Tensor):
            tensors.append(v)
    out: list[type] = []
    for t in tensors:
        for c in type(t).__mro__:
            if c not in out and users_class(c):
                out.append(c)
    return out


@contextlib.contextmanager
def _classes_kept(values: Any) -> Iterator[None]:
    """Keep the attributes of the user's tensor subclasses (and the entries of their dicts, lists and sets)
    as found: their ``__torch_function__`` runs for the user's step and for vramnb's own reads of the
    tensors (a class-level call counter, a list of the functions seen)."""
    from ._deep_state import put_back, shallow_copy

    found = [(c, dict(vars(c))) for c in _subclasses(values)]
    inner = [(v, shallow_copy(v)) for _, attrs in found for v in attrs.values() if isinstance(v, (dict, list, set))]
    try:
        yield
    finally:
        with held_back():
            for c, attrs in found:
                live = dict(vars(c))
                for k in live.keys() - attrs.keys():
                    delattr(c, k)
                for k, v in attrs.items():
                    if live.get(k) is not v and k not in ("__dict__", "__weakref__"):
                        setattr(c, k, v)
            for live_v, saved in inner:
                put_back(live_v, saved)


def kept_as_found(fn: F) -> F:
    """Decorate an entry point: it leaves every global state in this module's docstring as found, and the
    class attributes of the user's tensor subclasses among its arguments' tensors."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _guard(), _classes_kept([*args, *kwargs.values()]):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
