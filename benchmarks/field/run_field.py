"""Run the field cases (benchmarks/field/cases.py) through vramnb and score its reports.

Each case runs in its own Python process: a fresh IPython ``InteractiveShell`` with
``%load_ext vramnb``; the case's setup (unmeasured); then the cell under
``%%vram --breakdown`` (``case.runs`` times); then ``%vram`` and ``%vram free``. All printed
text (stdout and stderr) is kept. Out-of-memory reports are simulated as the tests do
(tests/test_postmortem.py): just before the measured cell, the process's address-space
limit (``RLIMIT_AS``) is set to its current size plus ``case.oom_headroom_mib``, so the CPU
allocator really fails inside the cell; the limit is lifted again before ``%vram``.
So that Python itself (the post-mortem's walk of the frames,
IPython's traceback) does not run out of address space after the failure, 64 MiB of ballast is held
under the limit and freed right after vramnb's post-mortem has read the limit (``process_limit``, wrapped
for the cell's duration): what vramnb reports about the limit is what it was at the failure.

Usage (re-runnable; the lead re-scores after fixes merge)::

    PYTHONPATH=<checkout> /work/venv/bin/python benchmarks/field/run_field.py --out DIR [--only NAME ...]

or, to score another checkout's vramnb with this checkout's cases (e.g. the held-out parts validation-3 and
validation-4 after advice fixes merge)::

    /work/venv/bin/python benchmarks/field/run_field.py --part validation-3 --checkout /work/main \
        --judgements v3 --out DIR
    MALLOC_ARENA_MAX=1 /work/venv/bin/python benchmarks/field/run_field.py --part validation-4 --checkout /work/main \
        --judgements v4 --out DIR
    MALLOC_ARENA_MAX=1 /work/venv/bin/python benchmarks/field/run_field.py --part validation-5 --checkout /work/main \
        --judgements v5 --out DIR
    MALLOC_ARENA_MAX=1 /work/venv/bin/python benchmarks/field/run_field.py --part validation-6 --checkout /work/main \
        --judgements v6-before --out DIR
    MALLOC_ARENA_MAX=1 /work/venv/bin/python benchmarks/field/run_field.py --part validation-7 --checkout /work/main \
        --judgements v7-before --out DIR
    MALLOC_ARENA_MAX=1 /work/venv/bin/python benchmarks/field/run_field.py --part validation-10 --checkout /work/main \
        --judgements v10 --out DIR

``--checkout DIR`` puts ``DIR`` first on the children's ``PYTHONPATH`` (so ``vramnb`` is imported from there; the
run stops if it is not) and records the last commit that changed that checkout's ``vramnb/`` (``-dirty`` when it has
uncommitted changes).

writes ``DIR/results.json`` (every case: the texts, the automatic score with the keywords
that matched, the judgement recorded in judgements.py with the commit it was made on) and
``DIR/results.md`` (tables per part, totals).

Automatic score, from the case's regular expressions over all the text printed:
``wrong`` if a ``wrong`` pattern matches; else ``diagnosed`` if a ``cause`` and a ``fix``
pattern match; ``partly`` if only a cause matches; ``missed`` otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cases as _cases  # noqa: E402

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# -- the child: one case ------------------------------------------------------------------
def _warm_vramnb() -> None:
    """Import every vramnb module now, so that no import (and its mappings) happens under the
    address-space limit of an out-of-memory case."""
    import importlib
    import pkgutil

    import vramnb

    for m in pkgutil.walk_packages(vramnb.__path__, "vramnb."):
        if m.name.split(".")[-1] in ("_plot", "_panel", "_widgets", "_panel_table", "_live"):
            continue
        with contextlib.suppress(Exception):
            importlib.import_module(m.name)


_BALLAST = 64 * 2**20


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        return [int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmSize:")][0]


def run_one(name: str) -> dict:
    import resource

    import torch

    torch.set_num_threads(1)
    from IPython.core.interactiveshell import InteractiveShell

    case = _cases.by_name()[name]
    ip = InteractiveShell.instance(colors="NoColor")
    steps: list[dict] = []

    def cell(label: str, src: str) -> dict:
        out, err = io.StringIO(), io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            res = ip.run_cell(src, store_history=True)
        e = res.error_in_exec or res.error_before_exec
        step = {"label": label, "source": src, "seconds": round(time.perf_counter() - t0, 3),
                "stdout": _ANSI.sub("", out.getvalue()), "stderr": _ANSI.sub("", err.getvalue()),
                "error": None if e is None else f"{type(e).__name__}: {e}"[:300]}
        steps.append(step)
        return step

    cell("load", "%load_ext vramnb")
    _warm_vramnb()
    # the first measured cell maps ~70 MiB of address space once (lazy initialisation): done here, so that an
    # out-of-memory case's headroom is the tensors' (the entry stays in vramnb.history(), as after any cell)
    cell("warm-up", "%%vram -q --breakdown\n_field_warm_up = None")
    setup = cell("setup", case.setup_code)
    if setup["error"]:
        return {"name": name, "steps": steps, "setup_failed": True}
    import vramnb

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    reports = []
    for k in range(case.runs):
        limited = case.oom_headroom_mib is not None
        if limited:
            import gc

            import vramnb.diagnose._postmortem as pm

            gc.collect()
            # Python's own slack for after the failure: the post-mortem reads the limit first (as it is at
            # the failure), then this ballast is freed so that walking the frames, formatting the
            # traceback and the report do not themselves run out of address space
            ballast = [bytearray(_BALLAST)]
            original = pm.process_limit

            def process_limit(_orig=original, _ballast=ballast):  # type: ignore[no-untyped-def]
                got = _orig()
                _ballast.clear()
                return got

            pm.process_limit = process_limit
            resource.setrlimit(resource.RLIMIT_AS, (_vm_size() + case.oom_headroom_mib * 2**20, hard))
        try:
            cell(f"cell run {k + 1}", "%%vram --breakdown\n" + case.cell_code)
        finally:
            if limited:
                resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
                pm.process_limit = original
                ballast.clear()
        rep = vramnb.history()[-1] if len(vramnb.history()) else None
        info: dict = {}
        if rep is not None:
            info = {"delta_allocated": getattr(rep, "delta_allocated", None),
                    "peak": getattr(rep, "peak_allocated", None),
                    "exception": getattr(rep, "exception", None)}
            oom = getattr(rep, "oom", None)
            if oom is not None and oom.verdict is not None:
                info["verdict"] = oom.verdict.kind
                info["fixes"] = [f.what for f in oom.verdict.fixes]
        reports.append(info)
    cell("%vram", "%vram")
    cell("%vram free", "%vram free")
    return {"name": name, "steps": steps, "reports": reports}


# -- the parent: every case, scoring, tables ----------------------------------------------
def vramnb_text(step: dict) -> str:
    """What vramnb printed in a step: a cell's report starts at its ``vram [`` header (IPython prints
    the traceback and the cell's own output before it); torch's warnings on stderr are not vramnb's."""
    out = step["stdout"]
    if step["label"].startswith("cell"):
        i = out.find("vram [")
        out = out[i:] if i >= 0 else ""
    err = "\n".join(ln for ln in step["stderr"].splitlines() if "vramnb" in ln)
    return out + ("\n" + err if err else "")


