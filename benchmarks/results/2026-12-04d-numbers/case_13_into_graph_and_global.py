"""A named tensor that moves into a graph (saved for backward, then `del`), and one a function
moves into a notebook global (`global G`): at the end each is its new holder's."""
from harness import MiB, check, done, rows, run, vram

run("w = torch.randn(1024, 256, requires_grad=True)\nx = torch.randn(256, 1024)")
rep, out = vram("loss = (x @ w).sum()\ndel x")
r = rows(rep)
check("tensor x at start", r["tensor x"][0], MiB)
check("tensor x at end: gone", r.get("tensor x", (0, 0, 0))[1], 0)
# mm saves x (for w's gradient); w is a name
check("activations at end include x (the graph loss keeps saved it)", r["activations"][1], MiB)
run("def stash(t):\n    global G\n    G = t")
rep, out = vram("tmp = torch.zeros(2*256*1024)\nstash(tmp)\ndel tmp")
r = rows(rep)
check("tensor G at end", r["tensor G"][1], 2 * MiB)
check("no tensor tmp at end", r.get("tensor tmp", (0, 0, 0))[1], 0)
rep, out = vram("stash(torch.zeros(256*1024))")
r = rows(rep)
check("G rebound: start 2 MiB, end 1 MiB", r["tensor G"][:2], (2 * MiB, MiB))
done()
