#!/usr/bin/env bash
# One batched run on the GPU machine (device tool), from the repository root, with .whl/ carried:
# the CUDA tests, the whole suite on this torch, the notebooks on CUDA, and the benchmarks.
# Everything lands in $OUT (at most 8 files come back).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
LOG=$OUT/log.txt
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv;
  python3 -c "import torch, IPython, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'IPython', IPython.__version__, torch.cuda.get_device_name(0))"; } 2>&1 | tee $LOG
echo "== cuda tests" | tee -a $LOG
python3 -m pytest -q -o addopts="" -p no:cacheprovider -m cuda -rA tests/test_cuda.py 2>&1 | tail -30 | tee -a $LOG
echo "== all tests (torch on this machine)" | tee -a $LOG
python3 -m pytest -q -o addopts="" -p no:cacheprovider --doctest-modules vramnb tests 2>&1 | tail -8 | tee -a $LOG
echo "== notebooks on CUDA (nbclient; outputs saved)" | tee -a $LOG
python3 - <<'PY' 2>&1 | tee -a $LOG
import glob, os, time, nbformat, nbclient
for path in sorted(glob.glob("notebooks/[0-9]*.ipynb")):
    nb = nbformat.read(path, 4); t = time.time(); err = None
    try:
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": "notebooks"}}).execute()
    except Exception as e:
        err = f"{type(e).__name__}: {str(e)[-400:]}"
    nbformat.write(nb, os.path.join(os.environ["OUT"], os.path.basename(path).replace(".ipynb", ".cuda.ipynb")))
    print(f"{path}: {'ok' if err is None else 'FAILED ' + err} in {time.time() - t:.1f} s")
PY
echo "== magic overhead" | tee -a $LOG
python3 benchmarks/bench_magic_overhead.py -n 400 --out $OUT/overhead.json 2>&1 | tail -40 | tee -a $LOG
echo "== step breakdown and tracking overhead" | tee -a $LOG
python3 benchmarks/bench_step.py --out $OUT/step.json 2>&1 | tail -20 | tee -a $LOG
