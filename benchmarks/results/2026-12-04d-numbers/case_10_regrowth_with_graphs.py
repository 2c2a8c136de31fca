"""A cell run three times that appends a model's output (with its graph) to a list: the regrowth
line's "grew by", the kept-graphs line and the rows, each against bytes from shapes."""
from harness import check, done, rows, run, vram

run("""
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256))
x = torch.randn(128, 256)
outs = []
""")
relu, y = 128 * 1024 * 4, 128 * 256 * 4
for k in range(3):
    rep, out = vram("outs.append(m(x))")
    r = rows(rep)
    check(f"run {k}: list outs (outputs themselves)", r["list outs"][1], (k + 1) * y)
    check(f"run {k}: activations (ReLU results)", r["activations"][1] - r["activations"][0], relu)
    check(f"run {k}: allocated grew by one output and its ReLU", rep.end_allocated - rep.start_allocated, y + relu)
from vramnb import format_bytes  # noqa: E402
check("regrowth names outs with its growth", f"outs grew by {format_bytes(y + relu)}" in out, True)
check("kept-graphs line with the 3 graphs' bytes",
      f"autograd graphs kept after the cell by outs ({format_bytes(3 * relu)})" in out, True)
done()
