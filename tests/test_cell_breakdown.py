"""%%vram --breakdown: the cell's memory by notebook object, exact on CPU."""

import gc

import vramnb
from tests.conftest import run

F32 = 4


def rows(rep):
    return {name: (a, b, p) for name, a, b, p in rep.sources}


def test_breakdown_of_forward_backward_step(ip):
    gc.collect()  # other tests' cycles go now, not during the measured cells
    run(ip, "torch.manual_seed(0)\n"
            "model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))\n"
            "opt = torch.optim.Adam(model.parameters(), foreach=False)\nx = torch.randn(32, 64)")
    p = (64 * 128 + 128 + 128 * 10 + 10) * F32
    res, cap = run(ip, "%%vram -d cpu --breakdown\nloss = model(x).square().mean()")
    r = rows(vramnb.history()[-1])
    assert r["parameters of model"] == (p, p, p)
    assert r["tensor x"][1] == 32 * 64 * F32
    # ReLU output + model output (saved by square); as a change: graphs other tests left in this
    # process (a pytest-xdist worker runs many files) count at the start and the end alike
    acts = (32 * 128 + 32 * 10) * F32
    assert r["activations"][1] - r["activations"][0] == acts
    assert "by source" in cap.outputs[-1].data["text/plain"]
    res, cap = run(ip, "%%vram -d cpu --breakdown\nloss.backward(); opt.step()")
    rep = vramnb.history()[-1]
    r = rows(rep)
    assert r["gradients of model"][:2] == (0, p)
    assert r["state of opt"][:2] == (0, 2 * p + 4 * F32)
    assert r["activations"][0] - r["activations"][1] == acts  # graph freed by backward
    # sources at the end add up to everything allocated
    assert sum(b for _, _, b, _ in rep.sources) == rep.end_allocated


def test_new_module_in_cell_and_tied_weights(ip):
    res, _ = run(ip, "%%vram -d cpu --breakdown\nemb = torch.nn.Embedding(100, 16)\n"
                     "head = torch.nn.Linear(16, 100, bias=False)\nhead.weight = emb.weight")
    r = rows(vramnb.history()[-1])
    assert r["parameters of emb"][1] == 100 * 16 * F32
    assert "parameters of head" not in r or r["parameters of head"][1] == 0  # the same storage, counted once


def test_gradients_of_a_kept_graph_are_not_activations(ip):
    run(ip, "m = torch.nn.Linear(256, 256)\nx = torch.randn(8, 256)\nloss = m(x).square().mean()\nloss.backward()")
    run(ip, "%%vram -d cpu --breakdown\ny = torch.ones(10)")
    r = rows(vramnb.history()[-1])
    assert r["gradients of m"][1] == (256 * 256 + 256) * F32
    assert r.get("activations", (0, 0, 0))[1] < (256 * 256) * F32


def test_memory_retained_in_containers_and_attributes_is_their_holders(ip):
    run(ip, "class Box:\n    pass\nbox = Box()")
    res, _ = run(ip, "%%vram -d cpu --breakdown\nd = {'a': torch.ones(2**20)}\nxs = [torch.ones(1000), torch.ones(10)]\n"
                     "box.t = torch.zeros(300, dtype=torch.float64)\ntmp = torch.ones(5000)\ndel tmp")
    assert res.error_in_exec is None
    rep = vramnb.history()[-1]
    r = rows(rep)
    assert r["dict d"][1] == 2**20 * F32
    assert r["list xs"][1] == 1010 * F32
    assert r["Box box"][1] == 300 * 8
    assert r.get("temporaries", (0, 0, 0))[1] == 0  # nothing allocated here is left unnamed
    assert sum(b for _, _, b, _ in rep.sources) == rep.end_allocated


def test_tensors_in_a_modules_attributes_are_the_modules(ip):
    run(ip, "class Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.l = torch.nn.Linear(8, 8)\n"
            "        self.cache = []\nnet = Net()")
    run(ip, "%%vram -d cpu --breakdown\nnet.cache.append(torch.ones(1000))\nnet.kv = torch.zeros(500)")
    r = rows(vramnb.history()[-1])
    assert r["attributes of net"][1] == 1500 * F32
    assert r.get("temporaries", (0, 0, 0))[1] == 0


def _kept_note(rep):
    return next((n for n in rep.notes if n.startswith("autograd graphs kept after the cell")), None)


