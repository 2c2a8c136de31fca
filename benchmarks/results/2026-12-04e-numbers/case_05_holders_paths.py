"""Held: `%vram` rows, "not shared", entries and "also kept by" for a dataclass, a namedtuple, a
`__slots__` object, nested dicts/lists/tuples, a view, a module with a buffer and a cache, its optimizer."""
from harness import MiB, check, done, ip, run

run('''
import dataclasses, collections
@dataclasses.dataclass
class Cfg:
    w: torch.Tensor
    extra: dict
NT = collections.namedtuple("NT", "a b")
class S:
    __slots__ = ("x", "y")
base = torch.zeros(4 * 256 * 1024)
cfg = Cfg(w=base[:1024], extra={"k": [torch.zeros(256 * 1024), (torch.zeros(512 * 1024),)]})
nt = NT(a=base, b=torch.zeros(2 * 256 * 1024))
s = S(); s.x = nt.b; s.y = {"deep": {"deeper": [torch.ones(3 * 256 * 1024)]}}
mod = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256))
mod.register_buffer("buf", torch.zeros(256 * 1024))
mod.cache = {"z": torch.zeros(256 * 1024)}
opt = torch.optim.SGD(mod.parameters(), lr=0.1, momentum=0.9)
mod(torch.randn(2, 256)).sum().backward(); opt.step()
''')
rep = ip.run_line_magic("vram", "")
h = {x.name: x for x in rep.holders}
e = {c.name: c for x in rep.holders for c in x.entries}
P = (256 * 256 + 256) * 2 * 4
check("cfg: view of base + 1 + 2 MiB; not shared 3 MiB", (h["cfg"].nbytes, h["cfg"].unique), (7 * MiB, 3 * MiB))
check("cfg.w: the 4 MiB storage it views", (e["cfg.w"].nbytes, e["cfg.w"].unique), (4 * MiB, 0))
check("cfg.extra['k']: 3 MiB", e["cfg.extra['k']"].nbytes, 3 * MiB)
check("nt: 6 MiB, all shared", (h["nt"].nbytes, h["nt"].unique), (6 * MiB, 0))
check("s: 5 MiB, 3 MiB its own", (h["s"].nbytes, h["s"].unique), (5 * MiB, 3 * MiB))
check("s.y['deep']['deeper'][0] listed", e["s.y['deep']['deeper'][0]"].nbytes, 3 * MiB)
check("mod: params + grads + buffer + cache", (h["mod"].nbytes, h["mod"].unique), (2 * P + 2 * MiB, 2 * MiB))
check("opt: momentum + params + grads; its own the momentum", (h["opt"].nbytes, h["opt"].unique), (3 * P, P))
check("named above: 4+3+2+3 MiB, buffer, cache, params, grads, momentum", rep.total, 14 * MiB + 3 * P)
check("named above = allocated", rep.total, rep.allocated)
done()
