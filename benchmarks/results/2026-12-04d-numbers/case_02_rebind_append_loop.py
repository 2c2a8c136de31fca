"""A value moved from a name into a list on every run (`ys.append(y); y = new`): the by-source
table must give the old value to the list at the end, not to `tensor y` (twice the bytes)."""
from harness import MiB, check, done, ip, nbytes, rows, run, vram

run("ys = []")
cell = """
if 'y' in dir():
    ys.append(y)
y = torch.zeros(256*1024)
"""
for k in range(3):
    rep, out = vram(cell)
    r = rows(rep)
    check(f"run {k}: tensor y at end", r.get("tensor y", (0, 0, 0))[1], nbytes(ip.user_ns["y"]))
    check(f"run {k}: list ys at end", r.get("list ys", (0, 0, 0))[1], nbytes(ip.user_ns["ys"]))
    check(f"run {k}: tensor y at start", r.get("tensor y", (0, 0, 0))[0], MiB if k else 0)
# the same in a training loop (xb, y, loss rebound in the loop, their last values appended)
run("model = torch.nn.Linear(512, 512)\nhist = []")
cell = """
for i in range(2):
    xb = torch.randn(256, 512)
    y = model(xb)
    loss = y.sum()
    hist.append((xb, y.detach(), loss.detach()))
"""
for k in range(3):
    rep, out = vram(cell)
    r = rows(rep)
    ns = ip.user_ns
    check(f"loop run {k}: tensor xb at end", r.get("tensor xb", (0, 0, 0))[1], nbytes(ns["xb"]))
    check(f"loop run {k}: tensor y at end", r.get("tensor y", (0, 0, 0))[1], nbytes(ns["y"]))
    check(f"loop run {k}: tensor loss at end", r.get("tensor loss", (0, 0, 0))[1], nbytes(ns["loss"]))
    # hist shares xb's storage with the name xb (claimed by the name), y/loss detach share storage too
    check(f"loop run {k}: list hist at end", r.get("list hist", (0, 0, 0))[1],
          nbytes(ns["hist"]) - nbytes(ns["xb"], ns["y"], ns["loss"]))
done()
