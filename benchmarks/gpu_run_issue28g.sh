#!/usr/bin/env bash
# Issue 28, seventh round, on the GPU machine (device tool), from the repository root with .whl/
# (Jupyter wheels) and .lowbit/ (bitsandbytes 0.50.2, torchao 0.18.0; see gpu_run_issue28c.sh) carried.
#   bash benchmarks/gpu_run_issue28g.sh "LIMITED TEST FILES" "UNLIMITED TEST FILES"
# every test marked cuda (about 150 s); then the named CPU test files on this machine's torch: the first
# list under an address-space limit of 200 GiB (the machine overcommits memory: a CPU request of TiBs that
# should fail is mapped and filled otherwise), the second without it (gloo ranks fail under the limit);
# then bench_low_bit. One device call (each runs at most 10 minutes).
set -u
source benchmarks/gpu_env.sh
export PYTHONPATH=$PWD/.lowbit:$PYTHONPATH
echo "tree $(git rev-parse --short HEAD 2>/dev/null) (stale on the machine: see README)" | tee -a $LOG
python3 -c "import bitsandbytes, torchao; print('bitsandbytes', bitsandbytes.__version__, 'torchao', torchao.__version__)" 2>&1 | tail -1 | tee -a $LOG
echo "== cuda tests" | tee -a $LOG
timeout 300 python3 -m pytest -q -o addopts="" -p no:cacheprovider -m cuda -rfEs tests 2>&1 | tail -40 | tee -a $LOG
if [ -n "${1:-}" ]; then
    echo "== test files under ulimit -v 200 GiB: $1" | tee -a $LOG
    ( ulimit -v 209715200; timeout 220 python3 -m pytest -q -o addopts="" -p no:cacheprovider -p no:nbval -rfEs $1 2>&1 | tail -30 ) | tee -a $LOG
fi
if [ -n "${2:-}" ]; then
    echo "== test files without the limit: $2" | tee -a $LOG
    timeout 120 python3 -m pytest -q -o addopts="" -p no:cacheprovider -p no:nbval -rfEs $2 2>&1 | tail -20 | tee -a $LOG
fi
echo "== bench_low_bit" | tee -a $LOG
timeout 60 python3 benchmarks/bench_low_bit.py $OUT/low_bit.json 2>&1 | grep -v Warning | tail -30 | tee -a $LOG
