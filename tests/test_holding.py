"""How a holder holds its memory, classified by what it is at run time (diagnose._holding), and the
fix that follows: every sentence checked against the object (CPU, exact bytes from shapes).

Cases differ from the field's validation-5 on purpose (other names, nesting, library-like classes
whose ``reset`` comes from a base class, dicts instead of lists)."""

from __future__ import annotations

import sys

import torch

from tests.conftest import run
from vramnb._units import format_bytes

def held(ip, name):  # type: ignore[no-untyped-def]
    """How the notebook name ``name`` holds its memory (diagnose._holding.holding), on CPU."""
    from vramnb.diagnose._holding import holding

    return holding(name, ip.user_ns[name], CPU, _ns(ip))


def held_note(ip, name):  # type: ignore[no-untyped-def]
    """The line the listing gives ``name`` (diagnose._holding.holding_note), on CPU, or None."""
    from vramnb.diagnose._holding import holding_note

    return holding_note(name, ip.user_ns[name], CPU, _ns(ip))

CPU = torch.device("cpu")
KiB = 1024


def _ns(ip):  # type: ignore[no-untyped-def]
    return {k: v for k, v in ip.user_ns.items() if not k.startswith("_")}


# -- an object's state: reset() where the class has a callable one ------------------------------
def test_an_object_keeping_entries_gets_its_inherited_reset(ip):  # type: ignore[no-untyped-def]
    run(ip, "class _MetricBase:\n    def reset(self):\n        self.dets, self.gts = {}, {}\n"
            "class DetectionAP(_MetricBase):\n    def __init__(self):\n        self.reset()\n"
            "    def update(self, i, d, g):\n        self.dets[i] = d; self.gts[i] = g\n"
            "ap = DetectionAP()\nfor i in range(5):\n    ap.update(i, torch.zeros(100, 6), torch.zeros(50, 5))")
    h = held(ip, "ap")
    n = 5 * (100 * 6 + 50 * 5) * 4
    assert (h.kind, h.path, h.nbytes) == ("object state", "ap", n)
    assert h.sentence == (
        f"ap (a DetectionAP) keeps {format_bytes(n)} in ap.dets (a dict of 5 tensors) and ap.gts (a dict of 5 "
        "tensors): containers, which keep what is added to them until it is removed: DetectionAP has a reset(): "
        "call `ap.reset()` once its result is read (e.g. at the end of each epoch)")


def test_a_reset_that_is_not_callable_is_not_offered(ip):  # type: ignore[no-untyped-def]
    run(ip, "class Recorder:\n    reset = None\n    def __init__(self):\n        self.frames = []\n"
            "rec = Recorder()\nrec.frames += [torch.zeros(256) for _ in range(4)]")
    h = held(ip, "rec")
    # one attribute holds it all: it is followed into, and named as an attribute of rec
    assert (h.kind, h.path, h.nbytes) == ("object state", "rec.frames", 4 * 256 * 4)
    assert "reset()" not in h.sentence and h.sentence == (
        f"rec.frames (a list of 4 tensors, {format_bytes(4 * 256 * 4)}) is an attribute of rec (a Recorder): it "
        "stays alive as long as rec does, not only while it is used: `del rec.frames` lets it go where it is no longer "
        "needed (or have Recorder's code not keep it: a local variable, or `del self.frames` once used)")


def test_a_model_kept_as_an_attribute_gets_no_object_line(ip):  # type: ignore[no-untyped-def]
    run(ip, "class Wrapper:\n    def __init__(self):\n        self.net = torch.nn.Linear(64, 64)\nw = Wrapper()")
    assert held_note(ip, "w") is None


