"""``vramnb.fit(model, loader, ...)`` reads the loader's batches without changing anything of the
user's: the loader's generator, its sampler (position, generator), the dataset's own generators and
caches, a stream inside an ``IterableDataset``, a persistent-workers loader's iterator, open files'
offsets. Each case compares exact states (generator states, what is left of a stream, the next
epoch's order) with a control run without ``fit``.
"""

from __future__ import annotations

import random
import signal

import numpy as np
import pytest
import torch
from torch.utils.data import (BatchSampler, DataLoader, Dataset, IterableDataset, RandomSampler, Sampler,
                              TensorDataset, WeightedRandomSampler)
from torch.utils.data.distributed import DistributedSampler

import vramnb
from vramnb._checks import InputError


def _fit(loader, allow=(), model=None):
    model = model if model is not None else torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return vramnb.fit(model, loader, lambda m, b: m(b[0]).sum(), opt, target="24GiB", progress=False,
                      allow=list(allow))


def _epoch(loader) -> list[int]:
    return [int(v) for b in loader for v in b[0][:, 0]]


def _numbered(n: int = 64) -> TensorDataset:
    return TensorDataset(torch.arange(float(n)).reshape(n, 1).repeat(1, 8))


def test_loader_generator_not_advanced() -> None:
    """Adversary 01: DataLoader(shuffle=True, generator=g)."""
    g = torch.Generator().manual_seed(1)
    loader = DataLoader(_numbered(), batch_size=8, shuffle=True, generator=g)
    before = g.get_state().clone()
    plan = _fit(loader)
    assert torch.equal(g.get_state(), before)
    assert plan.notes[0] == "planned for the largest of the loader's first 8 batches ((8, 8), 256 B)"
    control = DataLoader(_numbered(), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(1))
    assert _epoch(loader) == _epoch(control)


@pytest.mark.parametrize("entry", ["estimate", "max_batch_size", "profile_step"])
def test_refused_loader_not_iterated(entry: str) -> None:
    """The one-shot check itself called iter(loader), which draws a seed from the loader's generator."""
    g = torch.Generator().manual_seed(1)
    loader = DataLoader(_numbered(), batch_size=8, shuffle=True, generator=g)
    before = g.get_state().clone()
    model = torch.nn.Linear(8, 1)
    with pytest.raises(ValueError, match="pass one of its batches, e.g. next\\(iter\\(loader\\)\\); vramnb.fit also"):
        getattr(vramnb, entry)(model, loader, lambda m, b: m(b[0]).sum())
    assert torch.equal(g.get_state(), before)


def test_dataset_numpy_generator_not_advanced() -> None:
    """Adversary 02: the dataset draws from its own np.random.default_rng."""

    class Drawing(Dataset):
        def __init__(self) -> None:
            self.rng = np.random.default_rng(0)
            self.cache: dict[int, torch.Tensor] = {}  # fills on access

        def __len__(self) -> int:
            return 32

        def __getitem__(self, i: int):
            x = self.cache.setdefault(i, torch.tensor(self.rng.normal(size=8), dtype=torch.float32))
            return (x,)

    ds = Drawing()
    state = ds.rng.bit_generator.state
    _fit(DataLoader(ds, batch_size=8))
    assert ds.rng.bit_generator.state == state
    assert ds.cache == {}


def test_iterable_dataset_stream_not_consumed() -> None:
    """Adversary 03: an IterableDataset over a one-shot generator."""

    def stream():
        for _ in range(20):
            yield (torch.randn(8),)

    s = stream()

    class Stream(IterableDataset):
        def __iter__(self):
            return s

    plan = _fit(DataLoader(Stream(), batch_size=4))
    assert plan.notes[0].startswith("planned for the largest of the loader's first 5 batches ((4, 8), 128 B)")
    assert sum(1 for _ in s) == 20


def _persistent_epoch(call_fit: bool, epochs_before: int) -> tuple[list[int], object]:
    torch.manual_seed(0)
    loader = DataLoader(_numbered(32), batch_size=8, shuffle=True, num_workers=1, persistent_workers=True)
    for _ in range(epochs_before):
        _epoch(loader)
    it = loader._iterator
    model = torch.nn.Linear(8, 1)  # draws from torch's RNG in both runs
    if call_fit:
        _fit(loader, model=model)
    assert loader._iterator is it  # fit neither made nor replaced the user's persistent iterator
    return _epoch(loader), it


