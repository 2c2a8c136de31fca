"""Execute notebooks with nbclient (on whatever device this machine has) and save
them with their outputs into $OUT; print which ran, how long, and any failure.

Usage: python benchmarks/run_notebooks.py [notebooks/*.ipynb ...]
"""

from __future__ import annotations

import glob
import os
import sys
import time

import nbclient
import nbformat


def main(paths: list[str]) -> int:
    out = os.environ.get("OUT", "/tmp/out")
    failed = 0
    for path in paths or sorted(glob.glob("notebooks/[0-9]*.ipynb")):
        nb = nbformat.read(path, 4)
        t = time.time()
        err = None
        try:
            nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": "notebooks"}}).execute()
        except Exception as e:  # noqa: BLE001 - reported, and the partial notebook saved
            err = f"{type(e).__name__}: {str(e)[-400:]}"
            failed += 1
        nbformat.write(nb, os.path.join(out, os.path.basename(path).replace(".ipynb", ".cuda.ipynb")))
        print(f"{path}: {'ok' if err is None else 'FAILED ' + err} in {time.time() - t:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
