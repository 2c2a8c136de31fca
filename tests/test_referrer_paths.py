"""The holder of a re-run cell's growth where the holders' walk does not look (module hooks, a
tensor's hooks, a function's default argument, dict keys, a registry's bound methods): named by
the referrer walk, with the fix for that holder; and no ``del`` advice for names something else keeps."""

from __future__ import annotations

import re


import torch

from vramnb._units import format_bytes

from .conftest import run


def _regrowth(ip, setup: str, cell: str) -> list[str]:  # type: ignore[no-untyped-def]
    import vramnb

    run(ip, setup)
    for _ in range(3):
        run(ip, "%%vram -d cpu --breakdown\n" + cell)
    return vramnb.history()[-1].notes


def _line(notes: list[str], start: str) -> str:
    got = [n for n in notes if n.startswith(start)]
    assert len(got) == 1, notes
    return got[0]


def test_pruning_masks_kept_by_the_forward_pre_hooks(ip):  # type: ignore[no-untyped-def]
    notes = _regrowth(ip, "import torch.nn as nn, torch.nn.utils.prune as prune\n"
                          "model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))",
                      "prune.global_unstructured([(model[0], 'weight'), (model[2], 'weight')], "
                      "pruning_method=prune.L1Unstructured, amount=0.2)")
    line = _line(notes, "each run of this cell")
    mask = 256 * 256 * 4  # one float32 mask copy per module per round
    assert f"leaves {format_bytes(2 * mask)} more" in line
    assert "model[0]._forward_pre_hooks[" in line and "PruningContainer" in line
    # global pruning computes both masks as views of one storage: the hook's mask keeps all of it
    # (a hook's key is its handle's id, counted over the whole process)
    assert re.search(r"model\[0\]\._forward_pre_hooks\[\d+\] keeps " + re.escape(format_bytes(2 * mask)) + " more each run",
                     line), line
    assert "prune.remove(" in line and "'weight')" in line
    assert "no name" not in line


def test_a_tensor_hook_per_call_keeps_each_region(ip):  # type: ignore[no-untyped-def]
    setup = ("img = torch.randn(1, 3, 512, 512, requires_grad=True)\n"
             "def saliency(image, region):\n    def hook(grad):\n        return grad * region\n"
             "    image.register_hook(hook)\n    image.sum().backward()\n")
    cell = "for k in range(4):\n    region = torch.zeros(1, 3, 512, 512)\n    saliency(img, region)\n"
    notes = _regrowth(ip, setup, cell)
    line = _line(notes, "each run of this cell")
    region = 3 * 512 * 512 * 4
    assert f"leaves {format_bytes(4 * region)} more" in line
    # the last region is also the name `region`: the hooks keep the 3 others beyond the names
    assert "img._backward_hooks[" in line and f"(and 2 more like it) keeps {format_bytes(3 * region)} more each run" in line
    assert "its `region`" in line and "handle.remove()" in line
    # `del region` frees nothing: the hook keeps it
    assert not any("`del region`" in n for n in notes), notes
    assert "region is also kept by img._backward_hooks[" in _line(notes, "bound in a loop, but deleting")


def test_a_mutable_default_argument(ip):  # type: ignore[no-untyped-def]
    setup = "def embed(frames, features=[]):\n    for f in frames:\n        features.append(f * 2)\n    return len(features)"
    notes = _regrowth(ip, setup, "n = embed(torch.randn(4, 256, 256))")
    line = _line(notes, "each run of this cell")
    assert f"leaves {format_bytes(4 * 256 * 256 * 4)} more" in line
    assert f": embed.__defaults__[0] keeps {format_bytes(4 * 256 * 256 * 4)} more each run" in line
    assert "`def embed(..., features=None)`" in line


def test_tensors_as_dict_keys(ip):  # type: ignore[no-untyped-def]
    setup = "class Rep:\n    def __init__(self):\n        self.names = {}\nrep = Rep()"
    cell = "for s in range(3):\n    x = torch.randn(512, 1024)\n    rep.names[x] = f's{s}'\n"
    notes = _regrowth(ip, setup, cell)
    line = _line(notes, "each run of this cell")
    one = 512 * 1024 * 4
    assert f"leaves {format_bytes(3 * one)} more" in line
    assert f"the keys of rep.names keep {format_bytes(2 * one)} more each run" in line  # x is the third
    assert "id(t)" in line
    assert not any("`del x`" in n for n in notes), notes
    assert "x is also kept by rep.names (a key)" in _line(notes, "bound in a loop, but deleting")


