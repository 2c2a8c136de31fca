"""Read a loader's first batches in a copy of this process, so that nothing of the user's changes.

:func:`vramnb.fit` plans for the largest of a ``DataLoader``'s first batches. Iterating the
user's loader here would change what the user's own loop gets next: the sampler's generator
(``DataLoader(generator=g)``, ``WeightedRandomSampler(generator=g)``) and a resumable
sampler's position advance, a dataset's own random generators and caches move on, a one-shot
stream inside an ``IterableDataset`` is consumed, and a ``persistent_workers`` loader keeps the
iterator (and its workers) that the user's next epoch would then reuse. None of that can be put
back from outside.

So the batches are read *aside*: :func:`read_batches` starts one worker of a private
``DataLoader`` in a forked copy of this process. There, on its own copy of the user's loader (a
``DataLoader`` is read in that process itself: no workers of its own, no pinning; its sampler,
batch sampler, collate function and dataset as the user gave them, and so is any ``DataLoader``
a wrapper iterates there; where the loader has workers, as its worker 0 would:
``get_worker_info()`` says so and its ``worker_init_fn(0)`` runs first; without, with this
process's ``torch``, ``random`` and NumPy global generators as they were), it reads the batches
and sends back the first ones and each larger one (through shared memory, as DataLoader workers do) with
the size of every batch. Whatever that reading changes, it changes in the copy. The private
loader draws its seed from a generator of its own, and the ``SIGCHLD`` handler PyTorch installs
for DataLoader workers is put back as it was.

What a copy of the process still shares with it: open files and other processes. Each open
regular file is unshared in the copy (reopened there at its offset, so that reading moves no
offset here); where that cannot be done, its offset here is put back as found. A DataLoader
iterator whose workers are running (``iter(loader)`` kept in a wrapper) is refused, since reading
it would take the user's batches from those workers. Data read from any other pipe, socket or
queue shared with another process, and files written, are not kept (they cannot be put back).
"""

from __future__ import annotations

import multiprocessing
import pickle
import random
import signal
import sys
import traceback
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from .._checks import InputError, _batch_tensors
from .._file_offsets import offsets as _offsets
from .._file_offsets import put_offsets_back as _put_offsets_back
from .._file_offsets import unshare_offsets as _unshare_offsets
from .._interrupt import held_back

__all__ = ["read_batches", "Read", "TIMEOUT"]

#: seconds the copy may take for one batch: a dataset that waits on threads started before the copy
#: (a thread pool, a prefetching thread: a forked copy has none of them) would otherwise hang ``fit``
TIMEOUT = 120.0


class Read:
    """What :func:`read_batches` read: ``seen`` batches; ``first`` (the first ``keep`` in order);
    ``largest`` (the one with the most tensor bytes, the first of equals) and its ``size`` in bytes."""

    def __init__(self) -> None:
        self.seen = 0
        self.first: list[Any] = []
        self.largest: Any = None
        self.size = -1


def _as_is(x: Any) -> Any:
    return x


def _size(batch: Any) -> int:
    return sum(t.numel() * t.element_size() for _, t in _batch_tensors(batch))


def _unworked(source: Any) -> Any:
    """In the copy: a ``DataLoader`` reading in this process (its iterator and workers, which are
    the user's, left alone), or ``source`` itself."""
    if not isinstance(source, DataLoader):
        return source
    own = object.__new__(type(source))  # the user's loader class (its __iter__), not DataLoader's __init__
    own.__dict__.update(source.__dict__)
    # DataLoader.__setattr__ refuses some of these after __init__; the copy's dict is ours to set. The user's
    # persistent iterator stays referenced by the user's loader: dropping it would shut the user's workers down
    own.__dict__.update(_iterator=None, num_workers=0, pin_memory=False, timeout=0, persistent_workers=False)
    return own


