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

# The compiler cache's cumulative "hits calls" (empty without a cache), so that each
# step's line says how much of what it compiled was a hit: a warm run's builds should
# be nearly all hits, and a step that misses in every run shows there.
cache_counts() {
  # (ccache prints no "Hits:" line before its first cacheable call: 0 0 then)
  if [ -n "${CCACHE_DIR:-}" ]; then
    ccache --show-stats 2>/dev/null | awk '/^ *Hits:/ {print $2, $4; found = 1; exit} END {if (!found) print 0, 0}'
  fi
}
step_cache() {  # "  (compiler cache: H of N hit)" for a step that compiled, from its two cache_counts
  local before=($1) after=($2)
  [ "${#before[@]}" -eq 2 ] && [ "${#after[@]}" -eq 2 ] || return 0
  local calls=$((after[1] - before[1]))
  [ "${calls}" -gt 0 ] && printf '  (compiler cache: %d of %d hit)' $((after[0] - before[0])) "${calls}"
  return 0
}

print_timings() {
  if [ -n "${CCACHE_DIR:-}" ]; then
    local total=($(cache_counts))
    echo "--- compiler cache: ${total[0]} of ${total[1]} hit"
  fi
  echo "--- step times (wall clock)"
  printf '%s\n' "${timings[@]}"
  printf '%-34s %5d s\n' "total" $((SECONDS - started))
}

for step in scripts/test.d/*.sh; do
  echo "=== ${step} ==="
  step_started=$SECONDS
  cache_before="$(cache_counts)"
  if ! bash "${step}"; then
    timings+=("$(printf '%-34s %5d s  FAILED' "${step#scripts/test.d/}" $((SECONDS - step_started)))")
    print_timings
    echo "FAILED: ${step}"
    exit 1
  fi
  timings+=("$(printf '%-34s %5d s%s' "${step#scripts/test.d/}" $((SECONDS - step_started)) \
                "$(step_cache "${cache_before}" "$(cache_counts)")")")
  echo "=== ${step}: $((SECONDS - step_started)) s ==="
done
print_timings
echo "All test steps passed."
