"""Process-wide state the user set before calling an entry point: a SIGINT handler of the user's,
sys.excepthook, threading.excepthook, warnings filters (a custom 'error' filter), torch print
options, torch threads, env vars, logging handlers/levels, torch.backends flags (sdp kernels,
mkldnn, opt_einsum, cudnn), flush-denormal, torch default dtype float64, autograd anomaly mode,
the user's forward that itself changes some of these (print options, sdp flag, a logging level, an env var).
Prints PASS/FAIL per entry point."""
import logging
import os
import signal
import sys
import threading
import warnings

import torch

from _common import main


def _user_sigint(sig, frame):
    raise KeyboardInterrupt


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8, 2)

    def forward(self, x):
        torch.set_printoptions(precision=2)
        torch.backends.cuda.enable_math_sdp(False)
        logging.getLogger("user.model").setLevel(logging.ERROR)
        os.environ["USER_FWD_FLAG"] = "1"
        torch.backends.mkldnn.enabled = False
        return self.l(x)


def state():
    return {
        "sigint": signal.getsignal(signal.SIGINT), "excepthook": sys.excepthook, "thook": threading.excepthook,
        "filters": list(warnings.filters), "print": repr(torch._tensor_str.PRINT_OPTS.__dict__),
        "threads": torch.get_num_threads(), "env": dict(os.environ),
        "log": (logging.getLogger().level, list(logging.getLogger().handlers), logging.getLogger("user.model").level),
        "sdp": (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.math_sdp_enabled(),
                torch.backends.cuda.mem_efficient_sdp_enabled()),
        "mkldnn": torch.backends.mkldnn.enabled, "einsum": torch.backends.opt_einsum.enabled,
        "dtype": torch.get_default_dtype(), "anomaly": torch.is_anomaly_enabled(),
    }


def setup():
    signal.signal(signal.SIGINT, _user_sigint)
    sys.excepthook = lambda *a: None
    warnings.filterwarnings("error", message="user-specific")
    torch.set_printoptions(precision=6, sci_mode=False)
    torch.set_num_threads(1)
    logging.getLogger().setLevel(logging.INFO)
    torch.backends.cuda.enable_math_sdp(True)
    torch.backends.mkldnn.enabled = True
    os.environ.pop("USER_FWD_FLAG", None)
    logging.getLogger("user.model").setLevel(logging.DEBUG)
    torch.manual_seed(0)
    m = Net()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    return m, torch.randn(4, 8), (lambda mm, b: mm(b).sum()), opt, {"m": m}


if __name__ == "__main__":
    main("process state", setup, extra=lambda w: state())
