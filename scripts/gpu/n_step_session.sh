#!/usr/bin/env bash
# One device call for the n-step returns vector kernel (src/gpu/n_step_window.cuh),
# logs under $OUT/logs (packed into $OUT/n-step-logs.tar.gz):
#   1. build (CUDA, sm_90, no torch/JAX layers);
#   2. the n-step GPU tests (test_gpu_family.py's n-step cases, the vector-kernel
#      and NaN-isolation tests; test_family.py's CUDA n-step cases);
#   3. alone on the GPU: bench_conventions.py's peer section for n_step n=3
#      (SHAPES=RxH,... to change);
#   4. compute-sanitizer memcheck and racecheck over the small float32 n-step
#      cases, then, where ncu exists, one profile of the vector kernel at
#      65536x128 (instructions, DRAM throughput), in the time left.
# DEADLINE (seconds after the start, default 540) bounds the whole call.
set -uo pipefail
export PYTHONUNBUFFERED=1
RESULTS="${OUT:-/tmp/puffadv-n-step-out}"
LOG="$RESULTS/logs"
mkdir -p "$LOG"
cd "$(dirname "$0")/../.."
pack() { tar -C "$RESULTS" -czf "$RESULTS/n-step-logs.tar.gz" logs; }
trap pack EXIT
stamp() { echo "--- $(date -u +%H:%M:%S) UTC $*" | tee -a "$LOG/timeline.txt"; }
deadline=$(( ${DEADLINE:-540} ))
left() { echo $(( deadline - SECONDS )); }
status=0

stamp "start"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$LOG/machine.txt" 2>&1
git log --oneline -1 > "$LOG/commit.txt" 2>/dev/null || true
CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install -q --no-build-isolation --no-deps \
  -C build-dir=/tmp/n-step-gpu-build -C cmake.define.PUFF_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 \
  -C cmake.define.PUFF_HIP=OFF -C cmake.define.PUFF_TORCH=OFF -C cmake.define.PUFF_JAX=OFF . > "$LOG/build.log" 2>&1 \
  || { tail -40 "$LOG/build.log"; stamp "build FAILED"; exit 1; }
stamp "built"

timeout $(( $(left) > 400 ? 150 : 90 )) python3 -m pytest -q -p no:cacheprovider -rf tests/python/test_gpu_family.py \
  -k "n_step" > "$LOG/test-gpu-n-step.txt" 2>&1 || status=1
timeout 60 python3 -m pytest -q -p no:cacheprovider -rf tests/python/test_family.py \
  -k "(torch-cuda or cupy) and n_step" > "$LOG/test-family-cuda-n-step.txt" 2>&1 || status=1
for f in test-gpu-n-step test-family-cuda-n-step; do echo "$f: $(tail -1 "$LOG/$f.txt")"; done
stamp "tests done"

shapes="${SHAPES:-65536x128,262144x128,4096x1024,1048576x32,1048576x8,1024x128,8x131072}"
timeout $(( $(left) - 150 > 60 ? $(left) - 150 : 60 )) python3 benchmarks/bench_conventions.py --sections peers --estimators "n_step n=3 returns" \
  --shapes "$shapes" --json "$LOG/n-step-bench.json" --markdown "$LOG/n-step-bench.md" > "$LOG/n-step-bench.txt" 2>&1 \
  || status=1
grep -E "copy bandwidth|n_step" "$LOG/n-step-bench.txt" | head -12
stamp "bench done"

sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
small="n_step and float32 and (vector_kernel or nan_stays or (every_layout and (shape0 or shape1)))"
for tool in memcheck racecheck; do
  PUFFADV_UNDER_SANITIZER=1 timeout $(( $(left) - 60 > 120 ? 120 : ($(left) - 60 > 20 ? $(left) - 60 : 20) )) "$sanitizer" --tool "$tool" --error-exitcode 99 \
    python3 -m pytest -q -p no:cacheprovider tests/python/test_gpu_family.py -k "$small" > "$LOG/$tool.txt" 2>&1
  echo "$tool exit status $?" >> "$LOG/$tool.txt"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|exit status" "$LOG/$tool.txt" | tail -3
done
stamp "sanitizers done"

if command -v ncu >/dev/null && [ "$(left)" -gt 40 ]; then
  cat > "$LOG/ncu_workload.py" <<'PY'
import torch, puffadv
rows, horizon = 65536, 128
g = torch.Generator(device="cuda").manual_seed(0)
r = torch.randn(rows, horizon, device="cuda", generator=g)
v = torch.randn(rows, horizon, device="cuda", generator=g)
term = (torch.rand(rows, horizon, device="cuda", generator=g) < 0.05).float()
last = torch.randn(rows, device="cuda", generator=g)
for _ in range(4):
    puffadv.n_step_returns(r, v, term, n=3, last_value=last, gamma=0.99)
torch.cuda.synchronize()
PY
  timeout $(( $(left) - 5 )) ncu --kernel-name regex:n_step_vector --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section InstructionStats \
    python3 "$LOG/ncu_workload.py" > "$LOG/ncu.txt" 2>&1
  grep -E "Duration|DRAM Throughput|Executed Instructions |Registers Per|Achieved Occupancy|Compute \(SM\)" "$LOG/ncu.txt" | head -10
  stamp "ncu done"
fi
exit $status
