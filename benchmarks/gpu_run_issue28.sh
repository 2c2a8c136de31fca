#!/usr/bin/env bash
# Issue 28 on the GPU machine (device tool), from the repository root, with .whl/ carried:
# every test marked cuda (the tests collected from every file: the new restore, global-state and
# advice code runs under them too), then the whole CPU-side suite of the changed modules on CUDA's torch.
set -u
source benchmarks/gpu_env.sh
echo "== cuda tests" | tee -a $LOG
timeout 420 python3 -m pytest -q -o addopts="" -p no:cacheprovider -m cuda -rfEs tests 2>&1 | tail -40 | tee -a $LOG
echo "== issue 28 tests on this machine's torch" | tee -a $LOG
timeout 200 python3 -m pytest -q -o addopts="" -p no:cacheprovider -rfE tests/test_global_state.py tests/test_one_shot.py \
    tests/test_printed_split.py tests/test_restore_state.py tests/test_reasons.py tests/test_verdict_context.py \
    tests/test_code_state.py tests/test_fit_loader_untouched.py tests/test_fit_no_cuda_context.py \
    tests/test_compiled_models.py tests/test_entry_interrupts.py tests/test_kept_graph_advice.py \
    tests/test_leftover_notes.py 2>&1 | tail -20 | tee -a $LOG
echo "== adversary defect 21: fit on a CPU model creates no CUDA context" | tee -a $LOG
timeout 120 python3 benchmarks/results/2026-12-04-adversary/defect_21.py 2>&1 | tail -5 | tee -a $LOG
