"""The panel (never attacked before): `vramnb.panel(..., display=False)` on the models of attacks 04 and 06
(generators in helper objects, configs, hooks; pydantic/attrs/slots configs; a noisy optimizer), then
*Run step* with the controls at each technique setting (precision, checkpointing, freeze, LoRA, optimizer,
micro-batches, activation offload, zero_grad, mode) with "predict it on the card too" ticked, *Make it fit*
and *Apply* of its first plan, then *Run step* again, a run whose loss raises, and `close()`. A deep
fingerprint of the user's objects and the global state before and after the whole session. Prints
PASS/FAIL per case."""
import sys

import torch

import vramnb
from _common import fingerprint, global_fp, diff, save_globals, reset_globals
import attack_04_rng_objects as a4
import attack_06_configs as a6
import attack_01_registration_and_state_dict_hooks as a1

SETTINGS = [("precision", "bf16"), ("checkpointing", "every block"), ("freeze", "embeddings"), ("lora", "r=8"),
            ("optimizer", "SGD"), ("micro_batches", 2), ("activation_offload", "CPU"), ("zero_grad", "zeros"),
            ("mode", "no_grad"), ("batch_size", 2)]


def hooks_model():
    m, b, l, o = a1.model()
    a1.LOG.clear()
    a1.hooks(m, o)
    return m, b, l, o, {"m": m, "o": o, "LOG": a1.LOG}


CASES = {**{f"a4.{k}": v for k, v in a4.CASES.items()}, **{f"a6.{k}": v for k, v in a6.CASES.items()}, "a1.hooks": hooks_model}


def session(m, b, l, o):
    notes = []
    p = vramnb.panel(m, b, l, o, target="8GiB", display=False, predict=True)
    for name, value in [(None, None), *SETTINGS]:
        for ctl in p.controls.values():
            ctl.index = 0 if None not in [v for _, v in ctl.options] else ctl.index
        if name is not None:
            if value not in [v for _, v in p.controls[name].options]:
                continue
            p.controls[name].value = value
        rec = p.run()
        if rec is not None and rec.get("error"):
            notes.append(f"{name}={value}: {str(rec.get('error'))[:100]}")
    res = p.make_it_fit()
    if res is not None and getattr(res, "plans", None):
        p.apply(res.plans[0].recipe if hasattr(res.plans[0], "recipe") else res.plans[0])
        p.run()
    p.loss_fn = lambda mm, bb: (_ for _ in ()).throw(RuntimeError("user loss failed"))
    rec = p.run()
    p.close()
    return notes


def main(only=None):
    ok = True
    tried = held = 0
    for name, setup in CASES.items():
        if only and name != only:
            continue
        g = save_globals()
        m, b, l, o, watched = setup()
        before = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
        err = None
        try:
            notes = session(m, b, l, o)
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {str(e)[:300]}"
            notes = []
        after = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
        reset_globals(g)
        d = diff(before, after)
        tried += 1
        if d or (err and not err.startswith(("InputError", "ValueError"))):
            ok = False
            print(f"FAIL panel / {name}: {'(raised ' + err + ') ' if err else ''}changed:")
            for line in d:
                print("    ", line)
        else:
            held += 1
            print(f"PASS panel / {name}" + (f" (raised: {err})" if err else "") + (f" runs refused: {notes[:3]}" if notes else ""))
    print(f"tried {tried}, held {held}")
    print("PASS" if ok else "FAIL")


if __name__ == "__main__":
    main(*sys.argv[1:])
