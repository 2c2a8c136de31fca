#!/usr/bin/env bash
# Issue 15 on the GPU machine (device tool), from the repository root, with .whl/ carried:
# the CUDA tests (the live gauge's included) and the live gauge's cost on CUDA cells.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export PATH=/tmp/site/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
LOG=$OUT/log.txt
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv;
  python3 -c "import torch, IPython, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'IPython', IPython.__version__, torch.cuda.get_device_name(0))";
  git log -1 --format='commit %H %s' 2>/dev/null; } 2>&1 | tee $LOG
python3 -m ipykernel install --user --name python3 > /dev/null 2>&1 || true
echo "== cuda tests" | tee -a $LOG
timeout 300 python3 -m pytest -q -o addopts="" -p no:cacheprovider -m cuda -rA tests/test_cuda.py tests/test_live.py 2>&1 | tail -40 | tee -a $LOG
echo "== live gauge cost on CUDA" | tee -a $LOG
timeout 240 python3 benchmarks/bench_live.py --device cuda 2>&1 | tail -40 | tee -a $LOG