def test_a_registry_of_bound_methods(ip):  # type: ignore[no-untyped-def]
    setup = ("from collections import defaultdict\n_callbacks = defaultdict(list)\n"
             "class Viewer:\n    def __init__(self):\n        self.index = torch.arange(131072)\n"
             "        _callbacks['changed'].append(self.refresh)\n    def refresh(self):\n        pass\n")
    notes = _regrowth(ip, setup, "for i in range(4):\n    viewer = Viewer()\n")
    line = _line(notes, "each run of this cell")
    one = 131072 * 8
    assert f"leaves {format_bytes(4 * one)} more" in line
    assert "_callbacks['changed'][" in line
    assert f"(a bound method of a Viewer) (and 2 more like it) keeps {format_bytes(3 * one)} more each run" in line
    assert "weakref.WeakMethod" in line
    assert not any("`del viewer`" in n for n in notes), notes


def test_a_finalizer_given_a_bound_method_of_its_object(ip):  # type: ignore[no-untyped-def]
    # Python's weakref docs: a finalizer's func must not own a reference to the object, or it is never collected;
    # a weak method would let it be collected without ever calling the finalizer: not the advice
    setup = ("import weakref\nclass Writer:\n    def __init__(self):\n        self.buffer = torch.arange(131072)\n"
             "        self._finalizer = weakref.finalize(self, self.close)\n    def close(self):\n        pass\n")
    notes = _regrowth(ip, setup, "for i in range(4):\n    writer = Writer()\n")
    line = _line(notes, "each run of this cell")
    one = 131072 * 8
    assert f"leaves {format_bytes(4 * one)} more" in line
    assert ("weakref.finalize (a type)['_registry'][...].func (a finalizer's bound method of a Writer) keeps "
            f"{format_bytes(3 * one)} more each run") in line, line
    assert "a bound method of the Writer it waits for, so that Writer is never collected" in line
    assert "weakref.WeakMethod" not in line
    assert not any("`del writer`" in n for n in notes), notes


def test_the_walk_keeps_nothing_alive():  # type: ignore[no-untyped-def]
    """The walk's own objects make no reference cycle: what it followed is freed as soon as the
    notebook lets it go, not at the next collection (the next run's bytes would differ)."""
    import gc
    import weakref

    from vramnb.diagnose._referrer_paths import holding_paths, kept_elsewhere

    class Box:
        pass

    t = torch.zeros(1024)
    holder = Box()
    holder.k = [t]
    names = {"holder": holder, "t": t}
    gone = weakref.ref(holder)
    gc.disable()
    try:
        holdings, unfound, rest = holding_paths([(t.untyped_storage().nbytes(), [t])], names)
        assert (holdings[0].path, holdings[0].nbytes, unfound, rest) == ("t", 4096, 0, 0)
        assert kept_elsewhere(names, ["t"]) == {"t": "holder.k[0]"}
        del holdings, names, holder
        assert gone() is None
    finally:
        gc.enable()


def test_a_new_storage_at_a_freed_ones_address_counts_as_new():  # type: ignore[no-untyped-def]
    """A storage freed after the snapshot and a new one whose StorageImpl takes its address (the
    allocator reuses the block at once) is a new storage, with its bytes."""
    from vramnb.diagnose._referrer_paths import GrowthTrace

    def f(x, acc=[]):  # noqa: B006 - the mutable default is the point
        return x

    acc = f.__defaults__[0]  # type: ignore[index]
    cpu = torch.device("cpu")
    trace = GrowthTrace()
    for _ in range(3):
        acc.append(torch.zeros(1000))
        assert trace.step("cell", False, {"f": f}, [], cpu) is None
        acc.clear()  # freed: its StorageImpl's memory is free for the next storage
        acc.append(torch.zeros(3000))
        got = trace.step("cell", True, {"f": f}, [], cpu)
        assert got is not None
        holdings, unfound, rest = got
        assert [(h.path, h.kind, h.nbytes) for h in holdings] == [("f.__defaults__[0][0]", "default argument", 12000)]
        assert (unfound, rest) == (0, 0)
        acc.clear()