# -- tensors carrying their graphs in a container -------------------------------------------------
def test_a_logger_keeping_tensors_with_graphs_is_told_item_or_detach(ip):  # type: ignore[no-untyped-def]
    run(ip, "class Tracker2:\n    def __init__(self):\n        self.store = {'train': [], 'val': []}\n"
            "w = torch.ones(256, requires_grad=True)\ntr = Tracker2()\n"
            "for i in range(3):\n    tr.store['train'].append((w * torch.full((256,), float(i))).sum())")
    h = held(ip, "tr")
    # each product saves its plain operand (256 float32) for backward; w is a leaf (its own owner's)
    assert (h.kind, h.path) == ("graphs", "tr.store")
    assert h.sentence.startswith(
        f"tr.store keeps 3 tensors with an autograd graph (grad_fn), which keep what their forward saved for "
        f"backward ({format_bytes(3 * 256 * 4)}): store numbers (`.item()`) or detached tensors (`.detach()`)")
    # detached, nothing is said about graphs
    run(ip, "tr.store['train'] = [t.detach() for t in tr.store['train']]")
    assert "autograd graph" not in (held_note(ip, "tr") or "")


def test_a_history_of_non_scalar_tensors_with_graphs_is_told_detach_only(ip):  # type: ignore[no-untyped-def]
    """validation-8 (judge8, 2026-12-04 g): 'store numbers (`.item()`)' was offered for (10, 50000, 3) tensors,
    which are not numbers."""
    run(ip, "class Opt:\n    def __init__(self):\n        self.state = {'x': []}\n"
            "p = torch.ones(64, 3, requires_grad=True)\nopt_h = Opt()\n"
            "for i in range(3):\n    opt_h.state['x'].append(p * float(i + 1))")
    h = held(ip, "opt_h")
    assert (h.kind, h.path) == ("graphs", "opt_h.state")
    assert "`.item()`" not in h.sentence
    assert h.sentence.startswith("opt_h.state keeps 3 tensors with an autograd graph (grad_fn)")
    assert "): store detached tensors (`.detach()`) instead" in h.sentence


def test_a_bare_tensor_with_a_graph_is_left_to_the_kept_graph_line(ip):  # type: ignore[no-untyped-def]
    run(ip, "w = torch.ones(1024, requires_grad=True)\nloss = (w * torch.ones(1024)).sum()")
    assert held_note(ip, "loss") is None


# -- a class attribute ----------------------------------------------------------------------------
def test_a_class_level_list_is_named_with_its_instance_attribute_fix(ip):  # type: ignore[no-untyped-def]
    run(ip, "class FeatureCache:\n    seen = []\n    def add(self, x):\n        self.seen.append(x.clone())\n"
            "for k in range(3):\n    FeatureCache().add(torch.zeros(64, 64))")
    h = held(ip, "FeatureCache")
    n = 3 * 64 * 64 * 4
    assert (h.kind, h.path, h.nbytes) == ("class attribute", "FeatureCache.seen", n)
    assert h.sentence == (
        f"FeatureCache.seen (a list of 3 tensors, {format_bytes(n)}) is a class attribute: one object for "
        "FeatureCache and every instance that does not set its own, alive as long as the class, so what is added "
        "to it through any of them stays until it is removed: make it an instance attribute (`self.seen = []` in "
        "`__init__`), or empty it when done (`FeatureCache.seen.clear()`)")


def test_a_class_attribute_grown_on_every_run_gets_the_line(ip):  # type: ignore[no-untyped-def]
    import vramnb

    run(ip, "class Memo:\n    table = {}\n    def __init__(self, k):\n        self.k = k\n"
            "    def put(self, x):\n        self.table[(self.k, len(self.table))] = x * 2\n")
    for _ in range(3):
        run(ip, "%%vram -d cpu\nMemo(0).put(torch.ones(128, 128))")
    line = [n for n in vramnb.history()[-1].notes if "each run of this cell" in n]
    assert line and f"Memo grew by {format_bytes(128 * 128 * 4)}" in line[0], vramnb.history()[-1].notes
    assert "Memo.table (a dict of 3 tensors" in line[0] and "`self.table = {}` in `__init__`" in line[0]


