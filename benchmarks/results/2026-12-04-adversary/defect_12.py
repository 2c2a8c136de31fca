# One vramnb.estimate(...) on a torch.compile'd model ("nothing runs ...; your model untouched") and the
# user's compiled model stops running compiled: every later call runs eagerly (the compiled graph is never
# run again, no recompile for new shapes). A counting backend shows it; the same happens with inductor/eager.
import torch, vramnb, sys
RUNS = {"compiles": 0, "graph_runs": 0}
def backend(gm, inputs):
    RUNS["compiles"] += 1
    def run(*a):
        RUNS["graph_runs"] += 1; return gm.forward(*a)
    return run
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
cm = torch.compile(model, backend=backend)
opt = torch.optim.SGD(cm.parameters(), lr=0.1); x = torch.randn(4, 8)
cm(x).sum().backward()                                # compiled: 1 compile, 1 graph run
call = sys.argv[1] if len(sys.argv) > 1 else "estimate"
if call == "estimate": vramnb.estimate(cm, x, lambda m, b: m(b).sum(), opt, target="24GiB")
if call == "max_batch_size": vramnb.max_batch_size(cm, x, lambda m, b: m(b).sum(), opt, target="1GiB", progress=False)
if call == "fit": vramnb.fit(cm, x, lambda m, b: m(b).sum(), opt, target="24GiB", progress=False)
before = RUNS["graph_runs"]
for _ in range(3):
    cm(x).sum().backward()
ran = RUNS["graph_runs"] - before
print(call, "| compiled graph runs in the user's next 3 steps:", ran, "(3 without vramnb)")
print("PASS" if ran == 3 else f"FAIL: after {call}, the user's torch.compile'd model runs eagerly")
