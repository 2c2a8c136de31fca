"""A Ctrl-C as a measured block (every %%vram cell, %vram on, vramnb.vram()) starts or ends leaves it half open.

Found by a sweep sending a real SIGINT at each of the 159 calls into vramnb of one `with vramnb.vram("cpu")`
block: (a) landing in StorageTracker.tracking() between counting the thread and entering its mode, the
count stays (one more per interrupted cell; the tracker then takes this thread as tracking for good);
(b) landing in `_reset_watch` (the `with` that opens the block), the block's ExitStack is never closed: the
tracker's dispatch mode and the patched UntypedStorage.resize_ stay installed, and an UnboundLocalError
('resets') replaces the KeyboardInterrupt; (c) landing in the block's clean-up, a CastCache stays in the
tracker's watches (one more per interrupted cell). Prints PASS/FAIL."""
import signal
import sys

import torch

import vramnb
from vramnb import _measure
from vramnb._tracker import cpu_tracker


def state():
    t = cpu_tracker()
    return (torch._C._len_torch_dispatch_stack(), torch.UntypedStorage.resize_, dict(t._tracking), len(t.watches),
            len(_measure._ACTIVE))


with vramnb.vram("cpu", warn=False):
    torch.ones(10)
before = state()
results = {}
for name, caller in [("_patch_acquire", "tracking"), ("_reset_watch", None), ("_unwatch", None)]:
    sent = []

    def tracer(frame, event, arg, name=name, caller=caller, sent=sent):
        if (event == "call" and not sent and frame.f_code.co_name == name and "/vramnb/" in frame.f_code.co_filename
                and (caller is None or (frame.f_back is not None and frame.f_back.f_code.co_name == caller))):
            sent.append(1)
            signal.raise_signal(signal.SIGINT)  # a real Ctrl-C
        return None

    sys.settrace(tracer)
    raised = None
    try:
        with vramnb.vram("cpu", warn=False):
            torch.ones(1000)
    except BaseException as e:  # noqa: BLE001
        raised = type(e).__name__
    finally:
        sys.settrace(None)
    after = state()
    results[name] = (raised, after == before)
    print(f"Ctrl-C in {name}: raised {raised}; block state as before: {after == before} {'' if after == before else after}")
    before = after
print("PASS" if all(r == ("KeyboardInterrupt", True) for r in results.values()) else "FAIL")
