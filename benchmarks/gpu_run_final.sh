#!/usr/bin/env bash
# The closing GPU run (device tool), from the repository root, .whl/ carried: the CUDA
# tests, then every notebook on CUDA (6 at a time), outputs saved in $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
export JUPYTER_PATH=/tmp/site/share/jupyter
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
LOG=$OUT/log.txt
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv;
  python3 -c "import torch, IPython, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'IPython', IPython.__version__, torch.cuda.get_device_name(0))"; } 2>&1 | tee $LOG
echo "== cuda tests" | tee -a $LOG
timeout 240 python3 -m pytest -q -o addopts="" -p no:cacheprovider -m cuda -rA tests/ 2>&1 | tail -40 | tee -a $LOG
echo "== notebooks on CUDA (nbclient, 6 at a time; outputs saved)" | tee -a $LOG
timeout ${NB_TIMEOUT:-360} python3 benchmarks/run_notebooks.py -j 6 "$@" 2>&1 | grep -v WARNING | tee -a $LOG
echo "== 8-bit optimizers and fp8 (benchmarks/bench_low_bit.py)" | tee -a $LOG
timeout ${LOWBIT_TIMEOUT:-240} python3 benchmarks/bench_low_bit.py $OUT/low_bit.json 2>&1 | grep -v Warning | tee -a $LOG
# at most 8 files come back from the device tool: the executed notebooks travel as one archive
(cd $OUT && tar czf notebooks.cuda.tgz *.cuda.ipynb && rm -f *.cuda.ipynb)
