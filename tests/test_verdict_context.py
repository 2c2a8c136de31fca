"""The post-mortem reads what the failing code was doing and what is out of sight, exactly
(CPU): the names the failing code uses are never offered for deletion, training techniques
only where a model ran and not those already on, out-of-sight bytes against every name."""

from __future__ import annotations

import torch

import vramnb
from vramnb._units import format_bytes
from tests.conftest import measured_oom, run
from vramnb.diagnose import OOMState, verdict
from vramnb.diagnose._postmortem import FailingCode

MiB = 2**20
HUGE = "torch.empty(1 << 60, dtype=torch.uint8)"  # the CPU allocator refuses 1 EiB


def test_failing_code_names_the_model_and_optimizer_in_use_and_sees_autocast(ip):
    run(ip, "model = torch.nn.Linear(256, 256)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "small = torch.nn.Linear(2, 2)\n"
            "def train_step(x):\n    loss = model(x).sum()\n    loss.backward(); opt.step()\n"
            "    return " + HUGE)
    oom, _ = measured_oom(ip, "with torch.autocast('cpu', dtype=torch.bfloat16):\n    train_step(torch.ones(4, 256))")
    ctx = oom.state.context
    assert ctx.trains and ctx.model == "model" and ctx.optimizer == "opt" and ctx.autocast
    assert {"train_step", "model", "opt"} <= ctx.in_use and "small" not in ctx.in_use
    assert not ctx.checkpointing


def test_failing_frames_count_modules_nested_containers_and_the_graph_cut_short(ip):
    run(ip, "def step(model, x):\n    cfg = {'a': {'t': torch.ones(1000)}}\n    pair = [torch.ones(500), [torch.ones(250)]]\n"
            "    h = torch.relu(model(x))\n    g = h * 2\n    " + HUGE)
    oom, _ = measured_oom(ip, "step(torch.nn.Linear(64, 64), torch.ones(8, 64, requires_grad=True))")
    frames = {var: n for _, var, n, *_ in oom.state.frames}
    assert frames["model"] == (64 * 64 + 64) * 4  # a module local: its parameters
    assert frames["cfg"] == 1000 * 4 and frames["pair"] == 750 * 4  # nested containers
    assert frames["x"] == 8 * 64 * 4
    # h: its own 2 KiB and what its graph saved (relu's output is h itself; the Linear saved x: counted at x)
    assert frames["h"] == 8 * 64 * 4
    assert frames["g"] == 8 * 64 * 4 + 8  # mul saved the scalar 2, a 0-dim int64 tensor
    graph = {var: gb for _, var, _, gb in oom.state.frames}
    assert graph["g"] == 8 and graph["h"] == 0 and graph["model"] == 0
    assert "g 2.0 KiB + its graph 8 B (step:6)" in "\n".join(__import__("vramnb._report", fromlist=["x"]).oom_lines(oom))


def test_out_of_sight_bytes_are_what_vram_free_would_release(ip):
    run(ip, "kept = torch.zeros(2_500_000)\n"
            "def fail():\n    ref = kept; tmp = torch.ones(500_000); raise ValueError('x')")
    run(ip, "fail()")  # the last exception keeps tmp (2 MB) and, through ref, kept (a name: not out of sight)
    run(ip, "torch.ones(1_000_000)")  # Out and _ keep 4 MB
    oom, _ = measured_oom(ip, HUGE)
    assert oom.state.hidden == 500_000 * 4 + 1_000_000 * 4
    assert dict(oom.state.hidden_by) == {"last exception": 500_000 * 4, "output history": 1_000_000 * 4}


def test_failing_code_knows_which_containers_it_adds_to_and_which_it_only_reads(ip):
    # field case loss_parts_summed_oom: the loop only iterates parts; results and seen are added to
    run(ip, "parts = [torch.ones(4) for _ in range(3)]\nresults = []\nseen = {}\ncount = [0]\n")
    oom, _ = measured_oom(ip, "for part in parts:\n    results.append(part * 2)\n    seen[len(seen)] = part\n"
                      "    count[0] += 1\n    x = parts[0] + " + HUGE)
    ctx = oom.state.context
    assert {"parts", "results", "seen", "count"} <= ctx.in_use
    assert ctx.mutated == {"results", "seen", "count"}
    # inside a function: only that function's own lines count
    run(ip, "def other():\n    parts.append(1)\n\ndef step():\n    for p in parts:\n        results.extend([p])\n"
            "    return " + HUGE)
    oom, _ = measured_oom(ip, "step()")
    assert "parts" in oom.state.context.in_use and "parts" not in oom.state.context.mutated
    assert "results" in oom.state.context.mutated


