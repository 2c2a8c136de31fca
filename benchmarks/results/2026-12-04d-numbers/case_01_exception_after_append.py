"""An error raised in a function that appended a large tensor to a notebook list: the list keeps
it, the traceback's frames keep only the function's locals. Symptom: "last exception 0 B 114 MiB"."""
from harness import MiB, check, done, ip, rows, run, vram

run("""
keep = []
def step(n):
    a = torch.zeros(256*1024)      # 1 MiB, a local
    b = torch.zeros(2*256*1024)    # 2 MiB, a local
    keep.append(torch.zeros(111*256*1024))
    raise ValueError('x')
""")
rep, out = vram("step(1)")
r = rows(rep)
check("list keep at end", r.get("list keep", (0, 0, 0))[1], 111 * MiB)
check("last exception at end", r.get("last exception", (0, 0, 0))[1], 3 * MiB)
check("traceback line says 3.0 MiB", "traceback keeps 3.0 MiB alive" in out, True)
_, out = run("%vram free")
check("%vram free released 3.0 MiB", "total allocated freed              3.0 MiB" in out, True)
check("list still there", ip.user_ns["keep"][0].numel() * 4, 111 * MiB)
done()
