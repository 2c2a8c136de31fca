#!/usr/bin/env bash
# The predictions issue's GPU runs (issue 12), on the GPU machine:
#   bash benchmarks/gpu_run_zoo.sh ops      # context memory by workload + the op-level cases
#   bash benchmarks/gpu_run_zoo.sh sample   # the 35-architecture sample, every recipe
#   bash benchmarks/gpu_run_zoo.sh <args>   # anything else: passed to zoo_gpu.py
# Everything lands under $OUT (a tarball per part: the tool brings back few files).
set -u
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
part=${1:-sample}; shift || true
budget=${BUDGET:-520}
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv;
  python -c "import sys, torch, torchvision, transformers; print(sys.version.split()[0], torch.__version__, torchvision.__version__, transformers.__version__)"; } > "$OUT/versions.txt" 2>&1
start=$(date +%s)
work=/tmp/zoo-$part; rm -rf "$work"; mkdir -p "$work"
case "$part" in
  ops)
    timeout 150 python benchmarks/context_memory.py --out "$work/context.json" --repeat 1 > "$work/context.log" 2>&1
    left=$(( budget - ($(date +%s) - start) ))
    python benchmarks/zoo_gpu.py --cases $(python -c "import sys; sys.path.insert(0,'benchmarks'); from zoo import cases; print(' '.join(c.name for c in cases('op')))") \
      --jobs 15 --deadline $(( left - 40 )) --timeout 240 --out "$work/runs" "$@" > "$work/zoo.log" 2>&1 ;;
  final1)  # every op-level case and the sample: real, estimate with the GPU present, MemTracker (sample)
    ops=$(python -c "import sys; sys.path.insert(0,'benchmarks'); from zoo import cases; print(' '.join(c.name for c in cases('op')))")
    sample=$(python -c "import sys; sys.path.insert(0,'benchmarks'); from zoo_gpu import SAMPLE; print(' '.join(SAMPLE))")
    ZOO_MEMTRACKER=1 python benchmarks/zoo_gpu.py --cases $sample $ops --jobs 15 --deadline $(( budget - 40 )) --timeout 300 \
      --out "$work/runs" > "$work/zoo.log" 2>&1 ;;
  final2)  # the same estimates with CUDA hidden (CPU only), and max_batch_size on an emulated 16 GiB card
    ops=$(python -c "import sys; sys.path.insert(0,'benchmarks'); from zoo import cases; print(' '.join(c.name for c in cases('op')))")
    sample=$(python -c "import sys; sys.path.insert(0,'benchmarks'); from zoo_gpu import SAMPLE; print(' '.join(SAMPLE))")
    python benchmarks/zoo_batch.py --card 16 --timeout $(( budget - 30 )) --out "$work/batch" > "$work/batch.log" 2>&1 &
    python benchmarks/zoo_gpu.py --cases $sample $ops --cuda-hidden --jobs 11 --deadline $(( budget - 40 )) --timeout 200 \
      --out "$work/runs" > "$work/zoo.log" 2>&1
    wait ;;
  sample)
    ZOO_TRACE=1 python benchmarks/zoo_gpu.py --sample --jobs 15 --deadline $(( budget - 40 )) --timeout 300 --out "$work/runs" "$@" > "$work/zoo.log" 2>&1 ;;
  *)
    python benchmarks/zoo_gpu.py "$part" "$@" --jobs 15 --deadline $(( budget - 40 )) --out "$work/runs" > "$work/zoo.log" 2>&1 ;;
esac
tar czf "$OUT/zoo-$part.tgz" --exclude='*.trace.json.gz' -C "$work" .  # first: a time limit loses nothing
[ "$part" = final2 ] || python benchmarks/zoo_report.py "$work/runs" --records "$work/records.json" > "$work/compare.txt" 2>&1
tail -3 "$work/zoo.log"; grep -E "peak:|device:" "$work/compare.txt"; cat "$work/batch.log" 2>/dev/null | tail -8; cat "$work/context.log" 2>/dev/null
