#!/usr/bin/env bash
# GPU machine: the Python suite on every target (numpy, torch-cpu, torch-cuda,
# cupy), spread over processes with pytest-xdist (a crash in one worker is
# reported and does not hide the other results). The torch, JAX and conventions
# files run in their own steps (30, 40, 60). Log in $OUT/pytest-gpu.log.
set -uo pipefail
OUT="${OUT:-/tmp/puffadv-gpu-out}"
cd "$(dirname "$0")/../.."
python3 -c 'import nanobind, numpy, cupy; print("nanobind", nanobind.__version__, "numpy", numpy.__version__, "cupy", cupy.__version__)' \
  | tee "$OUT/pytest-gpu.log"
timeout 400 python3 -m pytest -q -rs -p no:cacheprovider -n 6 --dist loadfile tests/python \
  --ignore=tests/python/test_torch_ops.py --ignore=tests/python/test_jax.py --ignore=tests/python/test_jax_vmap.py \
  --ignore=tests/python/test_jax_errors.py \
  --ignore=tests/python/test_conventions.py >> "$OUT/pytest-gpu.log" 2>&1
status=$?
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest-gpu.log" | tail -25
exit $status
