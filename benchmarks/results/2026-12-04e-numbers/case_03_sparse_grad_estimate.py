"""Fixed: `estimate` of a step whose embedding has a sparse gradient, against the real CPU step."""
import sys

import torch

import vramnb

FAILS = []


def check(what, got, want):
    print(f"{'PASS' if got == want else 'FAIL'} {what}: got {got!r}, want {want!r}")
    if got != want:
        FAILS.append(what)


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(5000, 64, sparse=True), torch.nn.Flatten(), torch.nn.Linear(12 * 64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
tok, y = torch.randint(0, 5000, (8, 12)), torch.randint(0, 10, (8,))


def loss_fn(m, b):
    return torch.nn.functional.cross_entropy(m(b[0]), b[1])


real = vramnb.profile_step(model, (tok, y), loss_fn, opt, steps=2)
est = vramnb.estimate(model, (tok, y), loss_fn, opt, device="cpu", steps=2)
dense = (12 * 64 * 10 + 10) * 4
sparse = 8 * 12 * 8 + 8 * 12 * 64 * 4  # indices (1, 96) int64 + values (96, 64) float32
for r, e in zip(real.steps, est.steps):
    check(f"{r.kind}: real gradients after backward", dict(r.marks)["after backward"].sources["gradients"], dense + sparse)
    check(f"{r.kind}: estimated gradients after backward", dict(e.marks)["after backward"].sources["gradients"], dense + sparse)
    check(f"{r.kind}: estimated peak = real peak", e.peak.allocated, r.peak.allocated)
print("RESULT", "PASS" if not FAILS else f"FAIL ({len(FAILS)})")
sys.exit(1 if FAILS else 0)
