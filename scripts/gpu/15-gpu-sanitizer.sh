#!/usr/bin/env bash
# GPU machine: compute-sanitizer memcheck and racecheck over
#   - the GPU tests (tests/python/test_gpu.py, less the 43 GB cases),
#   - the conventions tests on CUDA tensors (GAE / TD(lambda) / V-trace, fused
#     outputs, bf16/fp16: the fast and the generic kernels),
#   - the quick GPU == CPU sweep of benchmarks/bench_conventions.py (every dtype,
#     flag type and layout).
# The two tools run side by side. Log in $OUT/sanitizer.log.
set -uo pipefail
OUT="${OUT:-/tmp/puffadv-gpu-out}"
cd "$(dirname "$0")/../.."
status=0
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
log="$OUT/sanitizer.log"
sanitize() {  # tool, time limit, command...: appends to $OUT/sanitizer-<tool>.log
  local tool="$1" limit="$2"; shift 2
  local tool_log="$OUT/sanitizer-$tool.log"
  echo "=== compute-sanitizer --tool $tool: $*" >> "$tool_log"
  PUFFADV_UNDER_SANITIZER=1 timeout "$limit" "$sanitizer" --tool "$tool" --error-exitcode 99 "$@" >> "$tool_log" 2>&1
  local rc=$?
  echo "=== $tool exit status $rc: $*" >> "$tool_log"
  return $rc
}
run_tool() {
  local tool="$1" rc=0
  : > "$OUT/sanitizer-$tool.log"
  sanitize "$tool" 120 python3 -m pytest -q -p no:cacheprovider tests/python/test_gpu.py tests/python/test_gpu_family.py -k "not 300007 and not 131072" || rc=1
  sanitize "$tool" 120 python3 -m pytest -q -p no:cacheprovider tests/python/test_conventions.py -k "cuda" || rc=1
  sanitize "$tool" 120 python3 benchmarks/bench_conventions.py --quick --check-only || rc=1
  return $rc
}
run_tool memcheck & memcheck=$!
run_tool racecheck & racecheck=$!
wait $memcheck || status=1
wait $racecheck || status=1
cat "$OUT/sanitizer-memcheck.log" "$OUT/sanitizer-racecheck.log" > "$log" && rm -f "$OUT"/sanitizer-*.log
grep -E "^=== .* exit status|ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|GPU == CPU" "$log" | tail -20
exit $status
