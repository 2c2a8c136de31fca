"""Holders the walk does not enter (a closure, a suspended generator's frame, an imported module's
global list, an lru_cache): no row may claim their memory for another holder; what is left is
said to be held by no name listed, with its exact bytes."""
import os
import sys
import tempfile

from harness import MiB, check, done, rows, run, vram

tmp = tempfile.mkdtemp()
with open(os.path.join(tmp, "nbnum_mod.py"), "w") as f:
    f.write("CACHE = []\n")
sys.path.insert(0, tmp)
run("import nbnum_mod, functools")
rep, out = vram("""
def make():
    t = torch.zeros(256*1024)
    return lambda: t.sum()
f = make()
def gen():
    t = torch.zeros(2*256*1024)
    yield 1
    yield 2
g = gen(); next(g)
nbnum_mod.CACHE.append(torch.zeros(3*256*1024))
@functools.lru_cache(None)
def load(n):
    return torch.zeros(n)
load(4*256*1024)
w = torch.zeros(10)
""")
r = rows(rep)
check("tensor w", r["tensor w"][1], 40)
nobody = r.get("alive after the cell, held by no name above", (0, 0, 0))[1]
check("held by no name above: 1+2+3+4 MiB", nobody, 10 * MiB)
check("rows sum to allocated", sum(v[1] for v in r.values()), rep.end_allocated)
_, out = run("%vram")
line = [ln for ln in out.splitlines() if "held by no name listed" in ln]
check("%vram: 10.0 MiB held by no name listed", bool(line) and line[0].strip().startswith("10.0 MiB allocated"), True)
done()
