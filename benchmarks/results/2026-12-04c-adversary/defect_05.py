"""estimate() takes the user's global module hooks out of PyTorch's dicts for the whole process.

predict/_user_hooks.without_user_global_hooks clears the user's global hooks from
torch.nn.modules.module._global_forward_hooks (and the other five dicts) while the fake step runs,
and puts the found entries back after: (a) the user's other thread's modules run without the
user's global hooks meanwhile (a logging/monitoring hook misses those calls), (b) a hook the user
removes meanwhile (handle.remove()) comes back after the estimate and runs again.
Prints PASS/FAIL."""
import threading

import torch
from torch.nn.modules.module import register_module_forward_hook

import vramnb

log = []
handle = register_module_forward_hook(lambda mod, args, out: log.append(type(mod).__name__))
user_model = torch.nn.Linear(4, 4)
in_est, done = threading.Event(), threading.Event()
seen = {}


def loss_fn(m, b):
    in_est.set()
    done.wait(30)
    return m(b).sum()


def user_thread():
    in_est.wait(30)
    n = len(log)
    user_model(torch.ones(1, 4))
    seen["hook ran in the user's thread"] = len(log) > n
    handle.remove()  # the user is done with it
    done.set()


t = threading.Thread(target=user_thread)
t.start()
vramnb.estimate(torch.nn.Linear(4, 4), torch.ones(2, 4), loss_fn, target="24GiB")
t.join()
n = len(log)
user_model(torch.ones(1, 4))
seen["removed hook runs again after"] = len(log) > n
print(seen)
print("PASS" if seen["hook ran in the user's thread"] and not seen["removed hook runs again after"] else "FAIL")
