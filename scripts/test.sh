#!/usr/bin/env bash
# Runs every test of puffadv: the steps in scripts/test.d/ in order (build and
# install, pytest, ctest, GPU backend builds, sanitizers, ...). Fails on the
# first failing step. Creates .venv with the test requirements if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh

failed=()
for step in scripts/test.d/*.sh; do
  echo "=== ${step} ==="
  if ! bash "${step}"; then
    failed+=("${step}")
    break
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "All test steps passed."
