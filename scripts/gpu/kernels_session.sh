#!/usr/bin/env bash
# One device call for kernel work (issue 13), logs under $OUT (packed into one
# archive: the device tool returns at most 8 files).
#   explore: build; the kernel-variant harness (benchmarks/gpu_scan_variants.cu)
#            timed and under Nsight Compute; quick GPU == CPU checks; the peer
#            benchmark (puffadv beside rl-triton).
#   final:   build; the conventions/non-finite/GPU tests on CUDA tensors, beside
#            compute-sanitizer memcheck and racecheck on the conventions
#            kernels; then the peer benchmark (and with DTYPES=1 the dtype
#            table) alone on the GPU. SHAPES=RxH,... limits the peer shapes.
# rl-triton: $PUFFADV_RL_TRITON (default ../peers/rl_triton beside this checkout).
# Usage there: bash scripts/gpu/kernels_session.sh explore|final
set -uo pipefail
export PYTHONUNBUFFERED=1
mode="${1:-explore}"
RESULTS="${OUT:-/tmp/puffadv-kernels-out}"
LOG="$RESULTS/logs"
mkdir -p "$LOG"
cd "$(dirname "$0")/../.."
export PUFFADV_RL_TRITON="${PUFFADV_RL_TRITON:-$PWD/../peers/rl_triton}"
pack() { tar -C "$RESULTS" -czf "$RESULTS/kernels-logs.tar.gz" logs; }
trap pack EXIT
stamp() { echo "--- $(date -u +%H:%M:%S) UTC $*" | tee -a "$LOG/timeline.txt"; }
status=0

stamp "start ($mode)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv > "$LOG/machine.txt" 2>&1
python3 -c 'import torch, triton, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)' >> "$LOG/machine.txt" 2>&1
python3 -m pip install -q --no-build-isolation -C build-dir=build/gpu -C cmake.define.PUFF_CUDA=ON \
  -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 -C cmake.define.PUFF_HIP=OFF \
  -C cmake.define.PUFF_TORCH=OFF -C cmake.define.PUFF_JAX=OFF . > "$LOG/build.log" 2>&1 &
build=$!
if [ "$mode" = explore ]; then
  nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Xptxas -v -Isrc \
    benchmarks/gpu_scan_variants.cu -o /tmp/variants > "$LOG/variants-ptxas.txt" 2>&1 || status=1
fi
wait $build || { tail -40 "$LOG/build.log"; stamp "build FAILED"; exit 1; }
stamp "built"
python3 -m puffadv > "$LOG/selfcheck.txt" 2>&1 || status=1

if [ "$mode" = explore ]; then
  /tmp/variants > "$LOG/variants.txt" 2>&1 || status=1
  stamp "variants timed"; tail -3 "$LOG/variants.txt"
  timeout 150 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    -k regex:scan_whole_rows /tmp/variants --profile --variant 4x6,4x8 > "$LOG/ncu.txt" 2>&1 || echo "ncu exit $?"
  stamp "ncu done"
  timeout 150 python3 benchmarks/bench_conventions.py --quick --check-only > "$LOG/check-quick.txt" 2>&1 || status=1
  tail -3 "$LOG/check-quick.txt"
  timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/python/test_conventions.py -k cuda \
    > "$LOG/pytest-conventions-cuda.txt" 2>&1 || status=1
  tail -1 "$LOG/pytest-conventions-cuda.txt"
  stamp "checks done"
else
  # Side by side on the GPU: the tests, the full GPU == CPU sweep, and the two
  # sanitizers over the kernel workload and the conventions tests on CUDA.
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  sanitize() {  # tool
    local tool="$1" rc=0 code
    for args in "scripts/gpu/kernel_workload.py" "-m pytest -q -p no:cacheprovider tests/python/test_conventions.py -k cuda"; do
      echo "=== $tool: python3 $args" >> "$LOG/sanitizer-$tool.txt"
      # shellcheck disable=SC2086
      PUFFADV_UNDER_SANITIZER=1 timeout "${LIMIT:-120}" "$sanitizer" --tool "$tool" --error-exitcode 99 \
        python3 $args >> "$LOG/sanitizer-$tool.txt" 2>&1
      code=$?
      echo "=== $tool exit status $code: python3 $args" >> "$LOG/sanitizer-$tool.txt"
      [ $code -eq 0 ] || rc=1
    done
    return $rc
  }
  sanitize memcheck & m=$!
  sanitize racecheck & r=$!
  timeout "${LIMIT:-120}" python3 -m pytest -q -p no:cacheprovider tests/python/test_conventions.py \
    tests/python/test_nonfinite.py tests/python/test_gpu.py tests/python/test_gpu_family.py -k "not 300007 and not 131072" \
    > "$LOG/pytest-gpu.txt" 2>&1 & p=$!
  timeout "${LIMIT:-120}" python3 benchmarks/bench_conventions.py --check-only > "$LOG/check-full.txt" 2>&1 & c=$!
  wait $p || status=1
  wait $c || status=1
  wait $m || status=1
  wait $r || status=1
  tail -1 "$LOG/pytest-gpu.txt"; tail -2 "$LOG/check-full.txt"
  grep -E "exit status|ERROR SUMMARY|RACECHECK SUMMARY|kernel workload|passed|failed" "$LOG"/sanitizer-*.txt | tail -12
  stamp "tests, sweep and sanitizers done"
fi

if [ "$mode" = explore ]; then
  timeout "${PEERS_LIMIT:-240}" python3 benchmarks/bench_conventions.py --sections peers ${SHAPES:+--shapes $SHAPES} \
    --markdown "$LOG/peers.md" --json "$LOG/peers.json" --plot "$LOG/peers.png" > "$LOG/peers.txt" 2>&1 \
    || echo "peer bars missed or failed"
else
  # Triton compiles each rl-triton kernel per block size (seconds each on a fresh
  # machine): rl-triton beside puffadv on the shapes of one block size, then
  # puffadv alone on the whole grid.
  timeout "${PEERS_LIMIT:-70}" python3 benchmarks/bench_conventions.py --sections peers \
    --shapes "${SHAPES:-65536x128,262144x128}" --markdown "$LOG/peers-rl.md" --json "$LOG/peers-rl.json" \
    > "$LOG/peers-rl.txt" 2>&1 || echo "peer bars missed or failed (rl-triton shapes)"
  stamp "peers beside rl-triton"
  env -u PUFFADV_RL_TRITON timeout "${GRID_LIMIT:-70}" python3 benchmarks/bench_conventions.py --sections peers \
    --markdown "$LOG/peers-grid.md" --json "$LOG/peers-grid.json" > "$LOG/peers-grid.txt" 2>&1 \
    || echo "peer bars missed or failed (grid)"
fi
stamp "peers benchmarked"
grep -hE "MISMATCH|MISSED|Error" "$LOG"/peers*.txt | head -40
if [ "$mode" = final ] && [ -n "${DTYPES:-}" ]; then
  timeout 200 python3 benchmarks/bench_conventions.py --sections dtypes --json "$LOG/dtypes.json" \
    > "$LOG/dtypes.txt" 2>&1 || echo "dtype bars missed or failed"
  stamp "dtypes benchmarked"
fi
exit $status
