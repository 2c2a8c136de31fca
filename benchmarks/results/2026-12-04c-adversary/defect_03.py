"""estimate() while another thread trains the same model: that thread's optimizer state is deleted.

UserState (predict/_fake_guard.py), the estimate's last line, diffs the user's gradients, slots and
optimizer state before/after and "puts back" every difference: the other thread's Adam state (made
during the estimate) is deleted, its gradients are set back to None, and the estimate raises a false
error blaming loss_fn ("loss_fn uses the notebook's model, not its first argument").
Prints PASS/FAIL."""
import threading

import torch

import vramnb

torch.manual_seed(0)
m = torch.nn.Linear(8, 8)
opt = torch.optim.Adam(m.parameters(), lr=0.1)
x = torch.randn(4, 8)
in_step, trained = threading.Event(), threading.Event()


def loss_fn(model, batch):  # uses its argument, as it should
    in_step.set()
    trained.wait(30)
    return model(batch).sum()


def train():
    in_step.wait(30)
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        m(x).pow(2).sum().backward()
        opt.step()
    trained.set()


t = threading.Thread(target=train)
t.start()
err = None
try:
    vramnb.estimate(m, x, loss_fn, opt, target="24GiB")
except Exception as e:  # noqa: BLE001
    err = e
t.join()
step = opt.state[m.weight]["step"].item() if m.weight in opt.state else None
print(f"estimate error: {None if err is None else str(err)[:90]!r}")
print(f"the other thread's Adam step: {step} (3 expected); grad kept: {m.weight.grad is not None}")
print("PASS" if err is None and step == 3 and m.weight.grad is not None else "FAIL")
