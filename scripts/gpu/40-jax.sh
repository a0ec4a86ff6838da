#!/usr/bin/env bash
# GPU machine step (scripts/gpu/run_all.sh runs it after building with CUDA):
# the JAX tests on CUDA (and CPU), then benchmarks/bench_jax.py at the SPEC
# section 5 shapes with the issue-8 bar (>= 20x lax.scan at 4096x128, 65536x128).
# Writes $OUT/jax-tests.txt and $OUT/bench_jax.md (paste into docs/benchmarks.md).
set -uo pipefail
OUT="${OUT:-/tmp/puffadv-gpu-out}"; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
if ! python3 -c 'import jax' 2>/dev/null; then
  echo "jax is not installed on this machine: JAX step not run"; exit 1
fi
python3 -c 'import jax, jaxlib.version, puffadv._core as c
print("jax", jax.__version__, "jaxlib", jaxlib.version.__version__, "devices", jax.devices())
print("handlers:", [(n, p) for n, p, _ in c.jax_ffi_targets()], "built with", c.jax_ffi_build())' \
  2>&1 | tee "$OUT/jax-env.txt"
status=0
python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_jax.py tests/python/test_jax_vmap.py \
  tests/python/test_jax_errors.py 2>&1 | tee "$OUT/jax-tests.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
python3 benchmarks/bench_jax.py --check-bar 2>&1 | tee "$OUT/bench_jax.md"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
exit $status
