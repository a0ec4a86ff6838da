#!/usr/bin/env bash
# One build of the torch operator library serves every torch release from its
# floor on (LibTorch Stable ABI, issue 17): the library 10-python.sh built
# against this environment's torch (2.13, the CPU wheel) is loaded into a second
# torch release, installed in a venv of its own, and the operator tests run
# there on the CPU (tests/python/test_torch_versions.py). PUFF_SECOND_TORCH picks
# the release: 2.14.1 by default, PyPI's CUDA build (about 4 GB with its CUDA
# libraries; it runs on a machine without a GPU).
# Measured on a 2-core machine (2026-12-01), wheels from a local mirror: venv
# and install 3.7 min with a cold pip cache (5 s when the venv exists), the test
# 1.8 min with a cold torch.compile cache (the child's 42 op tests: 89 s).
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$SECONDS
second_torch="${PUFF_SECOND_TORCH:-2.14.1}"
venv="$PWD/build/torch-${second_torch}-venv"
if [ ! -x "${venv}/bin/python" ]; then
  python -m venv "${venv}"
fi
"${venv}/bin/python" -m pip install -q "torch==${second_torch}" numpy pytest
echo "torch ${second_torch} installed in ${venv}: $((SECONDS - started)) s"
PUFFADV_SECOND_TORCH_PYTHON="${venv}/bin/python" \
  python -m pytest -q -p no:cacheprovider -rA tests/python/test_torch_versions.py -s
echo "torch-versions step: $((SECONDS - started)) s"
