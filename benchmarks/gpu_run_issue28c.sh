#!/usr/bin/env bash
# Issue 28, third round, on the GPU machine (device tool), from the repository root with .whl/
# (Jupyter wheels) and .lowbit/ carried. .lowbit/ is bitsandbytes 0.50.2 and torchao 0.18.0
# installed with `pip install --no-deps --target .lowbit`, keeping only bitsandbytes' CUDA 13.0 and
# CPU libraries and leaving out torchao's tests and its sm90a CUTLASS / MX-FP8 extensions (the
# call's tree is at most 64 MiB). Every test marked cuda with them importable, the low-bit
# benchmark, and adversary defect 21.
set -u
source benchmarks/gpu_env.sh
export PYTHONPATH=$PWD/.lowbit:$PYTHONPATH
python3 -c "import bitsandbytes, torchao; print('bitsandbytes', bitsandbytes.__version__, 'torchao', torchao.__version__)" 2>&1 | tail -1 | tee -a $LOG
echo "== cuda tests" | tee -a $LOG
timeout 420 python3 -m pytest -q -o addopts="" -p no:cacheprovider -m cuda -rfEs tests 2>&1 | tail -40 | tee -a $LOG
echo "== low-bit tests on this machine's torch" | tee -a $LOG
timeout 300 python3 -m pytest -q -o addopts="" -p no:cacheprovider -rfEs tests/test_no_effect.py tests/test_step.py tests/test_step_dropped_grads.py tests/test_global_state_settings.py tests/test_optimizer_custom_state_entries.py tests/test_step_writes_beside_the_model.py tests/test_numbers3.py tests/test_failed_op_frames.py 2>&1 | tail -15 | tee -a $LOG
echo "== adversary defect 21" | tee -a $LOG
timeout 120 python3 benchmarks/results/2026-12-04-adversary/defect_21.py 2>&1 | tail -3 | tee -a $LOG
echo "== bench_low_bit" | tee -a $LOG
timeout 240 python3 benchmarks/bench_low_bit.py $OUT/low_bit.json 2>&1 | grep -v Warning | tail -30 | tee -a $LOG
