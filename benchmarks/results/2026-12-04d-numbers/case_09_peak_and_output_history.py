"""The peak column when a name is rebound in a loop (old and new alive together), and the output
history (`Out`) holding a displayed tensor: `%vram` and `%vram free` against bytes from shapes."""
from harness import MiB, check, done, rows, run, vram

rep, out = vram("for i in range(1, 4):\n    x = torch.zeros(i*256*1024)")
r = rows(rep)
# the peak: x of 3 MiB made while x of 2 MiB is still bound
check("peak", rep.peak_allocated - rep.start_allocated, 5 * MiB)
check("tensor x at end", r["tensor x"][1], 3 * MiB)
check("rows at the peak sum to the peak", sum(v[2] for v in r.values()), rep.peak_allocated)
check("tensor x at the peak (the new value)", r["tensor x"][2], 3 * MiB)
# a rebinding that shrinks: the peak is the old and the new together
rep, out = vram("x = torch.zeros(256*1024)")
r = rows(rep)
check("shrink: tensor x start/end", r["tensor x"][:2], (3 * MiB, MiB))
check("shrink: peak rows sum", sum(v[2] for v in r.values()), rep.peak_allocated)
# Out keeps a displayed tensor; %vram free releases exactly it
run("big = torch.zeros(2*256*1024)")
run("big * 2")
run("del big")
_, out = run("%vram")
check("%vram lists the output history with 2.0 MiB",
      any("output history" in ln and "2.0 MiB" in ln for ln in out.splitlines()), True)
_, out = run("%vram free")
check("%vram free: output history 2.0 MiB",
      any(ln.strip().startswith("output history") and ln.strip().endswith("2.0 MiB") for ln in out.splitlines()), True)
check("%vram free: total 2.0 MiB", "total allocated freed              2.0 MiB" in out, True)
done()
