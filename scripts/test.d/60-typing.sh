#!/usr/bin/env bash
# Type checking as a user's project sees puffadv: mypy on tests/typing/pass/
# (must type-check against the installed package's py.typed and _core.pyi) and
# on each file in tests/typing/fail/ (each must fail, with the error code its
# "# expect:" line names). Runs against the puffadv this Python imports
# (10-python.sh's install). About 30 s on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$SECONDS
python -m pip install -q "$(grep -E '^mypy([<>=!~ ]|$)' requirements-test.txt)"
config=tests/typing/mypy.ini
# Outside the source tree, so that python/puffadv is never read as source.
cd build 2>/dev/null || { mkdir -p build && cd build; }

echo "--- must type-check: tests/typing/pass/"
python -m mypy --config-file "../${config}" --no-incremental ../tests/typing/pass/

for script in ../tests/typing/fail/*.py; do
  expected="$(sed -n 's/^# expect: *//p' "${script}")"
  [ -n "${expected}" ] || { echo "${script}: no '# expect: <error code>' line" >&2; exit 1; }
  if output="$(python -m mypy --config-file "../${config}" --no-incremental "${script}" 2>&1)"; then
    echo "${script} type-checked, but must fail with [${expected}]:" >&2
    echo "${output}" >&2
    exit 1
  fi
  if ! grep -q "error: .*\[${expected}\]" <<<"${output}"; then
    echo "${script} failed, but not with [${expected}]:" >&2
    echo "${output}" >&2
    exit 1
  fi
  echo "--- must fail: ${script#../} fails with [${expected}] as expected"
done
echo "typing step: $((SECONDS - started)) s"