@pytest.mark.parametrize("epochs_before", [0, 1])
def test_persistent_workers_next_epoch_unchanged(epochs_before: int) -> None:
    """Adversary 10 (and the user's workers already running: fit must not talk to them)."""
    control, _ = _persistent_epoch(False, epochs_before)
    after, it = _persistent_epoch(True, epochs_before)
    assert after == control
    if it is not None:
        assert all(w.is_alive() for w in it._workers)


class Resumable(Sampler):
    def __init__(self, n: int) -> None:
        self.n, self.pos = n, 0

    def __iter__(self):
        while self.pos < self.n:
            i = self.pos
            self.pos += 1
            yield i
        self.pos = 0

    def __len__(self) -> int:
        return self.n - self.pos


def test_resumable_sampler_position_kept() -> None:
    """Adversary 19: fit reads 256 of 300 batches and stops mid-epoch."""
    sampler = Resumable(300)
    loader = DataLoader(_numbered(300), batch_size=1, sampler=sampler)
    plan = _fit(loader)
    assert plan.notes[0].startswith("planned for the largest of the loader's first 256 batches")
    assert sampler.pos == 0
    assert _epoch(loader) == list(range(300))


class Buckets(BatchSampler):
    """A batch sampler with its own state: a random.Random and a count of epochs."""

    def __init__(self) -> None:
        self.rnd, self.epochs = random.Random(3), 0

    def __iter__(self):
        self.epochs += 1
        idx = list(range(40))
        self.rnd.shuffle(idx)
        yield from (idx[i:i + 5 + i % 3] for i in range(0, 40, 8))

    def __len__(self) -> int:
        return 5


def _samplers() -> dict[str, object]:
    ds = _numbered()
    return {
        "weighted, generator": lambda: DataLoader(ds, batch_size=4, sampler=WeightedRandomSampler(
            [1.0] * 64, 64, generator=torch.Generator().manual_seed(5))),
        "random sampler, generator": lambda: DataLoader(ds, batch_size=4, sampler=RandomSampler(
            ds, generator=torch.Generator().manual_seed(6))),
        "distributed, set_epoch": lambda: _epoch_set(DataLoader(ds, batch_size=4, sampler=DistributedSampler(
            ds, num_replicas=2, rank=1, seed=7))),
        "batch sampler with state": lambda: DataLoader(ds, batch_sampler=Buckets()),
    }


def _epoch_set(loader: DataLoader) -> DataLoader:
    loader.sampler.set_epoch(3)
    return loader


def _sampler_state(loader: DataLoader) -> object:
    s = loader.batch_sampler if isinstance(loader.batch_sampler, Buckets) else loader.sampler
    gen = getattr(s, "generator", None)
    return (bytes(gen.get_state().tolist()) if gen is not None else None, getattr(s, "epoch", None),
            getattr(s, "epochs", None), s.rnd.getstate() if hasattr(s, "rnd") else None)


@pytest.mark.parametrize("kind", sorted(_samplers()))
def test_stateful_samplers_kept(kind: str) -> None:
    loader = _samplers()[kind]()
    state = _sampler_state(loader)
    _fit(loader)
    assert _sampler_state(loader) == state
    torch.manual_seed(1)
    after = _epoch(loader)
    control = _samplers()[kind]()
    torch.manual_seed(1)
    assert after == _epoch(control)


