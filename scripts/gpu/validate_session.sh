#!/usr/bin/env bash
# One device call validating a whole tree (run from the checkout's root; logs packed into
# $OUT/logs.tar.gz, the device tool returns few files):
#   1. build with every layer (CUDA sm_90, torch, JAX); with VARIANTS=1, beside it the
#      kernel-variant harness (benchmarks/gpu_scan_variants.cu), timed on the idle GPU;
#   2. side by side: the whole Python suite on the GPU (pytest -n 6, JAX after it),
#      compute-sanitizer memcheck and racecheck over the scan kernels' layouts
#      (test_gpu_flat_rows.py, test_gpu.py's and test_gpu_family.py's every_layout cases);
#   3. alone on the GPU, bounded by DEADLINE (s after the start, default 585): the
#      estimators beside rl-triton (STD_SHAPES, FAM_SHAPES; BENCH_FIRST=1: before
#      step 2), the puff kernel, the
#      host cost of a call (bench_overhead.py), reduced precision, and Nsight
#      Compute over short rows (short_rows_workload.py).
# rl-triton: $PUFFADV_RL_TRITON (default .gpu/peers/rl_triton in the checkout).
set -uo pipefail
SR=$(cd "$(dirname "$0")" && pwd)/short_rows_workload.py
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
L=$OUT/logs; mkdir -p $L
export PUFFADV_RL_TRITON=${PUFFADV_RL_TRITON:-$PWD/.gpu/peers/rl_triton}
pack(){ tar -C $OUT -czf $OUT/logs.tar.gz logs; }; trap pack EXIT
stamp(){ echo "--- $(date -u +%T) ${SECONDS}s $*" | tee -a $L/timeline.txt; }
stamp start; git log --oneline -1 > $L/commit.txt 2>&1; git status --short >> $L/commit.txt
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/machine.txt 2>&1
if [ "${VARIANTS:-0}" = 1 ]; then
  ( nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Xptxas -v -Isrc benchmarks/gpu_scan_variants.cu \
      -o /tmp/variants > $L/variants-ptxas.txt 2>&1 && /tmp/variants > $L/variants.txt 2>&1
    echo "exit $?" >> $L/variants.txt ) & pv=$!
fi
CMAKE_BUILD_PARALLEL_LEVEL=14 python3 -m pip install -q --no-build-isolation --no-deps -C build-dir=/tmp/b \
  -C cmake.define.PUFF_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 -C cmake.define.PUFF_HIP=OFF . > $L/build.log 2>&1 \
  || { tail -40 $L/build.log; exit 1; }
