"""A dense square made for a few index pairs (validation-8: an adjacency as np.zeros((n, n)) filled at the edge
list; pyg's to_dense_adj for node degrees): the density and the sparse form, and for row sums of
to_dense_adj, torch_geometric.utils.degree as code that gives the same numbers."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import vramnb
from tests.conftest import measured_oom, run
from vramnb.diagnose import verdict


def test_a_dense_zeros_filled_at_a_few_pairs_names_the_sparse_form(ip):
    run(ip, "import types, numpy\nclass _NpStandIn:  # NumPy's failure for np.zeros((n, n))\n"
            "    @staticmethod\n    def zeros(shape):\n        raise MemoryError('Unable to allocate 374. MiB for an "
            "array with shape (7000, 7000) and data type float64')\nnp = _NpStandIn()\n"
            "dn = 7000\ndedges = numpy.zeros((70_000, 2), dtype=numpy.int64)\ndw = numpy.ones(70_000)")
    res, _ = run(ip, "%%vram -d cpu\ndadj = np.zeros((dn, dn))\ndadj[dedges[:, 0], dedges[:, 1]] = dw")
    assert isinstance(res.error_in_exec, MemoryError)
    note = next(n for n in vramnb.history()[-1].notes if n.startswith("MemoryError:"))
    assert note.endswith("it failed in `np.zeros((dn, dn))` (line 2): dadj is a dense (7000, 7000) matrix (373.8 MiB) "
                         "that line 3 fills at 70,000 index pairs (0.14 % of its entries): a sparse matrix of those "
                         "pairs holds only them (scipy.sparse.coo_matrix((values, (rows, cols)), shape=(7000, 7000)), "
                         "or torch.sparse_coo_tensor: about 1.6 MiB); densify a batch of rows at a time where a dense "
                         "block is needed"), note
    del ip.user_ns["np"]


def test_row_sums_of_to_dense_adj_get_degree_as_code(ip):
    pytest.importorskip("torch_geometric")
    run(ip, "from torch_geometric.utils import to_dense_adj\ntorch.manual_seed(0)\n"
            "dei = torch.randint(0, 2**22, (2, 1000))\ndnodes = 2**22")
    oom, _ = measured_oom(ip, "dadj2 = to_dense_adj(dei, max_num_nodes=dnodes)[0]\ndeg2 = dadj2.sum(-1)")
    fixes = verdict(dataclasses.replace(oom.state, cap=2**60, cap_room=0, cap_name="RLIMIT_AS",
                                        available=8 << 30)).fixes
    fix = [f for f in fixes if f.what.startswith("to_dense_adj makes a dense")]
    assert len(fix) == 1, [f.what for f in fixes]
    assert fix[0].what == ("to_dense_adj makes a dense (4,194,304 x 4,194,304) adjacency per graph (64.0 TiB in float32) "
                           "from 1,000 edges (1 in 17,592,186,044 of its entries); work on the edge list instead: dadj2.sum(-1) "
                           "is each node's number of outgoing edges, which torch_geometric.utils.degree(dei[0], dnodes) "
                           "counts from the edge list (16.0 MiB)")
    assert fix[0].code == "from torch_geometric.utils import degree\ndeg2 = degree(dei[0], dnodes)"
    from torch_geometric.utils import to_dense_adj

    ns = {"dei": torch.tensor([[0, 0, 1, 3, 3, 3], [1, 2, 2, 0, 0, 1]]), "dnodes": 5}
    exec(fix[0].code, ns)  # noqa: S102 - as printed: the same sums as the dense matrix's (duplicate edges too)
    assert torch.equal(ns["deg2"], to_dense_adj(ns["dei"], max_num_nodes=5)[0].sum(-1))
