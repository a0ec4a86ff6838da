#!/usr/bin/env bash
# One device call for the estimator family's GPU kernels (issue 20), logs under
# $OUT/logs, packed into one archive (the device tool returns few files):
#   1. build (CUDA, sm_90, no torch/JAX layers; build dir outside the carried tree,
#      so that a second call on a warm machine rebuilds only what changed);
#   2. side by side: the family's tests on CUDA tensors (test_family.py on the GPU
#      targets, test_gpu_family.py's cases, test_conventions.py's CUDA cases for
#      the standard producer that discounted returns now share) and
#      compute-sanitizer memcheck over the family's GPU cases;
#   3. alone on the GPU: bench_conventions.py's peer section for the family's
#      estimators beside rl-triton until the deadline (SHAPES=RxH,... to limit).
# rl-triton: $PUFFADV_RL_TRITON (default ../peers/rl_triton beside this checkout).
set -uo pipefail
export PYTHONUNBUFFERED=1
RESULTS="${OUT:-/tmp/puffadv-family-out}"
LOG="$RESULTS/logs"
mkdir -p "$LOG"
cd "$(dirname "$0")/../.."
export PUFFADV_RL_TRITON="${PUFFADV_RL_TRITON:-$PWD/../peers/rl_triton}"
pack() { tar -C "$RESULTS" -czf "$RESULTS/family-logs.tar.gz" logs; }
trap pack EXIT
stamp() { echo "--- $(date -u +%H:%M:%S) UTC $*" | tee -a "$LOG/timeline.txt"; }
status=0

stamp "start"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv > "$LOG/machine.txt" 2>&1
python3 -c 'import torch, triton, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)' >> "$LOG/machine.txt" 2>&1
git log --oneline -1 > "$LOG/commit.txt" 2>/dev/null || true
CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install -q --no-build-isolation --no-deps \
  -C build-dir=/tmp/family-gpu-build -C cmake.define.PUFF_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 \
  -C cmake.define.PUFF_HIP=OFF -C cmake.define.PUFF_TORCH=OFF -C cmake.define.PUFF_JAX=OFF . > "$LOG/build.log" 2>&1 \
  || { tail -40 "$LOG/build.log"; stamp "build FAILED"; exit 1; }
stamp "built"
python3 -m puffadv > "$LOG/selfcheck.txt" 2>&1 || status=1

# Everything below shares the device call's time: DEADLINE seconds after the start.
deadline=$(( ${DEADLINE:-400} ))
left() { echo $(( deadline - SECONDS )); }
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
test_limit=$(( $(left) > 300 ? ${TEST_LIMIT:-90} : 60 ))
(
  PUFFADV_UNDER_SANITIZER=1 timeout "$test_limit" "$sanitizer" --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q -p no:cacheprovider tests/python/test_gpu_family.py \
    -k "(every_layout and float32 and (shape0 or shape1 or shape3)) or nan_stays" > "$LOG/memcheck.txt" 2>&1
  echo "memcheck exit status $?" >> "$LOG/memcheck.txt"
) &
memcheck=$!
timeout "$test_limit" python3 -m pytest -q -p no:cacheprovider -rf -x tests/python/test_family.py -k "torch-cuda or cupy" \
  > "$LOG/test-family-cuda.txt" 2>&1 &
family=$!
timeout "$test_limit" python3 -m pytest -q -p no:cacheprovider -rf tests/python/test_conventions.py -k cuda \
  > "$LOG/test-conventions-cuda.txt" 2>&1 &
conventions=$!
timeout "$test_limit" python3 -m pytest -q -p no:cacheprovider -rf tests/python/test_gpu_family.py \
  > "$LOG/test-gpu-family.txt" 2>&1 || status=1
wait $family || status=1
wait $conventions || status=1
for f in test-gpu-family test-family-cuda test-conventions-cuda; do echo "$f: $(tail -1 "$LOG/$f.txt")"; done
wait $memcheck
grep -E "ERROR SUMMARY|passed|failed|exit status" "$LOG/memcheck.txt" | tail -4
stamp "tests and memcheck done"

# Alone on the GPU: the family beside rl-triton (rows print as they are measured).
shapes="${SHAPES:-65536x128,262144x128,4096x1024,1048576x32,1048576x8,1024x128,8x131072,64x16384,16384x64,8192x64,4096x64,8192x91}"
timeout $(( $(left) - ${VARIANT_SECONDS:-0} )) python3 benchmarks/bench_conventions.py --sections peers --estimators family \
  --shapes "$shapes" --json "$LOG/family-bench.json" --markdown "$LOG/family-bench.md" > "$LOG/family-bench.txt" 2>&1 \
  || status=1
grep -E "copy bandwidth|rl-triton [0-9]|MISMATCH" "$LOG/family-bench.txt" | head -3
stamp "bench done"
exit $status
