"""The reverse promise of `%%vram`: what the user's own cell changes on purpose must stay changed, as
without the magic (vramnb's guards put back only what vramnb changes). Each cell sets a process-wide
setting, seeds a generator, adds a warnings filter, a hook, an exception info, etc.; the same cell is
run plainly and under `%%vram`, `%%vram --breakdown`, and with `%vram on`, in fresh shells, and what the
next cell sees must be the same. Also: `sys.last_value`/`sys.last_traceback` (for `%debug`) after a
failing cell keep the user's frame locals, and `_`/`Out`/`_i` are as without the magic.
Prints PASS/FAIL per (cell, mode)."""
import sys

from IPython.core.interactiveshell import InteractiveShell

CELLS = {
    "manual_seed": "torch.manual_seed(123)",
    "default_dtype": "torch.set_default_dtype(torch.float64)",
    "grad_off": "torch.set_grad_enabled(False)",
    "deterministic": "torch.use_deterministic_algorithms(True)",
    "threads": "torch.set_num_threads(1)",
    "printoptions": "torch.set_printoptions(precision=2)",
    "anomaly": "torch.autograd.set_detect_anomaly(True)",
    "warnings_filter": "import warnings; warnings.filterwarnings('ignore', message='adv7-marker')",
    "numpy_seed": "np.random.seed(7)",
    "python_seed": "random.seed(7)",
    "global_hook": "H = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: None)",
    "flush_denormal": "torch.set_flush_denormal(True)",
    "matmul_precision": "torch.set_float32_matmul_precision('medium')",
    "cudnn_flag": "torch.backends.cudnn.benchmark = True",
    "env": "import os; os.environ['ADV7'] = '1'",
    "excepthook": "import sys; sys.excepthook = lambda *a: None",
    "np_seterr": "np.seterr(all='raise')",
    "mkldnn": "torch.backends.mkldnn.enabled = False",
    "checkpoint_debug": "torch.utils.checkpoint.set_checkpoint_debug_enabled(True)",
    "dynamo_config": "import torch._dynamo; torch._dynamo.config.cache_size_limit = 3",
    "default_device": "torch.set_default_device('meta')",
    "recursion": "sys.setrecursionlimit(4321)",
    "logging": "import logging; logging.getLogger('adv7').setLevel(logging.ERROR)",
    "train_model": "m = torch.nn.Linear(4, 4); opt = torch.optim.SGD(m.parameters(), lr=0.1); m(torch.randn(2, 4)).sum().backward(); opt.step()",
}

PROBE = """(
 hashlib.md5(bytes(torch.get_rng_state().tolist())).hexdigest(), str(torch.get_default_dtype()), torch.is_grad_enabled(),
 torch.are_deterministic_algorithms_enabled(), torch.get_num_threads(), torch._tensor_str.PRINT_OPTS.precision,
 torch.is_anomaly_enabled(), any('adv7-marker' in str(f[1]) for f in __import__('warnings').filters),
 hashlib.md5(repr(np.random.get_state()).encode()).hexdigest(), hash(random.getstate()),
 len(torch.nn.modules.module._global_forward_hooks), torch.get_float32_matmul_precision(),
 torch.backends.cudnn.benchmark, __import__('os').environ.get('ADV7'), repr(__import__('sys').excepthook)[:40],
 repr(np.geterr()), torch.backends.mkldnn.enabled, torch.utils.checkpoint._checkpoint_debug_enabled,
 __import__('torch._dynamo').config.cache_size_limit, str(torch.empty(1).device) if True else '',
 __import__('sys').getrecursionlimit(), __import__('logging').getLogger('adv7').level,
 [hashlib.md5(p.detach().numpy().tobytes()).hexdigest() for p in m.parameters()] if 'm' in dir() else None,
)"""

SETUP = "import torch, numpy as np, random, hashlib; torch.manual_seed(0); np.random.seed(0); random.seed(0)"