def test_a_container_the_failing_code_only_reads_is_never_emptied():
    ctx = FailingCode(in_use={"parts", "model"}, model="model", trains=True)
    holders = [("parts", 200 * MiB, 200 * MiB, "list")]
    assert not any(f.code == "parts.clear()" or "adds to" in f.what
                   for f in verdict(_state(holders=holders, context=ctx)).fixes)
    ctx.mutated = {"parts"}
    fixes = verdict(_state(holders=holders, context=ctx)).fixes
    assert fixes[0].code == "parts.clear()" and fixes[0].what == (
        "parts (list), which the failing code adds to, keeps 200.0 MiB: keep numbers or reduced values, not whole "
        "tensors, or empty it; that frees 200.0 MiB")


def _state(**kw):
    base = dict(device="cpu", at_failure=True, requested=100 * MiB, allocated=300 * MiB, available=60 * MiB)
    base.update(kw)
    return OOMState(**base)


def test_fixes_never_delete_what_the_failing_code_uses_and_rank_what_closes_the_gap_first():
    ctx = FailingCode(in_use={"train_step", "opt", "model"}, model="model", optimizer="opt", trains=True)
    s = _state(holders=[("opt", 200 * MiB, 200 * MiB), ("old", 30 * MiB, 30 * MiB), ("cache", 50 * MiB, 50 * MiB)],
               context=ctx)
    fixes = verdict(s).fixes
    codes = [f.code for f in fixes]
    assert "del opt" not in codes
    # 40 MiB short: deleting cache (50 MiB) closes it and comes before the techniques; old (30 MiB) after them
    compare = next(i for i, c in enumerate(codes) if c.startswith("vramnb.compare(model, batch, loss_fn, opt"))
    assert codes.index("del cache") < compare < codes.index("del old")
    assert any("with torch.autocast('cpu'" in c for c in codes)
    # CPU: no batch search (it models a CUDA card)
    assert not any(c.startswith("vramnb.max_batch_size") for c in codes)


def test_no_training_fixes_without_a_model_and_none_already_in_use():
    plain = verdict(_state(context=FailingCode(in_use={"z"}))).fixes
    assert not any("autocast" in f.code or "checkpoint" in f.code or "compare" in f.code for f in plain)
    on = verdict(_state(context=FailingCode(trains=True, autocast=True, checkpointing=True, model="net"))).fixes
    assert not any(f.code.startswith("with torch.autocast") or f.what == "recompute activations in backward" for f in on)
    # no optimizer in use: the code names none (never `optimizer`, a name the notebook may lack)
    assert any(f.code.startswith('vramnb.compare(net, batch, loss_fn, toggles={"precision": ["fp32", '
                                 '"bf16"], "checkpointing": ["off", "every block"]})') for f in on)
    # inference (gradients off): no recomputation in backward to offer
    inf = verdict(_state(context=FailingCode(trains=True, grad=False, model="net"))).fixes
    assert not any("autocast" in f.code for f in inf)  # no evidence that autocast lowers the failing operation
    inf = verdict(_state(context=FailingCode(trains=True, grad=False, model="net", forward=("net", "x", (8, 4), (8, 4)),
                                             op_name="addmm", request_shape=(8, 4), lowered=True,
                                             lowered_how="runs it in bfloat16"))).fixes
    assert any("autocast" in f.code for f in inf) and not any(f.what == "recompute activations in backward" for f in inf)
    # CUDA: vramnb.fit for this card, the cap as the target
    cuda = verdict(OOMState("cuda:0", True, 512 * MiB, 3900 * MiB, 4000 * MiB, 140 * 2**30, 4 * 2**30,
                            context=FailingCode(trains=True, model="net", optimizer="opt"))).fixes
    assert any(f.code == f"vramnb.fit(net, batch, loss_fn, opt, target={4 * 2**30})  # batch and loss_fn: yours"
               for f in cuda)


