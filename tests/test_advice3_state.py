"""Advice that agrees with the failing cell's own state (CPU): the grad mode the failing line ran
in (read from the cell's text after the ``with`` has exited), the parameters the optimizer trains,
the names a cell keeps after its loop, the gradient a named leaf holds."""

from __future__ import annotations

import torch

from tests.conftest import run
from vramnb.diagnose import OOMState, verdict
from vramnb.diagnose._postmortem import failing_code

MiB = 2**20


def _caught(ip, cell):  # type: ignore[no-untyped-def]
    """Run ``cell`` (which raises); the post-mortem's context read from its traceback after
    unwinding, as :func:`vramnb._measure.oom_info` reads it where the failure was not observed."""
    from vramnb._measure import _tb_frames

    res, _ = run(ip, cell)
    assert isinstance(res.error_in_exec, RuntimeError)
    return failing_code(_tb_frames(res.error_in_exec))


def _fixes(ctx):  # type: ignore[no-untyped-def]
    s = OOMState("cuda:0", True, 600 * MiB, 500 * MiB, reserved=500 * MiB, total=2**30,
                 free_device=0, non_pytorch=0, context=ctx)
    return [(f.what, f.code) for f in verdict(s).fixes]


def test_a_failure_under_no_grad_read_after_unwinding_is_not_said_to_have_gradients_on(ip):
    run(ip, "net = torch.nn.Linear(8, 8)")
    assert torch.is_grad_enabled()
    ctx = _caught(ip, "with torch.no_grad():\n    out = net(torch.ones(2, 8))\n    raise RuntimeError('x')")
    assert ctx.grad is False and torch.is_grad_enabled()
    text = " ".join(w + " " + c for w, c in _fixes(ctx))
    assert "gradients are on" not in text and "recompute activations" not in text
    # a decorated function, inference_mode, and set_grad_enabled(False)
    run(ip, "@torch.inference_mode()\ndef infer(x):\n    y = net(x)\n    raise RuntimeError('x')")
    assert _caught(ip, "infer(torch.ones(2, 8))").grad is False
    # the failing function has no construct of its own: the caller's `with` around its call decides
    run(ip, "def _evaluate(x):\n    y = net(x)\n    raise RuntimeError('x')")
    assert _caught(ip, "with torch.no_grad():\n    _evaluate(torch.ones(2, 8))").grad is False
    assert _caught(ip, "with torch.set_grad_enabled(False):\n    net(torch.ones(2, 8)); raise RuntimeError('x')").grad is False
    # gradients on: enable_grad inside no_grad, or no construct at all
    ctx = _caught(ip, "with torch.no_grad():\n    with torch.enable_grad():\n        net(torch.ones(2, 8))\n"
                      "        raise RuntimeError('x')")
    assert ctx.grad is True
    ctx = _caught(ip, "with torch.no_grad():\n    pass\nout = net(torch.ones(2, 8))\nraise RuntimeError('x')")
    assert ctx.grad is True
    assert "no backward runs in the failing code, yet gradients are on" in " ".join(w for w, _ in _fixes(ctx))


def test_the_loop_line_never_advises_deleting_what_the_loop_keeps_on_purpose(ip):
    """A best state bound only under a condition in the loop (a pass that does not improve keeps
    the earlier one) is the loop's result: the `del` at the end of the loop body leaves it out,
    and the bytes the line names are the bytes deleting the listed names frees."""
    import vramnb
    from vramnb._units import format_bytes

    run(ip, "best, best_state = None, None\nsrc = [torch.ones(1 << 18) for _ in range(3)]")
    res, _ = run(ip, "%%vram -d cpu --breakdown\nfor i, s in enumerate(src):\n    big = s.repeat(4)\n"
                     "    score = float(big.sum()) - i\n    if best is None or score < best:\n        best = score\n"
                     "        best_state = s.repeat(2)\n")
    assert res.error_in_exec is None
    notes = vramnb.history()[-1].notes
    line = [n for n in notes if n.startswith("bound in a loop")]
    assert line == [f"bound in a loop and still alive after it (a Python loop has no scope of its own): big "
                    f"({format_bytes(4 * MiB)}); each pass's values also stay alive while the next pass builds its "
                    "own: `del big` at the end of the loop body (where the next pass does not read them) or after "
                    "the loop frees them (an object in a reference cycle at the next gc.collect()), as does running "
                    "the loop in a function"], notes
    run(ip, "%%vram -d cpu\ndel big")  # what the line says `del big` frees, measured
    assert vramnb.history()[-1].delta_allocated == -4 * MiB
    assert ip.user_ns["best_state"].numel() == 1 << 19  # the kept result is still there


