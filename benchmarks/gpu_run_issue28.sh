#!/usr/bin/env bash
# Issue 28 on the GPU machine (device tool), from the repository root, with .whl/ carried:
# every test marked cuda (the tests collected from every file: the new restore, global-state and
# advice code runs under them too), then the whole CPU-side suite of the changed modules on CUDA's torch.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export PATH=/tmp/site/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
LOG=$OUT/log.txt
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv;
  python3 -c "import torch, IPython, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'IPython', IPython.__version__, torch.cuda.get_device_name(0))";
  git log -1 --format='commit %H %s' 2>/dev/null; } 2>&1 | tee $LOG
python3 -m ipykernel install --user --name python3 > /dev/null 2>&1 || true
echo "== cuda tests" | tee -a $LOG
timeout 420 python3 -m pytest -q -o addopts="" -p no:cacheprovider -m cuda -rfEs tests 2>&1 | tail -40 | tee -a $LOG
echo "== issue 28 tests on this machine's torch" | tee -a $LOG
timeout 150 python3 -m pytest -q -o addopts="" -p no:cacheprovider -x -rfE tests/test_global_state.py tests/test_one_shot.py \
    tests/test_printed_split.py tests/test_restore_state.py tests/test_reasons.py tests/test_verdict_context.py 2>&1 | tail -20 | tee -a $LOG