def test_a_request_under_the_process_limit_is_not_larger_than_the_whole_device():
    # 120 MiB asked, 1 GiB limit with 10 MiB of room: the limit is the device, not the room
    s = _state(requested=120 * MiB, allocated=20 * MiB, available=20 * 2**30, cap=2**30, cap_room=10 * MiB,
               cap_name="RLIMIT_AS", context=FailingCode(trains=True))
    v = verdict(s)
    assert v.kind == "per-process cap"
    assert not any(f.what.startswith("one request is larger") for f in v.fixes)
    assert v.fixes[0].code == ("import resource; resource.setrlimit(resource.RLIMIT_AS, "
                               "resource.getrlimit(resource.RLIMIT_AS)[1:] * 2)")
    big = verdict(_state(requested=2 * 2**30, available=20 * 2**30, cap=2**30, cap_room=10 * MiB,
                         context=FailingCode(trains=True)))
    assert any(f.what.startswith("one request is larger") for f in big.fixes)


def test_one_request_far_larger_than_all_tensors_under_a_process_limit_says_read_the_shapes():
    # field case broadcast_pairwise_distance_oom: 160000 B allocated, one 160000000 B request, 800 MiB address
    # space mostly the interpreter's own: raising the limit is one fix, the shapes the other
    s = _state(requested=160_000_000, allocated=160_000, available=20 * 2**30, cap=800 * MiB, cap_room=50 * MiB,
               cap_name="RLIMIT_AS", context=FailingCode(in_use={"a", "b"}))
    fixes = verdict(s).fixes
    assert fixes[0].code.startswith("import resource; resource.setrlimit(resource.RLIMIT_AS")
    assert fixes[1].what == ("one request of 152.6 MiB is more than the 156.2 KiB all tensors hold and the 50.0 MiB "
                             "still free together: read the shapes on the failing line (an unintended broadcast, "
                             "a batch or sequence far too large)")
    # what the tensors alive could make room for, or a request not far above them: no such sentence
    for kw in (dict(cap_room=200 * MiB), dict(allocated=60 * MiB)):
        assert not any("read the shapes" in f.what for f in verdict(_state(**{**s.__dict__, **kw})).fixes)


def test_a_cell_runs_even_where_vramnb_cannot_start_measuring(ip, monkeypatch, capsys):
    # under memory pressure vramnb's own start (the tracker's warm-up, its scan) can fail: the cell must still run
    from vramnb._tracker import StorageTracker

    def no_memory(self):
        raise MemoryError("no memory left")

    monkeypatch.setattr(StorageTracker, "warm_up", no_memory)
    res, cap = run(ip, "%%vram -d cpu\nran = 41 + 1\nran")
    assert res.error_in_exec is None and ip.user_ns["ran"] == 42
    assert "could not start measuring (MemoryError: no memory left); the cell ran unmeasured" in cap.stderr
    # and a failing cell keeps its own error
    res, cap = run(ip, "%%vram -d cpu\nraise KeyError('mine')")
    assert isinstance(res.error_in_exec, KeyError)


def test_every_report_carries_the_versions(ip):
    import platform

    import IPython

    want = {"torch": torch.__version__, "python": platform.python_version(), "vramnb": vramnb.__version__}
    model = torch.nn.Linear(8, 8)
    batch = torch.ones(4, 8)
    loss = lambda m, b: m(b).sum()  # noqa: E731
    est = vramnb.estimate(model, batch, loss, target="A100")
    assert est.versions.items() >= {**want, "target": est.target.name}.items()
    cmp = vramnb.compare(model, batch, loss, None, toggles={"precision": ["fp32"]}, progress=False)
    assert cmp.versions.items() >= want.items()
    ip.user_ns["t"] = torch.ones(10)
    magics = ip.magics_manager.registry["VramMagics"]
    rep = magics.state(torch.device("cpu"))  # what %vram shows
    assert rep.versions.items() >= {**want, "ipython": IPython.__version__}.items()


