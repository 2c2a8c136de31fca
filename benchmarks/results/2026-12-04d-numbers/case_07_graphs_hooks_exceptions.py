"""Graphs kept by a list of losses, a forward hook filling a list, an error stored in a list
(its frames' locals), an error re-raised from another: each holder's row against bytes
computed from shapes."""
from harness import MiB, check, done, ip, rows, run, vram

run("""
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1))
xs = [torch.randn(256, 256) for _ in range(4)]
""")
P = (256 * 1024 + 1024 + 1024 + 1) * 4
relu = 256 * 1024 * 4
rep, out = vram("losses = []\nfor x in xs:\n    losses.append(m(x).sum())")
r = rows(rep)
check("parameters of m", r["parameters of m"][1], P)
check("list losses holds its 4 scalars itself", r["list losses"][1], 4 * 4)
check("activations: 4 ReLU results", r["activations"][1] - r["activations"][0], 4 * relu)
check("kept-graphs line names losses", "autograd graphs kept after the cell by losses" in out, True)
run("del losses")
# a forward hook that fills a list
run("acts = []\nh = m[1].register_forward_hook(lambda mod, i, o: acts.append(o.detach()))")
rep, out = vram("with torch.no_grad():\n    for x in xs:\n        m(x)")
r = rows(rep)
check("list acts: 4 ReLU outputs", r["list acts"][1], 4 * relu)
check("no activations (no_grad)", r.get("activations", (0, 0, 0))[1] - r.get("activations", (0, 0, 0))[0], 0)
run("h.remove(); acts.clear()")
# an error kept in a list: its frame's locals
run("""
errs = []
def failing():
    buf = torch.zeros(3*256*1024)
    raise KeyError('k')
""")
rep, out = vram("try:\n    failing()\nexcept KeyError as e:\n    errs.append(e)")
r = rows(rep)
check("list errs keeps the frame's 3 MiB", r["list errs"][1], 3 * MiB)
check("no last exception row (the cell did not fail)", r.get("last exception", (0, 0, 0))[1], 0)
# re-raised from another: the chained error's frames are the last exception's
run("""
def outer():
    keepme = torch.zeros(256*1024)
    try:
        failing()
    except KeyError as e:
        raise RuntimeError('wrapped') from e
""")
rep, out = vram("outer()")
r = rows(rep)
check("last exception: outer's 1 MiB and failing's 3 MiB", r["last exception"][1], 4 * MiB)
check("traceback line 4.0 MiB", "traceback keeps 4.0 MiB alive" in out, True)
_, out = run("%vram free")
check("%vram free releases 4.0 MiB", "total allocated freed              4.0 MiB" in out, True)
check("errs kept", len(ip.user_ns["errs"]), 1)
done()