def _text(result: dict) -> str:
    return "\n".join(vramnb_text(s) for s in result.get("steps", []) if s["label"] not in ("load", "warm-up", "setup"))


_SIZE = r"(\d+(?:\.\d+)? (?:B|KiB|MiB|GiB))"
_TB_KEEPS = re.compile(r"the error's traceback keeps " + _SIZE + r" alive")
_TB_FREED = re.compile(r"last exception \(traceback frames\)\s+" + _SIZE)


def false_sentences(text: str) -> list[str]:
    """Sentences the case's own numbers contradict: the cell report's "the error's traceback keeps X
    alive ... %vram free releases it" against what ``%vram free`` then released from the traceback."""
    keeps, freed = _TB_KEEPS.search(text), _TB_FREED.search(text)
    if keeps and freed and keeps.group(1) != freed.group(1):
        return [f"traceback keeps {keeps.group(1)} alive, but %vram free released {freed.group(1)} from it"]
    return []


def auto_score(case: _cases.Case, text: str) -> tuple[str, dict]:
    def hits(patterns: list[str]) -> list[str]:
        return [p for p in patterns if re.search(p, text, re.IGNORECASE)]

    got = {"cause": hits(case.cause), "fix": hits(case.fix), "wrong": hits(case.wrong) + false_sentences(text)}
    if got["wrong"]:
        return "wrong", got
    if got["cause"] and got["fix"]:
        return "diagnosed", got
    return ("partly" if got["cause"] else "missed"), got


