"""profile_step that runs out of memory: the post-mortem on the StepReport, with each
fix's saving estimated on the user's own step (vramnb/diagnose/_savings.py).

A real CPU allocation failure: a subprocess lowers its own RLIMIT_DATA below what the
step needs (the test must not starve the machine)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CODE = textwrap.dedent(
    """
    import itertools, re, resource, torch, vramnb
    from vramnb import Recipe
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                                                      torch.nn.Linear(2048, 512)) for _ in range(6)])
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(2048, 512)
    loss_fn = lambda m, b: m(b).square().mean()
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def est(**s):
        return vramnb.estimate(model, x, loss_fn, opt, device="cpu", steps=1, warm_optimizer=True,
                               recipe=Recipe(**s) if s else None).peak_allocated
    base, ckpt = est(), est(checkpointing="every block")
    vm = int(re.search(r"VmData:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024
    resource.setrlimit(resource.RLIMIT_DATA, (vm + 300 * 2**20, resource.getrlimit(resource.RLIMIT_DATA)[1]))
    try:  # first, in the fresh process: the savings (the C heap the failure grows counts against the limit)
        vramnb.profile_step(model, x, loss_fn, opt, diagnose=True)
        raise SystemExit("the step did not fail")
    except RuntimeError as err:
        rep = err.vramnb_report
    calls = itertools.count()  # a list the loss appends to would be put back as found (vramnb/_code_state.py)
    counted = lambda m, b: next(calls) * 0 + loss_fn(m, b)  # noqa: E731
    try:  # by default, a loss_fn of the user's is not run again: the fixes come without savings
        vramnb.profile_step(model, x, counted, opt)
        raise SystemExit("the step did not fail")
    except RuntimeError as err:
        plain = err.vramnb_report.oom.verdict
    assert next(calls) == 1 and not any(f.estimated for f in plain.fixes), plain
    assert any(f.code == "vramnb.profile_step(model, batch, loss_fn, optimizer, diagnose=True)" for f in plain.fixes)
    oom = rep.oom
    assert oom is not None and oom.state.at_failure and oom.state.cap_name == "RLIMIT_DATA", oom
    assert oom.verdict.kind == "per-process cap", oom.verdict
    fixes = {f.what: f for f in oom.verdict.fixes}
    f = fixes["checkpointing every block"]
    assert f.estimated and f.fits and f.saving == base - ckpt, (f, base, ckpt)
    # the fix's code is the user's step with it: the checkpoint wrap of the blocks, then the step
    assert "block.forward = functools.partial(torch.utils.checkpoint.checkpoint, block.forward" in f.code
    assert "loss = loss_fn(model, batch)" in f.code
    # ranked: those that fit first; the batch size that fits is among them
    fits = [g.fits for g in oom.verdict.fixes if g.estimated]
    assert fits == sorted(fits, reverse=True), fits
    assert any(w.startswith("batch size ") and g.fits for w, g in fixes.items())
    text = repr(rep)
    assert f": checkpointing every block (this step's peak −{vramnb.format_bytes(base - ckpt)}, estimated; " \\
           "the step then fits):" in text, text
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # restored
    print("ok")
    """
)


def test_step_oom_fixes_carry_this_steps_estimated_savings():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout[-3000:] + out.stderr[-3000:]
