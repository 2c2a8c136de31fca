"""Held: the out-of-memory post-mortem of a failing function (request, allocated at the failure, the
frames' tensors, the holders, the traceback's bytes) and what `%vram free` then releases, measured."""
import gc

from harness import MiB, check, done, ip, run, vram

from vramnb._tracker import cpu_tracker

run('''
keep = [torch.zeros(256 * 1024) for _ in range(3)]
model = torch.nn.Linear(512, 512)
def f(n):
    loc = torch.zeros(2 * 256 * 1024)
    y = model(torch.randn(64, 512))
    return torch.empty(n, 1 << 20)
''')
rep, out = vram("f(1 << 26)", "")
P = (512 * 512 + 512) * 4
act = 64 * 512 * 4  # y, and the input Linear saved for its weight's gradient
st = rep.oom.state
check("request: (1<<26) x (1<<20) float32", rep.oom.requested, (1 << 26) * (1 << 20) * 4)
check("allocated at the failure", st.allocated, 3 * MiB + P + 2 * MiB + 2 * act)
check("frames: loc, y + its graph", [(n, b, g) for _, n, b, g in st.frames], [("loc", 2 * MiB, 0), ("y", 2 * act, act)])
check("holders: keep (its own), model (shared with the graph)", rep.oom.holders,
      [("keep", 3 * MiB, 3 * MiB, "list"), ("model", P, 0, "Module")])
check("line: the traceback keeps 2.2 MiB", "the error's traceback keeps 2.2 MiB alive" in out, True)
before = cpu_tracker().current
fr = ip.run_line_magic("vram", "free")
gc.collect()
check("%vram free: what it says it freed", dict(fr.freed)["last exception (traceback frames)"], 2 * MiB + 2 * act)
check("%vram free: what the tracker saw freed", before - cpu_tracker().current, 2 * MiB + 2 * act)
done()
