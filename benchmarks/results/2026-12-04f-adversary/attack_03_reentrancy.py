"""Re-entrancy: the user's own code, run by an entry point, itself calls vramnb. A loss function that
profiles or estimates a second (probe) model or the same model, a forward hook that measures with
`vramnb.vram()`, reads `vramnb.history()`/`session_peak()`, a loss that calls `compare`/`fit`/`max_batch_size`.
For every (outer entry point, inner call) pair: the outer call must finish or refuse clearly (no hang:
each run has a time limit), everything of the user's (both models, both optimizers, global state) must
be as before, and a plain `profile_step` + `estimate` afterwards must run and give the same bytes as
before the nested run (no vramnb state left behind: locks, exclusive owner, patched functions, modes).
Prints PASS/FAIL per pair."""
import sys
import threading

import torch
import torch.nn as nn

import vramnb
from _common import fingerprint, global_fp, diff


def make(seed, width=16):
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.BatchNorm1d(width), nn.Linear(width, 2))
    o = torch.optim.Adam(m.parameters(), lr=1e-3)
    b = torch.randn(4, 8)
    m(b).pow(2).mean().backward(); o.step(); o.zero_grad()
    return m, o, b


def plain_loss(m, b):
    return m(b).pow(2).mean()


STATE: dict = {}
INNER_ERRORS: list = []


def inner_calls(p, po, pb):
    return {
        "profile_step(probe)": lambda: vramnb.profile_step(p, pb, plain_loss, po),
        "estimate(probe)": lambda: vramnb.estimate(p, pb, plain_loss, po, target="8GiB"),
        "compare(probe)": lambda: vramnb.compare(p, pb, plain_loss, po, toggles={"precision": ["fp32", "bf16"]}, progress=False),
        "max_batch_size(probe)": lambda: vramnb.max_batch_size(p, pb, plain_loss, po, target="8GiB", progress=False, limit=16),
        "fit(probe)": lambda: vramnb.fit(p, pb, plain_loss, po, target="8GiB", progress=False),
        "vram() block": lambda: _vram_block(),
        "history/session_peak": lambda: (vramnb.history(), vramnb.session_peak()),
        "profile_step(same model)": lambda: vramnb.profile_step(STATE["m"], STATE["b"], plain_loss, STATE["o"]),
        "estimate(same model)": lambda: vramnb.estimate(STATE["m"], STATE["b"], plain_loss, STATE["o"], target="8GiB"),
    }


def _vram_block():
    with vramnb.vram("cpu"):
        torch.zeros(1000).sum()


OUTER = {
    "profile_step": lambda m, b, l, o: vramnb.profile_step(m, b, l, o),
    "compare": lambda m, b, l, o: vramnb.compare(m, b, l, o, toggles={"precision": ["fp32", "bf16"]}, progress=False),
    "estimate": lambda m, b, l, o: vramnb.estimate(m, b, l, o, target="8GiB"),
    "fit": lambda m, b, l, o: vramnb.fit(m, b, l, o, target="8GiB", progress=False),
}


def baseline():
    m, o, b = make(5)
    r = vramnb.profile_step(m, b, plain_loss, o)
    e = vramnb.estimate(m, b, plain_loss, o, target="8GiB")
    step = {k: v for k, v in r.peak.sources.items() if k != "other"}  # "other": whatever else is alive in the process
    return step, e.peak


def run_with_limit(fn, seconds=240):
    box = {}

    def target():
        try:
            box["r"] = fn()
        except BaseException as e:  # noqa: BLE001
            box["e"] = e
    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        return "HANG", None
    return box.get("r"), box.get("e")


def main(only_outer=None, only_inner=None):
    ok = True
    base = baseline()
    tried = held = 0
    for oname, outer in OUTER.items():
        if only_outer and oname != only_outer:
            continue
        for iname in inner_calls(None, None, None):
            if only_inner and iname != only_inner:
                continue
            m, o, b = make(0)
            p, po, pb = make(1, width=8)
            STATE.update(m=m, o=o, b=b)
            calls = inner_calls(p, po, pb)
            INNER_ERRORS.clear()
            done = {"n": 0}

            def loss(mm, bb, _call=calls[iname]):
                out = mm(bb).pow(2).mean()
                if done["n"] == 0:
                    done["n"] = 1
                    try:
                        _call()
                    except Exception as e:  # noqa: BLE001
                        INNER_ERRORS.append(f"{type(e).__name__}: {str(e)[:200]}")
                return out
            watched = {"m": m, "o": o, "p": p, "po": po, "b": b, "pb": pb}
            before = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
            r, err = run_with_limit(lambda: outer(m, b, loss, o))
            after = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
            d = diff(before, after)
            if r == "HANG":
                d.insert(0, "the outer call did not finish in 240 s (hang)")
            elif err is not None and not isinstance(err, (ValueError, TypeError, vramnb.VramnbError)):
                d.insert(0, f"the outer call raised {type(err).__name__}: {str(err)[:300]}")
            if r != "HANG":
                r2, e2 = run_with_limit(baseline, 240)
                if r2 == "HANG" or e2 is not None or r2 != base:
                    d.append(f"a later plain profile_step/estimate gave {r2!r} / {e2!r}, before {base!r}")
            tried += 1
            inner = INNER_ERRORS[0] if INNER_ERRORS else "ran"
            if d:
                ok = False
                print(f"FAIL {oname} ⊃ {iname} (inner: {inner}):")
                for line in d:
                    print("    ", line)
            else:
                held += 1
                print(f"PASS {oname} ⊃ {iname}: inner {inner}" + (f"; outer raised {type(err).__name__}: {str(err)[:150]}" if err else ""))
            if r == "HANG":
                print("stopping: a thread hangs")
                print(f"tried {tried}, held {held}")
                print("FAIL")
                return
    print(f"tried {tried}, held {held}")
    print("PASS" if ok else "FAIL")


if __name__ == "__main__":
    main(*sys.argv[1:])
