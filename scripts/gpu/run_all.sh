#!/usr/bin/env bash
# Runs on the GPU machine (device tool): builds puffadv with CUDA for sm_90,
# then every step in scripts/gpu/[0-9]*.sh, logging each to $OUT.
# Usage there: bash scripts/gpu/run_all.sh [step regex, e.g. "05|10|20"] [concurrent regex]
# Steps matching the second regex (correctness steps: tests, sanitizers) run
# side by side first, each logging to its own file; the others (benchmarks,
# which must have the GPU to themselves) run one by one after them.
set -uo pipefail
export PYTHONUNBUFFERED=1
# The device tool returns at most 8 files: steps log into $OUT/logs, which is
# packed into one archive at the end (plus the summary and the bench chart).
RESULTS="${OUT:-/tmp/puffadv-gpu-out}"
export OUT="$RESULTS/logs"; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
pack() {
  [ -f "$OUT/gpu_bandwidth.png" ] && cp "$OUT/gpu_bandwidth.png" "$RESULTS/"
  [ -f "$OUT/bench.md" ] && cp "$OUT/bench.md" "$RESULTS/"
  tar -C "$RESULTS" -czf "$RESULTS/gpu-logs.tar.gz" logs && rm -rf "$OUT"
}
trap pack EXIT
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
} 2>&1 | tee "$OUT/machine.txt"
python3 -m pip install -q --no-build-isolation -C build-dir=build/gpu \
  -C cmake.define.PUFF_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 . > "$OUT/build.log" 2>&1 \
  || { tail -50 "$OUT/build.log"; exit 1; }
python3 -m puffadv | tee "$OUT/selfcheck.txt"
status=0
selected=()
for step in scripts/gpu/[0-9]*.sh; do
  [ -n "${1:-}" ] && ! [[ "$step" =~ $1 ]] && continue
  selected+=("$step")
done
concurrent() { [ -n "${2:-}" ] && [[ "$1" =~ $2 ]]; }
pids=()
for step in "${selected[@]}"; do
  concurrent "$step" "${2:-}" || continue
  name="$(basename "$step" .sh)"
  ( start=$SECONDS; bash "$step" > "$OUT/step-$name.txt" 2>&1; rc=$?
    echo "--- $step took $((SECONDS - start)) s, exit status $rc" >> "$OUT/step-$name.txt"; exit $rc ) &
  pids+=("$!:$step")
done
for entry in "${pids[@]}"; do
  step="${entry#*:}"
  wait "${entry%%:*}" || { echo "STEP FAILED: $step"; status=1; }
  echo "=== $step (concurrent) ==="; tail -25 "$OUT/step-$(basename "$step" .sh).txt"
done
for step in "${selected[@]}"; do
  concurrent "$step" "${2:-}" && continue
  echo "=== $step ==="
  start=$SECONDS
  bash "$step" || { echo "STEP FAILED: $step"; status=1; }
  echo "--- $step took $((SECONDS - start)) s"
done
exit $status
