"""Memory moved in one cell from names into a dict, a deque, a set, a tuple in a dict, an object's
slot and a nested list, with `del` and rebinding; every row at the end against the bytes each
holder reaches, the rows summing to what is allocated."""
from harness import MiB, check, done, ip, nbytes, rows, run, vram

run("""
from collections import deque
class Slot:
    __slots__ = ("t",)
d, dq, s, nest, sl = {}, deque(), set(), [[]], Slot()
""")
rep, out = vram("""
a = torch.zeros(256*1024); d['a'] = a; del a
b = torch.zeros(2*256*1024); dq.append(b); b = None
c = torch.zeros(3*256*1024); s.add(c); del c
e = torch.zeros(4*256*1024); d['pair'] = (e, e[:10]); del e
f = torch.zeros(5*256*1024); sl.t = f; f = torch.zeros(10)
g = torch.zeros(6*256*1024); nest[0].append(g); nest.append(g); del g
""")
r = rows(rep)
ns = ip.user_ns
check("dict d", r["dict d"][1], nbytes(ns["d"]))
check("deque dq", r["deque dq"][1], nbytes(ns["dq"]))
check("set s", r["set s"][1], nbytes(ns["s"]))
check("Slot sl", r["Slot sl"][1], 5 * MiB)
check("list nest (one storage twice)", r["list nest"][1], 6 * MiB)
check("tensor f", r["tensor f"][1], 40)
check("b is None: no tensor b row", "tensor b" in r, False)
check("rows sum to allocated", sum(v[1] for v in r.values()), rep.end_allocated)
check("nothing labelled temporaries at end", r.get("temporaries", (0, 0, 0))[1], 0)
# across runs: move everything from d to dq
rep, out = vram("dq.extend(d.values()); d.clear()")
r = rows(rep)

check("d emptied: start 5 MiB, end 0", (r["dict d"][0], r["dict d"][1]), (5 * MiB, 0))
check("dq got it", r["deque dq"][1], nbytes(ns["dq"]))
check("change of d + dq is 0", (r["dict d"][1] - r["dict d"][0]) + (r["deque dq"][1] - r["deque dq"][0]), 0)
done()