def test_a_forward_only_recipe_does_not_warn_about_missing_gradients():
    model = torch.nn.Linear(8, 8)
    rep = vramnb.profile_step(model, torch.ones(4, 8), lambda m, b: m(b).sum(), None, recipe={"mode": "no_grad"})
    assert all(not s.missing_grads for s in rep.steps)
    assert "require grad but received none" not in repr(rep)


def test_regrowth_names_the_list_an_alias_shares(ip):
    run(ip, "acc = []\nalias = acc")
    for _ in range(3):
        run(ip, "%%vram -d cpu\nacc.append(torch.zeros(1000))")
    [note] = [n for n in vramnb.history()[-1].notes if n.startswith("each run of this cell")]
    assert ": acc and alias grew by 3.9 KiB:" in note  # 4000 B each run; deleting either alone frees nothing


def test_checkpointing_code_is_the_models_own_method_or_names_its_blocks():
    from vramnb.techniques import REGISTRY

    ck = REGISTRY["checkpointing"]

    class HF(torch.nn.Module):
        supports_gradient_checkpointing = True

        def activation_checkpointing_enable(self, every_n_layers=1):
            pass

    class Old(torch.nn.Module):
        supports_gradient_checkpointing = True

        def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
            pass

    class Unsupported(Old):  # the method exists on every PreTrainedModel; ConvNeXt's raises
        supports_gradient_checkpointing = False

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(2, 2) for _ in range(5))

    assert ck.code("every block", model=HF(), name="gpt") == \
        'gpt.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})'
    assert ck.code("every 2nd block", model=HF()) == \
        'model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False}, every_n_layers=2)'
    assert ck.code("every block", model=Old()) == \
        'model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})'
    assert "gradient_checkpointing_enable" not in ck.code("every block", model=Unsupported())
    code = ck.code("every 2nd block", model=Net(), name="net")
    assert code == ("import functools, torch.utils.checkpoint\n"
                    "for block in net.get_submodule('layers')[::2]:  # recompute each block's forward in backward\n"
                    "    if getattr(block.forward, 'func', None) is not torch.utils.checkpoint.checkpoint:"
                    "  # once, if run twice\n"
                    "        block.forward = functools.partial(torch.utils.checkpoint.checkpoint, block.forward, "
                    "use_reentrant=False)")
    net = Net()
    exec(code, {"net": net})  # runs as printed: blocks 0, 2 and 4 now recompute in backward
    assert [isinstance(b.__dict__.get("forward"), __import__("functools").partial) for b in net.layers] == \
        [True, False, True, False, True]
    x = torch.ones(3, 2, requires_grad=True)
    for b in net.layers:
        x = b(x)
    x.sum().backward()


def test_a_failing_cell_says_what_its_errors_traceback_keeps(ip):
    run(ip, "def prep():\n    big = torch.ones(2**20)\n    raise ValueError('bad input')")
    res, cap = run(ip, "%%vram -d cpu\nprep()")
    assert isinstance(res.error_in_exec, ValueError)
    note = [n for n in vramnb.history()[-1].notes if n.startswith("the error's traceback keeps")]
    assert note == ["the error's traceback keeps 4.0 MiB alive (the variables of the frames that raised; IPython "
                    "keeps it as the last exception): %vram free releases it"]


def test_the_traceback_line_counts_only_what_no_notebook_name_keeps(ip):
    # the frame holds `big` (4 MiB, also the notebook's `kept`) and `own` (2 MiB, its alone):
    # %vram free releases only `own`
    run(ip, "kept = torch.ones(2**20)\n"
            "def prep(big):\n    own = torch.ones(2**19)\n    raise ValueError('bad input')")
    run(ip, "%%vram -d cpu\nprep(kept)")
    note = [n for n in vramnb.history()[-1].notes if "traceback keeps" in n]
    assert note == ["the error's traceback keeps 2.0 MiB alive (the variables of the frames that raised; IPython "
                    "keeps it as the last exception): %vram free releases it"]
    freed = ip.run_line_magic("vram", "free -d cpu")
    assert dict(freed.freed)["last exception (traceback frames)"] == 2**19 * 4
    # all of it a name's: no line
    run(ip, "def prep2(big):\n    raise ValueError('bad input')")
    run(ip, "%%vram -d cpu\nprep2(kept)")
    assert not [n for n in vramnb.history()[-1].notes if "traceback" in n]


