"""`profile_distributed` seen from the parent (the notebook's process): the user's model and optimizer
passed as `args` (forked into the ranks), the parent's global state (RNGs, settings, warnings filters,
excepthooks, signal handlers, environment, cwd), PyTorch's global module hooks, open files' offsets,
child processes left, and the same after a rank raises, after a rank exits with `os._exit`, after a rank
that hangs past `timeout`, and after a Ctrl-C in the parent while the ranks run. Prints PASS/FAIL per case."""
import _thread
import os
import signal
import sys
import tempfile
import threading
import time

import torch
import torch.nn as nn

import vramnb
from _common import fingerprint, global_fp, diff

TMP = tempfile.TemporaryFile("w+")
TMP.write("0123456789")
TMP.seek(3)


def ddp_fn(rank, world, model, opt, mode):
    if mode == "raise" and rank == 1:
        raise RuntimeError("user error in rank 1")
    if mode == "exit" and rank == 1:
        os._exit(3)
    if mode == "hang" and rank == 1:
        time.sleep(600)
    torch.manual_seed(rank)
    model.train()
    TMP.seek(0)
    TMP.read(2)  # the rank moves its copy's offset (a shared open file description!)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    o = torch.optim.SGD(ddp.parameters(), lr=0.1)
    return ddp, torch.randn(4, 8), (lambda m, b: m(b).pow(2).mean()), o


def setup():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    o = torch.optim.Adam(m.parameters(), lr=1e-3)
    m(torch.randn(4, 8)).sum().backward(); o.step(); o.zero_grad()
    return m, o


def parent_state():
    return {"sigchld": repr(signal.getsignal(signal.SIGCHLD)), "sigterm": repr(signal.getsignal(signal.SIGTERM)),
            "env": sorted(os.environ.items()), "children": sorted(_children()), "file_offset": TMP.tell(),
            "manual_seed": repr(torch.manual_seed), "dist_init": torch.distributed.is_available() and torch.distributed.is_initialized(),
            "threads_alive": sorted(t.name for t in threading.enumerate())}


def _children():
    me = os.getpid()
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    if int(f.read().split(")")[1].split()[1]) == me:
                        out.append(p)
            except OSError:
                pass
    return out


def main(only=None):
    ok = True
    tried = held = 0
    for mode in ("ok", "raise", "exit", "hang", "interrupt"):
        if only and mode != only:
            continue
        m, o = setup()
        before = {**fingerprint({"m": m, "o": o}), **{f"g.{k}": v for k, v in global_fp().items()}, **{f"p.{k}": v for k, v in parent_state().items()}}
        got = None
        timer = None
        if mode == "interrupt":
            timer = threading.Timer(6.0, _thread.interrupt_main)
            timer.start()
        try:
            r = vramnb.profile_distributed(ddp_fn, nprocs=2, args=(m, o, mode), backend="gloo",
                                           timeout=20 if mode == "hang" else 300, grace=3)
            got = f"finished: {type(r).__name__}" + (f" errors: {[str(x)[:80] for x in getattr(r, 'errors', [])][:2]}" if getattr(r, "errors", None) else "")
        except KeyboardInterrupt:
            got = "KeyboardInterrupt"
        except Exception as e:  # noqa: BLE001
            got = f"{type(e).__name__}: {str(e)[:200]}"
        if timer:
            timer.cancel()
        time.sleep(0.5)
        after = {**fingerprint({"m": m, "o": o}), **{f"g.{k}": v for k, v in global_fp().items()}, **{f"p.{k}": v for k, v in parent_state().items()}}
        d = diff(before, after, n=10)
        tried += 1
        if d:
            ok = False
            print(f"FAIL profile_distributed / {mode} ({got}):")
            for line in d:
                print("    ", line)
        else:
            held += 1
            print(f"PASS profile_distributed / {mode}: {got}")
    print(f"tried {tried}, held {held}")
    print("PASS" if ok else "FAIL")


if __name__ == "__main__":
    main(*sys.argv[1:])
