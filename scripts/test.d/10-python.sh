#!/usr/bin/env bash
# Builds and installs the package (as README says, plus the torch op library,
# which needs torch at build time), then runs pytest.
set -euo pipefail
python -m pip install -q --no-build-isolation -C build-dir=build/test-wheel .
python -m puffadv
python -m pytest -q tests/python