def test_an_interrupted_cell_says_what_its_frames_keep(ip):
    run(ip, "def loop():\n    acts = [torch.ones(2**18) for _ in range(4)]\n    raise KeyboardInterrupt")
    res, _ = run(ip, "%%vram -d cpu\nloop()")
    assert isinstance(res.error_in_exec, KeyboardInterrupt)
    note = [n for n in vramnb.history()[-1].notes if "traceback keeps" in n]
    assert note == ["the interruption's traceback keeps 4.0 MiB alive (the variables of the frames that raised; "
                    "IPython keeps it as the last exception): %vram free releases it"]


def test_after_a_second_out_of_memory_the_note_on_unnamed_memory_blames_no_autograd_graphs(ip):
    # the first error's traceback is in a cycle (a frame's local keeps the error): after a second
    # error replaces the last exception, no name holds its frames' 4 MiB and only gc frees them
    import gc

    gc.collect()
    gc.disable()
    try:
        run(ip, "def build():\n    acts = torch.ones(2**20)\n    err = None\n    try:\n"
                "        torch.empty(1 << 60, dtype=torch.uint8)\n    except RuntimeError as e:\n"
                "        err = e\n        raise")
        run(ip, "%%vram -d cpu\nbuild()")
        run(ip, "%%vram -d cpu\ntorch.empty(1 << 60, dtype=torch.uint8)")
        rep = ip.run_line_magic("vram", "-d cpu")
        text = rep._table().to_text()
        assert "autograd graphs" not in text
        assert (f"{format_bytes(rep.allocated - rep.total)} allocated is not found under the names listed (no row "
                "above reaches it: objects this listing does not walk into, such as a module's or a tensor's hooks, a "
                "function's cache or default arguments, a class attribute "
                "of a class from another module, another module's globals or an autograd graph, or objects no "
                "variable reaches; those in a reference cycle waiting for gc, such as an earlier error's traceback, "
                "`%vram free` releases)") in text
        assert rep.allocated - rep.total >= 2**20 * 4
        freed = ip.run_line_magic("vram", "free -d cpu")
        assert dict(freed.freed)["unreachable cycles (gc.collect)"] >= 2**20 * 4
    finally:
        gc.enable()


def _fixes(rep) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    # the failing code read from the real cell's frames; the numbers of a card where the request is not
    # larger than the whole device (CPU's 1 EiB request is): 500 MiB allocated + 600 MiB asked, a 1 GiB card
    from vramnb.diagnose import OOMState, verdict

    ctx = rep.oom.state.context
    s = OOMState("cuda:0", True, 600 * 2**20, 500 * 2**20, reserved=500 * 2**20, total=2**30,
                 free_device=0, non_pytorch=0, context=ctx, holders=rep.oom.state.holders)  # what the cell keeps
    return [(f.what, f.code) for f in verdict(s).fixes]


def test_an_out_of_memory_inside_optimizer_step_gets_optimizer_state_fixes_not_activation_ones(ip):
    # Adam creates its state at the first step (torch.zeros_like per parameter): that allocation fails
    run(ip, "net = torch.nn.Linear(8, 8)\nadam = torch.optim.Adam(net.parameters())\n"
            "net(torch.ones(2, 8)).sum().backward()\n"
            "_zl = torch.zeros_like\n"
            "def _fail(*a, **k):\n    return torch.empty(1 << 60, dtype=torch.uint8)")
    run(ip, "torch.zeros_like = _fail")
    try:
        res, _ = run(ip, "%%vram -d cpu\nadam.step()")
    finally:
        run(ip, "torch.zeros_like = _zl")
    assert isinstance(res.error_in_exec, RuntimeError)
    rep = vramnb.history()[-1]
    assert rep.oom.state.context.phase == "optimizer step"
    fixes = _fixes(rep)
    text = " ".join(w + " " + c for w, c in fixes)
    assert "autocast" not in text and "checkpoint" not in text and "recompute" not in text
    # on the CPU torch's default step is the per-tensor loop (foreach kernels only on cuda/xpu/mtia): no foreach fix
    assert "foreach" not in text
    # Linear(8, 8): 72 trainable float32 parameters, 288 B; Adam's two moments: 576 B
    assert fixes[0] == ("an optimizer with less state: Adam keeps two state tensors (exp_avg, exp_avg_sq) per "
                        "trainable parameter, each of the parameter's shape and dtype, made at its first step(): "
                        "adam's 72 trainable parameters (288 B) take 576 B of state; Adafactor keeps factored second "
                        "moments (rows + columns), SGD one momentum tensor per parameter or none",
                        "adam = torch.optim.Adafactor(net.parameters(), lr=adam.param_groups[0]['lr'])")
    assert "model" not in text.replace("model.", "") and "optimizer." not in text


