"""Fixed: a storage resized in a cell (both buffers alive during c10's copy) and the metadata of a
nested / per-channel quantized tensor: the by-source table against bytes from shapes."""
from harness import MiB, check, done, rows, run, vram

run("import gc")
for old, new in ((2 * MiB, MiB), (MiB, 2 * MiB)):
    rep, _ = vram(f"rz = torch.zeros({old // 4})\nrz.untyped_storage().resize_({new});")
    r = rows(rep)
    check(f"resize {old}->{new}: peak - start = old + new", rep.peak_allocated - rep.start_allocated, old + new)
    check(f"resize {old}->{new}: the at-peak column sums to the peak", sum(p for _, _, p in r.values()), rep.peak_allocated)
    check(f"resize {old}->{new}: tensor rz at the end", r["tensor rz"][1], new)
    run("del rz")
rep, _ = vram("nt = torch.nested.nested_tensor([torch.zeros(100, 10), torch.zeros(50, 10)])\n"
              "q = torch.quantize_per_channel(torch.zeros(64, 1000), torch.ones(64, dtype=torch.float64), "
              "torch.zeros(64, dtype=torch.int64), 0, torch.qint8)")
r = rows(rep)
# data 1500 floats; nested sizes (2, 2) int64, strides (2, 2) int64, offsets (2,) int64
check("nested tensor: data + sizes + strides + offsets", r["tensor nt"][1], 1500 * 4 + 32 + 32 + 16)
check("per-channel qint8: data + scales (f64) + zero points (i64)", r["tensor q"][1], 64 * 1000 + 64 * 8 + 64 * 8)
check("nothing 'held by no name above'", [k for k in r if k.startswith("alive after")], [])
done()
