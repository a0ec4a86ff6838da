#!/usr/bin/env bash
# GPU machine: benchmarks/bench_gpu.py over the SPEC section 5 grid; the table,
# JSON and chart go to $OUT (copy them to docs/benchmarks.md, docs/gpu_bandwidth.png).
set -uo pipefail
OUT="${OUT:-/tmp/puffadv-gpu-out}"
cd "$(dirname "$0")/../.."
python3 benchmarks/bench_gpu.py --json "$OUT/bench.json" --markdown "$OUT/bench.md" \
  --plot "$OUT/gpu_bandwidth.png"
