"""The zoo on the CPU: ``vramnb.estimate(device="cpu")`` against the CPU tracker's
measurement, byte for byte (issue 12, must-have 1, CPU side).

A CPU estimate runs the step's dispatch on fake tensors; a CPU step runs it on
real ones, so the steady-state step's peak must agree exactly, source by source
("other", unrelated tensors of the process, is left out, as in
tests/test_estimate.py). For every case of ``zoo.cases()`` and recipe (fp32,
sgd, bf16 autocast on the CPU, and the model's own checkpointing where it has
one), at the case's ``cpu_batch_size``:

- ``equal``: every source of the steady-state peak equal;
- ``differs``: by how many bytes, which sources, and whether the peak's phase
  or a phase mark differs;
- ``refused``: the estimate raised (its error's first line); detection cases
  (``values_change_shapes``) must land here;
- ``real failed``: the real CPU step raised;
- ``timeout`` / ``crashed``: the case's process hung or died (what it finished
  before is kept).

Each case runs in its own process under a timeout, and the results file is
rewritten after every case, so a hang, a crash or an interrupt loses nothing;
``--resume`` skips what the file already has.

    python benchmarks/zoo_cpu.py --out /tmp/zoo_cpu.json              # the whole zoo
    python benchmarks/zoo_cpu.py --source nn --out nn.json
    python benchmarks/zoo_cpu.py --only resnet18 densenet121 --recipes fp32,bf16
    python benchmarks/zoo_cpu.py --report /tmp/zoo_cpu.json              # the table
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

CPU_RECIPES = ("fp32", "sgd", "bf16", "checkpointing")


def _first_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    return text.strip().splitlines()[0] if text.strip() else type(e).__name__


def _mine(bd: Any) -> dict[str, int]:
    return {k: v for k, v in bd.sources.items() if k != "other"}


def compare(case: Any, recipe: str, model: Any = None, batch: Any = None) -> dict[str, Any]:
    """One case x recipe on the CPU: the estimate, then the real step, compared.

    ``model``/``batch`` default to ``case.build()`` and the case's CPU batch.
    Returns a JSON-able record (``status``: ``equal``, ``differs``, ``refused``,
    ``real failed``)."""
    import torch

    import vramnb

    if model is None:
        torch.manual_seed(0)
        model = case.build()
    if batch is None:
        batch = case.make_batch(case.cpu_batch_size, "cpu")
    if recipe == "checkpointing":
        if case.enable_checkpointing is None:
            raise ValueError(f"{case.name} has no checkpointing of its own")
        case.enable_checkpointing(model)

    def loss_fn(m: Any, b: Any) -> Any:
        return case.loss(m, b, recipe, "cpu")

    rec: dict[str, Any] = {"case": case.name, "family": case.family, "validation": case.validation,
                           "recipe": recipe, "batch_size": case.cpu_batch_size,
                           "values_change_shapes": case.values_change_shapes}
    est = real = None
    t = time.perf_counter()
    try:
        est = vramnb.estimate(model, batch, loss_fn, lambda p: case.optimizer(p, recipe), device="cpu")
    except Exception as e:  # noqa: BLE001 - recorded, the point of the run
        rec["estimate_error"] = _first_line(e)
    rec["estimate_seconds"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    try:
        opt = case.optimizer(model.parameters(), recipe)
        real = vramnb.profile_step(model, batch, loss_fn, opt, module_depth=None)
        if real.error:
            raise RuntimeError(real.error)
    except Exception as e:  # noqa: BLE001
        rec["real_error"] = _first_line(e)
        real = None
    rec["real_seconds"] = round(time.perf_counter() - t, 2)

    if real is not None:
        rec["real_peak"] = sum(_mine(real.steady.peak).values())
        rec["real_sources"] = _mine(real.steady.peak)
        rec["real_peak_phase"] = real.steady.peak_phase
    if est is not None:
        rec["estimate_peak"] = sum(_mine(est.steady.peak).values())
        rec["estimate_sources"] = _mine(est.steady.peak)
        rec["estimate_peak_phase"] = est.steady.peak_phase
    if est is None:
        rec["status"] = "refused"
    elif real is None:
        rec["status"] = "real failed"
    else:
        e_src, r_src = _mine(est.steady.peak), _mine(real.steady.peak)
        diff = {k: e_src.get(k, 0) - r_src.get(k, 0) for k in sorted(set(e_src) | set(r_src))
                if e_src.get(k, 0) != r_src.get(k, 0)}
        rec["diff_bytes"] = rec["estimate_peak"] - rec["real_peak"]
        rec["diff_sources"] = diff
        marks = []
        for i, (es, rs) in enumerate(zip(est.steps, real.steps)):
            for (m1, b1), (m2, b2) in zip(es.marks, rs.marks):
                if m1 != m2 or _mine(b1) != _mine(b2):
                    marks.append(f"step {i + 1} {m2}: {sum(_mine(b1).values()) - sum(_mine(b2).values()):+d}")
            if es.peak_phase != rs.peak_phase:
                marks.append(f"step {i + 1} peak phase {es.peak_phase!r} vs real {rs.peak_phase!r}")
            if _mine(es.peak) != _mine(rs.peak) and i == 0:
                marks.append(f"step 1 peak: {sum(_mine(es.peak).values()) - sum(_mine(rs.peak).values()):+d}")
        rec["marks_differ"] = marks
        rec["status"] = "equal" if not diff else "differs"
    return rec


# -- one case in its own process ---------------------------------------------------------
def _child(name: str, source: str | None, recipes: list[str], out: str) -> None:
    import torch
    from zoo import cases

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    case = next(c for c in cases(source) if c.name == name)
    for recipe in recipes:
        if recipe == "checkpointing" and case.enable_checkpointing is None:
            continue
        try:
            rec = compare(case, recipe)
        except Exception as e:  # noqa: BLE001 - building the model or batch failed
            rec = {"case": name, "recipe": recipe, "status": "crashed", "error": _first_line(e),
                   "traceback": traceback.format_exc()[-2000:]}
        with open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")


def _run_case(name: str, source: str | None, recipes: list[str], timeout: float) -> list[dict[str, Any]]:
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl", delete=False) as tmp:
        path = tmp.name
    cmd = [sys.executable, __file__, "--child", name, "--recipes", ",".join(recipes), "--child-out", path]
    if source:
        cmd += ["--source", source]
    t = time.perf_counter()
    how = None
    try:
        p = subprocess.run(cmd, timeout=timeout, capture_output=True, text=True, check=False)
        if p.returncode != 0:
            how = f"exit status {p.returncode}: " + (p.stderr.strip().splitlines() or [""])[-1][:300]
    except subprocess.TimeoutExpired:
        how = f"timeout after {timeout:.0f} s"
    with open(path) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    os.unlink(path)
    done = {r["recipe"] for r in recs}
    if how is not None:  # what the process did not finish
        for recipe in recipes:
            if recipe not in done:
                recs.append({"case": name, "recipe": recipe,
                             "status": "timeout" if how.startswith("timeout") else "crashed", "error": how})
                break
    for r in recs:
        r.setdefault("case_seconds", round(time.perf_counter() - t, 1))
    return recs


def summary(records: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in records:
        out[r["status"]] = out.get(r["status"], 0) + 1
    return out


def report(paths: list[str]) -> str:
    """A text table of result files (the last record of a case x recipe wins)."""
    recs: dict[tuple[str, str], dict[str, Any]] = {}
    for path in paths:
        with open(path) as f:
            for r in json.load(f)["records"]:
                recs[r["case"], r["recipe"]] = r
    lines = [json.dumps(summary(list(recs.values())))]
    for (case, recipe), r in sorted(recs.items()):
        if r["status"] == "equal":
            what = "" if not r.get("marks_differ") else "steady peak equal; " + "; ".join(r["marks_differ"])
        elif r["status"] == "differs":
            what = f"{r['diff_bytes']:+d} B, by source {r['diff_sources']}; " + "; ".join(r.get("marks_differ", []))
        else:
            what = r.get("estimate_error") or r.get("real_error") or r.get("error", "")
        lines.append(f"{case:45s} {recipe:13s} {r['status']:11s} {what}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", choices=["nn", "torchvision", "hf"], help="one part of the zoo (default: all)")
    ap.add_argument("--only", nargs="*", default=[], help="cases whose name contains one of these")
    ap.add_argument("--recipes", default=",".join(CPU_RECIPES), help=f"comma-separated, of {CPU_RECIPES}")
    ap.add_argument("--out", default="zoo_cpu.json", help="results file (JSON), rewritten after every case")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per case (all its recipes)")
    ap.add_argument("--resume", action="store_true", help="keep the results in --out and skip their cases")
    ap.add_argument("--report", nargs="+", metavar="JSON", help="print the table of these result files and exit")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    recipes = [r.strip() for r in a.recipes.split(",") if r.strip()]
    bad = [r for r in recipes if r not in CPU_RECIPES]
    if bad:
        ap.error(f"unknown recipe(s) {bad}; choose from {list(CPU_RECIPES)}")
    if a.report:
        print(report(a.report))
        return
    if a.child:
        _child(a.child, a.source, recipes, a.child_out)
        return

    from zoo import cases
    selected = [c for c in cases(a.source) if not a.only or any(o in c.name for o in a.only)]
    if not selected:
        ap.error("no case selected")
    records: list[dict[str, Any]] = []
    if a.resume and os.path.exists(a.out):
        with open(a.out) as f:
            records = json.load(f)["records"]
    done = {r["case"] for r in records}
    for i, case in enumerate(selected):
        if case.name in done:
            continue
        recs = _run_case(case.name, a.source, recipes, a.timeout)
        records += recs
        for r in recs:
            extra = (f" {r.get('diff_bytes', 0):+d} B {r.get('diff_sources')}" if r["status"] == "differs" else
                     f" {r.get('estimate_error') or r.get('real_error') or r.get('error', '')}"[:200])
            print(f"[{i + 1}/{len(selected)}] {r['case']:45s} {r['recipe']:13s} {r['status']}{extra}", flush=True)
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"recipes": recipes, "summary": summary(records), "records": records}, f, indent=1)
        os.replace(tmp, a.out)
    print(json.dumps(summary(records)))


if __name__ == "__main__":
    main()
