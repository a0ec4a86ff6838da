#!/usr/bin/env bash
# One device call for flat whole rows (issues 13 and 20: packed, aligned arrays
# whose horizon is not a multiple of a thread's steps, src/kernels/scan_rows.cuh).
# Logs under $OUT/logs, packed into one archive:
#   1. build (CUDA, sm_90, no torch/JAX layers; build dir outside the carried tree);
#   2. side by side: tests/python/test_gpu_flat_rows.py (every estimator GPU == CPU on
#      odd horizons, NaN rows, 16-bit, which kernel each layout takes), the existing GPU
#      cases that now take the flat kernels (test_gpu.py every_layout / unaligned /
#      family, test_conventions.py and test_family.py on CUDA), and compute-sanitizer
#      memcheck and racecheck over a subset of the new cases;
#   3. alone on the GPU: the standard estimators and the family beside rl-triton at
#      8192x91 (the SPEC shape the flat kernels are for) and 8192x64 (aligned: must be
#      unchanged; SHAPES=... for others, e.g. 65536x91), then the puff advantage
#      (bench_gpu.py --quick). Fits one 600 s device call (DEADLINE=560 s from the start).
# rl-triton: $PUFFADV_RL_TRITON (default shared/peers/rl_triton, else ../shared/peers/rl_triton).
set -uo pipefail
export PYTHONUNBUFFERED=1
RESULTS="${OUT:-/tmp/puffadv-flat-out}"
LOG="$RESULTS/logs"
mkdir -p "$LOG"
cd "$(dirname "$0")/../.."
if [ -z "${PUFFADV_RL_TRITON:-}" ]; then
  for p in "$PWD/shared/peers/rl_triton" "$PWD/../shared/peers/rl_triton" "$PWD/../peers/rl_triton"; do
    [ -d "$p" ] && export PUFFADV_RL_TRITON="$p" && break
  done
fi
pack() { tar -C "$RESULTS" -czf "$RESULTS/flat-logs.tar.gz" logs; }
trap pack EXIT
stamp() { echo "--- $(date -u +%H:%M:%S) UTC $*" | tee -a "$LOG/timeline.txt"; }
status=0

stamp "start"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv > "$LOG/machine.txt" 2>&1
git log --oneline -1 > "$LOG/commit.txt" 2>/dev/null || true
CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install -q --no-build-isolation --no-deps \
  -C build-dir=/tmp/flat-gpu-build -C cmake.define.PUFF_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 \
  -C cmake.define.PUFF_HIP=OFF -C cmake.define.PUFF_TORCH=OFF -C cmake.define.PUFF_JAX=OFF . > "$LOG/build.log" 2>&1 \
  || { tail -40 "$LOG/build.log"; stamp "build FAILED"; exit 1; }
stamp "built"
python3 -m puffadv > "$LOG/selfcheck.txt" 2>&1 || status=1

deadline=$(( ${DEADLINE:-560} ))
left() { echo $(( deadline - SECONDS )); }
test_limit=${TEST_LIMIT:-120}
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
sanitize() {  # tool, log, pytest -k expression
  PUFFADV_UNDER_SANITIZER=1 timeout "$test_limit" "$sanitizer" --tool "$1" --error-exitcode 99 \
    python3 -m pytest -q -p no:cacheprovider tests/python/test_gpu_flat_rows.py -k "$3" > "$LOG/$2" 2>&1
  echo "$1 exit status $?" >> "$LOG/$2"
}
# FLAT_SHAPES 4 and 8: 9x5, 333x91 (row ends at every place in a group, blocks starting
# inside groups, a last group past the arrays); the NaN test at 40x91.
sanitize memcheck memcheck.txt "(match_the_cpu and float32 and (shape4 or shape8)) or (nan_stays and shape1)" &
memcheck=$!
sanitize racecheck racecheck.txt "match_the_cpu and float32 and shape8" &
racecheck=$!
timeout "$test_limit" python3 -m pytest -q -p no:cacheprovider -rf tests/python/test_family.py -k "torch-cuda or cupy" \
  > "$LOG/test-family-cuda.txt" 2>&1 &
family=$!
timeout "$test_limit" python3 -m pytest -q -p no:cacheprovider -rf tests/python/test_conventions.py -k cuda \
  > "$LOG/test-conventions-cuda.txt" 2>&1 &
conventions=$!
timeout "$test_limit" python3 -m pytest -q -p no:cacheprovider -rf tests/python/test_gpu.py \
  -k "every_layout or unaligned or strided_views or reduced_precision or nan_stays or graph" \
  > "$LOG/test-gpu.txt" 2>&1 &
gpu=$!
timeout "$test_limit" python3 -m pytest -q -p no:cacheprovider -rf tests/python/test_gpu_flat_rows.py \
  > "$LOG/test-gpu-flat-rows.txt" 2>&1 || status=1
for pid in $family $conventions $gpu; do wait "$pid" || status=1; done
for f in test-gpu-flat-rows test-gpu test-family-cuda test-conventions-cuda; do echo "$f: $(tail -1 "$LOG/$f.txt")"; done
wait $memcheck; wait $racecheck
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|exit status" "$LOG/memcheck.txt" "$LOG/racecheck.txt" | tail -8
stamp "tests and sanitizers done"

# Alone on the GPU.
shapes="${SHAPES:-8192x91,8192x64}"
timeout $(( $(left) / 3 )) python3 benchmarks/bench_conventions.py --sections peers --bench-only --shapes "$shapes" \
  --json "$LOG/standard-bench.json" --markdown "$LOG/standard-bench.md" > "$LOG/standard-bench.txt" 2>&1 || status=1
stamp "standard bench done"
timeout $(( $(left) / 2 )) python3 benchmarks/bench_conventions.py --sections peers --bench-only --estimators family \
  --shapes "$shapes" --json "$LOG/family-bench.json" --markdown "$LOG/family-bench.md" > "$LOG/family-bench.txt" 2>&1 \
  || status=1
stamp "family bench done"
timeout $(( $(left) - 5 )) python3 benchmarks/bench_gpu.py --quick --shapes "$shapes" --json "$LOG/puff-bench.json" \
  > "$LOG/puff-bench.txt" 2>&1 || status=1
stamp "puff bench done"
cat "$LOG/standard-bench.md" "$LOG/family-bench.md" 2>/dev/null | grep -E "^\|" | head -60
exit $status
