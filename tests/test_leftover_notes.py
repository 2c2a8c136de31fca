"""A measured cell's report names what the cell left alive that its code may not need, with the
``del`` (or ``.clone()``) that frees it and the exact bytes (field categories: an intermediate
name alive after a loop and the previous pass's tensors alive while the next is built; a
checkpoint dict holding a second copy of parameters; an optimizer still holding the
parameters of a deleted model; a small view keeping a large storage). CPU, bytes from shapes."""

from __future__ import annotations

import io

import torch

import vramnb
from tests.conftest import run
from vramnb._units import format_bytes

MiB = 2**20


def _notes(ip, cell: str) -> list[str]:
    res, _ = run(ip, "%%vram -d cpu --breakdown\n" + cell)
    assert res.error_in_exec is None, res.error_in_exec
    return vramnb.history()[-1].notes


def test_names_bound_in_a_loop_are_named_with_what_deleting_them_frees(ip):
    run(ip, "src = [torch.ones(1 << 18) for _ in range(3)]")
    notes = _notes(ip, "total = 0\nfor s in src:\n    big = s.repeat(4)\n    small = s[:4] * 2\n    total += float(big.sum())")
    # big: (1 << 20,) float32 = 4 MiB, small: 4 floats = 16 B; s is src's, total a float: neither listed
    assert (f"bound in a loop and still alive after it (a Python loop has no scope of its own): big "
            f"({format_bytes(4 * MiB)}), small ({format_bytes(16)}); each pass's values also stay alive while the "
            "next pass builds its own: `del big, small` at the end of the loop body (where the next pass does not "
            "read them) or after the loop frees them (an object in a reference cycle at the next gc.collect()), as "
            "does running the loop in a function") in notes, notes


def test_a_loop_name_read_after_the_loop_or_a_model_bound_in_it_is_not_offered_for_del(ip):
    """Adversarial: the best result kept for after the loop, and a model trained in the loop,
    are meant to outlive it: no `del` for them."""
    notes = _notes(ip, "for i in range(2):\n    best = torch.ones(1 << 20)\n    net_i = torch.nn.Linear(1024, 512)\n"
                       "score = float(best.sum())")
    assert not any(n.startswith("bound in a loop") for n in notes), notes


def test_a_loop_inside_a_function_the_cell_defines_names_no_notebook_name(ip):
    run(ip, "big = torch.ones(1 << 20)")  # a notebook name that the function's local shadows
    notes = _notes(ip, "def f(xs):\n    for x in xs:\n        big = x * 2\n    return 0\nf([torch.ones(4)])")
    assert not any(n.startswith("bound in a loop") for n in notes), notes


def test_a_small_loop_leftover_and_a_carried_state_get_no_loop_line(ip):
    run(ip, "w = torch.ones(64, 64)")
    notes = _notes(ip, "h = torch.zeros(1, 64)\nfor i in range(3):\n    h = h @ w\n    tmp = torch.ones(8)")
    assert not any(n.startswith("bound in a loop") for n in notes), notes


def test_a_checkpoint_dict_with_a_second_copy_of_parameters_gets_del(ip):
    run(ip, "net = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512))\n"
            "import io\nbuf = io.BytesIO()\ntorch.save({'model': net.state_dict(), 'epoch': 3}, buf)")
    notes = _notes(ip, "buf.seek(0)\nckpt = torch.load(buf)\nnet.load_state_dict(ckpt['model'])")
    n = 2 * (512 * 512 + 512) * 4
    assert (f"ckpt holds a second copy of the parameters of net ({format_bytes(n)}; load_state_dict copied them into "
            f"the model's own tensors): `del ckpt` once loaded frees {format_bytes(n)}") in notes, notes


def test_two_modules_of_one_shape_count_the_checkpoint_copy_once(ip):
    run(ip, "ga = torch.nn.Linear(512, 512)\ngb = torch.nn.Linear(512, 512)\nimport io\nbuf2 = io.BytesIO()\n"
            "torch.save({'a': ga.state_dict(), 'b': gb.state_dict()}, buf2)")
    notes = _notes(ip, "buf2.seek(0)\nck = torch.load(buf2)\nga.load_state_dict(ck['a'])\ngb.load_state_dict(ck['b'])")
    n = 2 * (512 * 512 + 512) * 4  # the two state dicts' tensors, each counted once
    assert (f"ck holds a second copy of the parameters of ga, gb ({format_bytes(n)}; load_state_dict copied them into "
            f"the model's own tensors): `del ck` once loaded frees {format_bytes(n)}") in notes, notes


