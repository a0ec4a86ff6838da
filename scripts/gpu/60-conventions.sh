#!/usr/bin/env bash
# GPU machine: the standard conventions (issue 6). Checks GPU == CPU for
# gae / td_lambda_returns / vtrace / the fused, reduced-precision puff advantage
# over dtypes, layouts and outputs, then times float32 against bfloat16 inputs
# (bar: bf16 <= 0.65x the float32 time). About 5 minutes. Logs in $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/puffadv-gpu-out}"
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
status=0
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/python/test_conventions.py \
  > "$OUT/conventions-pytest.log" 2>&1 || status=1
tail -1 "$OUT/conventions-pytest.log"
timeout 400 python3 benchmarks/bench_conventions.py --json "$OUT/conventions.json" \
  2>&1 | tee "$OUT/conventions-bench.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
exit $status
