"""The panel (round f's session: *Run step* at every technique with "predict it on the card too", *Make it fit*,
*Apply*, *Run step*, a failing loss, `close()`) and the `%%vram` cell magic + `%vram fit` line magic on this
round's models: stateful modules (attack 01), training helpers (attack 02), streams read by the loss (attack 05).
A deep fingerprint of the user's objects and the global state before and after. Prints PASS/FAIL per case."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-12-04f-adversary"))
sys.path.insert(0, HERE)

import attack_08_panel as f08  # noqa: E402
import attack_01_stateful_modules as a1  # noqa: E402
import attack_02_training_helpers as a2  # noqa: E402
import attack_05_data_pipelines_in_the_step as a5  # noqa: E402
from _common import diff, fingerprint, global_fp, reset_globals, save_globals  # noqa: E402

CASES = {**{f"a1.{k}": v for k, v in a1.CASES.items() if k in ("spectral_param", "bn_cumulative", "pruned", "weight_norm_param", "counting_module")},
         **{f"a2.{k}": v for k, v in a2.CASES.items() if k in ("sched_onecycle", "grad_scaler", "zero_grad_patched", "tensor_lr_and_user_keys")},
         **{f"a5.{k}": v for k, v in a5.CASES.items() if k in ("file_backed_dataset", "bytesio_stream", "dataset_with_rngs")}}


def magics(m, b, l, o):
    from IPython.core.interactiveshell import InteractiveShell
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "vramnb")
    sh.user_ns.update(m=m, b=b, l=l, o=o)
    errs = []
    for cell in ["%%vram\nloss = l(m, b)\nloss.backward()\no.step()\no.zero_grad()\nm.zero_grad(set_to_none=True)",
                 "%vram fit m b l o --target 8GiB"]:
        r = sh.run_cell(cell)
        if r.error_in_exec is not None or r.error_before_exec is not None:
            errs.append(repr(r.error_in_exec or r.error_before_exec)[:160])
    return errs


def main(only=None):
    ok = True
    tried = held = 0
    for name, setup in CASES.items():
        if only and name != only:
            continue
        for what in ("panel", "magics"):
            g = save_globals()
            m, b, l, o, watched = setup()
            err = None
            if what == "magics":  # the %%vram cell trains on purpose: only %vram fit is checked for changes
                try:
                    magics(m, b, l, o)
                except Exception as e:  # noqa: BLE001
                    err = f"{type(e).__name__}: {e}"
                m, b, l, o, watched = setup()
                from IPython.core.interactiveshell import InteractiveShell
                sh = InteractiveShell.instance()
                sh.user_ns.update(m=m, b=b, l=l, o=o)
                before = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
                r = sh.run_cell("%vram fit m b l o --target 8GiB")
                if r.error_in_exec is not None:
                    err = f"{type(r.error_in_exec).__name__}: {str(r.error_in_exec)[:200]}"
            else:
                before = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
                try:
                    f08.session(m, b, l, o)
                except Exception as e:  # noqa: BLE001
                    err = f"{type(e).__name__}: {str(e)[:300]}"
            after = {**fingerprint(watched), **{f"g.{k}": v for k, v in global_fp().items()}}
            reset_globals(g)
            d = diff(before, after)
            tried += 1
            if d or (err and not err.startswith(("InputError", "ValueError", "UsageError"))):
                ok = False
                print(f"FAIL {what} / {name}: {'(raised ' + err + ') ' if err else ''}changed:")
                for line in d:
                    print("    ", line)
            else:
                held += 1
                print(f"PASS {what} / {name}" + (f" (raised: {err[:200]})" if err else ""))
    print(f"tried {tried}, held {held}")
    print("PASS" if ok else "FAIL")


if __name__ == "__main__":
    main(*sys.argv[1:])
