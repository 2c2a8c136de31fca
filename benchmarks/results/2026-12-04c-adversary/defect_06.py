"""A Ctrl-C while fit() puts back its forked loader read leaves PyTorch's SIGCHLD handler installed.

planner/_read_aside.read_batches' `finally` (join the copy, put file offsets back, put the SIGCHLD
handler back) was not protected: a KeyboardInterrupt landing in `it._shutdown_workers()` (joining the
worker can take a while; that is when users press Ctrl-C) skips the rest. Simulated with a real
SIGINT sent when the clean-up starts. Prints PASS/FAIL."""
import os
import signal
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

import vramnb

loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
handler = signal.getsignal(signal.SIGCHLD)


def tracer(frame, event, arg):
    if (event == "call" and frame.f_code.co_name == "_shutdown_workers" and frame.f_back is not None
            and frame.f_back.f_code.co_name == "read_batches"):
        sys.settrace(None)
        os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C
    return None


sys.settrace(tracer)
try:
    vramnb.fit(torch.nn.Linear(8, 1), loader, lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1]),
               target="24GiB", progress=False)
    print("fit finished without the interrupt (not reproduced)")
except KeyboardInterrupt:
    print("KeyboardInterrupt raised (as it should be)")
sys.settrace(None)
now = signal.getsignal(signal.SIGCHLD)
print(f"SIGCHLD handler: {handler!r} -> {now!r}")
print("PASS" if now == handler else "FAIL")
