#!/usr/bin/env bash
# Techniques on the GPU machine: CUDA tests, the technique notebooks on CUDA, bench_techniques.
set -u
source benchmarks/gpu_env.sh
python3 -m pytest -q -o addopts="" -p no:cacheprovider -m cuda tests/test_cuda.py 2>&1 | tail -3 | tee -a $LOG
python3 benchmarks/run_notebooks.py notebooks/03_techniques.ipynb notebooks/01_where_memory_goes.ipynb 2>&1 | grep -v WARNING | tee -a $LOG
timeout 200 python3 benchmarks/bench_techniques.py --out $OUT/techniques.json 2>&1 | grep -v loss_type | tee -a $LOG | tail -60
