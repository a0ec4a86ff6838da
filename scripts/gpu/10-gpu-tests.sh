#!/usr/bin/env bash
# GPU machine: the whole Python suite (numpy, torch-cpu, torch-cuda and cupy
# targets), one pytest per file. Log in $OUT/pytest-gpu.log.
set -uo pipefail
OUT="${OUT:-/tmp/puffadv-gpu-out}"
cd "$(dirname "$0")/../.."
status=0
python3 -c 'import nanobind, numpy, cupy; print("nanobind", nanobind.__version__, "numpy", numpy.__version__, "cupy", cupy.__version__)' \
  | tee "$OUT/pytest-gpu.log"
# One pytest per file: a crash in one file does not hide the results of the others.
for file in tests/python/test_*.py; do
  echo "=== $file" >> "$OUT/pytest-gpu.log"
  timeout 200 python3 -m pytest -q -p no:cacheprovider "$file" >> "$OUT/pytest-gpu.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || { status=1; echo "FAILED (exit $rc): $file"; }
  tail -1 "$OUT/pytest-gpu.log"
done
grep -E "^(FAILED|ERROR)" "$OUT/pytest-gpu.log" | head -20
exit $status
