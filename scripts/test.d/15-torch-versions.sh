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
# The venv holds nothing of puffadv (the child imports the library built here
# through PYTHONPATH), so it lives outside the checkout, in PUFF_CI_CACHE
# (default ~/.cache/puffadv-ci): a CI run from a fresh clone on a machine that
# ran CI before reuses it, and pip only checks that the pins are met. One that
# no longer imports its torch is made anew.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$SECONDS
second_torch="${PUFF_SECOND_TORCH:-2.14.1}"
cache="${PUFF_CI_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/puffadv-ci}"
venv="${cache}/torch-${second_torch}-venv"
if [ -x "${venv}/bin/python" ] && ! "${venv}/bin/python" -c "import torch, numpy, pytest" >/dev/null 2>&1; then
  echo "${venv}: broken (torch, numpy or pytest does not import); making it anew"
  rm -rf "${venv}"
fi
if [ ! -x "${venv}/bin/python" ]; then
  mkdir -p "${cache}"
  python -m venv "${venv}"
fi
# --no-compile: byte-compiling torch's files costs ~45 s here; imports compile what they use.
"${venv}/bin/python" -m pip install -q --no-compile "torch==${second_torch}" numpy pytest
echo "torch ${second_torch} installed in ${venv}: $((SECONDS - started)) s"
PUFFADV_SECOND_TORCH_PYTHON="${venv}/bin/python" \
  python -m pytest -q -p no:cacheprovider -rA tests/python/test_torch_versions.py -s
echo "torch-versions step: $((SECONDS - started)) s"
