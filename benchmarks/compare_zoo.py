"""Read a zoo run (``zoo_gpu.py --out DIR``): estimate against real, per task, per source and per operator.

    python benchmarks/compare_zoo.py DIR [--ops] [--case NAME]

Prints the error of each task (steady-state peak allocated, device memory), the whole
run's figures (median, worst, under-estimate rate; validation set apart), and with ``--ops``
the operator-level divergences: operators only one side ran (aggregated by name and by
forward/backward), and operators whose CUDA kernel used memory it gave back (workspaces,
internal temporaries: ``peak - max(before, after)``), aggregated by name and signature.
"""

from __future__ import annotations

import argparse
import collections
import difflib
import glob
import gzip
import json
import os
import statistics

MiB = 1 << 20


def load(d: str) -> list[dict]:
    out = []
    for f in sorted(glob.glob(os.path.join(d, "*.json"))):
        r = json.load(open(f))
        r["_stem"] = f[:-5]
        out.append(r)
    return out


def err(est: int | None, real: int | None) -> float | None:
    if not est or not real:
        return None
    return (est - real) / real * 100


def stats(errs: list[float]) -> str:
    if not errs:
        return "no cases"
    a = [abs(e) for e in errs]
    under = sum(e < -2 for e in errs)
    return (f"n={len(errs)} median |err| {statistics.median(a):.2f} %, worst {max(errs, key=abs):+.1f} %, "
            f"within 2 %: {sum(x <= 2 for x in a)}, under by >2 %: {under} ({under / len(errs) * 100:.0f} %)")


def tasks(rows: list[dict], verbose: bool = True) -> dict:
    errs: dict[str, list[float]] = collections.defaultdict(list)
    for r in rows:
        real, est = r.get("real"), r.get("estimate")
        tag = "validation" if r.get("validation") else "tuning"
        if real is None or est is None:
            if verbose:
                print(f"{r['case']:42s} {r['recipe']:13s} real_error={r.get('real_error', '')[:80]!r} "
                      f"estimate_error={r.get('estimate_error', '')[:160]!r}")
            continue
        e = err(est["peak"], real["step1"]["peak"])
        ed = err(est.get("device"), real.get("device_used"))
        errs[f"peak {tag}"].append(e)
        errs["peak all"].append(e)
        if ed is not None:
            errs["device all"].append(ed)
        if verbose:
            src = ""
            prof = r.get("profile")
            if prof:
                diffs = {k: (est["sources_at_peak"].get(k, 0) - v) // MiB for k, v in prof["sources_at_peak"].items()
                         if abs(est["sources_at_peak"].get(k, 0) - v) > 4 * MiB}
                src = " ".join(f"{k}{v:+d}" for k, v in diffs.items())
            print(f"{r['case']:42s} {r['recipe']:13s} real {real['step1']['peak'] / MiB:9.1f} est {est['peak'] / MiB:9.1f} "
                  f"MiB {e:+7.2f} %  dev {'' if ed is None else f'{ed:+6.1f} %'}  est {est['seconds']:5.1f}s  [{src}]")
    for k, v in errs.items():
        print(f"{k:22s} {stats(v)}")
    return errs


def _key(row: dict) -> str:
    return row["op"] + (" (bwd)" if row["bwd"] else "")


def ops(rows: list[dict], top: int = 40) -> None:
    only_real: collections.Counter = collections.Counter()
    only_fake: collections.Counter = collections.Counter()
    extra: dict[str, list[int]] = collections.defaultdict(list)
    outdiff: collections.Counter = collections.Counter()
    for r in rows:
        f = r["_stem"] + ".ops.json.gz"
        if not os.path.exists(f):
            continue
        log = json.load(gzip.open(f, "rt"))
        real, fake = log["real"], log["fake"]
        sm = difflib.SequenceMatcher(a=[_key(x) for x in real], b=[_key(x) for x in fake], autojunk=False)
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag in ("replace", "delete"):
                for x in real[i1:i2]:
                    only_real[(r["case"], _key(x))] += 1
            if tag in ("replace", "insert"):
                for x in fake[j1:j2]:
                    only_fake[(r["case"], _key(x))] += 1
            if tag == "equal":
                for x, y in zip(real[i1:i2], fake[j1:j2]):
                    bx = sum(o[2] for o in x["out"]) if x["out"] else 0
                    by = sum(o[2] for o in y["out"]) if y["out"] else 0
                    if bx != by and abs(bx - by) > 4096:
                        outdiff[(r["case"], _key(x), str(x["out"])[:60], str(y["out"])[:60])] += 1
        for x in real:
            e = x["peak"] - max(x["before"], x["after"])
            if e > MiB:
                extra[f"{_key(x)} {str(x['in'])[:90]}"].append(e)
    print("\n== operators only the real step ran (case, op): count")
    for k, n in only_real.most_common(top):
        print(f"  {n:5d}  {k}")
    print("\n== operators only the fake step ran")
    for k, n in only_fake.most_common(top):
        print(f"  {n:5d}  {k}")
    print("\n== same operator, other output bytes (case, op, real out, fake out)")
    for k, n in outdiff.most_common(top):
        print(f"  {n:5d}  {k}")
    print("\n== memory a CUDA kernel used and gave back (> 1 MiB): op signature: count, max MiB")
    for k, v in sorted(extra.items(), key=lambda kv: -max(kv[1]))[:top]:
        print(f"  {len(v):5d}  {max(v) / MiB:8.1f}  {k}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--ops", action="store_true")
    ap.add_argument("--case")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    rows = load(a.dir)
    if a.case:
        rows = [r for r in rows if a.case in r["case"]]
    tasks(rows, verbose=not a.quiet)
    if a.ops:
        ops(rows)


if __name__ == "__main__":
    main()
