#!/usr/bin/env bash
# A short follow-up device call after a full validate_session.sh (run from the
# checkout's root; logs packed into $OUT/logs.tar.gz): build, then side by side
# pytest over PYTEST_FILES and compute-sanitizer memcheck over MEMCHECK_K (a -k
# expression of test_gpu_flat_rows.py), then the estimators ESTIMATORS beside
# rl-triton at SHAPES.
set -uo pipefail
export PYTHONUNBUFFERED=1 PUFFADV_RL_TRITON=${PUFFADV_RL_TRITON:-$PWD/.gpu/peers/rl_triton}
L=$OUT/logs; mkdir -p $L
pack(){ tar -C $OUT -czf $OUT/logs.tar.gz logs; }; trap pack EXIT
stamp(){ echo "--- $(date -u +%T) ${SECONDS}s $*" | tee -a $L/timeline.txt; }
stamp start; git status --short > $L/commit.txt
CMAKE_BUILD_PARALLEL_LEVEL=14 python3 -m pip install -q --no-build-isolation --no-deps -C build-dir=/tmp/b \
  -C cmake.define.PUFF_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 -C cmake.define.PUFF_HIP=OFF . > $L/build.log 2>&1 \
  || { tail -40 $L/build.log; exit 1; }
stamp built
( PUFFADV_UNDER_SANITIZER=1 timeout ${TEST_LIMIT:-200} compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q -p no:cacheprovider tests/python/test_gpu_flat_rows.py -k "${MEMCHECK_K:-aligned}" > $L/memcheck.txt 2>&1
  echo "memcheck exit $?" >> $L/memcheck.txt ) & p1=$!
timeout ${TEST_LIMIT:-200} python3 -m pytest -q -rs -p no:cacheprovider -n 8 --dist loadfile ${PYTEST_FILES:-tests/python/test_gpu_flat_rows.py} \
  > $L/pytest-gpu.txt 2>&1; echo "exit $?" >> $L/pytest-gpu.txt
wait $p1
echo "pytest-gpu: $(grep -E ' passed| failed' $L/pytest-gpu.txt | tail -1) $(tail -1 $L/pytest-gpu.txt)"
grep -E "^FAILED|^ERROR" $L/pytest-gpu.txt | head -20
grep -E "ERROR SUMMARY|passed|failed|memcheck exit" $L/memcheck.txt | tail -4
stamp tests
timeout ${BENCH_LIMIT:-120} python3 benchmarks/bench_conventions.py --sections peers --estimators "${ESTIMATORS:-gae last_value,vtrace vs+pg}" \
  --shapes ${SHAPES:-1048576x8,65536x128} --json $L/bench.json --markdown $L/bench.md > $L/bench.txt 2>&1
grep -E " us " $L/bench.txt | head -40
stamp done
