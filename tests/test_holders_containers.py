"""`%vram` digs into containers: entries named as typed, shared storage once, gradients apart."""

from __future__ import annotations

from collections import namedtuple

import torch

from tests.conftest import run
from vramnb._holders import HoldersReport, find_holders
from vramnb._units import format_bytes

CPU = torch.device("cpu")


def _lin_bytes(n_in: int, n_out: int) -> int:
    return (n_in * n_out + n_out) * 4


def _trained(n_in: int, n_out: int) -> torch.nn.Linear:
    lin = torch.nn.Linear(n_in, n_out)
    lin(torch.randn(2, n_in)).sum().backward()
    return lin


def _text(rows) -> str:  # type: ignore[no-untyped-def]
    return HoldersReport("cpu", rows, rows.total)._table().to_text()


def _entries(row) -> dict:  # type: ignore[no-untyped-def]
    return {e.name: e for e in row.entries}


def test_a_dict_of_models_lists_each_entry_with_parameters_and_gradients_apart() -> None:
    models = {"a": _trained(128, 64), "b": _trained(64, 32)}
    (row,) = find_holders({"models": models}, CPU)
    pa, pb = _lin_bytes(128, 64), _lin_bytes(64, 32)
    assert row.name == "models" and row.nbytes == row.unique == 2 * (pa + pb)
    assert row.detail == f"parameters {format_bytes(pa + pb)} · gradients {format_bytes(pa + pb)}"
    by = _entries(row)
    assert list(by) == ["models['a']", "models['b']"]  # largest first
    assert by["models['a']"].nbytes == by["models['a']"].unique == 2 * pa
    assert by["models['a']"].detail == f"parameters {format_bytes(pa)} · gradients {format_bytes(pa)}"
    assert by["models['b']"].nbytes == 2 * pb
    assert by["models['b']"].detail == f"parameters {format_bytes(pb)} · gradients {format_bytes(pb)}"
    text = _text(find_holders({"models": models}, CPU))
    assert "models['a']" in text and "models['b']" in text
    line = next(ln for ln in text.splitlines() if "models['a']" in ln)
    assert f"parameters {format_bytes(pa)} · gradients {format_bytes(pa)}" in line


def test_a_tensor_in_a_list_and_a_dict_of_one_name_counts_once_for_the_first_entry() -> None:
    w = torch.randn(1000)
    other = torch.randn(300)
    state = {"first": [w, other], "second": {"again": w}}
    (row,) = find_holders({"state": state}, CPU)
    assert row.nbytes == row.unique == (1000 + 300) * 4
    by = _entries(row)
    assert by["state['first']"].nbytes == (1000 + 300) * 4
    # the second entry reaches only w, counted for state['first'][0]: it holds nothing of its own
    second = by["state['second']['again']"]  # a container whose memory is one entry: that entry names it
    assert second.nbytes == 0 and second.unique == 0
    assert second.detail == f"(1000,) float32 · shares {format_bytes(4000)} with state['first'][0] (counted there)"
    first = _entries(by["state['first']"])
    # `del state['first'][0]` frees nothing (state['second'] keeps w); [1] is only there
    assert first["state['first'][0]"].nbytes == 4000 and first["state['first'][0]"].unique == 0
    assert first["state['first'][1]"].nbytes == first["state['first'][1]"].unique == 1200
    assert by["state['first']"].unique == 1200
    assert sum(e.nbytes for e in row.entries) == row.nbytes


def test_a_list_of_another_names_parameters_frees_nothing() -> None:
    lin = _trained(64, 64)
    params = [lin.weight, lin.bias]
    rows = {h.name: h for h in find_holders({"lin": lin, "params": params}, CPU)}
    w, b = 64 * 64 * 4, 64 * 4
    assert rows["params"].nbytes == 2 * (w + b) and rows["params"].unique == 0
    by = _entries(rows["params"])
    assert by["params[0]"].kind == "Parameter"
    assert by["params[0]"].nbytes == 2 * w and by["params[0]"].unique == 0  # lin keeps it
    # the detail names who else keeps it: why "not shared" is 0
    assert by["params[0]"].detail == f"(64, 64) float32 · gradient {format_bytes(w)} · also kept by lin"
    assert rows["params"].detail == (
        f"parameters {format_bytes(w + b)} · gradients {format_bytes(w + b)} · also kept by lin")
    assert rows["lin"].detail == f"parameters {format_bytes(w + b)} · gradients {format_bytes(w + b)} · also kept by params"


