#!/usr/bin/env bash
# Runs every test of puffadv: the steps in scripts/test.d/ in order (build and
# install, pytest, ctest, GPU backend builds, sanitizers, ...). Fails on the
# first failing step. Creates .venv with the test requirements if needed.
# Prints each step's wall time as it ends and a table of all of them at the end
# (the CI budget is 25 minutes on the 2-core machine: docs/benchmarks.md#ci-step-times).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
source scripts/setup_env.sh
source scripts/compiler_cache.sh
timings=("$(printf '%-34s %5d s' 'setup_env.sh (venv, requirements)' $((SECONDS - started)))")

print_timings() {
  if [ -n "${CCACHE_DIR:-}" ]; then
    echo "--- compiler cache: $(ccache --show-stats 2>/dev/null | grep -E '^ *Hits:' | head -1 | xargs)"
  fi
  echo "--- step times (wall clock)"
  printf '%s\n' "${timings[@]}"
  printf '%-34s %5d s\n' "total" $((SECONDS - started))
}

for step in scripts/test.d/*.sh; do
  echo "=== ${step} ==="
  step_started=$SECONDS
  if ! bash "${step}"; then
    timings+=("$(printf '%-34s %5d s  FAILED' "${step#scripts/test.d/}" $((SECONDS - step_started)))")
    print_timings
    echo "FAILED: ${step}"
    exit 1
  fi
  timings+=("$(printf '%-34s %5d s' "${step#scripts/test.d/}" $((SECONDS - step_started)))")
  echo "=== ${step}: $((SECONDS - step_started)) s ==="
done
print_timings
echo "All test steps passed."