def test_transform_rng_and_file_offset_kept(tmp_path, monkeypatch) -> None:
    """A dataset whose transform has its own random.Random and which reads lines from a file it keeps
    open (a forked copy shares the file's offset with this process: the copy reopens the file, so no
    offset here moves and none is put back, which would rewind one that another thread moved)."""
    from vramnb.planner import _read_aside

    put_back: list[dict] = []
    monkeypatch.setattr(_read_aside, "_put_offsets_back", put_back.append)
    path = tmp_path / "rows.txt"
    path.write_text("".join(f"{i}\n" for i in range(5000)))

    class Lines(Dataset):
        def __init__(self) -> None:
            self.f = open(path)  # noqa: SIM115 - kept open, read line by line
            self.rnd = random.Random(0)

        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int):
            v = float(self.f.readline()) + self.rnd.random()
            return (torch.full((8,), v),)

    ds = Lines()
    state = ds.rnd.getstate()
    _fit(DataLoader(ds, batch_size=8))
    assert ds.rnd.getstate() == state
    assert ds.f.readline() == "0\n"  # the user's next read starts where it was
    # the user's file was reopened in the copy, not put back here (another open file the test process shares
    # with the copy, such as pytest's capture file under pytest-xdist, may be)
    assert len(put_back) == 1 and ds.f.fileno() not in put_back[0]
    ds.f.close()


def test_user_error_reraised_and_nothing_changed() -> None:
    class Failing(Dataset):
        def __len__(self) -> int:
            return 16

        def __getitem__(self, i: int):
            if i == 9:
                raise KeyError(f"sample {i} is missing")
            return (torch.zeros(8),)

    g = torch.Generator().manual_seed(2)
    before = g.get_state().clone()
    with pytest.raises(KeyError, match="sample 9 is missing") as err:
        _fit(DataLoader(Failing(), batch_size=4, shuffle=True, generator=g))
    assert any("in a copy of this process" in n for n in getattr(err.value, "__notes__", []))
    assert torch.equal(g.get_state(), before)


def test_refused_batch_type_changes_nothing() -> None:
    """Adversary 01's second case: a torch_geometric DataLoader whose batches fit refuses."""
    pyg = pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data
    from torch_geometric.loader import DataLoader as GraphLoader

    graphs = [Data(x=torch.randn(4, 8), edge_index=torch.tensor([[0, 1], [1, 2]])) for _ in range(8)]
    g = torch.Generator().manual_seed(3)
    loader = GraphLoader(graphs, batch_size=2, shuffle=True, generator=g)
    before = g.get_state().clone()
    with pytest.raises(InputError, match="a batch must be a tensor"):
        _fit(loader)
    assert torch.equal(g.get_state(), before)
    assert pyg is not None


def test_bad_option_refused_before_reading(monkeypatch) -> None:
    from vramnb.planner import _read_aside

    def never(*a, **k):
        raise AssertionError("the loader was read")

    monkeypatch.setattr(_read_aside, "read_batches", never)
    with pytest.raises(ValueError, match="margin must be"):
        vramnb.fit(torch.nn.Linear(8, 1), DataLoader(_numbered(), batch_size=8), margin=2.0, progress=False)


def test_globals_and_sigchld_kept() -> None:
    handler = signal.getsignal(signal.SIGCHLD)
    loader, model = DataLoader(_numbered(), batch_size=8, shuffle=True), torch.nn.Linear(8, 1)
    torch_state, py_state, np_state = torch.random.get_rng_state(), random.getstate(), np.random.get_state()
    _fit(loader, model=model)
    assert signal.getsignal(signal.SIGCHLD) == handler
    assert torch.equal(torch.random.get_rng_state(), torch_state) and random.getstate() == py_state
    after = np.random.get_state()
    assert after[0] == np_state[0] and (after[1] == np_state[1]).all() and after[2:] == np_state[2:]


def test_largest_batch_found() -> None:
    """Batches of varying sizes: the largest of the first 256, read aside, exact bytes."""
    sizes = [3, 9, 5, 2, 7, 1, 4, 6, 8, 12, 2]  # the largest (12) is past the first 8
    loader = DataLoader(list(range(len(sizes))), batch_size=None,
                        collate_fn=lambda i: (torch.zeros(sizes[i], 8),))
    plan = _fit(loader)
    assert plan.notes[0] == f"planned for the largest of the loader's first 11 batches ((12, 8), {12 * 8 * 4} B)"


class Opened(Dataset):
    """A dataset its worker_init_fn opens in each worker (the h5py pattern)."""

    def __init__(self) -> None:
        self.handle = None

    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int):
        from torch.utils.data import get_worker_info

        assert self.handle is not None, "opened by worker_init_fn"
        return (torch.full((8,), float(get_worker_info().num_workers)),)


