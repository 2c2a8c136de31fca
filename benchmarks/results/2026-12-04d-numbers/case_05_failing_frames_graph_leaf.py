"""An out-of-memory error in a function whose locals hold a tensor, a global list's tensor (also
kept by the list) and a result whose graph keeps a leaf made in the function: the traceback
line must count what `%vram free` then releases (the leaf too), not what is also a name's."""
from harness import MiB, check, done, ip, rows, run, vram

run("""
keep = []
def step():
    a = torch.zeros(256*1024)                             # 1 MiB
    keep.append(torch.zeros(2*256*1024))                  # 2 MiB, the list's
    h = keep[-1]
    y = torch.zeros(4*256*1024, requires_grad=True) * 2   # 4 MiB, its graph keeps the 4 MiB leaf
    big = torch.empty(1 << 60, dtype=torch.uint8)
""")
rep, out = vram("step()")
r = rows(rep)
check("allocated at end", rep.end_allocated, 11 * MiB + 8)
check("list keep at end", r["list keep"][1], 2 * MiB)
# a, y, the leaf and MulBackward's saved scalar (8 B, labelled activations): 9 MiB + 8 B in all
check("last exception + activations at end", r["last exception"][1] + r.get("activations", (0, 0, 0))[1], 9 * MiB + 8)
check("traceback line", "the error's traceback keeps 9.0 MiB alive" in out, True)
check("failing frames line names a, h, y", "held by the failing frames: y 4.0 MiB" in out, True)
_, out = run("%vram free")
check("%vram free releases 9.0 MiB", "total allocated freed              9.0 MiB" in out, True)
check("keep intact", ip.user_ns["keep"][0].numel() * 4, 2 * MiB)
done()
