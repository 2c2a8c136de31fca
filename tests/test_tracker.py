"""The CPU storage tracker must be exact: bytes computed from shapes."""

import gc

import pytest
import torch

from vramnb._tracker import StorageTracker

MiB = 2**20


def fresh():
    gc.collect()
    t = StorageTracker("cpu")
    t.scan()
    return t


def test_new_tensor_counts_its_bytes_exactly():
    tr = fresh()
    start = tr.current
    with tr.tracking():
        x = torch.empty(3, 5, 7, dtype=torch.float64)
    assert tr.current - start == 3 * 5 * 7 * 8
    del x
    assert tr.current == start


def test_views_and_tied_storage_counted_once():
    tr = fresh()
    start = tr.current
    with tr.tracking():
        x = torch.zeros(1000, dtype=torch.float32)
        v1, v2 = x[10:], x.view(10, 100)
        t = x.t() if x.dim() == 2 else x.unsqueeze(0)
    assert tr.current - start == 4000
    del x, v1, t
    assert tr.current - start == 4000  # v2 still holds the storage
    del v2
    assert tr.current == start


def test_free_of_a_tensor_made_before_tracking():
    big = torch.empty(64 * MiB, dtype=torch.uint8)
    tr = fresh()
    start = tr.current
    with tr.tracking():
        del big
    assert start - tr.current == 64 * MiB


def test_peak_of_a_dropped_temporary():
    tr = fresh()
    start = tr.current
    tr.reset_peak()
    with tr.tracking():
        tmp = torch.ones(16 * MiB, dtype=torch.uint8)
        del tmp
    assert tr.current == start
    assert tr.peak - start == 16 * MiB


def test_resize_updates_size():
    tr = fresh()
    start = tr.current
    with tr.tracking():
        x = torch.empty(10, dtype=torch.float32)
        x.resize_(1000)
    assert tr.current - start == 4000
    del x


def test_a_storage_re_allocated_in_place_is_an_allocation_of_the_recording_thread():
    """FSDP2 frees its unsharded parameters with ``storage.resize_(0)`` and allocates them again
    with ``resize_(n)`` at each all-gather; from the second step those storages were registered
    earlier and belong to no thread. The recording thread's listener gets the free and the
    re-allocation, as it would a new tensor's."""
    tr = fresh()
    x = torch.empty(1000)
    tr.add_tensor(x)  # registered outside any tracking: owned by no thread
    events = []
    with tr.tracking(), tr.listening(lambda k, old, new: events.append((old, new))):
        x.untyped_storage().resize_(0)
        x.untyped_storage().resize_(4000)
    assert events == [(4000, 0), (0, 4000)]
    del x


_STEP_SCRIPT = """
import gc, torch
from vramnb._tracker import StorageTracker
def fresh():
    gc.collect()
    t = StorageTracker("cpu"); t.scan(); return t
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.Adam(model.parameters())
x = torch.randn(32, 64)
tr = fresh()
def check():
    assert tr.current == fresh().current, (tr.current, fresh().current)
with tr.tracking():
    loss = model(x).logsumexp(-1).mean()
check()
with tr.tracking():
    loss.backward()
check()
with tr.tracking():
    opt.step()
check()
with tr.tracking():
    opt.zero_grad(set_to_none=True)
    del loss
check()
print("ok")
"""


def test_training_step_matches_a_fresh_scan_at_every_point():
    # in a fresh process: other tests' leftovers (threads, caches) must not create
    # storages between the tracker's scan and the fresh scans it is compared with
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _STEP_SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_scan_finds_grads_and_saved_tensors():
    w = torch.randn(256, 256, requires_grad=True)
    x = torch.randn(8, 256)
    y = (x @ w).tanh()  # tanh saves its output; mm saves x
    tr = fresh()
    expected = {}
    for t in (w, x, y):
        expected[t.untyped_storage()._cdata] = t.untyped_storage().nbytes()
    for k, n in expected.items():
        assert tr.nbytes_of(k) == n
    y.sum().backward()
    tr2 = fresh()
    assert tr2.nbytes_of(w.grad.untyped_storage()._cdata) == 256 * 256 * 4


def test_keeps_no_strong_reference():
    tr = fresh()
    start = tr.current
    with tr.tracking():
        x = torch.empty(8 * MiB, dtype=torch.uint8)
    assert len(tr) >= 1
    del x
    gc.collect()
    assert tr.current == start


def test_other_devices_ignored():
    tr = StorageTracker("cuda")
    with tr.tracking():
        x = torch.ones(100)
    assert tr.current == 0
    del x


def test_listener_sees_changes():
    tr = fresh()
    seen = []
    with tr.listening(lambda k, old, new: seen.append((old, new))), tr.tracking():
        x = torch.empty(100, dtype=torch.int8)
        x.resize_(300)
        del x
    assert seen == [(0, 100), (100, 300), (300, 0)]


