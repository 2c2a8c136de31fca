#!/usr/bin/env bash
# Techniques on the GPU machine: CUDA tests, the technique notebooks on CUDA, bench_techniques.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
LOG=$OUT/log.txt
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader;
  python3 -c "import torch; print('torch', torch.__version__)"; } 2>&1 | tee $LOG
python3 -m pytest -q -o addopts="" -p no:cacheprovider -m cuda tests/test_cuda.py 2>&1 | tail -3 | tee -a $LOG
python3 benchmarks/run_notebooks.py notebooks/03_techniques.ipynb notebooks/01_where_memory_goes.ipynb 2>&1 | grep -v WARNING | tee -a $LOG
timeout 200 python3 benchmarks/bench_techniques.py --out $OUT/techniques.json 2>&1 | grep -v loss_type | tee -a $LOG | tail -60
