# ruff: noqa  (a measurement script kept as it was run for README.md; run: PYTHONPATH=<checkout> python <script> N)
import os, sys, time, statistics, warnings
warnings.simplefilter("ignore")
import torch, vramnb
print("vramnb", vramnb.__file__, "torch", torch.__version__, "load", os.getloadavg())
x = torch.rand(1000)
w = torch.nn.Parameter(torch.rand(64, 64))
a = torch.ones(1, 1000).expand(1 << 40, 1000)
b = torch.ones(1000, 64)
cases = {
    "sort (float32 values: autocast asked)": lambda: torch.sort(x.expand(1 << 50, 1000)),
    "mm (float32: autocast asked)": lambda: torch.mm(a, b),
    "long() (int64: no autocast)": lambda: x.expand(1 << 50, 1000).long(),
}
def once(f):
    try:
        with vramnb.vram("cpu", record=False) as m:
            f()
    except RuntimeError:
        pass
    return m.report
for name, f in cases.items():
    r = once(f)  # warm-up (imports)
    ctx = r.oom.state.context
    print(name, "| op:", ctx.op_name, ctx.request_shape, ctx.lowered, "| call:", (ctx.call or "")[:80])
    ts = []
    for _ in range(int(sys.argv[1])):
        t = time.perf_counter(); once(f); ts.append(time.perf_counter() - t)
    print(f"  {name}: median {statistics.median(ts)*1e3:.1f} ms, min {min(ts)*1e3:.1f} ms over {len(ts)}")
print("load", os.getloadavg())