def test_graph_walk_shared_seen_set_survives_wrapper_reuse():
    """Python wrappers of autograd nodes are made on access and freed after; a
    walk that remembered node ids skipped later nodes whose wrapper reused one
    (seen on CUDA: a kept loss showed 1 MiB of its 130 MiB graph)."""
    from vramnb._tracker import graph_tensors

    w = torch.randn(64, 64, requires_grad=True)
    losses = [torch.tanh(torch.tanh(torch.randn(8, 64) @ w) @ w).sum() for _ in range(40)]
    seen: dict = {}
    found = [list(graph_tensors(loss.grad_fn, seen, grads=False)) for loss in losses]
    # every graph saves its own tanh outputs and inputs: none is skipped
    assert all(len(f) >= 3 for f in found), [len(f) for f in found]


def test_exact_bytes_of_nested_and_per_channel_quantized_tensors_and_a_resize_peak():
    import warnings

    import vramnb

    warnings.filterwarnings("ignore", category=UserWarning)
    old = torch.zeros(1000)
    with vramnb.vram("cpu", record=False) as m:
        old.resize_(2000)  # the new 8000 B buffer is allocated while the old 4000 B one is alive
    assert (m.report.peak_allocated - m.report.start_allocated, m.report.end_allocated - m.report.start_allocated) \
        == (8000, 4000)
    with vramnb.vram("cpu", record=False) as m:
        nt = torch.nested.nested_tensor([torch.randn(10, 4), torch.randn(20, 4)])
    # values 30 x 4 floats, and its sizes (2 x 2 int64), strides (2 x 2 int64), offsets (2 int64)
    assert m.report.end_allocated - m.report.start_allocated == 120 * 4 + 32 + 32 + 16
    with vramnb.vram("cpu", record=False) as m:
        q = torch.quantize_per_channel(torch.zeros(4, 25), torch.ones(4) * 0.1, torch.zeros(4, dtype=torch.long), 0,
                                       torch.qint8)
    assert m.report.end_allocated - m.report.start_allocated == 100 + 4 * 8 + 4 * 8  # int8 data, f64 scales, i64 zeros
    del nt, q


def test_mmap_load_counts_the_mapped_file_once(tmp_path):
    """``torch.load(mmap=True)`` maps the whole file as one storage and gives each tensor a
    storage over a slice of it; the scan finds the file's storage after the slices: the bytes
    count once (the mapped file's size), and nothing once the tensors are gone."""
    import os

    path = tmp_path / "w.pt"
    torch.save({"a": torch.randn(512, 256), "b": torch.randn(1000, dtype=torch.float64)}, path)
    tr = fresh()
    start = tr.current
    with tr.tracking():
        sd = torch.load(path, mmap=True)
    tr.scan()
    assert tr.current - start == os.path.getsize(path)
    del sd
    gc.collect()
    assert tr.current == start


def test_masked_tensor_counts_its_data_and_mask_only():
    import warnings

    from torch.masked import masked_tensor

    tr = fresh()
    start = tr.current
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # MaskedTensor is a prototype
        with tr.tracking():
            d = torch.randn(1000)
            m = torch.arange(1000) % 2 == 0
            mt = masked_tensor(d, m)
    tr.scan()
    inner = {x.untyped_storage().data_ptr(): x.untyped_storage().nbytes()
             for x in (d, m, mt.get_data(), mt.get_mask())}
    assert tr.current - start == sum(inner.values())  # the wrapper's own storage holds no data
    del d, m, mt
    gc.collect()
    assert tr.current == start


def _mm_sin(x):
    return torch.mm(x.sin(), x).cos().sum()


@pytest.mark.slow
def test_torch_compile_buffers_count_in_the_peak():
    """Inductor's wrapper allocates ``buf0 = sin(x)`` and ``buf1 = mm(buf0, x)`` with
    ``empty_strided_cpu`` (below the dispatcher), frees both inside the call and returns a
    0-dim result: the peak is both buffers, the end the result. Compiled before the block
    (the module was loaded unpatched) and compiled inside it."""
    torch._dynamo.reset()
    n = 256
    x = torch.randn(n, n)
    f = torch.compile(_mm_sin)
    f(x)
    for compiled_inside in (False, True):
        if compiled_inside:
            torch._dynamo.reset()
            f = torch.compile(_mm_sin)
        tr = fresh()
        start = tr.current
        tr.reset_peak()
        with tr.tracking():
            y = f(x)
        assert tr.peak - start == 2 * n * n * 4
        assert tr.current - start == 4
        del y
    torch._dynamo.reset()


@pytest.mark.slow
def test_vram_block_running_compiled_code_is_exact_and_not_a_lower_bound():
    """A block that compiles says its peak is a lower bound (compiling runs unseen); a later
    block that only runs the compiled code reads its buffers exactly and says nothing."""
    import vramnb

    torch._dynamo.reset()
    n = 128
    x = torch.randn(n, n)
    f = torch.compile(_mm_sin)
    with vramnb.vram("cpu", record=False) as first:
        f(x)
    assert first.report.peak_is_lower_bound
    assert any("compiling" in note for note in first.report.notes)
    with vramnb.vram("cpu", record=False) as again:
        y = f(x)
    assert not again.report.peak_is_lower_bound
    assert again.report.peak_delta == 2 * n * n * 4
    assert again.report.delta_allocated == 4
    del y
    torch._dynamo.reset()