# -- exceptions kept with their tracebacks ---------------------------------------------------------
def test_exceptions_kept_in_a_dict_name_the_frames_locals(ip):  # type: ignore[no-untyped-def]
    run(ip, "def inner(n):\n    b = torch.zeros(n, 32)\n    raise ValueError(n)\n"
            "def outer(n):\n    a = torch.zeros(n, 16)\n    inner(n)\n"
            "errors = {}\nfor n in (64, 128):\n    try:\n        outer(n)\n    except ValueError as e:\n"
            "        errors[n] = e")
    h = held(ip, "errors")
    n = (64 + 128) * (16 + 32) * 4
    assert (h.kind, h.nbytes) == ("exceptions", n)
    assert h.sentence == (
        "errors keeps 2 exceptions (ValueError): an exception keeps its traceback, and the traceback the frames it "
        f"was raised through with their local variables (a in outer(), b in inner(): {format_bytes(n)}): keep the "
        "message instead (`str(e)`), or drop the traceback before keeping the exception (`e.__traceback__ = None`, "
        "or `e.with_traceback(None)`)")
    # dropped tracebacks: nothing held, nothing said
    run(ip, "for e in errors.values():\n    e.__traceback__ = None")
    assert held_note(ip, "errors") is None


def test_exceptions_appended_every_run_get_the_traceback_line(ip):  # type: ignore[no-untyped-def]
    import vramnb

    run(ip, "def check(n):\n    h = torch.zeros(n, 256)\n    raise RuntimeError('too big')\nrejected = []")
    cell = "%%vram -d cpu\nfor n in (64, 32):\n    try:\n        check(n)\n    except RuntimeError as err:\n" \
           "        rejected.append(err)"
    for _ in range(3):
        run(ip, cell)
    line = [n for n in vramnb.history()[-1].notes if "each run of this cell" in n]
    assert line and f"rejected grew by {format_bytes(96 * 256 * 4)}" in line[0]
    assert "h in check()" in line[0] and "`e.__traceback__ = None`" in line[0] and ".clear()" not in line[0]


# -- copies of weights -------------------------------------------------------------------------------
def test_state_dict_copies_keyed_by_step_get_keep_the_best(ip):  # type: ignore[no-untyped-def]
    run(ip, "net = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.BatchNorm1d(16))\n"
            "snapshots = {}\nfor step in (100, 200, 300):\n"
            "    snapshots[step] = {k: v.clone() for k, v in net.state_dict().items()}")
    h = held(ip, "snapshots")
    # Linear 32x16 + 16, BatchNorm weight, bias, running mean and var (16 each) float32, num_batches_tracked int64
    each = (32 * 16 + 16 + 4 * 16) * 4 + 8
    assert (h.kind, h.nbytes) == ("weight copies", 3 * each)
    assert h.sentence == (
        f"snapshots keeps 3 copies of net's weights (net.state_dict()), about {format_bytes(each)} each "
        f"({format_bytes(3 * each)}): keep only the copies you will load (the last and the best: replace, don't "
        "add), or save each to disk (`torch.save`) and keep its file name")


def test_state_dicts_kept_without_clone_are_no_copies(ip):  # type: ignore[no-untyped-def]
    run(ip, "net = torch.nn.Linear(32, 16)\nviews = [net.state_dict() for _ in range(3)]")
    assert "copies" not in (held_note(ip, "views") or "")