def observe(cell: str, mode: str):
    InteractiveShell.clear_instance()
    sh = InteractiveShell.instance()
    sh.run_cell(SETUP)
    sh.run_cell("torch.set_default_device('cpu')")
    if mode != "plain":
        sh.run_cell("%load_ext vramnb")
    if mode == "auto":
        sh.run_cell("%vram on")
    body = {"plain": cell, "auto": cell, "cell": "%%vram\n" + cell, "breakdown": "%%vram --breakdown\n" + cell}[mode]
    r = sh.run_cell(body)
    err = r.error_in_exec or r.error_before_exec
    if mode == "auto":
        sh.run_cell("%vram off")
    probe = sh.run_cell(PROBE).result
    # undo process-wide settings for the next shell
    sh.run_cell("torch.set_default_device('cpu'); torch.set_default_dtype(torch.float32); torch.set_grad_enabled(True); "
                "torch.use_deterministic_algorithms(False); torch.set_num_threads(2); torch.set_printoptions(profile='default'); "
                "torch.autograd.set_detect_anomaly(False); torch.set_flush_denormal(False); torch.set_float32_matmul_precision('highest'); "
                "torch.backends.cudnn.benchmark=False; import os, sys, logging; os.environ.pop('ADV7', None); sys.excepthook=sys.__excepthook__; "
                "np.seterr(all='warn'); np.seterr(under='ignore'); torch.backends.mkldnn.enabled=True; torch.utils.checkpoint.set_checkpoint_debug_enabled(None); "
                "import torch._dynamo; torch._dynamo.config.cache_size_limit=8; sys.setrecursionlimit(3000); logging.getLogger('adv7').setLevel(0); "
                "torch.nn.modules.module._global_forward_hooks.clear(); import warnings; warnings.filters[:] = [f for f in warnings.filters if 'adv7-marker' not in str(f[1])]")
    if mode != "plain":
        sh.run_cell("%unload_ext vramnb")
    return probe, err


def debug_info(mode: str):
    InteractiveShell.clear_instance()
    sh = InteractiveShell.instance()
    if mode != "plain":
        sh.run_cell("%load_ext vramnb")
    head = {"plain": "", "cell": "%%vram\n", "breakdown": "%%vram --breakdown\n"}[mode]
    sh.run_cell(head + "import torch\ndef f(n):\n    secret = torch.ones(n)\n    raise ValueError('boom')\nf(3)")
    tb = sys.last_traceback
    while tb.tb_next is not None:
        tb = tb.tb_next
    loc = tb.tb_frame.f_locals
    out = (type(sys.last_value).__name__, str(sys.last_value), sorted(loc), loc.get("n"), tuple(loc["secret"].shape) if "secret" in loc else None)
    r = sh.run_cell(head + "41 + 1")
    out2 = (r.result, sh.user_ns.get("_"), sorted(sh.user_ns.get("Out", {}).values()) if sh.user_ns.get("Out") else None)
    if mode != "plain":
        sh.run_cell("%unload_ext vramnb")
    return out, out2


def main(only=None):
    ok = True
    tried = held = 0
    for name, cell in CELLS.items():
        if only and name != only:
            continue
        ref, ref_err = observe(cell, "plain")
        for mode in ("cell", "breakdown", "auto"):
            got, err = observe(cell, mode)
            tried += 1
            if got != ref or (ref_err is None) != (err is None):
                ok = False
                diffs = [f"[{i}] {a!r} -> {b!r}" for i, (a, b) in enumerate(zip(ref, got or ())) if a != b] if got and ref else [f"{ref!r} -> {got!r}"]
                print(f"FAIL {name} / {mode}: the next cell sees {'; '.join(diffs)[:400]} (errors: {ref_err!r} / {err!r})")
            else:
                held += 1
                print(f"PASS {name} / {mode}")
    if not only:
        ref = debug_info("plain")
        for mode in ("cell", "breakdown"):
            tried += 1
            got = debug_info(mode)
            if got != ref:
                ok = False
                print(f"FAIL %debug info / {mode}: {ref!r} -> {got!r}")
            else:
                held += 1
                print(f"PASS %debug info / {mode}")
    print(f"tried {tried}, held {held}")
    print("PASS" if ok else "FAIL")


if __name__ == "__main__":
    main(*sys.argv[1:])