def test_the_optimizer_swap_takes_exactly_what_the_optimizer_steps(ip):
    """An optimizer over two modules (an embedding and a head): the Adafactor code takes the
    optimizer's own groups, not the largest module's parameters; run, it steps the same
    parameters with each group's learning rate. One optimizer over one whole model keeps
    ``model.parameters()``."""
    run(ip, "emb = torch.nn.Embedding(1000, 64)\nhead = torch.nn.Linear(64, 1000)\n"
            "adam = torch.optim.Adam([{'params': emb.parameters(), 'lr': 1e-3}, {'params': head.parameters(), "
            "'lr': 1e-4}])\n(head(emb(torch.tensor([1, 2]))).sum()).backward()\n"
            "_zl = torch.zeros_like\ndef _fail(*a, **k):\n    return torch.empty(1 << 60, dtype=torch.uint8)")
    run(ip, "torch.zeros_like = _fail")
    try:
        res, _ = run(ip, "%%vram -d cpu\nadam.step()")
    finally:
        run(ip, "torch.zeros_like = _zl")
    assert isinstance(res.error_in_exec, RuntimeError)
    import vramnb

    ctx = vramnb.history()[-1].oom.state.context
    assert ctx.phase == "optimizer step" and not ctx.optim_is_model
    code = [c for w, c in _fixes(ctx) if "Adafactor" in c]
    assert code == ['adam = torch.optim.Adafactor([{"params": g["params"], "lr": g["lr"]} for g in adam.param_groups])']
    old = [(sorted(id(p) for p in g["params"]), g["lr"]) for g in ip.user_ns["adam"].param_groups]
    run(ip, code[0])
    new = ip.user_ns["adam"]
    assert type(new) is torch.optim.Adafactor
    assert [(sorted(id(p) for p in g["params"]), g["lr"]) for g in new.param_groups] == old
    n = 1000 * 64 + 64 * 1000 + 1000
    assert sum(p.numel() for g in new.param_groups for p in g["params"]) == n
    # one optimizer over the whole of one model: its own expression
    run(ip, "net = torch.nn.Linear(8, 8)\nsgd = torch.optim.Adam(net.parameters())")
    from vramnb.diagnose._optim_target import steps_exactly

    assert steps_exactly(ip.user_ns["sgd"], ip.user_ns["net"])
    assert not steps_exactly(ip.user_ns["sgd"], torch.nn.Sequential(ip.user_ns["net"], torch.nn.Linear(8, 2)))


def test_a_named_leafs_gradient_is_its_names_not_held_by_no_name(ip):
    """``a.grad`` made in a cell (backward with retain_graph in a loop): the by-source table puts
    it under ``a``, and ``a.grad = None`` frees exactly those bytes."""
    import gc

    import vramnb

    gc.collect()
    n = 1 << 16
    run(ip, f"a = torch.randn({n}, requires_grad=True)")
    run(ip, "%%vram -d cpu --breakdown\ny = a * 2\nfor i in range(3):\n    y.sum().backward(retain_graph=True)")
    r = {name: (s, e) for name, s, e, _ in vramnb.history()[-1].sources}
    assert r["gradient of a"] == (0, n * 4), r
    assert r.get("alive after the cell, not found under the names above", (0, 0))[1] == 0, r
    run(ip, "%%vram -d cpu\na.grad = None")
    assert vramnb.history()[-1].delta_allocated == -n * 4
    run(ip, "del a, y")