def test_an_object_attribute_path_and_an_optimizer_state_apart() -> None:
    class Trainer:
        pass

    lin = _trained(32, 16)
    opt = torch.optim.Adam(lin.parameters())
    opt.step()
    trainer = Trainer()
    trainer.model = lin
    trainer.optimizer = opt
    trainer.step_count = 3
    (row,) = find_holders({"trainer": trainer}, CPU)
    p = _lin_bytes(32, 16)
    steps = 2 * 4  # one float32 step counter per parameter on CPU
    assert row.nbytes == 2 * p + 2 * p + steps
    by = _entries(row)
    # largest first; the attributes' order decides who counts the parameters: the model, set first
    assert list(by) == ["trainer.optimizer", "trainer.model"]
    assert by["trainer.model"].nbytes == 2 * p
    assert by["trainer.model"].detail == f"parameters {format_bytes(p)} · gradients {format_bytes(p)}"
    assert by["trainer.optimizer"].nbytes == 2 * p + steps
    assert by["trainer.optimizer"].unique == 2 * p + steps
    assert by["trainer.optimizer"].detail == (
        f"state {format_bytes(2 * p + steps)} · shares {format_bytes(2 * p)} with trainer.model (counted there)")
    assert by["trainer.model"].unique == 0  # the optimizer keeps the parameters too
    text = _text(find_holders({"trainer": trainer}, CPU))
    assert "trainer.model" in text and "trainer.optimizer" in text


def test_an_optimizer_row_splits_state_parameters_and_gradients() -> None:
    lin = _trained(16, 8)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    opt.step()
    (row,) = find_holders({"opt": opt}, CPU)
    p = _lin_bytes(16, 8)
    assert row.nbytes == 3 * p
    assert row.detail == f"state {format_bytes(p)} · parameters {format_bytes(p)} · gradients {format_bytes(p)}"


def test_a_tuple_inside_a_dict_and_a_namedtuple_are_named_as_typed() -> None:
    Pair = namedtuple("Pair", "keys values")
    cache = {"kv": (torch.ones(10, 4), torch.ones(20, 4)), 3: Pair(torch.ones(7), torch.ones(9))}
    (row,) = find_holders({"cache": cache}, CPU)
    assert row.nbytes == (40 + 80 + 7 + 9) * 4
    by = _entries(row)
    kv = _entries(by["cache['kv']"])
    assert by["cache['kv']"].kind == "tuple" and by["cache['kv']"].nbytes == 120 * 4
    assert kv["cache['kv'][1]"].nbytes == 80 * 4 and kv["cache['kv'][0]"].nbytes == 40 * 4
    assert kv["cache['kv'][1]"].detail == "(20, 4) float32"
    nt = _entries(by["cache[3]"])
    assert nt["cache[3].values"].nbytes == 36 and nt["cache[3].keys"].nbytes == 28
    text = _text(find_holders({"cache": cache}, CPU))
    for name in ("cache['kv'][0]", "cache['kv'][1]", "cache[3].keys", "cache[3].values"):
        assert name in text


def test_many_entries_are_elided_with_their_count_and_bytes() -> None:
    cache = [torch.ones(100 + i) for i in range(20)]
    (row,) = find_holders({"cache": cache}, CPU, max_entries=5)
    assert [e.name for e in row.entries] == [f"cache[{i}]" for i in range(19, 14, -1)]
    assert row.more == 15 and row.more_bytes == row.more_unique == sum((100 + i) * 4 for i in range(15))
    assert sum(e.nbytes for e in row.entries) + row.more_bytes == row.nbytes
    text = _text(find_holders({"cache": cache}, CPU, max_entries=5))
    assert "… and 15 more entries" in text
    line = next(ln for ln in text.splitlines() if "more entries" in ln)
    assert format_bytes(row.more_bytes) in line
    # one more than the limit is listed rather than summed
    (row,) = find_holders({"cache": cache[:6]}, CPU, max_entries=5)
    assert len(row.entries) == 6 and row.more == 0


