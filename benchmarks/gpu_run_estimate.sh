#!/usr/bin/env bash
# Estimates vs real steps on the GPU machine (device tool), from the repository root, .whl/ carried.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
LOG=$OUT/log.txt
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv;
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"; } 2>&1 | tee $LOG
echo "== estimates vs real ($*)" | tee -a $LOG
timeout ${BENCH_TIMEOUT:-540} python3 benchmarks/bench_estimate.py --out $OUT/estimate.json "$@" 2>&1 | grep -v "Warning\|warn(" | tee -a $LOG