def _error(err: BaseException) -> tuple[str, Any, str]:
    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    try:
        payload = pickle.dumps(err)
        pickle.loads(payload)
        return ("error", payload, text)
    except Exception:  # noqa: BLE001 - its __init__ takes other arguments than its args: rebuilt in the caller
        pass
    try:
        return ("error", pickle.dumps((type(err).__module__, type(err).__qualname__, err.args)), text)
    except Exception:  # noqa: BLE001 - not even its args pickle: its type and message
        return ("error", f"{type(err).__name__}: {err}", text)


def _rebuilt(payload: bytes) -> BaseException:
    """The user's exception from its pickle, or from its class's name and ``args`` (without running an
    ``__init__`` that takes other arguments); a ``RuntimeError`` naming it where the class is not found."""
    got = pickle.loads(payload)
    if isinstance(got, BaseException):
        return got
    module, qualname, args = got
    cls: Any = sys.modules.get(module)
    for part in qualname.split("."):
        cls = getattr(cls, part, None)
    if isinstance(cls, type) and issubclass(cls, BaseException):
        err = cls.__new__(cls, *args)
        err.args = args
        return err
    return RuntimeError(f"{qualname}: {args[0] if len(args) == 1 else args}")


def _refuse_workers(it: Any) -> Any:
    raise InputError("the loader reads from a DataLoader iterator whose worker processes are already running "
                     "(e.g. iter(loader) kept inside it): reading it would take those batches from your "
                     "iterator. Pass the DataLoader itself, or one batch")


class _Aside(IterableDataset):  # type: ignore[type-arg]
    """The private loader's dataset: in its worker (the copy), the user's batches as records."""

    def __init__(self, source: Any, limit: int, keep: int, rng: tuple[Any, Any, Any]) -> None:
        self.source, self.limit, self.keep, self.rng = source, limit, keep, rng

    def __iter__(self) -> Iterator[Any]:
        return self._records()

    def _records(self) -> Iterator[Any]:
        from multiprocessing.reduction import ForkingPickler

        from torch.utils.data._utils import worker

        src = self.source
        workers = src.num_workers if isinstance(src, DataLoader) else 0
        # every DataLoader iterated in the copy (the source, or one inside a wrapper of it) reads in the copy:
        # a user's persistent iterator would otherwise hand the copy's requests to the user's own workers
        if worker._worker_info is None:  # only ever in the private worker: the patch below is the copy's
            raise RuntimeError("vramnb's aside read runs only in its own DataLoader worker")
        base_iter = DataLoader.__iter__
        DataLoader.__iter__ = lambda loader: base_iter(_unworked(loader))  # type: ignore[method-assign,assignment]
        # so an iterator with workers met here is one of this process's (the user's, copied): its workers and
        # queues are the user's, and reading it would take the user's batches from them
        from torch.utils.data import dataloader

        dataloader._MultiProcessingDataLoaderIter.__next__ = _refuse_workers  # type: ignore[method-assign,assignment]
        largest = -1
        yield ("shared", _unshare_offsets(), "")
        try:
            if workers:  # as the user's worker 0 reads: its worker info and worker_init_fn, the generators seeded
                seeded = worker._worker_info
                worker._worker_info = worker.WorkerInfo(id=0, num_workers=workers, dataset=src.dataset,
                                                        seed=seeded.seed if seeded is not None else 0)
                if src.worker_init_fn is not None:
                    src.worker_init_fn(0)
            else:  # as this process's own loop would read: no worker info, the global generators as they were
                worker._worker_info = None
                cpu, py, np_state = self.rng
                torch.random.set_rng_state(cpu)
                random.setstate(py)
                if np_state is not None:
                    sys.modules["numpy"].random.set_state(np_state)
            it = iter(_unworked(src))
            for i in range(self.limit):
                try:
                    b = next(it)
                except StopIteration:
                    return
                n = _size(b)
                record = ("batch", i, n, b if i < self.keep or n > largest else None)
                largest = max(largest, n)
                try:
                    ForkingPickler.dumps(record)  # a batch that cannot be sent would be dropped by the queue
                except Exception as err:  # noqa: BLE001 - said to the caller
                    yield ("error", InputError(f"the loader's batch {i} cannot be sent between processes "
                                               f"({type(err).__name__}: {err}); pass one batch instead"), "")
                    return
                yield record
        except Exception as err:  # noqa: BLE001 - the user's error (or vramnb's refusal), raised in the caller
            yield _error(err)


