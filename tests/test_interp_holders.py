"""Holders in the interpreter's state (issue 28, validation-7): a bound method registered with atexit
keeps its object from C, where no referrer path reaches a name; the regrowth line names atexit as the
likely holder only where atexit's count of callbacks grew during the run, with the fix."""

from __future__ import annotations

from vramnb._units import format_bytes

from .conftest import run

_TRAINER = ("import atexit\nclass Trainer:\n"
            "    def __init__(self):\n        self.w = torch.zeros(256, 1024)\n        self.stats = [torch.ones(64, 1024)]\n"
            "{register}"
            "    def close(self):\n        pass\n")


def _line(ip):  # type: ignore[no-untyped-def]
    import vramnb

    return [n for n in vramnb.history()[-1].notes if n.startswith("each run of this cell")]


def test_a_bound_method_registered_with_atexit_is_named(ip):  # type: ignore[no-untyped-def]
    import atexit

    run(ip, _TRAINER.replace("{register}", "        atexit.register(self.close)\n"))
    for _ in range(3):
        run(ip, "%%vram -d cpu\ntrainer = Trainer()\ndel trainer")
    line = _line(ip)
    each = (256 + 64) * 1024 * 4
    now = atexit._ncallbacks()
    assert len(line) == 1
    assert line[0].startswith(
        f"each run of this cell leaves {format_bytes(each)} more (3 runs in a row): the bound method Trainer.close of "
        "a Trainer, which no object the garbage collector sees refers to (kept from C), while atexit's registered "
        f"callbacks went from {now - 1} to {now} during the last run (atexit._ncallbacks(); atexit has no public list "
        f"to check it against) keeps {format_bytes(each)} more each run")
    assert "`atexit.unregister(obj.close)`" in line[0] and "weakref.ref" in line[0]
    assert "kept where no referrer path reaches a name" not in line[0]


def test_atexit_growing_beside_a_list_that_keeps_the_tensors_is_not_blamed(ip):  # type: ignore[no-untyped-def]
    # atexit gets a callback each run, but what grows is a notebook list's entries
    run(ip, "import atexit\nkept = []")
    for _ in range(3):
        run(ip, "%%vram -d cpu\nkept.append(torch.zeros(256, 1024))\natexit.register(int)")
    line = _line(ip)
    assert len(line) == 1 and "kept grew by" in line[0]
    assert "atexit" not in line[0]


def test_without_atexit_a_kept_object_gets_no_atexit_sentence(ip):  # type: ignore[no-untyped-def]
    # the same trainer kept by a class-level registry: a path to a name, and atexit's count unchanged
    run(ip, _TRAINER.replace("{register}", "        Trainer.live.append(self.close)\n").replace(
        "class Trainer:\n", "class Trainer:\n    live = []\n"))
    for _ in range(3):
        run(ip, "%%vram -d cpu\ntrainer = Trainer()\ndel trainer")
    line = _line(ip)
    assert len(line) == 1 and "atexit" not in line[0] and "kept from C" not in line[0]


def test_a_partial_registered_with_atexit_is_named(ip):  # type: ignore[no-untyped-def]
    run(ip, "import atexit, functools\ndef save(state):\n    pass\nclass Run:\n"
            "    def __init__(self):\n        self.state = torch.zeros(128, 1024)\n"
            "        atexit.register(functools.partial(save, self.state))")
    for _ in range(3):
        run(ip, "%%vram -d cpu\nr = Run()\ndel r")
    line = _line(ip)
    assert len(line) == 1
    assert line[0].startswith(f"each run of this cell leaves {format_bytes(128 * 1024 * 4)} more (3 runs in a row): "
                              "functools.partial(save, ...), which no object the garbage collector sees refers to")
    assert "`atexit.unregister(functools.partial(save, ...))` (the same object)" in line[0]


def test_a_signal_handler_kept_from_c_is_named_by_its_signal():  # type: ignore[no-untyped-def]
    import signal

    import torch

    from vramnb._storages import storages_of_tensor
    from vramnb.diagnose._interp_holders import kept_from_c

    class Saver:
        def __init__(self) -> None:
            self.state = torch.zeros(64, 1024)

        def on_term(self, signum, frame):  # type: ignore[no-untyped-def]
            pass

    s = Saver()
    old = signal.signal(signal.SIGUSR1, s.on_term)
    try:
        handler = signal.getsignal(signal.SIGUSR1)
        keys = {k: st.nbytes() for k, st in storages_of_tensor(s.state)}
        got = kept_from_c([handler], keys, torch.device("cpu"), 3, 3)
        assert [(h.kind, h.nbytes) for h in got] == [("signal handler", 64 * 1024 * 4)]
        assert got[0].where == "the bound method Saver.on_term of a Saver, the handler of SIGUSR1"
        assert "`signal.signal(SIGUSR1, old)`" in got[0].advice
        # atexit's count unchanged and no registry checked holds it: no registry is named
        other = Saver()
        got = kept_from_c([other.on_term], {k: st.nbytes() for k, st in storages_of_tensor(other.state)},
                          torch.device("cpu"), 3, 3)
        assert [h.kind for h in got] == ["kept from C"] and "atexit is the likely holder" not in got[0].advice
        assert "atexit's registered callbacks went" not in got[0].where
    finally:
        signal.signal(signal.SIGUSR1, old)


