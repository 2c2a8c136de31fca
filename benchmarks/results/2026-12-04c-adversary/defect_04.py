"""While an estimate for a CUDA card runs, another thread's CPU autocast silently runs in float32.

CudaPolicy replaces PyTorch's AutocastCPU kernels (and sdpa/dropout) for the whole process; in any
thread but the estimate's they ran "the operator plainly" with autocast off: a user's thread training
under torch.autocast("cpu", dtype=torch.bfloat16) gets float32 linear/conv/bmm/attention outputs (twice
the activation memory, other numerics) for as long as the estimate (or a whole fit) runs.
Prints PASS/FAIL."""
import threading

import torch
import torch.nn.functional as F

import vramnb

in_est, done = threading.Event(), threading.Event()
got = {}


def loss_fn(m, b):
    in_est.set()
    done.wait(30)  # the user's thread runs while the estimate's step is inside
    return m(b).sum()


def step_under_autocast(out):
    x, w = torch.randn(2, 4), torch.randn(3, 4)
    q = torch.randn(1, 2, 4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out["linear"] = F.linear(x, w).dtype
        out["conv1d"] = F.conv1d(torch.randn(1, 4, 5), torch.randn(2, 4, 3)).dtype
        out["bmm"] = torch.bmm(torch.randn(1, 2, 4), torch.randn(1, 4, 3)).dtype
        out["sdpa"] = F.scaled_dot_product_attention(q, q, q).dtype


def user_thread():
    in_est.wait(30)
    step_under_autocast(got)
    done.set()


plain = {}
step_under_autocast(plain)
t = threading.Thread(target=user_thread)
t.start()
vramnb.estimate(torch.nn.Linear(4, 4), torch.ones(2, 4), loss_fn, target="24GiB")
t.join()
print("without an estimate:", {k: str(v) for k, v in plain.items()})
print("during an estimate :", {k: str(v) for k, v in got.items()})
print("PASS" if got == plain else "FAIL")
