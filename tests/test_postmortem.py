"""The out-of-memory post-mortem (vramnb/diagnose): the state at the failure, and one verdict.

CPU: the failing operator's allocation is seen by the storage tracker before anything
unwinds; the verdicts are pure functions of bytes, pinned here with the numbers of the
scenarios in the issue (the CUDA captures are in tests/test_cuda.py)."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

import vramnb
from vramnb._units import format_bytes
from tests.conftest import run
from vramnb._report import oom_lines
from vramnb.diagnose import OOMState, verdict
from vramnb.diagnose._postmortem import _deliver, listening

MiB, GiB = 2**20, 2**30


def _build_and_fail(keep_ref=None):
    keep = [torch.ones(1 << 18) for _ in range(4)]  # 4 x 1 MiB, local to this frame
    if keep_ref is not None:
        keep_ref.append(weakref.ref(keep[0]))
    torch.empty(1 << 60, dtype=torch.uint8)  # the CPU allocator refuses 1 EiB
    return keep


def test_cpu_state_is_taken_at_the_failure_not_after_unwinding():
    refs: list = []
    with pytest.raises(RuntimeError, match="can't allocate memory"):
        with vramnb.vram("cpu", record=False) as m:
            _build_and_fail(refs)
    oom = m.report.oom
    assert oom is not None and oom.state is not None and oom.state.at_failure
    # the failing frame's list, alive at the failure (the tracker counts the whole process: from the block's start)
    assert oom.live == oom.state.allocated == m.report.start_allocated + 4 * MiB
    assert oom.requested == 1 << 60
    where, var, nbytes, _ = oom.state.frames[0]
    assert (var, nbytes) == ("keep", 4 * MiB) and where.startswith("_build_and_fail:")
    assert oom.verdict is not None and oom.verdict.kind == "capacity"
    assert oom.verdict.fixes[0].what.startswith("one request is larger than the whole device")
    gc.collect()
    assert refs[0]() is None  # the post-mortem kept no reference to the frame's tensors


def test_cell_report_shows_the_post_mortem(ip):
    run(ip, "def build():\n    keep = [torch.ones(1 << 18) for _ in range(8)]\n"
            "    torch.empty(1 << 60, dtype=torch.uint8)")
    res, _ = run(ip, "%%vram -d cpu\nbuild()")
    assert isinstance(res.error_in_exec, RuntimeError)  # the user's error is unchanged
    rep = vramnb.history()[-1]
    text = str(rep._table())
    assert rep.oom.state.allocated - rep.start_allocated == 8 * MiB and "allocated at the failure" in text
    assert "verdict: capacity" in text
    assert "held by the failing frames: keep 8.0 MiB (build:3)" in text
    assert "verdict: capacity" in rep._repr_mimebundle_()["text/html"]


def test_fragmentation_verdict():
    # the scenario: 25 live 20 MiB blocks in a cached 1 GiB segment (500 MiB allocated,
    # 524 MiB free inside it, the largest free block 44 MiB), a 1.5 GiB cap, then 600 MiB asked
    s = OOMState("cuda:0", True, 600 * MiB, 500 * MiB, reserved=GiB, total=140 * GiB, cap=GiB + GiB // 2,
                 free_device=130 * GiB, largest_free_block=44 * MiB, non_pytorch=500 * MiB)
    v = verdict(s)
    assert v.kind == "fragmentation" and v.short_by == 0
    assert "largest free block is 44.0 MiB" in v.reason
    assert v.fixes[0].what.startswith("free the small live tensors") and v.fixes[0].saving == 524 * MiB
    assert v.fixes[1].code == 'os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"'  # not for holes


def test_per_process_cap_verdict():
    # the first scenario: a list of 512 MiB tensors under a 4 GiB cap on a 140 GiB card
    s = OOMState("cuda:0", True, 512 * MiB, 4 * GiB, reserved=4 * GiB, total=140 * GiB, cap=4 * GiB,
                 free_device=135 * GiB, largest_free_block=0, non_pytorch=600 * MiB)
    v = verdict(s)
    assert v.kind == "per-process cap" and v.short_by == 512 * MiB
    assert v.fixes[0].code == "torch.cuda.set_per_process_memory_fraction(1.0)"
    assert v.fixes[0].saving == 136 * GiB
    line = oom_lines(vramnb._report.OOMInfo(512 * MiB, 4 * GiB, [], "", s, v))[0]
    assert line == ("out of memory: asked for 512.0 MiB with 4.0 GiB allocated at the failure, 4.0 GiB reserved "
                    "(largest free block 0 B), of a 4.0 GiB per-process cap on a 140.0 GiB card; "
                    "135.0 GiB free on the device")


def test_another_process_verdict():
    s = OOMState("cuda:0", True, 2 * GiB, 10 * GiB, reserved=10 * GiB, total=16 * GiB, free_device=GiB,
                 largest_free_block=0, non_pytorch=GiB, other_processes=4 * GiB)
    v = verdict(s)
    assert v.kind == "another process" and v.short_by == GiB  # 10 + 2 + 1 + 4 = 17 GiB on a 16 GiB card
    assert v.fixes[0].saving == 4 * GiB


def test_capacity_and_held_out_of_sight_verdicts():
    full = dict(reserved=15 * GiB, total=16 * GiB, free_device=0, largest_free_block=0, non_pytorch=GiB)
    v = verdict(OOMState("cuda:0", True, 2 * GiB, 15 * GiB, **full))
    assert v.kind == "capacity" and v.short_by == 2 * GiB  # 15 + 2 + 1 (context) = 18 GiB on 16
    hidden = OOMState("cuda:0", True, 2 * GiB, 15 * GiB, hidden=3 * GiB, hidden_by=[("Out[3]", 3 * GiB)], **full)
    v = verdict(hidden)
    assert v.kind == "held out of sight" and v.short_by == 2 * GiB
    assert v.fixes[0].code == "%vram free" and "Out[3] 3.0 GiB" in v.reason


def test_capture_is_delivered_only_while_listening():
    got = []
    stop = listening("cuda:0", got.append)
    state = OOMState("cuda:0", True, 1, 2)
    _deliver(state)
    _deliver(OOMState("cuda:1", True, 1, 2))  # another device: not this measurement's
    stop()
    _deliver(state)
    assert got == [state]


def test_regrowth_lets_the_first_run_differ_and_fits_the_advice_to_a_list(ip):
    # field case retain_graph_carried_state: +9.0/+7.5/+7.5 MiB (the first run also makes gradients)
    run(ip, "keep = []")
    cell = "%%vram -d cpu\nfirst = globals().get('first', torch.ones(1 << 17))\nkeep.append(torch.ones(1 << 18))"
    for _ in range(3):
        run(ip, cell)
    notes = vramnb.history()[-1].notes
    assert ("each run of this cell leaves 1.0 MiB more (the last 2 of 3 runs in a row that grew): keep grew by "
            "1.0 MiB: it keeps what each run makes (keep is added to on every run and its tensors keep no graph: "
            "what grows is what it stores; store less in it (reduced values, not whole tensors), or empty it once "
            "what it holds has been used (`keep.clear()`))") in notes, notes


def test_regrowth_advice_fits_what_grew_and_names_only_what_the_cell_has(ip):
    """The re-run verdict's fix from what grew and what the cell does with it (field categories:
    state carried without detach, a list whose tensors keep their graphs, one filled by code the
    cell calls): never a ``loss.item()`` for a cell that has no loss."""
    run(ip, "rnn = torch.nn.RNNCell(4, 64)\nhidden = torch.zeros(1, 64)\nstore = []\n"
            "def fill():\n    store.append(torch.ones(1 << 16))")
    for _ in range(3):
        run(ip, "%%vram -d cpu\nfor i in range(8):\n    hidden = rnn(torch.ones(1, 4), hidden)")
    notes = " ".join(vramnb.history()[-1].notes)
    # each step keeps its input (1, 4) and its output (1, 64) float32 (tanh's result) in the chained graph
    grew = format_bytes(8 * (4 + 64) * 4)
    assert (f"hidden grew by {grew}: it keeps what each run makes (`hidden = rnn(torch.ones(1, 4), hidden)` carries "
            "hidden from one step to the next, so hidden keeps every step's graph: detach it where a step starts "
            "(`hidden = hidden.detach()`), or run the cell under `torch.no_grad()` if no backward needs it)") in notes
    assert "loss" not in notes
    for _ in range(3):
        run(ip, "%%vram -d cpu\nfill()")
    notes = " ".join(vramnb.history()[-1].notes)
    assert ("store grew by 256.0 KiB: it keeps what each run makes (this cell does not name store: code it calls (a "
            "function, a hook) adds to it on every run; empty it when done (`store.clear()`) or stop what fills it)"
            ) in notes, notes
    run(ip, "lin = torch.nn.Linear(256, 256)\nouts = []")
    for _ in range(3):
        run(ip, "%%vram -d cpu\nx = torch.ones(4, 256)\nouts.append((x, lin(x)))")
    notes = " ".join(vramnb.history()[-1].notes)
    # a tuple has no .detach(): each element with a graph is detached, by what the last entry holds
    assert "`outs.append((x, lin(x)))` keeps each step's graph: append `(x, lin(x).detach())`" in notes, notes
    assert "outs grew by" in notes and "loss" not in notes, notes


def test_regrowth_reports_what_the_holder_keeps_more_where_a_loop_variable_shares_part_of_it(ip):
    # field case hook_activations_train_mode: m (the loop variable) shares model[1]; each run adds
    # 256 KiB to each of the two lists, 512 KiB in all, of which deleting model alone frees 256 KiB
    run(ip, "model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))\n"
            "for m in model:\n    m.acts = []")
    cell = "%%vram -d cpu\nfor m in model:\n    m.acts.append(torch.ones(1 << 16))"
    for _ in range(3):
        run(ip, cell)
    notes = vramnb.history()[-1].notes
    assert ("each run of this cell leaves 512.0 KiB more (3 runs in a row): model grew by 512.0 KiB: it keeps what "
            "each run makes (what grows is held inside model: an attribute added to on every run (a list a forward "
            "hook fills: remove the hook when done, handle.remove(), or empty the list), or its parameters' .grad "
            "carrying a graph (see %vram for its parts))") in notes, notes


def test_regrowth_names_the_output_history_and_its_fix(ip):
    # field case out_history_keeps_results: each run's value (a 1 MiB tensor) is kept by Out
    cell = "%%vram -d cpu\ntorch.ones(1 << 18)"
    for _ in range(3):
        run(ip, cell)
    notes = vramnb.history()[-1].notes
    assert ("each run of this cell leaves 1.0 MiB more (3 runs in a row): (Out, _ __ ___) grew by 1.0 MiB: it keeps "
            "what each run makes (the output history (Out) keeps each run's result: end the cell with ';' so its "
            "value is not kept, or run %vram free)") in notes, notes


def test_cell_that_grows_on_every_rerun_names_the_variable(ip):
    run(ip, "keep = []")
    cell = "%%vram -d cpu\nkeep.append(torch.ones(1 << 18))"  # 1 MiB more each run
    seen = []
    for _ in range(3):
        run(ip, cell)
        seen.append(any("each run of this cell" in n for n in vramnb.history()[-1].notes))
    assert seen == [False, False, True]  # only from the third run
    notes = vramnb.history()[-1].notes
    assert any(n.startswith("each run of this cell leaves 1.0 MiB more (3 runs in a row): keep grew by 1.0 MiB")
               for n in notes)
    run(ip, cell)
    assert any("(4 runs in a row)" in n for n in vramnb.history()[-1].notes)  # it counts on
    run(ip, "%%vram -d cpu\nx = torch.ones(1 << 18)")  # rebinding: the same bytes, not growing
    run(ip, "%%vram -d cpu\nx = torch.ones(1 << 18)")
    run(ip, "%%vram -d cpu\nx = torch.ones(1 << 18)")
    assert not any("each run" in n for n in vramnb.history()[-1].notes)


def test_reports_and_records_carry_versions(ip):
    import platform

    run(ip, "%%vram -d cpu\ny = torch.ones(4)")
    rep = vramnb.history()[-1]
    assert rep.versions["torch"] == torch.__version__ and rep.versions["python"] == platform.python_version()
    import IPython

    assert rep.versions["ipython"] == IPython.__version__
    rec = vramnb.history().to_records()[-1]
    assert rec["torch"] == torch.__version__ and rec["cuda"] is None
    step = vramnb.profile_step(torch.nn.Linear(4, 4), torch.randn(2, 4), lambda m, b: m(b).sum())
    assert step.versions["torch"] == torch.__version__


def test_reserved_growth_verdict_reads_the_numbers():
    from vramnb._report import CellReport
    from vramnb.diagnose import reserved_growth

    # the loop over growing sizes: reserved +8.5 GiB, allocated +-0
    rep = CellReport("cuda:0", "CUDA caching allocator", GiB, GiB, 2 * GiB, 1.0, start_reserved=GiB,
                     end_reserved=GiB + 8 * GiB + GiB // 2)
    note = reserved_growth(rep)
    assert note is not None and note.startswith("reserved grew by 8.5 GiB while allocated changed by ±0 B")
    assert "expandable_segments:True" in note
    rep.end_allocated = rep.start_allocated + 4 * GiB  # allocated grew too: a real growth, no verdict
    assert reserved_growth(rep) is None


def test_cpu_process_limit_is_the_per_process_cap_verdict():
    # ulimit -v / resource.setrlimit(RLIMIT_AS): the system has the memory, this process may not take it
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import resource, torch, vramnb
        from vramnb.diagnose._postmortem import process_limit
        with open("/proc/self/status") as f:
            vm = [int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmSize:")][0]
        resource.setrlimit(resource.RLIMIT_AS, (vm + 512 * 2**20, resource.getrlimit(resource.RLIMIT_AS)[1]))
        try:
            with vramnb.vram("cpu", record=False) as m:
                torch.empty(2**30, dtype=torch.uint8)
        except RuntimeError:
            pass
        v = m.report.oom.verdict
        assert m.report.oom.state.at_failure and m.report.oom.state.cap == vm + 512 * 2**20, m.report.oom.state
        assert v.kind == "per-process cap", v
        assert 0 < m.report.oom.state.cap_room < 512 * 2**20 and "RLIMIT_AS" in v.fixes[0].code
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


def test_capacity_fixes_name_the_holder_whose_deletion_frees_the_most():
    s = OOMState("cpu", True, 256 * MiB, 900 * MiB, available=100 * MiB,
                 holders=[("total", 884 * MiB, 884 * MiB), ("model", 30 * MiB, 0)])
    v = verdict(s)
    assert v.kind == "capacity" and v.short_by == 156 * MiB
    assert v.fixes[0].code == "del total" and v.fixes[0].saving == 884 * MiB
    assert all(f.code != "del model" for f in v.fixes)  # deleting it frees nothing
    huge = verdict(OOMState("cpu", True, 1 << 50, MiB, available=100 * MiB))
    assert [f.code for f in huge.fixes] == [""]  # one request larger than the device: a shape to read, nothing else


def test_fragmentation_at_the_margin_of_a_step_that_needs_more_gets_the_steps_verdict(monkeypatch):
    # the GPU run of 2026-12-03 (tests/test_cuda.py, after other tests left cuBLAS's 65 MiB workspace):
    # 3 356 984 320 B allocated, 32 MiB asked under a cap of 3 398 434 816 B, the largest free block under 32 MiB,
    # so the request alone looked like fragmentation; the step itself is estimated at 4 303 355 904 B
    # reserved, more than the cap: that is the verdict, with the techniques' savings
    from vramnb import _profile_step
    from vramnb._report import OOMInfo
    from vramnb.diagnose import Fix
    from vramnb.diagnose._savings import StepFixes

    beside = 68_157_440
    cap = beside + (4_303_355_904 + 2_357_198_848) // 2
    s = OOMState("cuda:0", True, 32 * MiB, 3_356_984_320, reserved=3_378_511_872, total=150_109_880_320,
                 cap=cap, free_device=140 * GiB, largest_free_block=20 * MiB, non_pytorch=500 * MiB)
    s.beside = beside
    first = verdict(s)
    assert first.kind == "fragmentation"  # what the failing request alone says
    asked = []

    def step_savings(model, batch, loss_fn, optimizer, recipe, state, other, device):
        asked.append(other)
        fixes = StepFixes([Fix("checkpointing every block", "", 4_303_355_904 - 2_357_198_848, estimated=True,
                               fits=True)])
        fixes.need = 4_303_355_904 + other
        return fixes

    monkeypatch.setattr(_profile_step, "step_savings", step_savings)
    oom = OOMInfo(32 * MiB, s.allocated, [], "CUDA out of memory.", s, first)
    report = type("R", (), {"device": "cuda:0", "recipe": None})()
    err = torch.OutOfMemoryError("CUDA out of memory.")
    _profile_step._explain(err, oom, report, None, None, None, None, None, True)
    assert asked == [beside]
    assert oom.verdict.kind == "per-process cap", oom.verdict
    assert oom.verdict.short_by == 4_303_355_904 + beside - cap
    assert [f.what for f in oom.verdict.fixes if f.estimated] == ["checkpointing every block"]


def test_fragmentation_of_a_step_that_fits_stays_fragmentation(monkeypatch):
    from vramnb import _profile_step
    from vramnb._report import OOMInfo
    from vramnb.diagnose._savings import StepFixes

    s = OOMState("cuda:0", True, 600 * MiB, 500 * MiB, reserved=GiB, total=140 * GiB, cap=GiB + GiB // 2,
                 free_device=130 * GiB, largest_free_block=44 * MiB, non_pytorch=500 * MiB)
    fixes = StepFixes([])
    fixes.need = GiB  # the step fits the 1.5 GiB cap: the holes are the cause
    monkeypatch.setattr(_profile_step, "step_savings", lambda *a: fixes)
    oom = OOMInfo(600 * MiB, 500 * MiB, [], "CUDA out of memory.", s, verdict(s))
    _profile_step._explain(torch.OutOfMemoryError("x"), oom, type("R", (), {"device": "cuda:0"})(),
                           None, None, None, None, None, True)
    assert oom.verdict.kind == "fragmentation" and oom.verdict.fixes[0].what.startswith("free the small live")


def test_failing_frames_say_a_storage_is_shared_only_where_two_variables_share_one(ip):
    # two frame variables with distinct storages: no "(a storage two of them share …)"
    run(ip, "def apart():\n    a = torch.ones(1 << 19)\n    b = torch.ones(1 << 18)\n"
            "    torch.empty(1 << 60, dtype=torch.uint8)")
    run(ip, "%%vram -d cpu\napart()")
    text = str(vramnb.history()[-1]._table())
    assert "held by the failing frames: a 2.0 MiB (apart:4), b 1.0 MiB (apart:4)" in text
    assert "two of them share" not in text
    # b views a's storage: counted for a, and the line says so
    run(ip, "def together():\n    a = torch.ones(1 << 19)\n    b = a[:10]\n"
            "    torch.empty(1 << 60, dtype=torch.uint8)")
    run(ip, "%%vram -d cpu\ntogether()")
    text = str(vramnb.history()[-1]._table())
    assert ("held by the failing frames: a 2.0 MiB (together:4) (a storage two of them share counts for the first)"
            in text)


def test_regrowth_of_a_list_of_kept_models_names_what_each_keeps_beside_its_weights(ip):
    """A list that gains one trained model per run is the user's result: emptying it is no fix.
    Each entry (a trainer object wrapping its module) keeps its training data, (1024, 256)
    float32 = 1.0 MiB, beside 4 x 4 + 4 = 20 float32 weights (80 B): that attribute is named."""
    run(ip, "class KTrainer:\n    def __init__(self):\n        self.module = torch.nn.Linear(4, 4)\n"
            "    def fit(self, X):\n        self.data = {'X': X}\n        return self\nktrained = []")
    for _ in range(3):
        run(ip, "%%vram -d cpu\nktrained.append(KTrainer().fit(torch.ones(1024, 256)))")
    notes = " ".join(vramnb.history()[-1].notes)
    assert ("ktrained keeps a model per run, and each keeps 1.0 MiB in `.data` beside its weights (the last one's): "
            "drop that from the models you keep (`for m in ktrained: m.data = None`) rather than emptying ktrained"
            ) in notes, notes
    assert "ktrained.clear()" not in notes
    run(ip, "del ktrained, KTrainer")