def _commit(*path: str) -> str:
    """The checkout's commit (``path``: the last commit that changed it)."""
    try:
        return subprocess.run(["git", "-C", str(HERE), "log", "-1", "--format=%h", "--", *path], capture_output=True,
                              text=True, timeout=10).stdout.strip() or "?"
    except Exception:  # noqa: BLE001
        return "?"


def _vramnb_where(env: dict | None = None) -> str:
    out = subprocess.run([sys.executable, "-c", "import vramnb, os; print(os.path.dirname(vramnb.__file__))"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=HERE)  # not the caller's cwd
    return out.stdout.strip()


def _checkout_commit(vramnb_dir: str) -> str:
    """The last commit that changed ``vramnb_dir`` in its checkout (``-dirty`` if it has uncommitted changes)."""
    try:
        git = ["git", "-C", vramnb_dir]
        head = subprocess.run([*git, "log", "-1", "--format=%h", "--", "."], capture_output=True, text=True,
                              timeout=10)
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "."], capture_output=True, text=True, timeout=10)
        return (head.stdout.strip() or "?") + ("-dirty" if dirty.stdout.strip() else "")
    except Exception:  # noqa: BLE001
        return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="folder for results.json and results.md")
    ap.add_argument("--only", nargs="*", help="case names (default: all)")
    ap.add_argument("--part", choices=PARTS, help="run one part only")
    ap.add_argument("--checkout", metavar="DIR",
                    help="import vramnb from this checkout (a git worktree root) instead of PYTHONPATH's")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--check-split", action="store_true", help="check TUNING/VALIDATION against split(SPLIT_SEED)")
    ap.add_argument("--judgements", choices=("before", "after", "c-before", "c-after", "v3", "v4", "v5", "v6-before",
                                                 "v6-after", "v7-before", "v7-after", "v8-before", "v8-after",
                                                 "v9-before", "v8-seen", "v9-seen", "v10", "v10-seen"),
                    default="before",
                    help="which by-hand judgements to record (judgements.py)")
    ap.add_argument("--rescore", metavar="DIR", help="re-score DIR/results.json (keywords, judgements) without running")
    a = ap.parse_args()
    if a.rescore:
        _rescore(Path(a.rescore), a.judgements)
        return
    if a.one:
        print("\x00RESULT" + json.dumps(run_one(a.one)))
        return
    names = [c.name for c in _cases.CASES]
    tuning, validation = _cases.split(names)
    if (tuning, validation) != (sorted(_cases.TUNING), sorted(_cases.VALIDATION)):
        raise SystemExit("cases.TUNING/VALIDATION differ from split(SPLIT_SEED): a case was added or renamed")
    if a.check_split:
        print("split ok:", len(tuning), "tuning,", len(validation), "validation")
        return
    if not a.out:
        ap.error("--out DIR is required")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    judged_set = a.judgements
    JUDGED_AT, JUDGEMENTS = _judgements(judged_set)

    env = dict(os.environ, MALLOC_ARENA_MAX="1", OMP_NUM_THREADS="1", PYTHONWARNINGS="default")
    if a.checkout:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(a.checkout).resolve()), *filter(None, [env.get("PYTHONPATH")])])
    where = _vramnb_where(env)
    if a.checkout and not Path(where).resolve().is_relative_to(Path(a.checkout).resolve()):
        raise SystemExit(f"--checkout {a.checkout}: vramnb is imported from {where!r}, not from that checkout")
    print(f"vramnb from {where} ({_checkout_commit(where)})", flush=True)
    results = []
    for case in _cases.all_cases():
        if a.only and case.name not in a.only:
            continue
        if a.part and _cases.part_of(case.name, tuning) != a.part:
            continue
        t0 = time.perf_counter()
        try:
            p = subprocess.run([sys.executable, __file__, "--one", case.name], capture_output=True, text=True,
                               timeout=a.timeout, env=env)
            raw = p.stdout.split("\x00RESULT", 1)
            res = json.loads(raw[1]) if len(raw) == 2 else {"name": case.name, "steps": [],
                                                            "crash": (p.stdout + p.stderr)[-3000:]}
        except subprocess.TimeoutExpired:
            res = {"name": case.name, "steps": [], "crash": "timeout"}
        res["wall_s"] = round(time.perf_counter() - t0, 2)
        _score(case, res, tuning, JUDGEMENTS)
        results.append(res)
        print(f"{case.name:42s} {res['part']:10s} auto={res['auto_score']:9s} judged={res['judged']} ({res['wall_s']} s)",
              flush=True)
    meta = {"commit": _commit(), "vramnb_commit": _checkout_commit(where), "vramnb": where,
            "judged_at": JUDGED_AT, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "split_seed": _cases.SPLIT_SEED, "third_field": THIRD_FIELD.get(judged_set, THIRD_FIELD["before"])}
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    (out / "results.md").write_text(_markdown(meta, results))
    print(f"wrote {out / 'results.json'} and {out / 'results.md'}")


