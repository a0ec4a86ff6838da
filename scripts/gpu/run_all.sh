#!/usr/bin/env bash
# Runs on the GPU machine (device tool): builds puffadv with CUDA for sm_90,
# then every step in scripts/gpu/[0-9]*.sh, logging each to $OUT.
# Usage there: bash scripts/gpu/run_all.sh [step-name-filter]
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/puffadv-gpu-out}"; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
} 2>&1 | tee "$OUT/machine.txt"
python3 -m pip install -q --no-build-isolation -C build-dir=build/gpu \
  -C cmake.define.PUFF_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 . > "$OUT/build.log" 2>&1 \
  || { tail -50 "$OUT/build.log"; exit 1; }
python3 -m puffadv | tee "$OUT/selfcheck.txt"
status=0
for step in scripts/gpu/[0-9]*.sh; do
  [ -n "${1:-}" ] && [[ "$step" != *"$1"* ]] && continue
  echo "=== $step ==="
  bash "$step" || { echo "STEP FAILED: $step"; status=1; }
done
exit $status