def _open(worker_id: int) -> None:
    from torch.utils.data import get_worker_info

    get_worker_info().dataset.handle = f"opened in worker {worker_id}"


def test_worker_init_fn_runs_in_the_copy_only() -> None:
    ds = Opened()
    loader = DataLoader(ds, batch_size=8, num_workers=2, worker_init_fn=_open)
    plan = _fit(loader)
    assert plan.notes[0].startswith("planned for the largest of the loader's first 4 batches ((8, 8), 256 B)")
    assert ds.handle is None and loader._iterator is None


def test_user_iterator_mid_epoch_continues_unchanged() -> None:
    """The user holds an iterator of the same loader (2 workers, shuffled) mid-epoch while fit reads it."""

    def make():
        torch.manual_seed(4)
        return DataLoader(_numbered(), batch_size=4, shuffle=True, num_workers=2)

    control = iter(make())
    next(control)
    expect = [int(v) for b in control for v in b[0][:, 0]]
    loader = make()
    it = iter(loader)
    next(it)
    _fit(loader)
    assert [int(v) for b in it for v in b[0][:, 0]] == expect


def test_one_shot_sampler_not_consumed() -> None:
    """DataLoader takes any iterable of indices as its sampler: here a generator, one-shot."""
    order = (i for i in [5, 3, 9, 1, 7, 2, 8, 0])
    loader = DataLoader(_numbered(), batch_size=2, sampler=order)
    _fit(loader)
    assert list(order) == [5, 3, 9, 1, 7, 2, 8, 0]


class NeedsTwo(Exception):
    """An exception whose __init__ takes other arguments than its args: it does not unpickle."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"sample {index}: {reason}")


def test_user_exception_keeps_its_type_when_it_does_not_unpickle() -> None:
    class Failing(Dataset):
        def __len__(self) -> int:
            return 8

        def __getitem__(self, i: int):
            raise NeedsTwo(i, "corrupt")

    with pytest.raises(NeedsTwo, match="sample 0: corrupt") as err:
        _fit(DataLoader(Failing(), batch_size=2))
    assert any("NeedsTwo: sample 0: corrupt" in n for n in err.value.__notes__)


def test_batch_that_cannot_be_sent_is_refused() -> None:
    from collections.abc import Mapping

    class Local(Mapping):  # defined in a function: pickle cannot name it
        def __init__(self, d):
            self.d = d

        def __getitem__(self, k):
            return self.d[k]

        def __iter__(self):
            return iter(self.d)

        def __len__(self) -> int:
            return len(self.d)

    loader = DataLoader(list(range(4)), batch_size=None, collate_fn=lambda i: Local({"x": torch.randn(2, 8)}))
    model = torch.nn.Linear(8, 1)
    with pytest.raises(InputError, match="batch 0 cannot be sent between processes"):
        vramnb.fit(model, loader, lambda m, b: m(b["x"]).sum(), progress=False, allow=[])


class Augmenting(Dataset):
    """Each sample draws from the dataset's own generator: in a worker, the worker's copy of it."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int):
        return (torch.full((8,), float(i) + float(self.rng.integers(1000)) * 100),)


