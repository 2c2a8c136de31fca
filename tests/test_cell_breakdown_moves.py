"""Memory that moves between holders inside a cell or across runs of it: each column of the
by-source table, and each sentence about who holds it, names the holder at that point (exact
bytes on CPU, from shapes)."""

import gc

import vramnb
from tests.conftest import run

F32 = 4
MiB = 1 << 20


def rows(rep):
    return {name: (a, b, p) for name, a, b, p in rep.sources}


def test_a_list_keeps_what_a_failing_function_appended_the_traceback_only_its_locals(ip):
    gc.collect()
    run(ip, "mv_keep = []\ndef mv_step():\n    a = torch.zeros(256 * 1024)\n    b = torch.zeros(512 * 1024)\n"
            "    mv_keep.append(torch.zeros(5 * 256 * 1024))\n    raise ValueError('x')")
    res, cap = run(ip, "%%vram -d cpu --breakdown\nmv_step()")
    rep = vramnb.history()[-1]
    r = rows(rep)
    # the list keeps the 5 MiB it was given; the traceback's frame keeps a and b (3 MiB), and the
    # frames of the measuring machinery the error passes through count for nothing
    assert r["list mv_keep"] == (0, 5 * MiB, 5 * MiB)
    assert r["last exception"][1] == 3 * MiB
    freed = ip.run_line_magic("vram", "free -d cpu")
    # what the exception's frames kept, apart from cycles earlier tests left for gc
    assert dict(freed.freed)["last exception (traceback frames)"] == 3 * MiB
    run(ip, "del mv_keep, mv_step")


def test_a_value_moved_from_a_name_into_a_list_is_the_lists_at_the_end(ip):
    gc.collect()
    run(ip, "mv_ys = []")
    cell = "%%vram -d cpu --breakdown\nif 'mv_y' in dir():\n    mv_ys.append(mv_y)\nmv_y = torch.zeros(256 * 1024)"
    for k in range(3):
        run(ip, cell)
        r = rows(vramnb.history()[-1])
        # before: the old value stayed "tensor mv_y" at the end (2 MiB for one 1 MiB tensor)
        assert r["tensor mv_y"][:2] == ((MiB if k else 0), MiB)
        assert r.get("list mv_ys", (0, 0, 0))[:2] == (max(k - 1, 0) * MiB, k * MiB)
    # a training loop's names rebound, their last values kept by a list: each name holds one value
    run(ip, "mv_model = torch.nn.Linear(512, 512)\nmv_hist = []")
    cell = ("%%vram -d cpu --breakdown\nfor i in range(2):\n    mv_xb = torch.randn(256, 512)\n"
            "    mv_out = mv_model(mv_xb)\n    mv_loss = mv_out.sum()\n"
            "    mv_hist.append((mv_xb, mv_out.detach(), mv_loss.detach()))")
    step = 2 * 256 * 512 * F32 + F32  # xb, out and loss of one iteration
    for k in range(3):
        run(ip, cell)
        rep = vramnb.history()[-1]
        r = rows(rep)
        assert r["tensor mv_xb"][1] == 256 * 512 * F32
        assert r["tensor mv_out"][1] == 256 * 512 * F32
        assert r["tensor mv_loss"][1] == F32
        # the list: every iteration's values but the last, which the names hold (counted once)
        assert r["list mv_hist"][1] == (2 * k + 1) * step
        assert sum(b for _, _, b, _ in rep.sources) == rep.end_allocated
    run(ip, "del mv_ys, mv_y, mv_model, mv_hist, mv_xb, mv_out, mv_loss")


def test_what_an_object_attribute_holds_is_its_even_where_a_graph_saved_it(ip):
    gc.collect()
    run(ip, "class MvNets:\n    pass\nmv_nets = MvNets()\nmv_m = torch.nn.Sequential(torch.nn.Linear(1024, 256), "
            "torch.nn.ReLU(), torch.nn.Linear(256, 1))")
    run(ip, "%%vram -d cpu --breakdown\nmv_nets.X = torch.randn(4096, 1024)\nmv_nets.out = mv_m(mv_nets.X)")
    rep = vramnb.history()[-1]
    r = rows(rep)
    # the data set and the output are the object's; the graph's own saved tensor (ReLU's result) is activations
    assert r["MvNets mv_nets"][:2] == (0, 4096 * 1024 * F32 + 4096 * F32)
    assert r["activations"][1] - r["activations"][0] == 4096 * 256 * F32
    # moved from a name to the attribute in the cell
    run(ip, "%%vram -d cpu --breakdown\nmv_X2 = torch.randn(1024, 1024)\nmv_nets.Y = mv_X2\ndel mv_X2")
    r = rows(vramnb.history()[-1])
    assert r["MvNets mv_nets"][1] - r["MvNets mv_nets"][0] == 1024 * 1024 * F32
    assert "tensor mv_X2" not in r
    run(ip, "del mv_nets, MvNets, mv_m")


