"""NumPy's own MemoryError gets the cheaper form where the evidence is on the line (validation-8's
misses): only part of a call's result is read on the same line (``np.corrcoef(a, b)[0, 1:]``: the shape
from NumPy's message), and dense ``meshgrid`` arrays that ``sparse=True`` would make broadcastable."""

from __future__ import annotations

import numpy as np

import vramnb
from tests.conftest import run


def _note() -> str:
    return next(n for n in vramnb.history()[-1].notes if n.startswith("MemoryError:"))


def test_one_row_of_a_correlation_matrix_is_named_with_its_share(ip):
    run(ip, "import numpy as np\nclass VNp:  # NumPy's failure, as np.cov's product raises it\n"
            "    @staticmethod\n    def corrcoef(a, b, rowvar=True):\n        raise MemoryError('Unable to allocate "
            "374. MiB for an array with shape (7001, 7001) and data type float64')\n"
            "va, vb = np.zeros(10), np.zeros((10, 7000))")
    res, _ = run(ip, "%%vram -d cpu\nvcorr = VNp.corrcoef(va, vb, rowvar=False)[0, 1:]")
    assert isinstance(res.error_in_exec, MemoryError)
    note = _note()
    assert note.endswith("it failed in `VNp.corrcoef(va, vb, rowvar=False)` (line 2): only `[0, 1:]` of "
                         "`VNp.corrcoef(va, vb, rowvar=False)`'s result is read: (7000,) of (7001, 7001) where the "
                         "result is the (7001, 7001) float64 array that could not be made (1/7,002 of it: 54.7 KiB of "
                         "373.9 MiB): compute that part directly instead of the whole result"), note


def test_dense_meshgrid_arrays_get_sparse_true_as_code_that_broadcasts_the_same(ip):
    run(ip, "import numpy as np\nvx = np.linspace(-1, 1, 32, dtype=np.float32)")
    res, _ = run(ip, "%%vram -d cpu\nvxx, vyy, vzz = np.meshgrid(vx, vx, vx, indexing='ij')\n"
                     "vr = np.broadcast_to(vxx ** 2 + vyy ** 2 + vzz ** 2, (2**30, 32, 32, 32)).copy()")
    assert isinstance(res.error_in_exec, MemoryError)
    note = _note()
    assert ("vxx, vyy, vzz come from `np.meshgrid(vx, vx, vx, indexing='ij')` (line 2): 3 dense (32, 32, 32) grids "
            "(128.0 KiB each, 384.0 KiB in all), though each varies along one axis only; with sparse=True they are "
            "(32, 1, 1), (1, 32, 1), (1, 1, 32) (384 B in all)") in note, note
    code = note.split("as code: `")[1].rstrip("`")
    assert code == "vxx, vyy, vzz = np.meshgrid(vx, vx, vx, indexing='ij', sparse=True)"
    ns = {"np": np, "vx": np.linspace(-1, 1, 32, dtype=np.float32)}
    exec(code, ns)  # noqa: S102 - the printed code: the same sum by broadcasting
    dense = np.meshgrid(ns["vx"], ns["vx"], ns["vx"], indexing="ij")
    assert np.array_equal(ns["vxx"] ** 2 + ns["vyy"] ** 2 + ns["vzz"] ** 2, sum(d ** 2 for d in dense))


def test_a_meshgrid_given_sparse_by_the_code_is_left_alone(ip):
    run(ip, "import numpy as np\nvx2 = np.linspace(-1, 1, 16)")
    run(ip, "%%vram -d cpu\nva2, vb2 = np.meshgrid(vx2, vx2, sparse=False)\n"
            "vr2 = np.broadcast_to(va2 + vb2, (2**40, 16, 16)).copy()")
    assert "come from `np.meshgrid" not in _note()