_STRATEGY = ("import functools\n"
             "def clear_cache_hook(owner, *args):\n    owner.cache = {}\n"
             "class Strategy:\n    def __init__(self, x, scale):\n        self.x, self.scale, self.cache = x, scale, {}\n"
             "    def mean(self):\n        if 'mean' not in self.cache:\n"
             "            k = torch.exp(-torch.cdist(self.x, self.x) / self.scale)\n"
             "            m = k @ self.x\n"
             "{register}"
             "            self.cache['mean'] = m\n        return self.cache['mean']\n"
             "scale = torch.tensor(2.0, requires_grad=True)\n")


def test_a_hook_on_a_grad_fn_that_refers_to_its_owner_is_named_as_a_cycle_through_cpp(ip):  # type: ignore[no-untyped-def]
    """validation-9 grad_fn_hook_closes_over_its_owner (gpytorch#2734): the hook's dict is kept by the autograd
    node in C++, gc sees no referrer, and the hook keeps the object that keeps the node's graph."""
    run(ip, _STRATEGY.replace("{register}", "            m.grad_fn.register_hook(functools.partial(clear_cache_hook, self))\n"))
    for _ in range(3):
        run(ip, "%%vram -d cpu\nfor i in range(4):\n    s = Strategy(torch.randn(256, 8), scale)\n    acq = s.mean().sum()")
    line = _line(ip)
    assert len(line) == 1, line
    assert ("functools.partial(clear_cache_hook, ...) (a hook on an autograd node: grad_fn.register_hook keeps it in "
            "C++, where the garbage collector cannot see it; it refers to a Strategy) keeps") in line[0]
    assert ("where the node is in a graph that the Strategy keeps, the graph keeps the hook and the hook keeps the graph: "
            "a reference cycle through C++ that gc.collect() never frees; have the hook keep a weak reference") in line[0]
    assert "kept where no referrer path reaches a name" not in line[0]


def test_the_same_hook_holding_a_weak_reference_leaves_nothing(ip):  # type: ignore[no-untyped-def]
    # the printed fix: the hook keeps a weakref to its owner; each run's strategies are then freed
    run(ip, "import weakref\n" + _STRATEGY.replace(
        "{register}", "            ref = weakref.ref(self)\n"
                      "            m.grad_fn.register_hook(lambda *a: (o := ref()) is not None and clear_cache_hook(o))\n"))
    for _ in range(3):
        run(ip, "%%vram -d cpu\nfor i in range(4):\n    s = Strategy(torch.randn(256, 8), scale)\n    acq = s.mean().sum()")
    import vramnb

    assert vramnb.history()[-1].delta_allocated == 0
    assert _line(ip) == []


_SCALE = ("class Scale(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n        y = x * 2\n"
          "{keep}        return y\n    @staticmethod\n    def backward(ctx, grad):\n        return grad * 2\n")


def test_a_custom_functions_output_set_on_ctx_is_named_with_save_for_backward(ip):  # type: ignore[no-untyped-def]
    """validation-10 custom_function_output_stored_on_ctx (pytorch#25340): `ctx.y = y` in forward; the output's
    grad_fn is that ctx, a cycle the regrowth walk cannot follow to a name."""
    import gc

    run(ip, _SCALE.replace("{keep}", "        ctx.y = y\n"))
    gc.disable()  # (the cycle stays until the collector runs: as it would between runs of a busy notebook)
    try:
        for _ in range(3):
            run(ip, "%%vram -d cpu\nfor i in range(4):\n    x = torch.randn(256, 256, requires_grad=True)\n"
                    "    y = Scale.apply(x)\n    y.sum().backward()")
        line = _line(ip)
    finally:
        gc.enable()
    assert len(line) == 1, line
    assert "the context of the custom autograd Function Scale (its forward set ctx.y) keeps" in line[0]
    assert "save tensors for backward with `ctx.save_for_backward(...)` and read them as `ctx.saved_tensors`" in line[0]