class Wrapper:
    """A re-iterable around the user's loader (as Lightning's CombinedLoader is), not a DataLoader."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader

    def __iter__(self):
        yield from self.loader


def _wrapped_epoch(call_fit: bool) -> tuple[list[int], list[bool]]:
    torch.manual_seed(0)
    loader = DataLoader(Augmenting(), batch_size=8, shuffle=True, num_workers=1, persistent_workers=True)
    _epoch(loader)  # the user's workers run, each with its copy of the dataset's generator
    model = torch.nn.Linear(8, 1)
    if call_fit:
        _fit(Wrapper(loader), model=model)
    return _epoch(loader), [w.is_alive() for w in loader._iterator._workers]


def test_wrapped_persistent_loader_workers_untouched() -> None:
    """The copy iterating a wrapper met the user's persistent iterator and sent its requests to the
    user's worker, whose dataset generator then moved on: the next epoch's values differed."""
    assert _wrapped_epoch(True) == _wrapped_epoch(False)


class Holding:
    """Re-iterable outside, the user's worker iterator inside: reading it in the copy took the user's
    batches from the user's workers (the user's own next() then failed with KeyError)."""

    def __init__(self, loader: DataLoader) -> None:
        self.it = iter(loader)

    def __iter__(self):
        for _ in range(3):
            yield next(self.it)


def _held_rest(call_fit: bool) -> list[int]:
    torch.manual_seed(0)
    h = Holding(DataLoader(_numbered(), batch_size=4, shuffle=True, num_workers=2))
    model = torch.nn.Linear(8, 1)
    if call_fit:
        with pytest.raises(InputError, match="worker processes are already running"):
            _fit(h, model=model)
    return [int(v) for b in h.it for v in b[0][:, 0]]


def test_running_worker_iterator_inside_a_wrapper_refused() -> None:
    assert _held_rest(True) == _held_rest(False)


def test_no_fork_refused_before_reading(monkeypatch) -> None:
    """Where the platform cannot fork (Windows), the loader is refused before anything is read."""
    import multiprocessing

    g = torch.Generator().manual_seed(8)
    loader = DataLoader(_numbered(), batch_size=8, shuffle=True, generator=g)
    before = g.get_state().clone()
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    with pytest.raises(InputError, match="this platform cannot fork one: pass one batch instead"):
        _fit(loader)
    assert torch.equal(g.get_state(), before)


def test_the_fit_magic_leaves_the_loader_as_found(ip) -> None:
    """``%vram fit model loader`` goes through the same read: the loader's generator and the dataset's
    own generator as they were, the next epoch as without the magic."""
    from tests.conftest import run

    run(ip, "import numpy as np, torch\nfrom torch.utils.data import DataLoader\n"
            "from tests.test_fit_loader_untouched import Augmenting\n"
            "g = torch.Generator().manual_seed(9)\nds = Augmenting()\n"
            "loader = DataLoader(ds, batch_size=8, shuffle=True, generator=g)\nnet = torch.nn.Linear(8, 1)\n"
            "loss = lambda m, b: m(b[0]).sum()\n"
            "before = (g.get_state().clone(), ds.rng.bit_generator.state)")
    res, _ = run(ip, "%vram fit net loader loss --target 24GiB -q -o plan")
    assert res.error_in_exec is None
    res, _ = run(ip, "assert torch.equal(g.get_state(), before[0]) and ds.rng.bit_generator.state == before[1]\n"
                     "assert plan.notes[0].startswith(\"planned for the largest of the loader's first 4 batches\")")
    assert res.error_in_exec is None, res.error_in_exec


class Pooled(Dataset):
    """Waits on a thread pool started before the copy: a forked copy has none of its threads."""

    def __init__(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(2)
        self.pool.submit(int).result()

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int):
        return (self.pool.submit(torch.zeros, 8).result(),)


def test_dataset_waiting_on_threads_refused_not_hung(monkeypatch) -> None:
    from vramnb.planner import _read_aside

    monkeypatch.setattr(_read_aside, "TIMEOUT", 3.0)
    ds = Pooled()
    with pytest.raises(InputError, match="gave no batch in 3 s when read in a copy of this process"):
        _fit(DataLoader(ds, batch_size=4))
    assert ds[0][0].shape == (8,)  # the user's pool still works here
    ds.pool.shutdown()


@pytest.mark.parametrize("at", ["_shutdown_workers", "put_offsets_back"])
def test_ctrl_c_while_the_read_is_put_back_keeps_sigchld(at: str) -> None:
    """Adversary 2026-12-04c 06: a Ctrl-C (SIGINT) landing in read_batches' clean-up (joining the copy,
    putting offsets back) cut it short: PyTorch's SIGCHLD handler stayed installed for good."""
    import os
    import sys

    handler = signal.getsignal(signal.SIGCHLD)
    sent = []

    def tracer(frame, event, arg):
        if (event == "call" and not sent and frame.f_code.co_name == at and frame.f_back is not None
                and frame.f_back.f_code.co_name == "read_batches"):
            sent.append(at)
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered at the next bytecode
        return None

    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            _fit(DataLoader(_numbered(), batch_size=8))
    finally:
        sys.settrace(None)
    assert sent == [at]
    assert signal.getsignal(signal.SIGCHLD) == handler