def test_capacity_fixes_name_the_module_that_failed_not_an_idle_larger_copy(ip):
    """A deep copy kept beside the model being trained (larger, idle): autocast/checkpointing/
    compare code names the model whose forward or backward failed, read from the failing stack
    (a module's forward frame) or the failing loss's graph (backward)."""
    run(ip, "import copy\nbig = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))\n"
            "small = torch.nn.Sequential(torch.nn.Linear(16, 16))\n"
            "class _Fail(torch.nn.Module):\n    def forward(self, x):\n"
            "        return torch.empty(1 << 60, dtype=torch.uint8)\n")
    # forward: small's forward is on the stack (the failing layer inside it); the cell also names big
    run(ip, "small.add_module('boom', _Fail())")
    res, _ = run(ip, "%%vram -d cpu\nsaved = copy.deepcopy(big)\nfor i in range(2):\n"
                     "    loss = small(torch.ones(2, 16)).sum()\n    loss.backward()")
    assert isinstance(res.error_in_exec, RuntimeError)
    import vramnb

    ctx = vramnb.history()[-1].oom.state.context
    assert ctx.model == "small", ctx
    text = " ".join(w + " " + c for w, c in _fixes(ctx))
    assert "vramnb.max_batch_size(small," in text and "big" not in text and "saved" not in text
    # backward: the hook on small's weight fails inside the engine; the failing loss's graph reaches small's leaves
    run(ip, "del small.boom\n_h = small[0].weight.register_hook(lambda g: torch.empty(1 << 60, dtype=torch.uint8))")
    try:
        res, _ = run(ip, "%%vram -d cpu\nsaved2 = copy.deepcopy(big)\nloss = small(torch.ones(2, 16)).sum()\n"
                         "out_big = big(torch.ones(2, 64)).sum()\nloss.backward()")
    finally:
        run(ip, "_h.remove()")
    assert isinstance(res.error_in_exec, RuntimeError)
    ctx = vramnb.history()[-1].oom.state.context
    assert ctx.phase == "backward" and ctx.model == "small", ctx
    run(ip, "del saved, saved2, out_big, loss")
    # a loss module without parameters failing in its forward is not the model: the model the cell trains is named
    run(ip, "class _BadLoss(torch.nn.Module):\n    def forward(self, y):\n"
            "        return torch.empty(1 << 60, dtype=torch.uint8)\ncrit = _BadLoss()")
    res, _ = run(ip, "%%vram -d cpu\nloss = crit(small(torch.ones(2, 16)))")
    assert isinstance(res.error_in_exec, RuntimeError)
    assert vramnb.history()[-1].oom.state.context.model == "small"


def test_an_object_whose_methods_are_hooks_gets_remove_the_hooks_when_it_grows(ip):
    """A Grad-CAM-like helper whose bound methods are forward/backward hooks on a layer grows on
    every training run that never calls it: the re-run line names the hooks and says to remove
    them and empty its lists; doing so frees exactly what it grew by, and the next run keeps
    nothing."""
    import vramnb

    run(ip, "hnet = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))\n"
            "class _Cam:\n    def __init__(self, layer):\n        self.acts, self.grads = [], []\n"
            "        self.h1 = layer.register_forward_hook(self.save_act)\n"
            "        self.h2 = layer.register_full_backward_hook(self.save_grad)\n"
            "    def save_act(self, m, i, o):\n        self.acts.append(o)\n"
            "    def save_grad(self, m, gi, go):\n        self.grads.append(go[0])\n"
            "hcam = _Cam(hnet[0])\nhx = torch.ones(128, 64)")
    cell = "%%vram -d cpu\nhnet.zero_grad(set_to_none=False)\nhnet(hx).sum().backward()"
    for _ in range(4):
        run(ip, cell)
    notes = vramnb.history()[-1].notes
    line = [n for n in notes if "hooks" in n]
    assert line and ("hcam's methods are registered as hooks (forward hook save_act on hnet[0]; backward hook "
                     "save_grad on hnet[0]): every forward/backward of that module calls them, whoever runs it; "
                     "remove the hooks when done (`hcam.h1.remove()`, `hcam.h2.remove()`); "
                     "empty what they fill (hcam.acts.clear(), hcam.grads.clear())") in line[0], notes
    # each run keeps hnet[0]'s output (128, 64) and its output gradient (128, 64), float32
    assert "grew by " + __import__("vramnb._units", fromlist=["x"]).format_bytes(2 * 128 * 64 * 4) in line[0]
    run(ip, "%%vram -d cpu\nhcam.h1.remove(); hcam.h2.remove()\nhcam.acts.clear(); hcam.grads.clear()")
    # the four runs' outputs and output gradients: what the line's fix frees
    assert vramnb.history()[-1].delta_allocated == -4 * 2 * 128 * 64 * 4
    run(ip, cell)
    assert vramnb.history()[-1].delta_allocated == 0