def test_graphs_kept_without_backward_are_named_with_the_fix(ip):
    gc.collect()
    run(ip, "torch.manual_seed(0)\ngm = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), "
            "torch.nn.Linear(256, 64))\ngxs = [torch.randn(32, 64) for _ in range(4)]")
    # each forward saves the ReLU output (32×256 f32) for backward; the inputs are gxs's
    relu = 32 * 256 * F32
    run(ip, "%%vram -d cpu --breakdown\nouts = []\nfor x in gxs:\n    outs.append(gm(x))")
    rep = vramnb.history()[-1]
    r = rows(rep)
    assert r["activations"][1] - r["activations"][0] == 4 * relu
    note = _kept_note(rep)
    kib = vramnb.format_bytes(4 * relu)
    assert note == (f"autograd graphs kept after the cell by outs ({kib}): no backward ran in this cell: if none "
                    "will run on these results, wrap the cell in `with torch.no_grad():` (or "
                    f"`torch.inference_mode()`) so that it builds no graph (these keep {kib}); "
                    "`outs.append(gm(x))` keeps each graph: append `gm(x).detach()`")  # (32, 64): no .item()
    # a running total: also the model's output (32×64, saved by square) per step; loss's graph is inside total's
    run(ip, "%%vram -d cpu --breakdown\ntotal = 0\nfor x in gxs:\n    loss = gm(x).square().mean()\n    total += loss")
    note = _kept_note(vramnb.history()[-1])
    step = relu + 32 * 64 * F32
    assert note.startswith(f"autograd graphs kept after the cell by total ({vramnb.format_bytes(4 * step)}), "
                           f"loss ({vramnb.format_bytes(step)}): no backward ran")
    assert f"(these keep {vramnb.format_bytes(4 * step)})" in note
    assert note.endswith("`total += loss` chains each graph onto total: add `loss.item()` instead")
    # training: backward ran, so no no_grad advice; the running total still chains every step's nodes
    run(ip, "gopt = torch.optim.SGD(gm.parameters(), lr=0.1)")
    run(ip, "%%vram -d cpu --breakdown\ntotal_loss = 0\nfor x in gxs:\n    loss = gm(x).square().mean()\n"
            "    loss.backward(); gopt.step(); gopt.zero_grad()\n    total_loss = total_loss + loss")
    assert _kept_note(vramnb.history()[-1]) == (
        "autograd graphs kept after the cell by total_loss (nodes only, no saved tensor): "
        "`total_loss = total_loss + loss` chains each graph onto total_loss: add `loss.item()` instead")
    # the fixed cells leave no note
    run(ip, "%%vram -d cpu --breakdown\nwith torch.no_grad():\n    outs = [gm(x) for x in gxs]")
    assert _kept_note(vramnb.history()[-1]) is None
    run(ip, "%%vram -d cpu --breakdown\ntotal = 0\nfor x in gxs:\n    loss = gm(x).square().mean()\n"
            "    loss.backward()\n    total += loss.item()")
    assert _kept_note(vramnb.history()[-1]) is None
    run(ip, "del outs, total, total_loss, loss, gm, gopt, gxs")


def test_create_graph_leaf_cycles_are_labelled_by_holder_not_temporaries(ip):
    import warnings

    gc.collect()
    n = 1 << 16
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's own create_graph cycle warning
        run(ip, f"%%vram -d cpu --breakdown\nfor i in range(3):\n    cx = torch.randn({n}, requires_grad=True)\n"
                "    cy = cx.tanh()\n    cy.backward(torch.ones_like(cy), create_graph=True)\n    del cy")
    r = rows(vramnb.history()[-1])
    assert r["tensor cx"][1] == n * F32
    # cx.grad = ones·(1 - cy²): the gradient, and its graph keeps cy and the ones
    assert r["autograd graph of gradients of cx"][1] == 3 * n * F32
    # the two earlier cx: cx -> cx.grad -> its graph -> cx, a cycle in C++ that no name reaches: their
    # graphs' saved cy and ones are activations, cx and cx.grad are held by no name
    # as changes: graphs other tests left in this process (a pytest-xdist worker runs many
    # files; CI's worker had 17 KiB of them) count at the start and the end alike
    assert r["activations"][1] - r["activations"][0] == 2 * 2 * n * F32
    nobody = r["alive after the cell, not found under the names above"]
    assert nobody[1] - nobody[0] == 2 * 2 * n * F32
    assert r.get("temporaries", (0, 0, 0))[1] == 0
    run(ip, "cx.grad = None\ndel cx")


def test_what_a_failed_cells_frames_keep_is_the_last_exceptions(ip):
    gc.collect()
    run(ip, "def lx_fail():\n    big = torch.ones(3000, 100)\n    raise ValueError('boom')")
    run(ip, "%%vram -d cpu --breakdown\nlx_fail()")
    r = rows(vramnb.history()[-1])
    assert r["last exception"][1] == 3000 * 100 * F32  # `big` in the kept traceback's frame
    assert r.get("temporaries", (0, 0, 0))[1] == 0