# -- the %vram listing and the out-of-memory post-mortem ----------------------------------------------
def test_vram_listing_explains_a_loader_keeping_its_last_batch(ip):  # type: ignore[no-untyped-def]
    run(ip, "class Prefetcher:\n    def __init__(self, n):\n        self.n = n\n    def __iter__(self):\n"
            "        for i in range(self.n):\n            self.pending = {'img': torch.zeros(32, 3, 64, 64), "
            "'lbl': torch.zeros(32, dtype=torch.long)}\n            yield self.pending['img'].mean()\n"
            "pf = Prefetcher(3)\nfor m in pf:\n    pass")
    res, _ = run(ip, "%vram -d cpu")
    n = 32 * 3 * 64 * 64 * 4 + 32 * 8  # at least 1 MiB: %vram explains only holders that size
    assert any(note.startswith(f"pf.pending (a dict of 2 tensors, {format_bytes(n)}) is an attribute of pf (a "
                               "Prefetcher): it stays alive as long as pf does") for note in res.result.notes), \
        res.result.notes
    # below 1 MiB, %vram says nothing about it
    run(ip, "pf.pending = {'img': torch.zeros(4)}")
    res, _ = run(ip, "%vram -d cpu")
    assert not any("pf.pending" in note for note in res.result.notes)


def test_out_of_memory_names_how_the_largest_holder_holds(ip):  # type: ignore[no-untyped-def]
    """The largest holder's line comes with the post-mortem's holders (a fifth item), rendered under
    "largest holders"."""
    from vramnb._report import OOMInfo, oom_lines

    run(ip, "class Bank:\n    def __init__(self):\n        self.a, self.b = [], []\n    def clear(self):\n"
            "        self.a.clear(); self.b.clear()\nbank = Bank()\n"
            "for i in range(4):\n    bank.a.append(torch.zeros(256, 256)); bank.b.append(torch.zeros(256, 256))")
    magics = ip.magics_manager.registry["VramMagics"]
    rows = magics._holders_fn("cpu", explain=True)()
    assert rows[0][:2] == ("bank", 8 * 256 * 256 * 4)
    lines = oom_lines(OOMInfo(1 << 30, rows[0][1], rows))
    assert lines[-1] == (f"bank (a Bank) keeps {format_bytes(8 * 256 * 256 * 4)} in bank.a (a list of 4 tensors) "
                         "and bank.b (a list of 4 tensors): containers, which keep what is added to them until it is "
                         "removed: Bank has a clear(): call `bank.clear()` once its result is read (e.g. at the end of "
                         "each epoch)")


def test_a_generator_frame_holding_the_previous_value_gets_del_before_yield() -> None:
    """Read where the allocation fails (as capture_cpu_oom reads it): the failing frame is a
    generator's, and its line rebinds the variable the frame still holds."""
    from vramnb._report import OOMInfo, oom_lines
    from vramnb.diagnose import OOMState
    from vramnb.diagnose._postmortem import _stack, failing_code, frame_sharing

    seen: dict = {}

    def probe() -> torch.Tensor:
        seen["frames"] = frame_sharing(CPU)[0]
        seen["ctx"] = failing_code(_stack(sys._getframe(1)))
        return torch.zeros(1)

    def chunks(n):  # type: ignore[no-untyped-def]
        chunk = None
        for i in range(n):
            chunk = torch.zeros(512, 1024) if i == 0 else probe()
            yield chunk.sum()

    list(chunks(2))
    st = OOMState("cpu", True, 2 << 20, 2 << 20, frames=seen["frames"], context=seen["ctx"])
    lines = oom_lines(OOMInfo(2 << 20, 2 << 20, [], "", st))
    assert any(f[1] == "chunk" and f[2] == 512 * 1024 * 4 for f in st.frames)
    assert ("test_a_generator_frame_holding_the_previous_value_gets_del_before_yield.<locals>.chunks is a generator: "
            "its frame keeps its local variables between `yield`s, so the previous chunk (2.0 MiB) was still bound "
            "while this line built its replacement: `del chunk` once it is used, before the `yield` (yield only what "
            "the caller needs), so that the next one is not built beside it") in lines


def test_a_plain_function_frame_gets_no_generator_line() -> None:
    from vramnb.diagnose._postmortem import generator_frame

    assert generator_frame(sys._getframe()) is None