def test_an_out_of_memory_in_a_no_grad_evaluation_loop_gets_no_checkpointing(ip):
    run(ip, "net = torch.nn.Linear(8, 8)\nkept = []")
    res, _ = run(ip, "%%vram -d cpu\nwith torch.no_grad():\n    for i in range(3):\n"
                     "        kept.append(net(torch.ones(2, 8)))\n    torch.empty(1 << 60, dtype=torch.uint8)")
    assert isinstance(res.error_in_exec, RuntimeError)
    fixes = _fixes(vramnb.history()[-1])
    text = " ".join(w + " " + c for w, c in fixes)
    assert "recompute" not in text and "checkpoint" not in text and "vramnb.compare" not in text
    # on a card (cuda:0 in _fixes): keeping them on the CPU is a fix
    assert ("with gradients off nothing is kept for backward: what grows is what the loop keeps (kept); keep each "
            "step's outputs on the CPU (.cpu()) or reduced (predictions, metrics), not whole output tensors on the "
            "device", "") in fixes


def test_an_out_of_memory_in_a_forward_only_cell_with_gradients_on_says_no_grad_not_checkpointing(ip):
    """An evaluation loop written without ``torch.no_grad()`` (field case: spvnas#108): the cell
    never calls backward or a step, so training techniques are no fix; turning gradients off
    is. A cell that does call backward keeps the training fixes."""
    run(ip, "net = torch.nn.Linear(8, 8)\nkept = []")
    res, _ = run(ip, "%%vram -d cpu\nfor i in range(3):\n    kept.append(net(torch.ones(2, 8)))\n"
                     "torch.empty(1 << 60, dtype=torch.uint8)")
    assert isinstance(res.error_in_exec, RuntimeError)
    fixes = _fixes(vramnb.history()[-1])
    text = " ".join(w + " " + c for w, c in fixes)
    assert "recompute" not in text and "checkpoint" not in text and "vramnb.compare" not in text
    assert fixes[0] == ("no backward runs in the failing code, yet gradients are on: each forward keeps its "
                        "activations for a backward; if none will run on these outputs, turn gradients off around "
                        "the failing code", "with torch.no_grad():  # or torch.inference_mode()\n    ...  # the failing code")
    res, _ = run(ip, "%%vram -d cpu\nloss = net(torch.ones(2, 8)).sum()\nloss.backward()\n"
                     "torch.empty(1 << 60, dtype=torch.uint8)")
    assert isinstance(res.error_in_exec, RuntimeError)
    text = " ".join(w + " " + c for w, c in _fixes(vramnb.history()[-1]))
    assert "no backward runs" not in text and "recompute activations in backward" in text


def test_an_out_of_memory_inside_backward_keeps_the_training_fixes(ip):
    """The autograd engine runs backward with gradients off: a failure there (field case: a loss
    summed over 12 parts, one backward) is training, not evaluation."""
    run(ip, "net = torch.nn.Linear(8, 8)\n"
            "class Boom(torch.autograd.Function):\n"
            "    @staticmethod\n    def forward(ctx, x):\n        return x.clone()\n"
            "    @staticmethod\n    def backward(ctx, g):\n        torch.empty(1 << 60, dtype=torch.uint8)\n        return g")
    res, _ = run(ip, "%%vram -d cpu\nloss = Boom.apply(net(torch.ones(2, 8))).sum()\nloss.backward()")
    assert isinstance(res.error_in_exec, RuntimeError)
    rep = vramnb.history()[-1]
    assert rep.oom.state.context.phase == "backward"
    text = " ".join(w + " " + c for w, c in _fixes(rep))
    assert "with gradients off" not in text and "evaluation step" not in text
    assert "recompute activations in backward" in text


