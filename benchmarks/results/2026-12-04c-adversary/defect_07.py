"""A Ctrl-C as an entry point starts leaves torch.compile's stance at "force_eager" for good.

_compiled.compiled_eagerly sets the stance inside `with held_back():` and opens its `try` (whose
`finally` puts the stance back) only after: an interrupt held back there is raised when held_back
ends, outside the try. Every torch.compile'd function of the user's then runs eagerly for the rest
of the process. Found by a sweep sending a real SIGINT at each of an estimate's first ~3200 calls
into vramnb (one in 11): call 45 is that held_back's __exit__. Prints PASS/FAIL."""
import signal
import sys

import torch
import torch._dynamo  # noqa: F401 - a notebook that uses torch.compile has it imported
from torch._dynamo import eval_frame

import vramnb

model, batch = torch.nn.Linear(8, 2), torch.randn(4, 8)
sent = []


def tracer(frame, event, arg):
    if (event == "call" and not sent and frame.f_code.co_name == "__exit__" and frame.f_back is not None
            and frame.f_back.f_code.co_name == "compiled_eagerly"):
        sent.append(1)
        signal.raise_signal(signal.SIGINT)  # a real Ctrl-C, landing where held_back holds it
    return None


sys.settrace(tracer)
try:
    vramnb.estimate(model, batch, lambda m, b: m(b).sum(), target="24GiB")
except KeyboardInterrupt:
    print("KeyboardInterrupt raised (as it should be)")
finally:
    sys.settrace(None)
f = torch.compile(lambda t: t * 2, backend="eager")
print(f"stance after: {eval_frame._stance.stance!r}")
print("PASS" if sent and eval_frame._stance.stance == "default" else "FAIL")
