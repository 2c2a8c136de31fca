"""`%vram`'s listing: holds / not shared for names sharing storages (a list and a dict holding
one tensor, a view, a notebook class's attribute also bound on an instance, a module and its
optimizer), against bytes from shapes."""
from harness import MiB, check, done, ip, run

run("""
t = torch.zeros(256*1024)
L, D = [t], {'t': t}
del t
base = torch.zeros(2*256*1024)
view = base[:10]
class K:
    shared = torch.zeros(3*256*1024)
k = K()
k.mine = K.shared
lin = torch.nn.Linear(512, 512)
opt = torch.optim.Adam(lin.parameters())
lin(torch.randn(4, 512)).sum().backward()
opt.step()
""")
rep = ip.run_line_magic("vram", "")
h = {x.name: x for x in rep.holders}
P = (512 * 512 + 512) * 4
check("L holds 1 MiB, not shared 0", (h["L"].nbytes, h["L"].unique), (MiB, 0))
check("D holds 1 MiB, not shared 0", (h["D"].nbytes, h["D"].unique), (MiB, 0))
check("base and view share 2 MiB", (h["base"].nbytes, h["base"].unique, h["view"].nbytes, h["view"].unique),
      (2 * MiB, 0, 2 * MiB, 0))
check("class K holds 3 MiB, shared with k", (h["K"].kind, h["K"].nbytes, h["K"].unique), ("class", 3 * MiB, 0))
check("k holds 3 MiB, shared with K", (h["k"].nbytes, h["k"].unique), (3 * MiB, 0))
check("lin: parameters + gradients", h["lin"].nbytes, 2 * P)
check("opt: parameters, gradients and state", h["opt"].nbytes, 4 * P + 4 * 2)
check("opt not shared: its state", h["opt"].unique, 2 * P + 4 * 2)
check("named above total", rep.total, MiB + 2 * MiB + 3 * MiB + 4 * P + 8)
done()
