#!/usr/bin/env bash
# One batched run on the GPU machine (device tool), from the repository root, with .whl/ carried:
# the CUDA tests, the whole suite on this torch, the notebooks on CUDA, and the benchmarks.
# Everything lands in $OUT (at most 8 files come back).
set -u
source benchmarks/gpu_env.sh
echo "== cuda tests" | tee -a $LOG
python3 -m pytest -q -o addopts="" -p no:cacheprovider -m cuda -rA tests/test_cuda.py 2>&1 | tail -30 | tee -a $LOG
echo "== all tests (torch on this machine)" | tee -a $LOG
python3 -m pytest -q -o addopts="" -p no:cacheprovider --doctest-modules vramnb tests 2>&1 | tail -8 | tee -a $LOG
echo "== notebooks on CUDA (nbclient; outputs saved)" | tee -a $LOG
python3 benchmarks/run_notebooks.py 2>&1 | grep -v WARNING | tee -a $LOG
echo "== magic overhead" | tee -a $LOG
python3 benchmarks/bench_magic_overhead.py -n 400 --out $OUT/overhead.json 2>&1 | tail -40 | tee -a $LOG
echo "== step breakdown and tracking overhead" | tee -a $LOG
python3 benchmarks/bench_step.py --out $OUT/step.json 2>&1 | tail -20 | tee -a $LOG