def test_a_notebook_class_attribute_that_grows_is_named(ip):
    gc.collect()
    run(ip, "class MvCache:\n    store = {}\n    def add(self, k, v):\n        type(self).store[k] = v\n"
            "mv_c = MvCache()")
    cell = "%%vram -d cpu --breakdown\nmv_c.add(len(MvCache.store), torch.zeros(256 * 1024))"
    for k in range(3):
        run(ip, cell)
        rep = vramnb.history()[-1]
        r = rows(rep)
        assert r["class MvCache"][:2] == (k * MiB, (k + 1) * MiB)
    text = "\n".join(rep.notes)
    assert "no name of the notebook grew" not in text
    assert "MvCache grew by 1.0 MiB" in text
    holders = ip.run_line_magic("vram", "-d cpu")
    row = next(h for h in holders.holders if h.name == "MvCache")
    assert (row.kind, row.nbytes, row.unique) == ("class", 3 * MiB, 3 * MiB)
    run(ip, "del mv_c, MvCache")


def test_the_traceback_line_counts_a_leaf_only_the_failing_frames_graph_keeps(ip):
    gc.collect()
    run(ip, "mv_keep2 = []\ndef mv_fail():\n    a = torch.zeros(256 * 1024)\n"
            "    mv_keep2.append(torch.zeros(512 * 1024))\n    h = mv_keep2[-1]\n"
            "    y = torch.zeros(1024 * 1024, requires_grad=True) * 2\n"
            "    big = torch.empty(1 << 60, dtype=torch.uint8)")
    run(ip, "%%vram -d cpu\nmv_fail()")
    rep = vramnb.history()[-1]
    # a (1 MiB), y (4 MiB) and the leaf y's graph keeps (4 MiB, AccumulateGrad holds it; before: left
    # out, "5.0 MiB"); h is the list's. MulBackward's saved scalar (8 B) rounds away.
    line = next(n for n in rep.notes if "traceback keeps" in n)
    assert line.startswith(f"the error's traceback keeps {vramnb.format_bytes(9 * MiB)} alive")
    freed = ip.run_line_magic("vram", "free -d cpu")
    assert freed.total == 9 * MiB + 8
    run(ip, "del mv_keep2, mv_fail")


def test_a_deque_holds_its_tensors_and_a_move_without_allocating_is_seen(ip):
    gc.collect()
    run(ip, "from collections import deque\nmv_d, mv_dq = {}, deque()")
    run(ip, "%%vram -d cpu --breakdown\nmv_a = torch.zeros(256 * 1024)\nmv_d['a'] = mv_a\ndel mv_a\n"
            "mv_b = torch.zeros(512 * 1024)\nmv_dq.append(mv_b)\nmv_b = None")
    r = rows(vramnb.history()[-1])
    assert r["dict mv_d"][:2] == (0, MiB)
    assert r["deque mv_dq"][:2] == (0, 2 * MiB)  # before: no row, "held by no name above"
    assert "alive after the cell, not found under the names above" not in r
    holders = ip.run_line_magic("vram", "-d cpu")
    assert next(h for h in holders.holders if h.name == "mv_dq").nbytes == 2 * MiB
    # a cell that allocates nothing: its start and end are one point of the timeline
    run(ip, "%%vram -d cpu --breakdown\nmv_dq.extend(mv_d.values())\nmv_d.clear()")
    r = rows(vramnb.history()[-1])
    assert r["dict mv_d"][:2] == (MiB, 0)  # before: (1 MiB, 1 MiB), the start's holder at the end
    assert r["deque mv_dq"][:2] == (2 * MiB, 3 * MiB)
    run(ip, "del mv_d, mv_dq")