def test_a_dict_of_gradients_shaped_like_the_parameters_is_no_checkpoint_copy(ip):
    """Adversarial: gradients kept by name have the parameters' shapes but are no copy of them."""
    run(ip, "gm = torch.nn.Linear(1024, 512)\ngm(torch.ones(2, 1024)).sum().backward()")
    notes = _notes(ip, "grads = {n: p.grad.clone() for n, p in gm.named_parameters()}")
    assert not any("second copy" in n for n in notes), notes


def test_an_optimizer_left_after_del_model_gets_del_opt(ip):
    run(ip, "mdl = torch.nn.Linear(1024, 512)\nopt = torch.optim.Adam(mdl.parameters())\n"
            "mdl(torch.ones(2, 1024)).sum().backward()\nopt.step()")
    notes = _notes(ip, "del mdl")
    n = (1024 * 512 + 512) * 4  # parameters; gradients and Adam's two moments the same each
    assert (f"opt still holds the parameters it steps (mdl deleted: no module of the notebook holds them now), their "
            f"gradients and its state: `del opt` frees {format_bytes(4 * n)}") in notes, notes


def test_a_small_view_of_a_large_storage_gets_clone(ip):
    notes = _notes(ip, "base = torch.ones(1 << 20)\nhead = base[:10]\ndel base")
    assert (f"head ({format_bytes(40)} of data) is a view that keeps a whole {format_bytes(4 * MiB)} storage alive: "
            f"`head = head.clone()` keeps only its own bytes and frees {format_bytes(4 * MiB - 40)}") in notes, notes


def test_no_leftover_line_where_the_name_is_still_needed_by_another_holder(ip):
    run(ip, "keep = torch.ones(1 << 20)")
    notes = _notes(ip, "view = keep[:10]")  # keep holds the storage: cloning view frees nothing
    assert not any("is a view" in n for n in notes), notes
    assert io is not None and torch is not None


def _delta(ip, cell: str) -> int:
    """What ``cell`` changes allocated memory by (CPU tracker), measured."""
    res, _ = run(ip, "%%vram -d cpu -q\n" + cell)
    assert res.error_in_exec is None, res.error_in_exec
    return vramnb.history()[-1].delta_allocated


def test_a_small_view_kept_in_a_dict_or_list_entry_gets_clone_with_the_bytes_it_frees(ip):
    """Field case sliced_head_keeps_storage: the view is an entry of a dict (and, another shape of
    it, of a list inside a dict the cell fills by key); the line names the entry as typed, and its
    bytes are what the `.clone()` it gives really frees (measured)."""
    notes = _notes(ip, "x = torch.randn(1 << 20)\nsnapshot = {'step': 1, 'head': x[:10]}\ndel x")
    line = (f"snapshot['head'] ({format_bytes(40)} of data) is a view that keeps a whole {format_bytes(4 * MiB)} "
            f"storage alive: `snapshot['head'] = snapshot['head'].clone()` keeps only its own bytes and frees "
            f"{format_bytes(4 * MiB - 40)}")
    assert line in notes, notes
    assert _delta(ip, "snapshot['head'] = snapshot['head'].clone()") == -(4 * MiB - 40)
    run(ip, "hist = {}")
    notes = _notes(ip, "y = torch.randn(1 << 21)\nhist['rows'] = [y[:4], y[4:8]]\ndel y")
    # two views of one 8 MiB storage: deleting either entry alone frees nothing, so neither is offered
    assert not any("is a view" in n for n in notes), notes
    notes = _notes(ip, "y = torch.randn(1 << 21)\nhist['rows'] = [y[:4]]\ndel y")
    assert (f"hist['rows'][0] ({format_bytes(16)} of data) is a view that keeps a whole {format_bytes(8 * MiB)} "
            f"storage alive: `hist['rows'][0] = hist['rows'][0].clone()` keeps only its own bytes and frees "
            f"{format_bytes(8 * MiB - 16)}") in notes, notes
    assert _delta(ip, "hist['rows'][0] = hist['rows'][0].clone()") == -(8 * MiB - 16)


def test_a_view_in_a_tuple_or_one_another_name_shares_is_not_offered_a_clone(ip):
    run(ip, "base2 = torch.ones(1 << 20)")
    notes = _notes(ip, "box = {'v': base2[:10]}\npair = (torch.ones(1 << 20)[:4],)")
    assert not any("is a view" in n for n in notes), notes