def test_optimizer_step_fixes_count_adamw_state_per_trainable_parameter_and_foreach_only_when_used(ip):
    """Adam(W)'s state is two tensors per *trainable* parameter (frozen ones get none), with
    amsgrad three; the foreach fix only where the step runs the foreach kernels (a group's
    ``foreach=True``; torch's default picks them on CUDA only)."""
    run(ip, "net2 = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 4))\n"
            "net2[1].weight.requires_grad_(False)\n"
            "opt2 = torch.optim.AdamW([p for p in net2.parameters() if p.requires_grad], amsgrad=True, foreach=True)\n"
            "net2(torch.ones(2, 16)).sum().backward()\n"
            "_zl = torch.zeros_like\n"
            "def _fail(*a, **k):\n    return torch.empty(1 << 60, dtype=torch.uint8)")
    run(ip, "torch.zeros_like = _fail")
    try:
        res, _ = run(ip, "%%vram -d cpu\nopt2.step()")
    finally:
        run(ip, "torch.zeros_like = _zl")
    assert isinstance(res.error_in_exec, RuntimeError)
    fixes = _fixes(vramnb.history()[-1])
    n = 16 * 32 + 32 + 4  # trainable: net2[0].weight, net2[0].bias, net2[1].bias (net2[1].weight frozen)
    assert fixes[0][0] == (f"an optimizer with less state: AdamW keeps three state tensors (exp_avg, exp_avg_sq, "
                           f"max_exp_avg_sq) per trainable parameter, each of the parameter's shape and dtype, made at "
                           f"its first step(): opt2's {n:,} trainable parameters ({format_bytes(4 * n)}) take "
                           f"{format_bytes(3 * 4 * n)} of state; Adafactor keeps factored second moments (rows + "
                           f"columns), SGD one momentum tensor per parameter or none")
    assert ("the step's temporaries: this step runs the multi-tensor (foreach) kernels, which work on all of a "
            "group's tensors at once; one tensor at a time needs less",
            'for g in opt2.param_groups:\n    g["foreach"] = False') in fixes


def test_a_failure_after_the_report_is_made_does_not_say_the_cell_ran_unmeasured(ip, monkeypatch):
    # validation-10: a MemoryError in what follows the report (a limit the cell ran into) printed "the cell ran
    # unmeasured" under a report that had measured it
    from vramnb import _measure

    def no_memory(*a, **k):
        raise MemoryError("no memory left")

    monkeypatch.setattr(_measure, "_cache_verdict", no_memory)  # runs after the report is made
    res, cap = run(ip, "%%vram -d cpu\nx = torch.ones(1024)")
    assert res.error_in_exec is None
    assert ("could not finish the report (MemoryError: no memory left); the report shown was made before it, "
            "without the notes that come after") in cap.stderr
    assert "ran unmeasured" not in cap.stderr


def test_a_breakdown_that_runs_out_of_memory_leaves_the_report_with_a_note(ip, monkeypatch):
    from vramnb import _cell_breakdown

    calls = []
    claims = _cell_breakdown.CellAttribution._claims_now

    def no_memory_at_the_end(self, *a, **k):  # the start's reading works; the end's runs out of memory
        calls.append(1)
        if len(calls) > 1:
            raise MemoryError
        return claims(self, *a, **k)

    monkeypatch.setattr(_cell_breakdown.CellAttribution, "_claims_now", no_memory_at_the_end, raising=True)
    res, cap = run(ip, "%%vram -d cpu --breakdown\nx = torch.ones(1024)")
    rep = vramnb.history()[-1]
    assert res.error_in_exec is None and "could not" not in cap.stderr
    assert rep.end_allocated - rep.start_allocated == 4096 and rep.sources == []
    assert "the breakdown by source could not be made: no memory was left to read the live objects" in rep.notes