def _raise(record: tuple[str, Any, str]) -> None:
    _, payload, text = record
    if isinstance(payload, InputError):
        raise payload
    err = _rebuilt(payload) if isinstance(payload, bytes) else RuntimeError(payload)
    if isinstance(err, InputError):
        raise err from None
    if text:
        err.add_note("(raised where vramnb.fit read the loader's batches, in a copy of this process so that "
                     "nothing of yours changed; there:)\n" + text.rstrip())
    raise err from None


def _timed(it: Iterator[Any]) -> Iterator[Any]:
    while True:
        try:
            yield next(it)
        except StopIteration:
            return
        except RuntimeError as err:
            if not str(err).startswith("DataLoader timed out"):
                raise
            raise InputError(f"the loader gave no batch in {TIMEOUT:g} s when read in a copy of this process (a "
                             "dataset that waits on threads started before, e.g. a thread pool or a prefetching "
                             "thread, cannot run in a forked copy): pass one batch instead (your largest)") from None


def read_batches(source: Any, limit: int, keep: int) -> Read:
    """The first ``limit`` batches of ``source`` (a ``DataLoader`` or another re-iterable of
    batches), read in a copy of this process (see the module): their count, the first ``keep``,
    the largest by tensor bytes.

    Raises:
        InputError: this platform cannot fork a process (pass one batch instead); a batch that
            is not a tensor, or a tuple, list or dict of tensors; a batch that cannot be sent
            between processes; no batch within :data:`TIMEOUT` seconds.
        Exception: what the user's loader raised while reading, unchanged but for a note that
            carries the traceback from the copy.
    """
    if "fork" not in multiprocessing.get_all_start_methods():
        raise InputError("vramnb.fit reads a loader's batches in a copy of this process, so that nothing of "
                         "the loader's changes, and this platform cannot fork one: pass one batch instead "
                         "(your largest, e.g. a tuple of tensors from the loader)")
    from torch.utils.data._utils import signal_handling

    np = sys.modules.get("numpy")
    rng = (torch.random.get_rng_state(), random.getstate(), np.random.get_state() if np is not None else None)
    aside = DataLoader(_Aside(source, limit, keep, rng), batch_size=None, num_workers=1,
                       multiprocessing_context="fork", collate_fn=_as_is, generator=torch.Generator(),
                       timeout=TIMEOUT)
    chld = signal.getsignal(signal.SIGCHLD) if hasattr(signal, "SIGCHLD") else None
    chld_set = signal_handling._SIGCHLD_handler_set
    found = _offsets()
    out = Read()
    it: Any = None
    try:
        it = iter(aside)
        for record in _timed(it):
            if record[0] == "error":
                _raise(record)
            if record[0] == "shared":  # the files whose offsets the copy shares with this process
                found = {fd: v for fd, v in found.items() if fd in record[1]}
                continue
            _, i, n, b = record
            out.seen = i + 1
            if i < keep:
                out.first.append(b)
            if n > out.size:
                out.largest, out.size = b, n
    finally:
        with held_back():  # put back whole: an interrupt (Ctrl-C) here is raised once the worker is gone,
            # the offsets and the SIGCHLD handler as found (cut short, PyTorch's handler would stay installed)
            try:
                if it is not None:
                    it._shutdown_workers()  # joins (or kills) the worker before the offsets are put back
            finally:
                _put_offsets_back(found)
                if not chld_set and signal_handling._SIGCHLD_handler_set and chld is not None:
                    try:
                        signal.signal(signal.SIGCHLD, chld)
                        signal_handling._SIGCHLD_handler_set = False
                    except ValueError:  # not the main thread: PyTorch set none either
                        pass
    return out