def test_items_past_the_walk_limit_are_summed_in_the_more_row(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import vramnb._holder_entries as he

    monkeypatch.setattr(he, "MAX_ITEMS", 10)
    keep = torch.ones(50)
    cache = [torch.ones(100 + i) for i in range(30)] + [keep]
    rows = {h.name: h for h in find_holders({"cache": cache, "keep": keep}, CPU, max_entries=5)}
    row = rows["cache"]
    assert len(row.entries) == 5 and row.more == 5 + 21  # 10 walked, 5 of them listed; 21 never walked
    assert sum(e.nbytes for e in row.entries) + row.more_bytes == row.nbytes == sum((100 + i) * 4 for i in range(30)) + 200
    assert row.more_unique == row.more_bytes - 200  # `keep` is another name's too


def test_entry_levels_are_limited_and_deeper_memory_stays_in_the_last_level_shown() -> None:
    deep = {"l1": {"l2": {"l3": {"x": torch.ones(10), "y": torch.ones(30)}, "z": torch.ones(5)}}, "w": torch.ones(1)}
    (row,) = find_holders({"deep": deep}, CPU)
    (l2,) = [e for e in row.entries if e.name == "deep['l1']['l2']"]  # deep['l1'] holds only l2: named by it
    (l3,) = [e for e in l2.entries if e.name == "deep['l1']['l2']['l3']"]
    assert l3.nbytes == 160 and [e.name for e in l3.entries] == ["deep['l1']['l2']['l3']['y']", "deep['l1']['l2']['l3']['x']"]
    assert row.nbytes == 4 * (10 + 30 + 5 + 1)
    # a fourth level is not listed: its container's row says how many entries it has, and their bytes
    deeper = {"a": {"b": {"c": {"x": torch.ones(10), "y": torch.ones(30)}, "d": torch.ones(5)}, "e": torch.ones(2)},
              "f": torch.ones(1)}
    (row,) = find_holders({"deeper": deeper}, CPU)
    a = _entries(row)["deeper['a']"]
    b = _entries(a)["deeper['a']['b']"]
    c = _entries(b)["deeper['a']['b']['c']"]
    assert c.entries == [] and c.more == 2 and c.more_bytes == c.more_unique == c.nbytes == 160
    line = _text(find_holders({"deeper": deeper}, CPU)).splitlines()
    i = next(j for j, ln in enumerate(line) if "deeper['a']['b']['c']" in ln)
    assert "… and 2 more entries" in line[i + 1] and format_bytes(160) in line[i + 1]


def test_a_module_dict_lists_its_modules() -> None:
    md = torch.nn.ModuleDict({"enc": _trained(32, 32), "dec": _trained(32, 8)})
    (row,) = find_holders({"md": md}, CPU)
    by = _entries(row)
    assert by["md['enc']"].nbytes == 2 * _lin_bytes(32, 32)
    assert by["md['dec']"].detail == f"parameters {format_bytes(_lin_bytes(32, 8))} · gradients {format_bytes(_lin_bytes(32, 8))}"


def test_html_indents_entries_beneath_their_name() -> None:
    models = {"a": _trained(8, 8)}
    rows = find_holders({"models": models}, CPU)
    html = HoldersReport("cpu", rows, rows.total)._repr_mimebundle_()["text/html"]
    assert ">models<" in html and ">\u00a0\u00a0models[&#x27;a&#x27;]<" in html
    assert "each storage counts for the first entry that reaches it" in html


def test_a_records_row_per_entry_with_its_parent() -> None:
    models = {"a": _trained(8, 8), "b": _trained(4, 4)}
    rows = find_holders({"models": models}, CPU)
    recs = HoldersReport("cpu", rows, rows.total).to_records()
    assert [(r["name"], r["parent"], r["level"]) for r in recs] == [
        ("models", None, 0), ("models['a']", "models", 1), ("models['b']", "models", 1)]
    assert recs[1]["nbytes"] == 2 * _lin_bytes(8, 8) and "entries" not in recs[0]


def test_vram_magic_shows_the_entries_of_a_dict_of_trained_models(ip) -> None:  # type: ignore[no-untyped-def]
    run(ip, "models = {k: torch.nn.Linear(64, 32) for k in 'abc'}\n"
            "for m in models.values():\n    m(torch.randn(2, 64)).sum().backward()")
    res, _ = run(ip, "%vram -d cpu")
    (row,) = [h for h in res.result.holders if h.name == "models"]
    p = _lin_bytes(64, 32)
    assert row.nbytes == 6 * p and [e.nbytes for e in row.entries] == [2 * p] * 3
    text = res.result._table().to_text()
    for k in "abc":
        line = next(ln for ln in text.splitlines() if f"models['{k}']" in ln)
        assert f"parameters {format_bytes(p)} · gradients {format_bytes(p)}" in line


def test_slotted_objects_are_followed_without_running_user_code() -> None:
    import dataclasses

    @dataclasses.dataclass(slots=True)
    class Batch:
        ids: torch.Tensor
        mask: torch.Tensor

    class Cache:
        __slots__ = ("__kv", "note", "unset")

        def __init__(self) -> None:
            self.__kv = torch.ones(64)
            self.note = "x"

        def __getattr__(self, name: str) -> None:
            raise AssertionError("user code ran")

    holder = {"batch": Batch(torch.ones(10, dtype=torch.int64), torch.ones(10, dtype=torch.bool)), "cache": Cache()}
    (row,) = find_holders({"holder": holder}, CPU)
    assert row.nbytes == 80 + 10 + 64 * 4
    by = {e.name: e for e in row.entries}
    assert by["holder['cache']._Cache__kv"].nbytes == 256
    batch = _entries(by["holder['batch']"])
    assert batch["holder['batch'].ids"].nbytes == 80 and batch["holder['batch'].mask"].nbytes == 10


def test_a_modules_plain_attributes_are_its_entries_and_its_parameters_count_for_it() -> None:
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = torch.nn.Linear(16, 16)
            self.cache = torch.ones(100)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList([Block(), Block()])
            self.acts: list[torch.Tensor] = []
            self.weights = [self.blocks[0].l.weight]  # a list aliasing a parameter: counted for the module

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for b in self.blocks:
                x = b.l(x)
            return x

    net = Net()
    net.register_forward_hook(lambda m, i, o: m.acts.append(o.detach()))
    with torch.no_grad():
        for _ in range(3):
            net(torch.randn(8, 16))
    (row,) = find_holders({"net": net}, CPU)
    params = 2 * (16 * 16 + 16) * 4
    acts, caches = 3 * 8 * 16 * 4, 2 * 100 * 4
    assert row.nbytes == params + acts + caches
    assert row.detail == f"parameters {format_bytes(params)} · other attributes {format_bytes(acts + caches)}"
    by = _entries(row)
    assert by["net.acts"].nbytes == acts and len(by["net.acts"].entries) == 3
    assert by["net.blocks[0].cache"].nbytes == by["net.blocks[1].cache"].nbytes == 400
    tied = by["net.weights[0]"]  # a list of one entry is named by it
    assert tied.nbytes == 0 and tied.kind == "Parameter"
    assert tied.detail == f"(16, 16) float32 · shares {format_bytes(16 * 16 * 4)} with net (counted there)"
    assert sum(e.nbytes for e in row.entries) == acts + caches  # the parameters count for `net` itself


def test_an_optimizers_plain_attributes_are_its_entries() -> None:
    lin = _trained(8, 8)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    opt.step()
    opt.ema = {"weight": lin.weight.detach().clone(), "alias": lin.weight}  # type: ignore[attr-defined]
    (row,) = find_holders({"opt": opt}, CPU)
    p, w = _lin_bytes(8, 8), 8 * 8 * 4
    assert row.nbytes == 3 * p + w
    assert row.detail == (f"state {format_bytes(p)} · parameters {format_bytes(p)} · gradients {format_bytes(p)}"
                          f" · other attributes {format_bytes(w)}")
    by = _entries(_entries(row)["opt.ema"])
    assert by["opt.ema['weight']"].nbytes == w
    assert by["opt.ema['alias']"].nbytes == 0  # the parameter counts for the optimizer itself
    assert by["opt.ema['alias']"].detail.endswith(f"shares {format_bytes(2 * w)} with opt (counted there)")


def test_a_list_also_held_by_a_dict_counts_once_in_the_total() -> None:
    cache = [torch.ones(1000), torch.ones(500)]
    state = {"cache": cache, "step": torch.ones(10)}
    rows = find_holders({"cache": cache, "state": state}, CPU)
    by = {h.name: h for h in rows}
    assert rows.total == (1000 + 500 + 10) * 4  # the list's tensors once
    assert by["state"].nbytes == 1510 * 4 and by["state"].unique == 40
    entry = _entries(by["state"])["state['cache']"]
    assert entry.nbytes == 1500 * 4 and entry.unique == 0  # `del state['cache']` frees nothing: `cache` keeps it
    assert entry.detail == f"tensors {format_bytes(6000)} · also kept by cache"
    assert [e.name for e in entry.entries] == ["state['cache'][0]", "state['cache'][1]"]
    text = _text(rows)
    assert "state['cache'][0]" in text and "cache[1]" in text and "also kept by cache" in text


def test_a_kept_loss_splits_the_parameters_its_graph_keeps_from_its_activations() -> None:
    lin = torch.nn.Linear(256, 256)
    x = torch.randn(64, 256)
    loss = torch.tanh(lin(x)).sum()  # saves x (for the weight's gradient) and tanh's output
    p = (256 * 256 + 256) * 4
    acts = 2 * 64 * 256 * 4
    (row,) = find_holders({"losses": [loss]}, CPU)
    (entry,) = row.entries
    assert entry.name == "losses[0]" and entry.nbytes == 4 + p + acts
    assert entry.detail == f"() float32 · parameters {format_bytes(p)} · autograd graph {format_bytes(acts)}"
    loss.backward()  # frees the saved activations; the leaves now have gradients
    (row,) = find_holders({"losses": [loss]}, CPU)
    assert row.entries[0].detail == f"() float32 · parameters {format_bytes(p)} · gradients {format_bytes(p)}"
    assert row.detail == f"tensors 4 B · parameters {format_bytes(p)} · gradients {format_bytes(p)}"


def test_a_view_says_it_keeps_its_whole_storage(ip):
    run(ip, "a = torch.ones(500, 1000)\nb = a[::2]\ndel a")
    res, _ = run(ip, "%vram -d cpu")
    [row] = [h for h in res.result.holders if h.name == "b"]
    assert row.nbytes == 500 * 1000 * 4  # the view keeps all of a's storage alive
    assert row.detail.startswith("(250, 1000) float32 · a view of a 1.9 MiB storage")


def test_a_kept_exception_holds_its_frames_variables(ip):
    run(ip, "def f():\n    big = torch.ones(2**20)\n    raise ValueError('x')\n"
            "try:\n    f()\nexcept ValueError as e:\n    err = e")
    res, _ = run(ip, "%vram -d cpu")
    [row] = [h for h in res.result.holders if h.name == "err"]
    assert (row.kind, row.nbytes, row.unique) == ("ValueError", 4 * 2**20, 4 * 2**20)  # big, in f's frame


def test_a_container_whose_entries_view_one_storage_counted_elsewhere_shares_it_once() -> None:
    # three views of one 4000-byte storage: the list shares 4000 bytes with state['a'], not 12000
    base = torch.randn(1000)
    state = {"a": base, "b": [base[0:10], base[10:20], base[20:30]]}
    (row,) = find_holders({"state": state}, CPU)
    assert row.nbytes == 1000 * 4
    by = _entries(row)
    assert by["state['b']"].detail == f"shares {format_bytes(1000 * 4)} with state['a'] (counted there)"


class _Layer:  # the shape of a Hugging Face cache: an output's cache object, a cache per attention, layers
    def __init__(self, n: int) -> None:
        self.keys, self.values = torch.ones(n), torch.ones(n)


class _LayerCache:
    def __init__(self, n: int) -> None:
        self.layers = [_Layer(n), _Layer(n)]


class _TwoCaches:
    def __init__(self, n: int) -> None:
        self.self_attention_cache, self.cross_attention_cache = _LayerCache(n), _LayerCache(2 * n)


def test_tensors_five_levels_below_a_name_are_that_names():
    """An encoder-decoder's output keeps its key/value cache five levels down (output → cache →
    cache per attention → its list of layers → a layer → keys): those bytes are the output's, and
    deleting it frees them (transformers' EncoderDecoderCache; a Whisper's `out` held 5.9 MiB so)."""
    logits = torch.ones(7)
    out = {"logits": logits, "cache": _TwoCaches(100)}
    cache_bytes = 4 * 2 * 2 * (100 + 200)  # keys and values of two layers of each cache
    (row,) = find_holders({"out": out}, CPU)
    assert row.nbytes == row.unique == 7 * 4 + cache_bytes
