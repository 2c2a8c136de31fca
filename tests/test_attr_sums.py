"""A running sum kept inside an object's method (field case metric_object_keeps_graph:
``self.sum += val`` in ``Metric.update``, called from the cell with its loss): the report names
``object.attribute``, the statement, the method and its line, and the ``.detach()`` to add there;
the bytes it gives are what dropping the graph frees (measured). CPU, bytes from shapes."""

from __future__ import annotations

import vramnb
from tests.conftest import run
from vramnb._units import format_bytes

METRIC = ("class Metric:\n    def __init__(self):\n        self.sum = torch.tensor(0.)\n        self.n = 0\n"
          "    def update(self, val):\n        self.sum += val\n        self.n += 1\n")


def _notes(ip, cell: str) -> list[str]:
    res, _ = run(ip, "%%vram -d cpu --breakdown -q\n" + cell)
    assert res.error_in_exec is None, res.error_in_exec
    return vramnb.history()[-1].notes


def _where(ip, cls: str, line: int) -> str:
    fn = ip.user_ns[cls].update
    return f"{cls}.update ({fn.__code__.co_filename}:{line})"


def test_a_metric_objects_running_sum_names_the_attribute_the_method_and_the_fix(ip):
    run(ip, "torch.manual_seed(0)\nmodel = torch.nn.Linear(64, 64)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            + METRIC + "train_loss = Metric()")
    cell = ("for i in range(4):\n    loss = model(torch.randn(8, 64)).pow(2).mean()\n    opt.zero_grad()\n"
            "    loss.backward()\n    opt.step()\n    train_loss.update(loss)")
    notes = _notes(ip, cell)
    where = _where(ip, "Metric", ip.user_ns["Metric"].update.__code__.co_firstlineno + 1)
    assert (f"autograd graphs kept after the cell by train_loss.sum (nodes only, no saved tensor): `self.sum += val` "
            f"in {where} chains each graph onto train_loss.sum: add `val.detach()` there (or `val.item()`, a number)"
            ) in notes, notes
    # the fix does what it says: with val.detach() the sum keeps no graph
    run(ip, "Metric.update = lambda self, val: (setattr(self, 'sum', self.sum + val.detach()), None)[1]\n"
            "fixed = Metric()")
    run(ip, cell.replace("train_loss", "fixed"))
    assert ip.user_ns["fixed"].sum.grad_fn is None


def test_an_evaluation_metric_in_a_dict_keeps_saved_tensors_and_the_bytes_are_what_detach_frees(ip):
    """Another shape: no backward runs, the objects sit in a dict the cell names
    (``metrics['mse'].update(...)``), the method appends to a list attribute."""
    run(ip, "class Tracker:\n    def __init__(self):\n        self.vals = []\n    def add(self, v):\n"
            "        self.vals.append(v)\nmetrics = {'mse': Tracker()}\nnet = torch.nn.Linear(256, 256)")
    notes = _notes(ip, "for i in range(4):\n    metrics['mse'].add(net(torch.ones(32, 256)).pow(2).mean())")
    # each step keeps its graph: net's output (32, 256) float32, saved by pow; the input is a leaf of nobody
    line = next(n for n in notes if n.startswith("autograd graphs kept after the cell by metrics['mse'].vals"))
    assert "`self.vals.append(v)` in Tracker.add (" in line and "keeps each graph in metrics['mse'].vals: append " \
        "`v.detach()` there (or `v.item()` for a number)" in line, line
    said = line.split("metrics['mse'].vals (", 1)[1].split(")", 1)[0]
    res, _ = run(ip, "%%vram -d cpu -q\nmetrics['mse'].vals = [v.detach() for v in metrics['mse'].vals]")
    assert res.error_in_exec is None
    assert said == format_bytes(-vramnb.history()[-1].delta_allocated), (said, vramnb.history()[-1].delta_allocated)


def test_an_object_whose_graph_attribute_no_method_adds_to_gets_no_line(ip):
    """Adversarial: an attribute set once with a graph (no running sum in any method) is no chain."""
    run(ip, "class Box:\n    def __init__(self, t):\n        self.t = t\nw = torch.ones(4, requires_grad=True)")
    notes = _notes(ip, "b = Box(w * 2)\nb")
    assert not any("Box." in n for n in notes), notes


def test_regrowth_of_such_an_object_gets_the_methods_fix(ip):
    run(ip, "net2 = torch.nn.Linear(128, 128)\n" + METRIC + "val_loss = Metric()")
    for _ in range(3):
        notes = _notes(ip, "val_loss.update(net2(torch.ones(64, 128)).pow(2).mean())")
    text = " ".join(notes)
    assert "val_loss.sum grew by" in text and "`self.sum += val` in Metric.update (" in text, text


def test_the_imagenet_average_meter_and_a_dict_of_running_sums(ip):
    """Other shapes: PyTorch's ImageNet example's ``AverageMeter.update(val, n)`` (``self.sum += val * n``),
    and a meter keeping a dict of sums (``self.totals[k] += v``)."""
    run(ip, "class AverageMeter:\n    def __init__(self):\n        self.val = 0\n        self.sum = 0\n"
            "        self.count = 0\n    def update(self, val, n=1):\n        self.val = val\n"
            "        self.sum += val * n\n        self.count += n\n        self.avg = self.sum / self.count\n"
            "class Meters:\n    def __init__(self):\n        self.totals = {}\n    def add(self, d):\n"
            "        for k, v in d.items():\n            self.totals.setdefault(k, 0)\n            self.totals[k] += v\n"
            "losses = AverageMeter()\nmeters = Meters()\nnet3 = torch.nn.Linear(32, 32)")
    notes = _notes(ip, "for i in range(3):\n    loss = net3(torch.ones(4, 32)).pow(2).mean()\n    loss.backward()\n"
                       "    losses.update(loss, 4)\n    meters.add({'l2': loss})")
    text = " ".join(notes)
    assert "`self.sum += val * n` in AverageMeter.update (" in text and \
        "chains each graph onto losses.sum: add `(val * n).detach()` there (or `(val * n).item()`, a number)" in text, text
    assert "`self.totals[k] += v` in Meters.add (" in text and \
        "chains each graph onto meters.totals's entries: add `v.detach()` there (or `v.item()`, a number)" in text, text
