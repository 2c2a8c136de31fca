#!/usr/bin/env bash
# Issue 28, sixth round, on the GPU machine (device tool), from the repository root with .whl/
# (Jupyter wheels) and .lowbit/ (bitsandbytes 0.50.2, torchao 0.18.0; see gpu_run_issue28c.sh) carried.
#   bash benchmarks/gpu_run_issue28f.sh [T1.py T2.py ...]
# every test marked cuda (about 150 s), then the named CPU test files on this machine's torch, then
# bench_low_bit: one device call (each runs at most 10 minutes; the machine is given back after 30 s idle).
set -u
source benchmarks/gpu_env.sh
export PYTHONPATH=$PWD/.lowbit:$PYTHONPATH
python3 -c "import bitsandbytes, torchao; print('bitsandbytes', bitsandbytes.__version__, 'torchao', torchao.__version__)" 2>&1 | tail -1 | tee -a $LOG
echo "== cuda tests" | tee -a $LOG
timeout 300 python3 -m pytest -q -o addopts="" -p no:cacheprovider -m cuda -rfEs tests 2>&1 | tail -40 | tee -a $LOG
if [ $# -gt 0 ]; then
    echo "== test files on this machine's torch: $*" | tee -a $LOG
    timeout 200 python3 -m pytest -q -o addopts="" -p no:cacheprovider -p no:nbval -rfEs "$@" 2>&1 | tail -30 | tee -a $LOG
fi
echo "== bench_low_bit" | tee -a $LOG
timeout 60 python3 benchmarks/bench_low_bit.py $OUT/low_bit.json 2>&1 | grep -v Warning | tail -30 | tee -a $LOG