def test_a_metric_module_keeping_its_states_gets_its_reset(ip):  # type: ignore[no-untyped-def]
    """A torchmetrics-like metric is an nn.Module whose list states are plain attributes: named
    with the bytes of those lists alone (not its parameters), and its reset()."""
    run(ip, "class MeanIoU(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.scale = torch.nn.Parameter(torch.ones(1024))\n        self.reset()\n"
            "    def reset(self):\n        self.preds, self.targets = [], []\n"
            "    def update(self, p, t):\n        self.preds.append(p); self.targets.append(t)\n"
            "miou = MeanIoU()\nfor i in range(3):\n    miou.update(torch.zeros(8, 64, dtype=torch.long), "
            "torch.zeros(8, 64, dtype=torch.long))")
    h = held(ip, "miou")
    n = 2 * 3 * 8 * 64 * 8  # int64 states; the 4 KiB parameter is not theirs
    assert h.sentence == (
        f"miou (a MeanIoU) keeps {format_bytes(n)} in miou.preds (a list of 3 tensors) and miou.targets (a list of 3 "
        "tensors): containers, which keep what is added to them until it is removed: MeanIoU has a reset(): call "
        "`miou.reset()` once its result is read (e.g. at the end of each epoch)")


def test_an_object_named_with_a_model_beside_its_lists_counts_only_the_lists(ip):  # type: ignore[no-untyped-def]
    run(ip, "class Trainer:\n    def __init__(self):\n        self.model = torch.nn.Linear(256, 256)\n"
            "        self.outputs, self.labels = [], []\ntrn = Trainer()\n"
            "for i in range(2):\n    trn.outputs.append(torch.zeros(64, 256)); trn.labels.append(torch.zeros(64))")
    note = held_note(ip, "trn")
    n = 2 * 64 * 256 * 4 + 2 * 64 * 4
    assert note is not None and note.startswith(
        f"trn (a Trainer) keeps {format_bytes(n)} in trn.outputs (a list of 2 tensors) and trn.labels (a list of 2 "
        "tensors): containers, which keep what is added to them until it is removed: Trainer has no reset()")


def test_a_model_whose_layers_keep_lists_gets_no_reset_sentence(ip):  # type: ignore[no-untyped-def]
    """A model without reset() whose layers keep lists (filled by hooks, say) is left to the hook and
    Module advice: no "has no reset()" or running-value line for a model."""
    run(ip, "net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU())\nnet[0].acts = []\n"
            "for i in range(3):\n    net[0].acts.append(torch.zeros(1024, 64))")
    assert held_note(ip, "net") is None


def test_a_class_level_tensor_is_not_said_to_be_added_to(ip):  # type: ignore[no-untyped-def]
    run(ip, "class Rope:\n    table = torch.zeros(2048, 64)\n")
    h = held(ip, "Rope")
    assert h.sentence == (
        f"Rope.table (a tensor, {format_bytes(2048 * 64 * 4)}) is a class attribute: one object for Rope and every "
        "instance that does not set its own, alive as long as the class: make it an instance attribute, or "
        "`del Rope.table` when done")


def test_a_mapping_object_with_clear_and_a_slotted_record(ip):  # type: ignore[no-untyped-def]
    """A UserDict subclass (its items in .data, clear() from MutableMapping) and a slotted dataclass: the
    attribute is read through the slots, and clear() is named only where the class has it."""
    run(ip, "import collections, dataclasses\nclass FrameCache(collections.UserDict):\n    pass\n"
            "fc = FrameCache()\nfor k in range(3):\n    fc[k] = torch.zeros(128, 128)\n"
            "@dataclasses.dataclass(slots=True)\nclass Episode:\n    steps: list\n"
            "ep = Episode([torch.zeros(64, 64) for _ in range(2)])")
    h = held(ip, "fc")
    assert (h.path, h.nbytes) == ("fc.data", 3 * 128 * 128 * 4)
    assert "FrameCache has a clear(): call `fc.clear()`" in h.sentence
    h = held(ip, "ep")
    assert (h.path, h.nbytes) == ("ep.steps", 2 * 64 * 64 * 4) and "`del ep.steps`" in h.sentence
    assert "reset()" not in h.sentence and "clear()" not in h.sentence