def _score(case: _cases.Case, res: dict, tuning: list[str], judgements: dict) -> None:
    score, got = auto_score(case, _text(res))
    j = judgements.get(case.name)
    res.update(url=case.url, category=case.category, known_fix=case.known_fix, notes=case.notes,
               part=_cases.part_of(case.name, tuning), auto_score=score, matched=got,
               judged=j[0] if j else None, reason=j[1] if j else None,
               judged_without_tb=j[2] if j and len(j) > 2 else (j[0] if j else None))


def _judgements(judged_set: str) -> tuple[str, dict]:
    """The by-hand judgements to record: ``before`` (the baseline's of the tuning and validation parts, with
    validation-2's before any change) or ``after`` (every part, read again after this session's changes)."""
    import judgements as j  # noqa: PLC0415

    if judged_set == "after":
        return j.JUDGED_AT_AFTER, dict(j.JUDGEMENTS_AFTER)
    if judged_set == "v3":
        return f"validation-3: {j.JUDGED_AT_V3}", dict(j.JUDGEMENTS_V3)
    if judged_set == "c-before":
        return j.JUDGED_AT_C_BEFORE, dict(j.JUDGEMENTS_C_BEFORE)
    if judged_set == "c-after":
        return j.JUDGED_AT_C_AFTER, dict(j.JUDGEMENTS_C_AFTER)
    if judged_set == "v4":
        return f"validation-4: {j.JUDGED_AT_V4}", dict(j.JUDGEMENTS_V4)
    if judged_set == "v5":
        return f"validation-5: {j.JUDGED_AT_V5}", dict(j.JUDGEMENTS_V5)
    if judged_set == "v6-before":
        return f"validation-6: {j.JUDGED_AT_V6_BEFORE}", dict(j.JUDGEMENTS_V6_BEFORE)
    if judged_set == "v6-after":
        return f"validation-6: {j.JUDGED_AT_V6_AFTER}", dict(j.JUDGEMENTS_V6_AFTER)
    if judged_set == "v7-before":
        return f"validation-7: {j.JUDGED_AT_V7_BEFORE}", dict(j.JUDGEMENTS_V7_BEFORE)
    if judged_set == "v7-after":
        return f"validation-7: {j.JUDGED_AT_V7_AFTER}", dict(j.JUDGEMENTS_V7_AFTER)
    if judged_set == "v8-before":
        return f"validation-8: {j.JUDGED_AT_V8_BEFORE}", dict(j.JUDGEMENTS_V8_BEFORE)
    if judged_set == "v8-after":
        return f"validation-8: {j.JUDGED_AT_V8_AFTER}", dict(j.JUDGEMENTS_V8_AFTER)
    if judged_set == "v9-before":
        return f"validation-9: {j.JUDGED_AT_V9_BEFORE}", dict(j.JUDGEMENTS_V9_BEFORE)
    if judged_set == "v8-seen":
        return f"validation-8: {j.JUDGED_AT_V8_SEEN}", dict(j.JUDGEMENTS_V8_SEEN)
    if judged_set == "v9-seen":
        return f"validation-9: {j.JUDGED_AT_V9_SEEN}", dict(j.JUDGEMENTS_V9_SEEN)
    if judged_set == "v10":
        return f"validation-10: {j.JUDGED_AT_V10}", dict(j.JUDGEMENTS_V10)
    if judged_set == "v10-seen":
        return f"validation-10: {j.JUDGED_AT_V10_SEEN}", dict(j.JUDGEMENTS_V10_SEEN)
    return f"{j.JUDGED_AT}; validation-2: {j.JUDGED_AT_V2_BEFORE}", {**j.JUDGEMENTS, **j.JUDGEMENTS_V2_BEFORE}


