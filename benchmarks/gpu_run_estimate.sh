#!/usr/bin/env bash
# Estimates vs real steps on the GPU machine (device tool), from the repository root, .whl/ carried.
set -u
source benchmarks/gpu_env.sh
echo "== estimates vs real ($*)" | tee -a $LOG
timeout ${BENCH_TIMEOUT:-540} python3 benchmarks/bench_estimate.py --out $OUT/estimate.json "$@" 2>&1 | grep -v "Warning\|warn(" | tee -a $LOG