def test_a_running_sum_attribute_with_a_graph_is_told_item(ip):  # type: ignore[no-untyped-def]
    """An attribute that is one tensor carrying a graph (a metric's running sum) gets the graph line,
    not "keep it in a local variable"."""
    run(ip, "class Avg:\n    def __init__(self):\n        self.total = torch.zeros(())\n"
            "    def update(self, v):\n        self.total = self.total + v\n"
            "w = torch.ones(4096, requires_grad=True)\navg = Avg()\nfor i in range(3):\n"
            "    avg.update((w * torch.full((4096,), float(i))).sum())")
    h = held(ip, "avg")
    # each product saved its plain operand (4096 float32); the adds save nothing
    assert (h.kind, h.path) == ("graphs", "avg.total")
    assert h.sentence.startswith(
        f"avg.total keeps 1 tensor with an autograd graph (grad_fn), which keeps what its forward saved for backward "
        f"({format_bytes(3 * 4096 * 4)}): store numbers (`.item()`)")


def test_vram_listing_names_the_hooks_of_an_object_whose_methods_fill_its_lists(ip):  # type: ignore[no-untyped-def]
    """A Grad-CAM-like helper: %vram's line for it is the hooks' (remove them), not "no reset()" nor a
    running value per batch."""
    run(ip, "gnet = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU())\n"
            "class Saver:\n    def __init__(self, layer):\n        self.acts = []\n"
            "        self.handle = layer.register_forward_hook(self.save)\n"
            "    def save(self, m, i, o):\n        self.acts.append(o.detach())\n"
            "saver = Saver(gnet[0])\nfor i in range(4):\n    gnet(torch.ones(256, 256))")
    res, _ = run(ip, "%vram -d cpu")
    (line,) = [n for n in res.result.notes if n.startswith("saver ")]
    assert line.startswith(f"saver holds {format_bytes(4 * 256 * 256 * 4)}: ") and "remove the hooks" in line
    assert "reset()" not in line and "running value" not in line


def test_an_attribute_reaching_only_a_models_leaves_through_a_graph_gets_no_line(ip):  # type: ignore[no-untyped-def]
    """After backward the running sum's graph saves nothing: what it reaches is the model's parameters and
    gradients, so no "attribute of" line (it would blame the model's bytes on the attribute)."""
    run(ip, "lin = torch.nn.Linear(512, 512)\nclass Meter:\n    def __init__(self):\n"
            "        self.total = torch.tensor(0.)\nmeter = Meter()\nfor i in range(3):\n"
            "    loss = lin(torch.ones(4, 512)).pow(2).mean()\n    loss.backward()\n    meter.total += loss")
    assert held_note(ip, "meter") is None


def test_an_attribute_the_objects_own_methods_read_is_not_advised_deleted(ip):  # type: ignore[no-untyped-def]
    # what the object exists to keep (a writer's buffer it flushes): `del writer.buffer` would break the writer
    run(ip, "class Writer:\n    def __init__(self):\n        self.buffer = [torch.zeros(256) for _ in range(4)]\n"
            "    def flush(self):\n        return [t.sum() for t in self.buffer]\nwriter = Writer()")
    h = held(ip, "writer")
    assert (h.kind, h.path, h.nbytes) == ("object state", "writer.buffer", 4 * 256 * 4)
    assert h.sentence == (
        f"writer.buffer (a list of 4 tensors, {format_bytes(4 * 256 * 4)}) is an attribute of writer (a Writer) that "
        "Writer's own methods read (flush()): it is what writer works with, and goes when writer does (`del writer` "
        "and every other reference to it once done), or have Writer keep less of it")


