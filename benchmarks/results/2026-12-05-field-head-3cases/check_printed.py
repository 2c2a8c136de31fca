"""Check the fixes vramnb (deea3f5) printed for the three re-run cases, in plain Python (vramnb not imported).

decode_loop_keeps_every_step_scores_oom: validation-9's calibrate_plain.py (setup, gc, 64 MiB ballast, RLIMIT_AS =
VmSize + headroom): the cell as is (must fail) and the cell with `if output_scores: scores.append(...)` (the printed fix,
calibrate_plain's FIXED cell: must fit).
pyplot_figures_never_closed / profiler_started_never_stopped: setup, then the cell three times (1 s apart, gc after each),
RSS after each run and the growth per run: the cell as is, and with the printed fix (plt.close(fig) after savefig;
prof.stop() before the runs)."""
import gc
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-12-05-field-validation9-before"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "field"))


def rss():
    with open("/proc/self/status") as f:
        return [int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmRSS:")][0] / 2**20


def grow(name, variant):
    import torch
    import cases
    torch.set_num_threads(1)
    c = cases.by_name()[name]
    g = {}
    exec(compile(c.setup_code, "<setup>", "exec"), g)
    cell = c.cell_code
    extra = ""
    if variant == "fixed":
        if name == "pyplot_figures_never_closed":
            assert 'fig.savefig(f"/tmp/judge8_fmap_{i}.png")\n' in cell
            cell = cell.replace('fig.savefig(f"/tmp/judge8_fmap_{i}.png")\n',
                                'fig.savefig(f"/tmp/judge8_fmap_{i}.png")\n    plt.close(fig)\n')
        else:
            g["prof"].stop()
    gc.collect()
    base = rss()
    out = [base]
    for _ in range(3):
        exec(compile(cell, "<cell>", "exec"), g)
        gc.collect()
        out.append(rss())
        time.sleep(1.0)
    if name == "pyplot_figures_never_closed":
        extra = f"; open figures after: {len(g['plt'].get_fignums())}"
    d = [f"{b - a:+.1f}" for a, b in zip(out, out[1:])]
    print(f"{name:40s} {variant:5s} RSS {' | '.join(f'{x:.1f}' for x in out)} MiB; per run {' '.join(d)} MiB{extra}",
          flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--grow":
        grow(sys.argv[2], sys.argv[3])
    else:
        env = dict(os.environ, MALLOC_ARENA_MAX="1", OMP_NUM_THREADS="1")
        cal = os.path.join(HERE, "..", "2026-12-05-field-validation9-before", "calibrate_plain.py")
        for which in ("bug", "fixed"):
            subprocess.run([sys.executable, cal, "decode_loop_keeps_every_step_scores_oom", which], env=env, check=False)
        for name in ("pyplot_figures_never_closed", "profiler_started_never_stopped"):
            for v in ("bug", "fixed"):
                subprocess.run([sys.executable, __file__, "--grow", name, v], env=env, check=False)
