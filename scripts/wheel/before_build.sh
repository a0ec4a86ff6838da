#!/usr/bin/env bash
# cibuildwheel's before-build (run in each Python's build environment): release
# wheels build without isolation, so that the build sees torch and jax and the
# wheel gets the torch operator library and the JAX handlers (PUFF_TORCH and
# PUFF_JAX stay AUTO). Installs pyproject.toml's build requirements, then the
# torch (CPU build) and jax to build against: the OLDEST each extension supports,
# since newer releases load what older ones built (README: "JAX"; the torch
# library's rule is in docs/packaging.md). Where no such wheel exists for this
# Python and platform, the wheel is built without that extension, and says so.
set -euo pipefail
cd "$(dirname "$0")/../.."
mapfile -t requires < <(sed -n 's/^requires = \[\(.*\)\]/\1/p' pyproject.toml | tr -d '" ' | tr ',' '\n')
python -m pip install "${requires[@]}" "cmake>=3.28" ninja
torch_requirement="${PUFF_WHEEL_TORCH:-torch==2.13.0}"
jax_requirement="${PUFF_WHEEL_JAX:-jax==0.10.2}"
python -m pip install "${torch_requirement}" --index-url https://download.pytorch.org/whl/cpu \
  || echo "NOTICE: no ${torch_requirement} wheel here: this puffadv wheel has no torch operator library"
python -m pip install "${jax_requirement}" \
  || echo "NOTICE: no ${jax_requirement} wheel here: this puffadv wheel has no JAX handlers"