# -- no_grad only where the code that made the graphs is known to run no backward (validation-9 hessian_rows) --
def test_rows_made_by_autograd_grad_are_not_told_no_grad_and_name_the_input_leaf(ip):  # type: ignore[no-untyped-def]
    """Hessian rows from autograd.grad(create_graph=True): under no_grad the forces have no grad_fn and
    autograd.grad raises, so only detaching what is stored is offered, naming the input it differentiates by."""
    from vramnb.diagnose._holding import holding

    src = ("rows = []\nfor i in range(6):\n"
           "    row = torch.autograd.grad(forces.view(-1)[i], pos, retain_graph=True, create_graph=True)[0]\n"
           "    rows.append(row.view(-1))")
    run(ip, "pos = torch.rand(4, 3).requires_grad_(True)\nE = (pos[:, None] - pos[None]).pow(2).sum().sqrt()\n"
            "forces = -torch.autograd.grad(E, pos, create_graph=True)[0]\n" + src)
    for source in (src, None):  # the failing cell known (a post-mortem), or not (%vram)
        h = holding("rows", ip.user_ns["rows"], CPU, _ns(ip), source=source)
        assert h.kind == "graphs"
        assert "no_grad" not in h.sentence
        assert h.sentence.endswith("store detached tensors (`.detach()`) instead where no gradient has to reach pos "
                                   "through them")
    # the fix as printed: the rows detached keep no graph
    run(ip, "rows = [r.detach() for r in rows]")
    assert "autograd graph" not in (held_note(ip, "rows") or "")


def test_no_grad_is_offered_where_the_code_is_known_to_run_no_backward(ip):  # type: ignore[no-untyped-def]
    from vramnb.diagnose._holding import holding

    src = "for i in range(3):\n    log.append(net(torch.randn(8, 64)))"
    run(ip, "net = torch.nn.Linear(64, 64)\nlog = []\n" + src)
    with_src = holding("log", ip.user_ns["log"], CPU, _ns(ip), source=src).sentence
    assert with_src.endswith("store detached tensors (`.detach()`) instead, or compute what is stored under "
                             "`torch.no_grad()` if no backward needs it")
    # unknown code (%vram), or code that runs a backward: detaching only
    assert holding("log", ip.user_ns["log"], CPU, _ns(ip)).sentence.endswith(
        "store detached tensors (`.detach()`) instead")
    assert "no_grad" not in holding("log", ip.user_ns["log"], CPU, _ns(ip), source=src + "\nlog[-1].sum().backward()").sentence


def test_a_class_registry_its_own_init_adds_to_is_not_told_to_become_an_instance_attribute(ip):  # type: ignore[no-untyped-def]
    """validation-10 spiking_neurons_kept_by_class_registry (snntorch): __init__ appends through the class, so an
    instance attribute cannot help; the registry is emptied with its own classmethod or .clear()."""
    run(ip, "class Neuron:\n    instances = []\n    def __init__(self):\n        Neuron.instances.append(self)\n"
            "        self.mem = torch.zeros(1 << 18)\n"
            "    @classmethod\n    def _clear_instances(cls):\n        cls.instances = []\n"
            "class Leaky(Neuron):\n    pass\nnet = [Leaky() for _ in range(4)]\ndel net")
    note = held_note(ip, "Neuron")
    assert note is not None and "make it an instance attribute" not in note
    assert note.endswith("Neuron's own code adds to it through the class (Neuron.__init__), a registry of every "
                         "instance: empty it when a set of them is discarded or rebuilt (`Neuron.instances.clear()`, "
                         "or `Neuron._clear_instances()`, its own)")
    # the printed classmethod, run: nothing is kept
    run(ip, "Neuron._clear_instances()")
    assert ip.user_ns["Neuron"].instances == []
