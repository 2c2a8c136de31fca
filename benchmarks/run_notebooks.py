"""Execute notebooks with nbclient (on whatever device this machine has) and save
them with their outputs into $OUT; print which ran, how long, and any failure.

Usage: python benchmarks/run_notebooks.py [-j N] [notebooks/*.ipynb ...]
(-j: run N notebooks at once, each in its own kernel)
"""

from __future__ import annotations

import glob
import os
import sys
import time

import nbclient
import nbformat


def run_one(path: str) -> tuple[str, str | None, float]:
    out = os.environ.get("OUT", "/tmp/out")
    nb = nbformat.read(path, 4)
    t = time.time()
    err = None
    try:
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": "notebooks"}}).execute()
    except Exception as e:  # noqa: BLE001 - reported, and the partial notebook saved
        err = f"{type(e).__name__}: {str(e)[-400:]}"
    nbformat.write(nb, os.path.join(out, os.path.basename(path).replace(".ipynb", ".cuda.ipynb")))
    return path, err, time.time() - t


def main(argv: list[str]) -> int:
    jobs = 1
    if argv[:1] == ["-j"]:
        jobs, argv = int(argv[1]), argv[2:]
    paths = argv or sorted(glob.glob("notebooks/[0-9]*.ipynb"))
    failed = 0
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for path, err, secs in pool.map(run_one, paths):
            failed += err is not None
            print(f"{path}: {'ok' if err is None else 'FAILED ' + err} in {secs:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