def _rescore(folder: Path, judged_set: str) -> None:
    JUDGED_AT, JUDGEMENTS = _judgements(judged_set)

    data = json.loads((folder / "results.json").read_text())
    cases = _cases.by_name()
    tuning, _ = _cases.split([c.name for c in _cases.CASES])
    for res in data["results"]:
        _score(cases[res["name"]], res, tuning, JUDGEMENTS)
    data["meta"]["judged_at"] = JUDGED_AT
    data["meta"]["third_field"] = THIRD_FIELD.get(judged_set, THIRD_FIELD["before"])
    (folder / "results.json").write_text(json.dumps(data, indent=1))
    (folder / "results.md").write_text(_markdown(data["meta"], data["results"]))
    print(f"re-scored {folder / 'results.json'} and {folder / 'results.md'}")


SCORES = ("diagnosed", "partly", "missed", "wrong")
PARTS = ("tuning", "validation", "validation-2", "validation-3", "validation-4", "validation-5", "validation-6",
         "validation-7", "validation-8", "validation-9", "validation-10")
# what the judgements' third field scores (judgements.py)
THIRD_FIELD = {"before": "were the traceback sentence true", "after": "were the traceback sentence true",
               "v3": "were the false sentence or the inapplicable advice named in the reason absent",
               "v4": "were the false sentence or the inapplicable advice named in the reason absent",
               "v5": "were the false sentence or the inapplicable advice named in the reason absent",
               "v6-before": "were the false sentence or the inapplicable advice named in the reason absent",
               "v6-after": "were the false sentence or the inapplicable advice named in the reason absent",
               "v7-before": "were the false sentence or the inapplicable advice named in the reason absent",
               "v7-after": "were the false sentence or the inapplicable advice named in the reason absent",
               "v8-before": "were the false sentence or the inapplicable advice named in the reason absent",
               "v8-after": "were the false sentence or the inapplicable advice named in the reason absent",
               "v9-before": "were the false sentence or the inapplicable advice named in the reason absent",
               "v8-seen": "were the false sentence or the inapplicable advice named in the reason absent",
               "v9-seen": "were the false sentence or the inapplicable advice named in the reason absent",
               "v10": "were the false sentence or the inapplicable advice named in the reason absent",
               "v10-seen": "the same as the first (no false sentence or inapplicable advice was found)"}


def _markdown(meta: dict, results: list[dict]) -> str:
    lines = [f"# Field cases: vramnb at {meta.get('vramnb_commit', '?')} (checkout {meta['commit']}, {meta['date']})", "",
             f"vramnb imported from `{meta.get('vramnb', '?')}`; each case's source, known fix and all printed text are "
             "in results.json.", "",
             f"Judgements by hand at {meta['judged_at']}; `auto` is the keyword score of this run "
             f"(split seed {meta['split_seed']}).", ""]
    for part in PARTS:
        rows = [r for r in results if r["part"] == part]
        if not rows:
            continue
        lines += [f"## {part} ({len(rows)} cases)", "", "| case | category | source | auto | judged | reason |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            reason = (r["reason"] or "").replace("|", "\\|")
            lines.append(f"| {r['name']} | {r['category']} | [link]({r['url']}) | {r['auto_score']} | "
                         f"{r['judged'] or '-'} | {reason} |")
        third = meta.get("third_field", "were the traceback sentence true")
        titles = {"judged": "judged", "judged_without_tb": f"judged, {third}",
                  "auto_score": "auto"}
        for key, title in titles.items():
            counts = {s: sum(1 for r in rows if r.get(key) == s) for s in SCORES}
            lines.append("")
            lines.append(f"totals ({title}): " + ", ".join(f"{s} {n}" for s, n in counts.items()))
        lines.append("")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
