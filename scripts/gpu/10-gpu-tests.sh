#!/usr/bin/env bash
# GPU machine: the whole Python suite (numpy, torch-cpu, torch-cuda and cupy
# targets), then compute-sanitizer memcheck and racecheck over the GPU tests
# (tests/python/test_gpu.py, less the 43 GB cases). Logs in $OUT.
# PUFFADV_GPU_SANITIZE=0 skips the sanitizers.
set -uo pipefail
OUT="${OUT:-/tmp/puffadv-gpu-out}"
cd "$(dirname "$0")/../.."
status=0
python3 -c 'import nanobind, numpy, cupy; print("nanobind", nanobind.__version__, "numpy", numpy.__version__, "cupy", cupy.__version__)' \
  | tee "$OUT/pytest-gpu.log"
# One pytest per file: a crash in one file does not hide the results of the others.
for file in tests/python/test_*.py; do
  echo "=== $file" >> "$OUT/pytest-gpu.log"
  timeout 300 python3 -m pytest -q -p no:cacheprovider "$file" >> "$OUT/pytest-gpu.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || { status=1; echo "FAILED (exit $rc): $file"; }
  tail -1 "$OUT/pytest-gpu.log"
done
grep -E "^(FAILED|ERROR)" "$OUT/pytest-gpu.log" | head -20
# PUFFADV_GPU_SANITIZE=0 skips the (slow) sanitizer runs.
[ "${PUFFADV_GPU_SANITIZE:-1}" = "0" ] && exit $status

sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
: > "$OUT/sanitizer.log"
for tool in memcheck racecheck; do
  echo "=== compute-sanitizer --tool $tool ===" >> "$OUT/sanitizer.log"
  PUFFADV_UNDER_SANITIZER=1 timeout 280 "$sanitizer" --tool "$tool" --error-exitcode 99 \
    python3 -m pytest -q -p no:cacheprovider tests/python/test_gpu.py >> "$OUT/sanitizer.log" 2>&1
  rc=$?
  echo "=== $tool exit status $rc ===" | tee -a "$OUT/sanitizer.log"
  [ "$rc" -eq 0 ] || status=1
done
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" "$OUT/sanitizer.log" | tail -8
exit $status
