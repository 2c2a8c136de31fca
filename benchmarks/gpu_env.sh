# Sourced by benchmarks/gpu_run*.sh on the GPU machine (device tool), from the repository root with
# .whl/ carried: installs the carried wheels (IPython, ipywidgets, nbval, ...) beside the machine's
# torch, sets the paths, and starts $OUT/log.txt with the date, GPU, versions and commit.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
export PATH=/tmp/site/bin:$PATH JUPYTER_PATH=/tmp/site/share/jupyter
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG=$OUT/log.txt
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv;
  python3 -c "import torch, IPython, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'IPython', IPython.__version__, torch.cuda.get_device_name(0))";
  git log -1 --format='commit %H %s' 2>/dev/null; } 2>&1 | tee "$LOG"
python3 -m ipykernel install --user --name python3 > /dev/null 2>&1 || true
