#!/usr/bin/env bash
# Run on the GPU machine (device tool), from the repository root, with .whl/ carried.
# Installs the Jupyter wheels, runs the CUDA tests, all tests, the notebooks on CUDA,
# and the overhead benchmark; everything lands in $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv;
  python3 -c "import torch, IPython, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'IPython', IPython.__version__, torch.cuda.get_device_name(0))"; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
python3 -m pytest -q -o addopts="" -p no:cacheprovider -m cuda -rA tests/test_cuda.py 2>&1 | tee $OUT/pytest_cuda.txt | tail -15
python3 -m pytest -q -o addopts="" -p no:cacheprovider --doctest-modules vramnb tests 2>&1 | tee $OUT/pytest_all.txt | tail -5
python3 -m pytest -q -o addopts="" -p no:cacheprovider --nbval-lax --nbval-current-env notebooks 2>&1 | tee $OUT/nbval_lax.txt | tail -3
python3 - <<'PY' 2>&1 | tee $OUT/notebooks_cuda.txt
import glob, os, time, nbformat, nbclient
for path in sorted(glob.glob("notebooks/[0-9]*.ipynb")):
    nb = nbformat.read(path, 4); t = time.time(); err = None
    try:
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": "notebooks"}}).execute()
    except Exception as e:
        err = f"{type(e).__name__}: {str(e)[-300:]}"
    nbformat.write(nb, os.path.join(os.environ["OUT"], os.path.basename(path).replace(".ipynb", ".cuda.ipynb")))
    print(f"{path}: {'ok' if err is None else 'FAILED ' + err} in {time.time() - t:.1f} s")
PY
python3 benchmarks/bench_magic_overhead.py -n 400 --out $OUT/overhead.json 2>&1 | tail -30
