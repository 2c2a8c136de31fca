"""Ctrl-C at random points of vramnb's entry points, run as a script (``python _interrupt_stress.py SEED N
WHAT``) by tests/test_interrupt_stress.py: prints one line per failure and ``done RUNS FAILURES`` at the end.

Each run sends SIGINT to the main thread (``_thread.interrupt_main``, as Jupyter's *Interrupt kernel*) after a
random delay while ``%%vram`` cells, ``profile_step``, ``compare`` or ``estimate`` run, then checks: exactly
one ``KeyboardInterrupt`` reached the caller (none lost, none twice), the process is alive, and the user's
model, optimizer, gradients, RNG, grad mode and default dtype are as they were (the interrupt may cut the
user's own step in ``profile_step``, which vramnb then restores)."""

from __future__ import annotations

import _thread
import random
import sys
import threading
import time

import torch

import vramnb


def snapshot(model: torch.nn.Module, opt: torch.optim.Optimizer) -> tuple:
    params = [(n, p, p.detach().clone(), p.grad) for n, p in model.named_parameters()]
    state = {id(k): {kk: (vv, vv.clone() if torch.is_tensor(vv) else vv) for kk, vv in v.items()}
             for k, v in opt.state.items()}
    return (params, state, torch.get_rng_state().clone(), torch.is_grad_enabled(), torch.get_default_dtype(),
            torch._C._len_torch_dispatch_stack(), [g["lr"] for g in opt.param_groups])


def changed(before: tuple, model: torch.nn.Module, opt: torch.optim.Optimizer) -> list[str]:
    params, state, rng, grad, dtype, stack, lrs = before
    out = []
    now = list(model.named_parameters())
    if [n for n, *_ in params] != [n for n, _ in now]:
        out.append("parameter names")
    for (n, p, v, g), (_, q) in zip(params, now):
        if q is not p or not torch.equal(q.detach(), v) or q.grad is not g:
            out.append(f"parameter {n}")
    if {id(k) for k in opt.state} != set(state):
        out.append("optimizer state keys")
    for k, v in opt.state.items():
        for kk, (obj, val) in state.get(id(k), {}).items():
            if v.get(kk) is not obj or (torch.is_tensor(val) and not torch.equal(v[kk], val)):
                out.append(f"optimizer state {kk}")
    if not torch.equal(torch.get_rng_state(), rng):
        out.append("RNG")
    if torch.is_grad_enabled() != grad or torch.get_default_dtype() != dtype:
        out.append("grad mode or default dtype")
    if torch._C._len_torch_dispatch_stack() != stack:
        out.append("dispatch mode stack")
    if [g["lr"] for g in opt.param_groups] != lrs:
        out.append("lr")
    return out


def main() -> None:
    seed, n, what = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    rnd = random.Random(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(2, 16)).sum().backward()
    opt.step()  # state to keep
    batch = torch.randn(8, 16)

    def loss_fn(m: torch.nn.Module, b: torch.Tensor) -> torch.Tensor:
        return m(b).pow(2).mean()

    shell = None
    if what == "vram":
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.extension_manager.load_extension("vramnb")
        shell.user_ns.update(model=model, batch=batch, torch=torch)
    ops = {
        "estimate": lambda: vramnb.estimate(model, batch, loss_fn, opt, target="24GiB"),
        "profile_step": lambda: vramnb.profile_step(model, batch, loss_fn, opt, steps=2),
        "compare": lambda: vramnb.compare(model, batch, loss_fn, opt),
    }
    if what == "vram":
        def op() -> None:
            assert shell is not None
            r = shell.run_cell("%%vram\nx = torch.ones(64, 64)\ny = model(batch).sum()\ndel x, y\n", store_history=False)
            if r.error_in_exec is not None:
                raise r.error_in_exec
    else:
        op = ops[what]
    t0 = time.perf_counter()
    op()  # how long one call takes, to spread the interrupts over all of it
    span = time.perf_counter() - t0
    failures = 0
    for i in range(n):
        before = snapshot(model, opt)
        delay = rnd.uniform(0, span * 1.1)
        got = 0
        timer = threading.Timer(delay, _thread.interrupt_main)
        t0 = time.perf_counter()
        try:
            timer.start()
            op()
            time.sleep(max(0.0, delay - (time.perf_counter() - t0)) + 0.3)  # lands here if the call ended first
        except KeyboardInterrupt:
            got += 1
        try:
            for _ in range(30):  # a second one (delivered again twice) or a late one lands here
                time.sleep(0.01)
        except KeyboardInterrupt:
            got += 1
        timer.join()
        bad = changed(before, model, opt)
        if got != 1 or bad:
            failures += 1
            print(f"run {i} delay {delay:.4f}: {got} KeyboardInterrupt, changed: {bad}", flush=True)
    print("done", n, failures, flush=True)


if __name__ == "__main__":
    main()
