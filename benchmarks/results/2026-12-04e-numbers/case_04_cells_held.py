"""Held: `%%vram --breakdown` on cells with other dtypes, layouts and memory owners, against bytes
from shapes (each cell's own rows; the at-peak column sums to the peak everywhere)."""
import os
import tempfile

from harness import MiB, check, done, rows, run, vram

run("import numpy as np, threading, time")
path = os.path.join(tempfile.mkdtemp(), "t.pt")
run(f"torch.save(torch.zeros(1 << 20), {path!r})")
CASES = [
    ("a = torch.zeros(1024, 256, dtype=torch.bfloat16)\nb = torch.zeros(1000, dtype=torch.complex64)\n"
     "c = torch.zeros(999, dtype=torch.bool)\nd = torch.zeros(777, dtype=torch.float8_e4m3fn)",
     {"tensor a": 512 * 1024, "tensor b": 8000, "tensor c": 999, "tensor d": 777}, None),
    ("s2 = torch.eye(512).to_sparse_csr()", {"tensor s2": 513 * 8 + 1024 * 8 + 512 * 4},
     MiB + 513 * 8 + 1024 * 8 + 512 * 4),  # the dense eye and its CSR copy together
    ("arr = np.zeros(1 << 18, dtype=np.float32)\nfn = torch.from_numpy(arr)\nbk = fn.numpy()", {"tensor fn": MiB}, None),
    ("r = torch.zeros(1 << 18)\nr.resize_(1 << 19);", {"tensor r": 2 * MiB}, 3 * MiB),
    ("v = torch.zeros(1 << 18)\nvv = v[::2]\nvt = v.view(512, 512).t()", {"tensor v": MiB}, None),
    ("q = torch.quantize_per_tensor(torch.zeros(1000, 1000), 0.1, 0, torch.qint8)", {"tensor q": 10**6}, 4 * 10**6 + 10**6),
    ("big = torch.zeros(1 << 20)\nbig.mul_(2)\nbig.add_(1)\ndel big", {}, 4 * MiB),
    (f"mm = torch.load({path!r}, mmap=True)", {"tensor mm": os.path.getsize(path)}, None),
    ("sh = torch.zeros(1 << 18)\nsh.share_memory_();", {"tensor sh": MiB}, 2 * MiB),
    ("tgt = torch.zeros(1 << 18)\nsrc = torch.zeros(1 << 19)\ntgt.set_(src.untyped_storage())\ndel src",
     {"tensor tgt": 2 * MiB}, 3 * MiB),
    ("cx = torch.zeros(1 << 17, dtype=torch.complex64)\nvr = torch.view_as_real(cx)\nre = cx.real.clone()",
     {"tensor cx": MiB, "tensor re": MiB // 2}, None),
    ("w = torch.zeros(1 << 18, requires_grad=True)\nfor _ in range(3):\n    (w * 2).sum().backward()",
     {"tensor w": MiB, "gradient of w": MiB}, None),
    ("stop = threading.Event()\nbox = []\ndef worker():\n    box.append(torch.zeros(1 << 18))\n    stop.wait()\n"
     "thr = threading.Thread(target=worker, daemon=True); thr.start(); time.sleep(0.3)", {"list box": MiB}, None),
    ("npa = np.ones(1 << 18, dtype=np.float32)\ntn = torch.as_tensor(npa)\ntn2 = torch.tensor(npa)",
     {"tensor tn": MiB, "tensor tn2": MiB}, None),
    ("h = torch.zeros(1 << 18, dtype=torch.float16)\nh32 = h.float()\ndel h", {"tensor h32": MiB}, MiB + MiB // 2),
    ("gl = torch.zeros(256, 256, requires_grad=True)\nout = (gl @ gl).relu()\nraise RuntimeError('after graph')",
     {"tensor gl": 256 * 1024, "tensor out": 256 * 1024}, 3 * 256 * 1024),
]
for body, want, peak in CASES:
    rep, _ = vram(body)
    r = rows(rep)
    first = body.splitlines()[0]
    for name, n in want.items():
        check(f"{first}: {name} at the end", r.get(name, (0, 0, 0))[1], n)
    if peak is not None:
        check(f"{first}: peak - start", rep.peak_allocated - rep.start_allocated, peak)
    check(f"{first}: at-peak column sums to the peak", sum(p for _, _, p in r.values()), rep.peak_allocated)
    check(f"{first}: end column sums to allocated", sum(e for _, e, _ in r.values()), rep.end_allocated)
run("stop.set()")
done()
