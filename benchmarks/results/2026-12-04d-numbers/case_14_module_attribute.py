"""A tensor moved into a module's attribute (`model.cache = t; del t`) and a forward hook
appending outputs with their graphs to a list on the module: the module's "attributes" row holds
the tensors themselves, the graphs' saved tensors are activations."""
from harness import MiB, check, done, rows, run, vram

run("""
torch.manual_seed(0)
mm = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256))
mm.outs = []
hh = mm.register_forward_hook(lambda mod, i, o: mod.outs.append(o))
x = torch.randn(128, 256)
""")
rep, out = vram("t = torch.zeros(256*1024)\nmm.cache = t\ndel t\nfor _ in range(2):\n    mm(x)")
r = rows(rep)
relu, y = 128 * 1024 * 4, 128 * 256 * 4
check("attributes of mm: cache + 2 outputs", r["attributes of mm"][1], MiB + 2 * y)
check("activations: 2 ReLU results", r["activations"][1] - r["activations"][0], 2 * relu)
check("no tensor t at end", r.get("tensor t", (0, 0, 0))[1], 0)
check("rows sum to allocated", sum(v[1] for v in r.values()), rep.end_allocated)
done()
