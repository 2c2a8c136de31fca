"""profile_distributed on the GPU machine with one CUDA device: nccl at world size 1 (issue 16).

The code path of a real NCCL run (process group, one device per rank, DDP, profile_step on
CUDA in the rank, the per-rank report) with one rank; two ranks need a 2-GPU machine
(tests/test_distributed.py's cuda test).

    python benchmarks/nccl_one_rank.py
"""

import sys

sys.path.insert(0, __import__("os").path.dirname(__file__) + "/..")
from tests.test_distributed import ddp_linear_cuda  # noqa: E402

import vramnb  # noqa: E402

if __name__ == "__main__":
    rep = vramnb.profile_distributed(ddp_linear_cuda, 1, backend="nccl", start_method="spawn", timeout=240)
    print(rep)
    for r in rep.ranks:
        print("rank", r.rank, r.status, r.device, "error", r.error)
        if r.step is not None:
            print(r.step)
