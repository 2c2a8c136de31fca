#!/usr/bin/env bash
# Issue 15 on the GPU machine (device tool), from the repository root, with .whl/ carried:
# the CUDA tests (the live gauge's included) and the live gauge's cost on CUDA cells.
set -u
source benchmarks/gpu_env.sh
echo "== cuda tests" | tee -a $LOG
timeout 300 python3 -m pytest -q -o addopts="" -p no:cacheprovider -m cuda -rA tests/test_cuda.py tests/test_live.py 2>&1 | tail -40 | tee -a $LOG
echo "== live gauge cost on CUDA" | tee -a $LOG
timeout 240 python3 benchmarks/bench_live.py --device cuda 2>&1 | tail -40 | tee -a $LOG