def test_an_evaluation_loop_growing_a_container_gets_no_smaller_batch_line(ip):
    """Under no_grad, concatenating every step's logits onto one tensor (or appending them to a
    list) grows with the samples seen, whatever the batch: "a smaller batch per evaluation step"
    is no fix there; a loop that keeps nothing still gets it. A running float total is no container."""
    run(ip, "enet = torch.nn.Linear(8, 8)\nepreds = torch.zeros(0, 8)\nelist = []\netotal = 0.0")
    def smaller(ctx):  # type: ignore[no-untyped-def]
        ctx.forward = ("enet", "its input", (4, 8), (4, 8))  # the evidence the line needs (a failure in the forward)
        return any(f[0].startswith("a smaller batch per evaluation step") for f in _fixes(ctx))

    ctx = _caught(ip, "with torch.no_grad():\n    for i in range(3):\n        logits = enet(torch.ones(4, 8))\n"
                      "        epreds = torch.cat([epreds, logits])\n    raise RuntimeError('x')")
    assert ctx.grad is False and ctx.grows == {"epreds"} and not smaller(ctx)
    ctx = _caught(ip, "with torch.no_grad():\n    for i in range(3):\n        elist.append(enet(torch.ones(4, 8)))\n"
                      "    raise RuntimeError('x')")
    assert ctx.grows == {"elist"} and not smaller(ctx)
    ctx = _caught(ip, "with torch.no_grad():\n    for i in range(3):\n        out = enet(torch.ones(4, 8))\n"
                      "        etotal += float(out.sum())\n    raise RuntimeError('x')")
    assert ctx.grad is False and not ctx.grows and smaller(ctx)


def test_a_retry_inside_except_says_what_the_handled_exception_keeps(ip):
    """An out-of-memory error in a retry run inside the ``except`` block of the first failure:
    the first attempt's frame (its h1) is kept by the exception being handled; the post-mortem
    says so with its bytes. Retried after the block, nothing is kept: the line's fix frees it."""
    import vramnb
    from vramnb._report import oom_lines
    from vramnb._units import format_bytes

    n = 1 << 20
    run(ip, f"def _attempt(k):\n    h1 = torch.ones({n} // k)\n    return torch.empty(1 << 60, dtype=torch.uint8)\n"
            "def _inside():\n    try:\n        return _attempt(1)\n    except RuntimeError:\n        return _attempt(2)\n"
            "def _outside():\n    failed = False\n    try:\n        return _attempt(1)\n    except RuntimeError:\n"
            "        failed = True\n    if failed:\n        return _attempt(2)\n")
    res, _ = run(ip, "%%vram -d cpu\n_inside()")
    assert isinstance(res.error_in_exec, RuntimeError)
    oom = vramnb.history()[-1].oom
    assert oom.state.handled == [("_attempt:3", "h1", n * 4, 0)]
    assert ("held by the exception being handled: the failing code ran inside an except block, and that exception's "
            "traceback keeps the finished frames it was raised through alive until the block ends "
            f"({format_bytes(n * 4)}): h1 {format_bytes(n * 4)} (_attempt:3); run the retry (or whatever the block "
            "runs) after the except block ends: note the failure in it, act on it outside") in oom_lines(oom)
    # the failing frames: the retry's own h1 (half the size)
    assert ("_attempt:3", "h1", n * 2, 0) in [tuple(f) for f in oom.state.frames]
    res, _ = run(ip, "%%vram -d cpu\n_outside()")
    assert isinstance(res.error_in_exec, RuntimeError)
    oom = vramnb.history()[-1].oom
    assert oom.state.handled == [] and not any("exception being handled" in ln for ln in oom_lines(oom))
    inside, outside = vramnb.history()[-2], vramnb.history()[-1]
    # at the retry's failure, each from its cell's start (the first cell's error is still kept as the last exception)
    assert ((inside.oom.state.allocated - inside.start_allocated) - (outside.oom.state.allocated - outside.start_allocated)
            == n * 4)
