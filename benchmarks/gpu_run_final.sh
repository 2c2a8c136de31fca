#!/usr/bin/env bash
# The closing GPU run (device tool), from the repository root, .whl/ carried: the CUDA
# tests, then every notebook on CUDA (6 at a time), outputs saved in $OUT.
set -u
source benchmarks/gpu_env.sh
echo "== cuda tests" | tee -a $LOG
timeout 240 python3 -m pytest -q -o addopts="" -p no:cacheprovider -m cuda -rA tests/ 2>&1 | tail -40 | tee -a $LOG
echo "== notebooks on CUDA (nbclient, 6 at a time; outputs saved)" | tee -a $LOG
timeout ${NB_TIMEOUT:-360} python3 benchmarks/run_notebooks.py -j 6 "$@" 2>&1 | grep -v WARNING | tee -a $LOG
echo "== 8-bit optimizers and fp8 (benchmarks/bench_low_bit.py)" | tee -a $LOG
timeout ${LOWBIT_TIMEOUT:-240} python3 benchmarks/bench_low_bit.py $OUT/low_bit.json 2>&1 | grep -v Warning | tee -a $LOG
# at most 8 files come back from the device tool: the executed notebooks travel as one archive
(cd $OUT && tar czf notebooks.cuda.tgz *.cuda.ipynb && rm -f *.cuda.ipynb)
