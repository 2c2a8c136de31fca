"""profile_step in one thread reverts a model another thread trains meanwhile.

_reach's process-wide forward pre-hook and optimizer step pre-hook record every module that runs
and every optimizer that steps, in any thread; the restore then puts them back: the other thread's
training steps (weights, optimizer state) are undone. Prints PASS/FAIL."""
import threading

import torch

import vramnb

torch.manual_seed(0)
m1 = torch.nn.Linear(8, 8)
opt1 = torch.optim.SGD(m1.parameters(), lr=0.1)
m2 = torch.nn.Linear(8, 8)                      # trained by the user's own thread
opt2 = torch.optim.Adam(m2.parameters(), lr=0.1)
x = torch.randn(4, 8)
in_step, trained = threading.Event(), threading.Event()


def loss_fn(model, batch):
    in_step.set()
    trained.wait(10)  # the other thread trains while the step runs
    return model(batch).sum()


def train_other():
    in_step.wait(10)
    for _ in range(3):
        opt2.zero_grad()
        m2(x).pow(2).sum().backward()
        opt2.step()
    trained.set()


t = threading.Thread(target=train_other)
t.start()
w_before = m2.weight.detach().clone()
vramnb.profile_step(m1, x, loss_fn, opt1)
t.join()
steps = opt2.state[m2.weight]["step"].item() if m2.weight in opt2.state else 0
changed = not torch.equal(m2.weight.detach(), w_before)
print(f"other thread's model trained 3 steps: weights changed={changed}, Adam step={steps}")
print("PASS" if changed and steps == 3 else "FAIL")
