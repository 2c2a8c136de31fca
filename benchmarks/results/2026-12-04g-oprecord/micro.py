# ruff: noqa  (a measurement script kept as it was run for README.md; run: PYTHONPATH=<checkout> python <script> N)
import os, sys, time, statistics, warnings
warnings.simplefilter("ignore")
import torch
from vramnb.diagnose import _failing_op as F
new = hasattr(F, "record")
if not new:
    from vramnb.diagnose._op_call import op_facts
x = torch.rand(1000)
cases = {"sort values (autocast asked)": (torch.ops.aten.sort.default, (x.expand(1 << 20, 1000),), {}, (1 << 20) * 1000 * 4),
         "sort indices (no autocast)": (torch.ops.aten.sort.default, (x.expand(1 << 20, 1000),), {}, (1 << 20) * 1000 * 8),
         "mm (autocast asked)": (torch.ops.aten.mm.default, (torch.ones(1, 1000).expand(1 << 20, 1000), torch.ones(1000, 64)), {}, (1 << 20) * 64 * 4)}
print("new" if new else "old", "load", os.getloadavg())
N = int(sys.argv[1])
for name, (f, a, k, req) in cases.items():
    def one():
        if new:
            op = F.record(f, a, k); op.outputs; return F.read_op(op, req, "cpu")
        spec = F.op_spec(f, a, k); op_facts(f, a, k); return F.read_op(spec, req, "cpu")
    r = one()
    ts = []
    for _ in range(N):
        t = time.perf_counter(); one(); ts.append(time.perf_counter() - t)
    print(f"  {name}: {r[:3]} median {statistics.median(ts)*1e3:.2f} ms, min {min(ts)*1e3:.2f} ms (N={N})")
print("load", os.getloadavg())
