"""A forward (or the loss) that flips a process-wide switch as it runs, once per call: the entry point must
put each back as found. Switches: `torch.backends.cudnn.benchmark` / `.deterministic` / `.enabled`,
`torch.use_deterministic_algorithms(True, warn_only=True)`, `torch.set_num_threads(1)`,
`torch.set_num_interop_threads` (read only), `torch.autograd.set_detect_anomaly(True)`,
`torch.set_float32_matmul_precision("medium")`, `torch.set_default_dtype(float64)` (and back to a copy of
the input's dtype), `torch.set_default_device("cpu")`, `torch.backends.mkldnn.enabled`,
`torch.backends.opt_einsum.strategy`, `os.environ[...]`, `os.chdir`, `logging.getLogger(...).setLevel`,
a logging handler added, `warnings.simplefilter("error", UserWarning)` left on, `torch.set_printoptions`,
`np.seterr`, `sys.setrecursionlimit`, `torch._C._set_grad_enabled(False)` in the loss after the forward,
`torch.autograd.set_grad_enabled` kept disabled across the backward (must be refused or restored), an
autocast cache off (`torch.set_autocast_cache_enabled(False)`). Prints PASS/FAIL per case and entry point."""
import logging
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn

import _common
from _common import main


def _extra_fp():
    lg = logging.getLogger("adv8.user")
    return {
        "cudnn": (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic, torch.backends.cudnn.enabled,
                  torch.backends.cudnn.allow_tf32),
        "mkldnn": torch.backends.mkldnn.enabled,
        "det_warn": torch.is_deterministic_algorithms_warn_only_enabled(),
        "anomaly": (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
        "default_device": str(torch.get_default_device()),
        "einsum": (torch.backends.opt_einsum.enabled, torch.backends.opt_einsum.strategy),
        "env": os.environ.get("ADV8_FLAG"),
        "log": (lg.level, len(lg.handlers), logging.getLogger().level, lg.propagate, lg.disabled),
        "inference": torch.is_inference_mode_enabled(),
        "interop": torch.get_num_interop_threads(),
        "ac_cache": torch.is_autocast_cache_enabled(),
        "cuda_tf32": torch.backends.cuda.matmul.allow_tf32,
        "bf16_red": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    }


_orig = _common.global_fp
_common.global_fp = lambda: {**_orig(), **_extra_fp()}


def _saved():
    return (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic, torch.backends.cudnn.enabled,
            torch.backends.mkldnn.enabled, torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(), torch.get_num_threads(), torch.is_anomaly_enabled(),
            torch.get_default_dtype(), torch.backends.opt_einsum.strategy, os.environ.get("ADV8_FLAG"),
            logging.getLogger("adv8.user").level, list(logging.getLogger("adv8.user").handlers), warnings.filters[:],
            sys.getrecursionlimit(), torch.is_autocast_cache_enabled(), os.getcwd(), torch.is_grad_enabled(),
            torch.backends.cuda.matmul.allow_tf32)


def _reset(s):
    (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic, torch.backends.cudnn.enabled,
     torch.backends.mkldnn.enabled) = s[:4]
    torch.use_deterministic_algorithms(s[4], warn_only=s[5])
    torch.set_num_threads(s[6])
    torch.autograd.set_detect_anomaly(s[7])
    torch.set_default_dtype(s[8])
    torch.backends.opt_einsum.strategy = s[9]
    if s[10] is None:
        os.environ.pop("ADV8_FLAG", None)
    else:
        os.environ["ADV8_FLAG"] = s[10]
    lg = logging.getLogger("adv8.user")
    lg.setLevel(s[11])
    lg.handlers[:] = s[12]
    warnings.filters[:] = s[13]
    sys.setrecursionlimit(s[14])
    torch.set_autocast_cache_enabled(s[15])
    os.chdir(s[16])
    torch.set_grad_enabled(s[17])
    torch.backends.cuda.matmul.allow_tf32 = s[18]


SWITCHES = {
    "cudnn_benchmark": lambda: setattr(torch.backends.cudnn, "benchmark", not torch.backends.cudnn.benchmark),
    "cudnn_deterministic": lambda: setattr(torch.backends.cudnn, "deterministic", True),
    "cudnn_enabled_off": lambda: setattr(torch.backends.cudnn, "enabled", False),
    "mkldnn_off": lambda: setattr(torch.backends.mkldnn, "enabled", False),
    "deterministic_warn_only": lambda: torch.use_deterministic_algorithms(True, warn_only=True),
    "num_threads_1": lambda: torch.set_num_threads(1),
    "anomaly_on": lambda: torch.autograd.set_detect_anomaly(True),
    "matmul_precision_medium": lambda: torch.set_float32_matmul_precision("medium"),
    "einsum_strategy": lambda: setattr(torch.backends.opt_einsum, "strategy", "greedy"),
    "env_var": lambda: os.environ.__setitem__("ADV8_FLAG", str(int(os.environ.get("ADV8_FLAG", "0")) + 1)),
    "chdir": lambda: os.chdir("/tmp"),
    "logger_level": lambda: logging.getLogger("adv8.user").setLevel(logging.DEBUG),
    "logger_handler": lambda: logging.getLogger("adv8.user").addHandler(logging.NullHandler()),
    "warnings_error": lambda: warnings.simplefilter("error", DeprecationWarning),
    "np_seterr": lambda: np.seterr(all="raise"),
    "recursionlimit": lambda: sys.setrecursionlimit(sys.getrecursionlimit() + 1),
    "autocast_cache_off": lambda: torch.set_autocast_cache_enabled(False),
    "tf32": lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", True),
    "printoptions": lambda: torch.set_printoptions(precision=2),
}


class Flip(nn.Module):
    def __init__(self, flip):
        super().__init__()
        self.flip = flip
        self.l = nn.Linear(8, 2)

    def forward(self, x):
        self.flip()
        return self.l(x)


def _case(name):
    def setup():
        torch.manual_seed(0)
        m = Flip(SWITCHES[name])
        return m, torch.randn(4, 8), lambda mm, b: mm(b).pow(2).mean(), torch.optim.SGD(m.parameters(), lr=0.1), {"m": m}
    return setup


def grad_off_in_loss():
    torch.manual_seed(0)
    m = nn.Linear(8, 2)

    def l(mm, b):
        out = mm(b).pow(2).mean()
        torch.set_grad_enabled(False)  # left off: the backward still works on the graph made above
        return out
    return m, torch.randn(4, 8), l, torch.optim.SGD(m.parameters(), lr=0.1), {"m": m}


def default_dtype_in_forward():
    torch.manual_seed(0)
    m = nn.Linear(8, 2)
    inner = m.forward

    def fwd(x):
        torch.set_default_dtype(torch.float64)
        return inner(x)
    m.forward = fwd
    return m, torch.randn(4, 8), lambda mm, b: mm(b).pow(2).mean(), torch.optim.SGD(m.parameters(), lr=0.1), {"m": m}


CASES = {**{k: _case(k) for k in SWITCHES}, "grad_off_in_loss": grad_off_in_loss,
         "default_dtype_in_forward": default_dtype_in_forward}

if __name__ == "__main__":
    only = sys.argv[1] if len(sys.argv) > 1 else None
    ok = True
    for name, setup in CASES.items():
        if only and name != only:
            continue
        s = _saved()
        ok &= main(name, setup)
        _reset(s)
    print("ALL PASS" if ok else "SOME FAIL")