def test_a_dict_of_models_and_optimizers_trained_in_a_loop_names_what_each_entry_keeps(ip):
    """Field case models_trained_in_loop_kept_by_dict: each entry keeps its model's parameters and
    gradients and its optimizer's state; the `del` bytes are measured."""
    run(ip, "torch.manual_seed(0)\nzoo = {}\nfor k in ('a', 'b', 'c'):\n    m = torch.nn.Linear(512, 512)\n"
            "    zoo[k] = {'model': m, 'optimizer': torch.optim.Adam(m.parameters())}\ndel m")
    notes = _notes(ip, "for key, obj in zoo.items():\n    mdl, op = obj['model'], obj['optimizer']\n"
                       "    mdl(torch.ones(4, 512)).sum().backward()\n    op.step()\ndel mdl, op, obj")
    p = (512 * 512 + 512) * 4  # one model's parameters; its gradients the same, Adam's state twice that
    line = next(n for n in notes if n.startswith("zoo keeps"))
    assert line == (f"zoo keeps 3 trained entries (3 models, 3 optimizers), each model with its gradients and each "
                    f"optimizer with its state, after training (parameters {format_bytes(3 * p)}, gradients "
                    f"{format_bytes(3 * p)}, optimizer state {format_bytes(3 * 2 * p + 3 * 2 * 4)}): keep only what "
                    "later cells use, e.g. the best model or its `state_dict()` saved to disk (torch.save); "
                    f"`del zoo['a']` frees {format_bytes(4 * p + 2 * 4)}, `del zoo['b']` frees "
                    f"{format_bytes(4 * p + 2 * 4)}, `del zoo['c']` frees {format_bytes(4 * p + 2 * 4)}; to keep a "
                    "model but not its training state, set its gradients to None (`zero_grad(set_to_none=True)`) and "
                    "drop its optimizer"), line
    assert _delta(ip, "del zoo['b']") == -(4 * p + 2 * 4)  # Adam's step counts: a float32 scalar per parameter


def test_a_list_of_untrained_models_or_one_model_with_its_optimizer_gets_no_trained_line(ip):
    run(ip, "pair = {'model': torch.nn.Linear(512, 512)}\npair['opt'] = torch.optim.SGD(pair['model'].parameters())\n"
            "fresh = [torch.nn.Linear(512, 512) for _ in range(3)]")
    notes = _notes(ip, "pair['model'](torch.ones(2, 512)).sum().backward()\npair['opt'].step()\nn = len(fresh)")
    assert not any(" trained entries" in n for n in notes), notes


def test_a_list_of_slices_appended_in_a_loop_gets_one_line_and_one_fix_with_what_it_frees(ip):
    """Another shape of the view category: each pass appends a small slice of a new large tensor."""
    run(ip, "heads = []")
    notes = _notes(ip, "for i in range(3):\n    big = torch.randn(1 << 20)\n    heads.append(big[:4])\ndel big")
    line = next(n for n in notes if n.startswith("heads's 3 entries"))
    assert line == (f"heads's 3 entries ({format_bytes(48)} of data) are views that keep whole storages of "
                    f"{format_bytes(12 * MiB)} alive: `heads = [t.clone() for t in heads]` keeps only their own bytes "
                    f"and frees {format_bytes(12 * MiB - 48)} (or store `.clone()`s when adding to it)"), line
    assert not any(n.startswith("heads[") for n in notes), notes
    assert _delta(ip, "heads = [t.clone() for t in heads]") == -(12 * MiB - 48)


def test_a_list_of_trained_models_gets_index_assignments_not_shifting_dels(ip):
    run(ip, "runs = []")
    notes = _notes(ip, "for lr in (0.1, 0.01):\n    m = torch.nn.Linear(512, 512)\n"
                       "    o = torch.optim.SGD(m.parameters(), lr=lr)\n    m(torch.ones(2, 512)).sum().backward()\n"
                       "    o.step()\n    runs.append((m, o))\ndel m, o")
    line = next(n for n in notes if n.startswith("runs keeps 2 trained entries"))
    p = (512 * 512 + 512) * 4  # parameters and gradients of one model (SGD without momentum keeps no state)
    assert f"`runs[0] = None` frees {format_bytes(2 * p)}, `runs[1] = None` frees {format_bytes(2 * p)}" in line, line
    assert "del runs[" not in line
    assert _delta(ip, "runs[0] = None") == -2 * p


def test_two_models_a_training_cell_uses_together_outside_any_loop_get_no_trained_line(ip):
    """Adversarial: a GAN's generator and discriminator in one dict, trained together by a cell that
    does not loop over the dict: both are in use, "keep only the best" would be wrong."""
    run(ip, "gan = {'g': torch.nn.Linear(512, 512), 'd': torch.nn.Linear(512, 512)}")
    notes = _notes(ip, "out = gan['d'](gan['g'](torch.ones(2, 512))).sum()\nout.backward()")
    assert not any(" trained entries" in n for n in notes), notes
