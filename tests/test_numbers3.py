"""Numbers round (e): figures a report prints that disagreed with bytes computed from shapes
(exact bytes on CPU). Each test failed before its fix."""

import gc

import vramnb
from tests.conftest import run

F32 = 4
MiB = 1 << 20


def rows(rep):
    return {name: (a, b, p) for name, a, b, p in rep.sources}


def test_a_storage_resize_keeps_old_and_new_buffers_in_the_at_peak_column(ip):
    # c10's resize_bytes_cpu allocates the new buffer, copies, then frees the old one: for a moment
    # both are alive. The peak said so; the by-source table's "at peak" column lost one of them.
    gc.collect()
    for old, new in ((2 * MiB, MiB), (MiB, 2 * MiB)):
        run(ip, f"%%vram -d cpu --breakdown\nn3_r = torch.zeros({old // F32})\n"
                f"n3_r.untyped_storage().resize_({new});")
        rep = vramnb.history()[-1]
        r = rows(rep)
        assert rep.peak_allocated - rep.start_allocated == old + new
        assert sum(p for _, _, _, p in rep.sources) == rep.peak_allocated
        assert r["tensor n3_r"][1] == new
        run(ip, "del n3_r")


def test_a_nested_or_per_channel_quantized_tensors_metadata_is_the_names(ip):
    # a nested tensor keeps its sizes, strides and offsets (int64 tensors of its own), a per-channel
    # quantized tensor its scales (float64) and zero points (int64): `%vram` counted them for the
    # name, the breakdown called them "held by no name above"
    gc.collect()
    run(ip, "%%vram -d cpu --breakdown\nn3_nt = torch.nested.nested_tensor([torch.zeros(100, 10), torch.zeros(50, 10)])\n"
            "n3_q = torch.quantize_per_channel(torch.zeros(64, 1000), torch.ones(64, dtype=torch.float64), "
            "torch.zeros(64, dtype=torch.int64), 0, torch.qint8)")
    rep = vramnb.history()[-1]
    r = rows(rep)
    nested = (100 + 50) * 10 * F32 + 3 * (2 * 2 * 8)  # data; sizes and strides (2, 2) int64, offsets (2,) int64
    nested -= 2 * 8  # the offsets are (2,), not (2, 2)
    assert r["tensor n3_nt"][1] == nested
    assert r["tensor n3_q"][1] == 64 * 1000 + 64 * 8 + 64 * 8
    assert not any(name.startswith("alive after the cell") for name in r)
    assert sum(b for _, _, b, _ in rep.sources) == rep.end_allocated
    run(ip, "del n3_nt, n3_q")


def test_vram_counts_the_mapping_that_mmap_loaded_tensors_keep(ip, tmp_path):
    # torch.load(mmap=True) maps the whole file; each tensor's storage is a slice of that mapping,
    # and any one of them keeps all of it mapped: the tracker counts the file's bytes once. `%vram`
    # counted each slice's own bytes, then said the rest (the deleted tensor's slice and the
    # file's headers) was "held by no name listed ... a function's cache, a class attribute ..."
    import os

    import torch

    path = tmp_path / "sd.pt"
    torch.save({"a": torch.zeros(1 << 20), "b": torch.zeros(1 << 18), "c": torch.zeros(1 << 16)}, path)
    size = os.path.getsize(path)  # the mapping: every tensor's bytes, and the archive's headers
    gc.collect()
    before = ip.run_line_magic("vram", "-d cpu")  # what no name holds already (other tests' leftovers)
    run(ip, f"n3_sd = torch.load({str(path)!r}, mmap=True)\nn3_a = n3_sd['a']\ndel n3_sd['b']")
    gc.collect()
    rep = ip.run_line_magic("vram", "-d cpu")
    h = {x.name: x for x in rep.holders}
    assert (h["n3_sd"].nbytes, h["n3_sd"].unique) == (size, 0)
    assert (h["n3_a"].nbytes, h["n3_a"].unique) == (size, 0)
    # nothing more is held by no name listed than before: the mapping is the two names'
    assert rep.allocated - rep.total == before.allocated - before.total
    run(ip, "del n3_sd, n3_a")


def test_estimate_counts_a_sparse_embedding_gradient_as_the_real_step_does():
    # Embedding(sparse=True)'s gradient keeps the looked-up indices (int64) and one row of the
    # output's gradient per token; under FakeTensorMode the sparse result was built empty (nnz 0),
    # so the estimate lost those bytes (25,344 B here) from the gradients and the peak
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(5000, 64, sparse=True), torch.nn.Flatten(), torch.nn.Linear(12 * 64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tok, y = torch.randint(0, 5000, (8, 12)), torch.randint(0, 10, (8,))

    def loss_fn(m, b):
        return torch.nn.functional.cross_entropy(m(b[0]), b[1])

    real = vramnb.profile_step(model, (tok, y), loss_fn, opt, steps=2)
    est = vramnb.estimate(model, (tok, y), loss_fn, opt, device="cpu", steps=2)
    dense = (12 * 64 * 10 + 10) * F32
    sparse = 8 * 12 * 8 + 8 * 12 * 64 * F32  # indices (1, 96) int64, values (96, 64) float32
    for r, e in zip(real.steps, est.steps):
        grads = dict(r.marks)["after backward"].sources["gradients"]
        assert grads == dense + sparse
        assert dict(e.marks)["after backward"].sources["gradients"] == grads
        # at the peak, every source but "other" (what else the process holds: on CPU the real step
        # counts the whole process, other tests' leftovers included; the estimate only the step)
        mine = {k: v for k, v in r.peak.sources.items() if k != "other"}
        assert {k: v for k, v in e.peak.sources.items() if k != "other"} == mine
