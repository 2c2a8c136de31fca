"""A checkpoint loaded beside the initialised model it goes into (validation-9: "save the model to disk and delete
it" was printed for the very model the next line loads into):

* a name the rest of the failing cell reads is in use: never offered for deletion (IPython compiles each top-level
  statement apart, so the failing statement's own code names only its own names);
* ``state = torch.load(...)`` then ``model.load_state_dict(state)``: the meta-device build with
  ``assign=True`` and ``mmap=True``, as code that runs as printed and loads the same weights."""

from __future__ import annotations

import torch

import vramnb
from tests.conftest import run

SETUP = ("import torch.nn as nn\nclass LNet(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
         "        self.a = nn.Linear(256, 512)\n        self.b = nn.Linear(512, 8)\n"
         "class LIO:  # where torch.load runs out of memory\n    @staticmethod\n    def load(path, weights_only=True):\n"
         "        raise MemoryError()\n"
         "LCKPT = {path!r}")


def _cell(ip):  # type: ignore[no-untyped-def]
    res, _ = run(ip, "%%vram -d cpu\nlmodel = LNet()\nlstate = LIO.load(LCKPT, weights_only=True)\n"
                     "lmodel.load_state_dict(lstate)\ndel lstate")
    assert isinstance(res.error_in_exec, MemoryError)
    return next(n for n in vramnb.history()[-1].notes if n.startswith("MemoryError:"))


def test_the_model_the_cell_loads_into_gets_the_meta_build_not_a_delete(ip, tmp_path):
    path = tmp_path / "l.pt"
    run(ip, SETUP.format(path=str(path)))
    torch.save(ip.user_ns["LNet"]().state_dict(), path)
    note = _cell(ip)
    held = (256 * 512 + 512 + 512 * 8 + 8) * 4
    assert (f"lmodel's own initialised parameters ({vramnb.format_bytes(held)}) and the checkpoint "
            "`LIO.load(LCKPT, weights_only=True)` reads are alive together") in note, note
    code = ("with torch.device('meta'):\n    lmodel = LNet()\nlstate = LIO.load(LCKPT, weights_only=True, mmap=True)\n"
            "lmodel.load_state_dict(lstate, assign=True)")
    assert "del lmodel" not in note and "save it to disk" not in note
    # as printed (the stand-in replaced by torch.load): the model holds the checkpoint's weights
    ns = {"torch": torch, "LNet": ip.user_ns["LNet"], "LCKPT": str(path), "LIO": torch}
    exec(code, ns)  # noqa: S102
    want = torch.load(path, weights_only=True)
    assert all(torch.equal(v, want[k]) for k, v in ns["lmodel"].state_dict().items())
    assert ns["lmodel"].a.weight.device.type == "cpu"


def test_the_verdict_offers_no_delete_for_a_name_a_later_statement_reads(ip):
    """The same through the verdict's holder fixes: the CPU allocator's failure, the model read after."""
    import dataclasses

    from tests.conftest import measured_oom
    from vramnb.diagnose import verdict

    run(ip, "import torch.nn as nn\nlbig = nn.Linear(1024, 1024)")
    oom, _ = measured_oom(ip, "lx = torch.zeros(1).expand(2**46).clone()\nly = lbig(torch.zeros(2, 1024))")
    s = dataclasses.replace(oom.state, cap=2**60, cap_room=0, cap_name="RLIMIT_AS", available=8 << 30,
                            holders=[("lbig", 4 << 20, 4 << 20, "Module")])
    assert "lbig" in oom.state.context.in_use
    assert not any("lbig" in f.code for f in verdict(s).fixes)
