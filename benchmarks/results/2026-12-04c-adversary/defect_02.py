"""Two entry points in two threads, overlapping: the process is left changed for good.

Thread A runs profile_step; while its step runs, thread B starts an estimate, which finds A's
state mid-step (torch.compiler stance "force_eager", the RNG after A's dropout) as "the state
found" and puts it back after A restored its own: every torch.compile'd function of the user
then runs eagerly for the rest of the process, and torch's RNG is not where it was.
Prints PASS/FAIL."""
import threading

import torch
import torch._dynamo  # noqa: F401 - a notebook that uses torch.compile has it imported
from torch._dynamo import eval_frame

import vramnb

torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))
opt = torch.optim.SGD(m.parameters(), lr=0.1)
x = torch.randn(4, 8)
other, other_x = torch.nn.Linear(8, 8), torch.randn(4, 8)
stance0, rng0 = eval_frame._stance.stance, torch.get_rng_state()
a_mid, b_in, a_done = threading.Event(), threading.Event(), threading.Event()


def loss_a(model, batch):
    y = model(batch).sum()  # dropout draws from the RNG
    a_mid.set()
    b_in.wait(30)
    return y


def loss_b(model, batch):
    b_in.set()
    a_done.wait(30)  # A finishes while B's estimate runs
    return model(batch).sum()


def a():
    vramnb.profile_step(m, x, loss_a, opt)
    a_done.set()


def b():
    a_mid.wait(30)
    vramnb.estimate(other, other_x, loss_b, target="24GiB")


ta, tb = threading.Thread(target=a), threading.Thread(target=b)
ta.start(); tb.start(); ta.join(); tb.join()
stance, rng_same = eval_frame._stance.stance, torch.equal(rng0, torch.get_rng_state())
print(f"compiler stance {stance0!r} -> {stance!r}; torch RNG as found: {rng_same}")
print("PASS" if stance == stance0 and rng_same else "FAIL")
