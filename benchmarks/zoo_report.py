"""The zoo benchmark's figures from one run's results: real steps and GPU-present estimates
(``zoo_gpu.py``), CUDA-hidden estimates (``--cuda-hidden``), MemTracker, max_batch_size.

    python benchmarks/zoo_report.py REAL_DIR [--hidden HIDDEN_DIR] [--batch BATCH_DIR] [--markdown]

Errors are (estimate - real) / real of the steady-state step: peak allocated and device memory
(nvidia-smi's per-process figure). Parts: the zoo sample and the op-level cases, the validation
third (chosen by name before anything was fixed) apart.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics


def load(d: str) -> dict:
    out = {}
    for f in glob.glob(os.path.join(d, "*.json")):
        r = json.load(open(f))
        out[(r["case"], r["recipe"])] = r
    return out


def stats(errs: list[float]) -> dict:
    if not errs:
        return {}
    a = [abs(e) for e in errs]
    return {"n": len(errs), "median_abs": statistics.median(a), "worst": max(errs, key=abs),
            "worst_under": min(errs), "under_2": sum(e < -2 for e in errs), "within_2": sum(x <= 2 for x in a)}


def fmt(s: dict) -> str:
    if not s:
        return "—"
    return (f"{s['n']} steps: median {s['median_abs']:.2f} %, worst {s['worst']:+.1f} %, worst under {s['worst_under']:+.1f} %, "
            f"under by > 2 %: {s['under_2']} ({100 * s['under_2'] / s['n']:.0f} %), within 2 %: {s['within_2']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("real")
    ap.add_argument("--hidden")
    ap.add_argument("--batch")
    ap.add_argument("--records", help="write the records benchmarks/zoo/accuracy_table.py reads: real steps of REAL_DIR, "
                                      "estimates of --hidden where given (else REAL_DIR's own)")
    a = ap.parse_args()
    real = load(a.real)
    hidden = load(a.hidden) if a.hidden else {}
    rows = []
    for key, r in sorted(real.items()):
        if "real" not in r:
            continue
        rp, rd = r["real"]["step1"]["peak"], r["real"].get("device_used")
        row = {"case": key[0], "recipe": key[1], "validation": r["validation"], "op": key[0].startswith("op/")}
        for name, src in (("gpu", r.get("estimate")), ("hidden", hidden.get(key, {}).get("estimate"))):
            if src:
                row[f"{name}_peak"] = 100 * (src["peak"] - rp) / rp
                if rd and src.get("device"):
                    row[f"{name}_device"] = 100 * (src["device"] - rd) / rd
                row[f"{name}_bytes"] = src["peak"]
        for dev in ("cuda", "cpu"):
            m = r.get(f"memtracker_{dev}")
            if m:
                row[f"mt_{dev}"] = 100 * (m["peak"] - rp) / rp
        rows.append(row)
    if a.records:
        recs = []
        for key, r in sorted(real.items()):
            est = (hidden.get(key) or {}).get("estimate") if hidden else r.get("estimate")
            if "real" not in r or not est:
                continue
            recs.append({"case": key[0], "family": r["family"], "recipe": key[1], "kinds": est.get("kinds") or [],
                         "real_peak": r["real"]["step1"]["peak"], "est_peak": est["peak"],
                         "real_device": r["real"].get("device_used"), "est_device": est.get("device"),
                         "validation": bool(r.get("validation"))})
        json.dump(recs, open(a.records, "w"), indent=1)
    same = [r for r in rows if "gpu_bytes" in r and "hidden_bytes" in r]
    print(f"GPU present vs CUDA hidden, same bytes: {sum(r['gpu_bytes'] == r['hidden_bytes'] for r in same)} of {len(same)}")
    for part, sel in (("zoo sample", lambda r: not r["op"]), ("op-level cases", lambda r: r["op"])):
        for subset, f in (("all", lambda r: True), ("validation third", lambda r: r["validation"]),
                          ("tuning part", lambda r: not r["validation"])):
            rs = [r for r in rows if sel(r) and f(r)]
            for est in ("hidden", "gpu"):
                peaks = [r[f"{est}_peak"] for r in rs if f"{est}_peak" in r]
                devices = [r[f"{est}_device"] for r in rs if f"{est}_device" in r]
                print(f"{part:15s} {subset:17s} {est:6s} peak:   {fmt(stats(peaks))}")
                print(f"{'':15s} {'':17s} {est:6s} device: {fmt(stats(devices))}")
        rs = [r for r in rows if sel(r)]
        for dev in ("cuda", "cpu"):
            e = [r[f"mt_{dev}"] for r in rs if f"mt_{dev}" in r]
            if e:
                print(f"{part:15s} MemTracker fake {dev}: {fmt(stats(e))}")
                both = [r for r in rs if f"mt_{dev}" in r and "hidden_peak" in r]
                print(f"{'':15s}   same steps, vramnb (CUDA hidden): {fmt(stats([r['hidden_peak'] for r in both]))}")
    if a.batch:
        print("\nmax_batch_size on an emulated card (real steps search the true largest batch):")
        for f in sorted(glob.glob(os.path.join(a.batch, "*.batch.json"))):
            b = json.load(open(f))
            print(f"  {b['case']:24s} card {b['card'] / 2**30:.0f} GiB: true largest {b.get('true_largest')}, "
                  f"safe (default) {b.get('predicted_worst')} ({'runs' if b.get('predicted_worst_runs') else 'OUT OF MEMORY'}), "
                  f"safety='none' {b.get('predicted_none')} ({'runs' if b.get('predicted_none_runs') else 'OUT OF MEMORY'}), "
                  f"{b.get('estimates_worst')} + {b.get('estimates_none')} estimates, {b.get('search_seconds', 0):.0f} s")
    worst = sorted((r for r in rows if "hidden_peak" in r), key=lambda r: r["hidden_peak"])
    print("\nlargest under- and over-estimates (CUDA hidden, peak):")
    for r in worst[:8] + worst[-5:]:
        print(f"  {r['case']:40s} {r['recipe']:13s} {r['hidden_peak']:+6.2f} %{'  (validation)' if r['validation'] else ''}")


if __name__ == "__main__":
    main()
