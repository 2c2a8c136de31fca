"""Process-wide settings a loss function sets in the step (beyond round d's defect 6): NumPy's error
and print options, torch's warn-always, the new fp32_precision switches, the MHA fast path, the
preferred linalg library, the recursion limit, the working directory, autograd's multithreading,
flush-denormal, a dynamo config value, checkpoint's debug flag, a signal handler. One loss per
setting; each entry point on a fresh setup. Prints PASS/FAIL per setting and entry point."""
import os
import sys
import signal
import tempfile

import numpy as np
import torch

from _common import main

TMP = tempfile.mkdtemp()

SETTERS = {
    "np.seterr": lambda: np.seterr(all="raise"),
    "np.set_printoptions": lambda: np.set_printoptions(precision=2),
    "torch.set_warn_always": lambda: torch.set_warn_always(True),
    "fp32_precision (mkldnn.matmul)": lambda: setattr(torch.backends.mkldnn.matmul, "fp32_precision", "bf16"),
    "fp32_precision (cuda.matmul)": lambda: setattr(torch.backends.cuda.matmul, "fp32_precision", "tf32"),
    "mha fastpath": lambda: torch.backends.mha.set_fastpath_enabled(False),
    "preferred_linalg_library": lambda: torch.backends.cuda.preferred_linalg_library("magma"),
    "recursionlimit": lambda: sys.setrecursionlimit(5000),
    "chdir": lambda: os.chdir(TMP),
    "autograd multithreading": lambda: torch.autograd.set_multithreading_enabled(False),
    "flush_denormal": lambda: torch.set_flush_denormal(True),
    "dynamo config": lambda: setattr(torch._dynamo.config, "recompile_limit", 64),
    "checkpoint debug": lambda: torch.utils.checkpoint.set_checkpoint_debug_enabled(True),
    "SIGUSR1 handler": lambda: signal.signal(signal.SIGUSR1, lambda *a: None),
    "autocast cache": lambda: torch.set_autocast_cache_enabled(False),
    "autocast cpu dtype": lambda: torch.set_autocast_dtype("cpu", torch.float16),
}


def make(setter):
    def setup():
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        opt = torch.optim.SGD(m.parameters(), lr=0.1)

        def loss(mm, b):
            setter()
            return mm(b).pow(2).mean()
        return m, torch.randn(4, 8), loss, opt, {"m": m}
    return setup


if __name__ == "__main__":
    only = sys.argv[1:]
    ok = True
    for name, s in SETTERS.items():
        if only and name not in only:
            continue
        ok &= main(name, make(s), entries=["profile_step", "estimate"] if "quick" in os.environ.get("MODE", "") else None)
    print("ALL PASS" if ok else "SOME FAIL")