stamp built
if [ "${VARIANTS:-0}" = 1 ]; then wait $pv; tail -2 $L/variants.txt; stamp variants; fi
python3 -m puffadv > $L/selfcheck.txt 2>&1; tail -1 $L/selfcheck.txt
T=${TEST_LIMIT:-230}
san(){ tool=$1; shift; PUFFADV_UNDER_SANITIZER=1 timeout $T compute-sanitizer --tool $tool --error-exitcode 99 "$@" >> $L/$tool.txt 2>&1; echo "$tool exit $? : $*" >> $L/$tool.txt; }
# QUICK=1: no sanitizers, no JAX tests, and pytest over PYTEST_FILES only (a
# follow-up call after a full one, when the device time left is short).
run_tests(){
if [ "${QUICK:-0}" = 1 ]; then
( timeout $T python3 -m pytest -q -rs -p no:cacheprovider -n 8 --dist loadfile ${PYTEST_FILES:-tests/python/test_gpu.py tests/python/test_gpu_family.py} \
  > $L/pytest-gpu.txt 2>&1; echo "exit $?" >> $L/pytest-gpu.txt )
echo "pytest-gpu: $(grep -E ' passed| failed' $L/pytest-gpu.txt | tail -1) $(tail -1 $L/pytest-gpu.txt)"
grep -E "^FAILED|^ERROR" $L/pytest-gpu.txt | head -20
else
( san memcheck python3 -m pytest -q -p no:cacheprovider tests/python/test_gpu_flat_rows.py -k "(match_the_cpu and float32 and (shape4 or shape8)) or (nan_stays and shape1) or (aligned and (shape6 or shape7))"
  san memcheck python3 -m pytest -q -p no:cacheprovider tests/python/test_gpu.py tests/python/test_gpu_family.py -k "every_layout and float32" ) & p1=$!
( san racecheck python3 -m pytest -q -p no:cacheprovider tests/python/test_gpu_flat_rows.py -k "match_the_cpu and float32 and shape8"
  san racecheck python3 -m pytest -q -p no:cacheprovider tests/python/test_gpu_family.py -k "every_layout and float32" ) & p2=$!
( timeout $T python3 -m pytest -q -rs -p no:cacheprovider -n 6 --dist loadfile tests/python \
  --ignore=tests/python/test_jax.py --ignore=tests/python/test_family_jax.py > $L/pytest-gpu.txt 2>&1; echo "exit $?" >> $L/pytest-gpu.txt ) & p3=$!
wait $p3
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/python/test_jax.py tests/python/test_family_jax.py > $L/pytest-jax.txt 2>&1; echo "exit $?" >> $L/pytest-jax.txt
wait $p1 $p2
for f in pytest-gpu pytest-jax; do echo "$f: $(grep -E ' passed| failed' $L/$f.txt | tail -1) $(tail -1 $L/$f.txt)"; done
grep -E "^FAILED|^ERROR" $L/pytest-gpu.txt $L/pytest-jax.txt | head -20
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|exit [0-9]+ :|passed|failed" $L/memcheck.txt $L/racecheck.txt | tail -8
fi
stamp tests
}
# Seconds to the deadline, and a 1/n share of them: at least 1 (timeout 0
# would mean no limit).
left(){ echo $(( ${DEADLINE:-585} - SECONDS )); }
share(){ local s=$(( $(left) / $1 )); echo $(( s < 1 ? 1 : s )); }
# The estimators beside rl-triton; BENCH_FIRST=1 runs them before the tests
# (each step gets a share of the time left, or STD_LIMIT / FAM_LIMIT seconds:
# after a slow build and the tests, a whole-grid run can be cut short; with
# BENCH_FIRST, TEST_LIMIT bounds the tests; the markdown is written after every
# shape, so a cut run keeps what it measured).
run_peer_benches(){
timeout ${STD_LIMIT:-$(share 3)} python3 benchmarks/bench_conventions.py --sections peers --shapes ${STD_SHAPES:-8192x91,8192x64,65536x128,1024x128,4096x1024} \
  --json $L/std-bench.json --markdown $L/std-bench.md ${STD_EXTRA:-} > $L/std-bench.txt 2>&1; grep -E "MISSED|MISMATCH" $L/std-bench.txt | head -12
stamp std-bench
timeout ${FAM_LIMIT:-$(share 2)} python3 benchmarks/bench_conventions.py --sections peers --estimators family --shapes ${FAM_SHAPES:-8192x91,8192x64,65536x128,4096x1024,1024x128,262144x128} \
  --json $L/family-bench.json --markdown $L/family-bench.md > $L/family-bench.txt 2>&1; grep -E "MISSED|MISMATCH" $L/family-bench.txt | head -12
stamp family-bench
}
if [ "${BENCH_FIRST:-0}" = 1 ]; then run_peer_benches; run_tests; else run_tests; run_peer_benches; fi
timeout $(share 3) python3 benchmarks/bench_gpu.py --quick --shapes ${PUFF_SHAPES:-8192x91,8192x64,65536x128} --markdown $L/puff-bench.md > $L/puff-bench.txt 2>&1; tail -6 $L/puff-bench.txt
stamp puff-bench
timeout $(share 2) python3 benchmarks/bench_overhead.py --quick --json $L/overhead.json > $L/overhead.txt 2>&1; tail -24 $L/overhead.txt
stamp overhead
timeout $(share 2) python3 benchmarks/bench_conventions.py --quick --sections dtypes --bench-only --json $L/dtypes.json > $L/dtypes.txt 2>&1; grep -E "ratio|BAR|bar met" $L/dtypes.txt | head -12
stamp dtypes
if [ -n "${NCU_VARIANTS:-}" ] && [ -x /tmp/variants ]; then  # the harness's kernels at 65536x128
  timeout $(share 2) ncu --section SpeedOfLight --section LaunchStats --section Occupancy --section InstructionStats \
    -k regex:scan_ /tmp/variants --profile --variant $NCU_VARIANTS > $L/ncu-variants.txt 2>&1
  grep -E "^  void|Duration|DRAM Throughput|Executed Instructions  |Registers Per|Achieved Occupancy" $L/ncu-variants.txt | head -80
fi
timeout $(share 1) ncu --profile-from-start off --section SpeedOfLight --section LaunchStats --section Occupancy python3 $SR > $L/ncu-short-rows.txt 2>&1
grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Grid Size|Block Size" $L/ncu-short-rows.txt | head -60
stamp ncu
