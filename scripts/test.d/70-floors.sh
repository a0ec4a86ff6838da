#!/usr/bin/env bash
# The build requirements' declared floors work: a throwaway virtual environment
# with exactly the lowest versions pyproject.toml's [build-system] requires allows
# (scikit-build-core, nanobind; cmake and ninja as scikit-build-core would fetch
# them), a CPU build without isolation, then the self-check and the puff and
# packaging tests. Measured on the shared 2-core machine, 2026-12-01: 82 s; 2026-12-06,
# with the core's units hits from 10-python's build: 32 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
work="$(realpath -m "${PUFF_FLOORS_BUILD_DIR:-build/ci-floors}")"
# The CMake build directory sits beside 10-python's (build/test-wheel), at the same depth
# below the clone (compiler_cache.sh), so the core's units, compiled with the same flags
# there, are hits here rather than a second cold build.
cmake_build="$(realpath -m "${PUFF_FLOORS_CMAKE_DIR:-build/ci-floors-cmake}")"
rm -rf "${work}" "${cmake_build}" && mkdir -p "${work}"
started=$SECONDS

# "scikit-build-core>=0.11" -> "scikit-build-core==0.11": every requirement needs a floor.
mapfile -t floors < <(python - <<'PY'
import re, tomllib
for req in tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]:
    m = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)", req)
    assert m, f"build requirement without a plain >= floor: {req!r}"
    print(f"{m[1]}=={m[2]}")
PY
)
echo "--- building with the floors: ${floors[*]}"
python -m venv "${work}/venv"
"${work}/venv/bin/python" -m pip install -q --disable-pip-version-check "${floors[@]}" \
  "$(grep -E '^cmake' requirements-test.txt)" ninja numpy pytest hypothesis
PATH="${work}/venv/bin:${PATH}" "${work}/venv/bin/python" -m pip install -q --no-build-isolation \
  --no-deps --target "${work}/site" -C build-dir="${cmake_build}" -C cmake.define.PUFF_CUDA=OFF \
  -C cmake.define.PUFF_HIP=OFF -C cmake.define.PUFF_TORCH=OFF -C cmake.define.PUFF_JAX=OFF . \
  > "${work}/build.log" 2>&1 || { tail -60 "${work}/build.log"; exit 1; }
"${work}/venv/bin/python" -m pip list 2>/dev/null | grep -iE '^(scikit.build.core|nanobind) '

cd "${work}"
PYTHONPATH="${work}/site" "${work}/venv/bin/python" -m puffadv | tail -1
PYTHONPATH="${work}/site" "${work}/venv/bin/python" -m pytest -q -p no:cacheprovider \
  "${OLDPWD}/tests/python/test_puff.py" "${OLDPWD}/tests/python/test_packaging.py"
echo "floors step: $((SECONDS - started)) s"
