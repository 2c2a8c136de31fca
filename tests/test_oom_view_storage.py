"""deepcopy / pickle / torch.save of a view copy its whole storage (validation-8: a 1 KiB row deep-copied as
its 48.8 MiB storage; 8 KiB shards pickled as 97.7 MiB): the line says so with both sizes and gives the
``.clone()`` form as code, read from the call's argument on meta tensors (nothing of the user's runs)."""

from __future__ import annotations

import vramnb
from tests.conftest import run

SETUP = ("class VSer:  # raises where the real call would run out of memory\n"
         "    @staticmethod\n    def dumps(x):\n        raise MemoryError()\n"
         "    @staticmethod\n    def deepcopy(x):\n        raise MemoryError()\n"
         "vdata = torch.zeros(2**20, 4)")


def _note() -> str:
    return next(n for n in vramnb.history()[-1].notes if n.startswith("MemoryError:"))


def test_pickling_a_slice_names_the_whole_storage_and_gives_clone(ip):
    run(ip, SETUP)
    res, _ = run(ip, "%%vram -d cpu\nvpayloads = [VSer.dumps(vdata[i * 16:(i + 1) * 16]) for i in range(4)]")
    assert isinstance(res.error_in_exec, MemoryError)
    note = _note()
    assert ("pickle.dumps of vdata[i * 16:(i + 1) * 16], a (16, 4) float32 view (256 B), copies the whole storage it "
            "views, 16.0 MiB (65,536x)") in note, note
    assert note.endswith("as code: `vpayloads = [VSer.dumps(vdata[i * 16:(i + 1) * 16].clone()) for i in range(4)]`")


def test_deepcopy_of_a_row_gives_clone_and_a_view_that_is_most_of_its_storage_gets_nothing(ip):
    run(ip, SETUP)
    run(ip, "%%vram -d cpu\nvrow = VSer.deepcopy(vdata[3])")
    assert "copy.deepcopy of vdata[3], a (4,) float32 view (16 B), copies the whole storage" in _note()
    run(ip, "%%vram -d cpu\nvmost = VSer.deepcopy(vdata[:2**19 + 2**18])")  # 3/4 of it: nothing to save
    assert "copies the whole storage" not in _note()
