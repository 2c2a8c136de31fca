"""A training set an object attribute keeps (`nets.X`), which the first layer also saved for
backward in a graph kept after the cell: the object holds it itself, so it is the object's row,
not "activations". Symptom: "activations 0 B 32.0 MiB" beside "nets grew by 32.0 MiB"."""
from harness import MiB, check, done, ip, nbytes, rows, run, vram

run("""
class Nets:
    pass
nets = Nets()
model = torch.nn.Sequential(torch.nn.Linear(1024, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
""")
rep, out = vram("""
nets.X = torch.randn(8192, 1024)          # 32 MiB, kept by the object
nets.out = model(nets.X)                   # a graph kept after the cell: saves X, h, relu(h)
""")
r = rows(rep)
ns = ip.user_ns
X, out_t = ns["nets"].X, ns["nets"].out
h = 8192 * 256 * 4
check("Nets nets at end (X and the output it holds itself)", r.get("Nets nets", (0, 0, 0))[1], nbytes(X, out_t) + 0)
# Linear saves its input (X, the object's) and ReLU its result (h bytes), which the 2nd Linear saves too
check("activations at end: relu's result only, not X", r.get("activations", (0, 0, 0))[1], h)
total_end = sum(v[1] for v in r.values())
check("rows sum to allocated at end", total_end, rep.end_allocated)
# the same data set moved from a name to the attribute in one cell (`X = ...; nets.Y = X; del X`)
rep, out = vram("""
X2 = torch.randn(4096, 1024)
nets.Y = X2
del X2
""")
r = rows(rep)
check("moved to an attribute: Nets nets gains 16 MiB", r["Nets nets"][1] - r["Nets nets"][0], 16 * MiB)
done()
