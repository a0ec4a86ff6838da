#!/usr/bin/env bash
# Plain CMake build of the C++ core with its tests (no Python module, no torch),
# then ctest: the GoogleTest unit tests (label "unit") and the CMake package
# tests (label "package": install into a fresh prefix, then build and run
# examples/cpp against it and against the build tree). About 1 min on 2 cores.
set -euo pipefail
# One CUDA architecture is enough to test the package of a CUDA build (when nvcc exists).
export CUDAARCHS="${CUDAARCHS:-90}"
build="${PUFF_CPP_BUILD_DIR:-build/ctest}"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
# The torch operator is built and tested by 10-python.sh; here it would only cost time.
cmake -S . -B "${build}" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DPUFF_TESTS=ON -DPUFF_TORCH=OFF
cmake --build "${build}" --parallel "$(nproc)"
# Without GoogleTest (libgtest-dev) the unit tests are skipped at configure time: not a pass.
if ! ctest --test-dir "${build}" -N -L unit | grep -q "Total Tests: [1-9]"; then
  echo "20-cpp: no C++ unit tests registered; is libgtest-dev installed?" >&2
  exit 1
fi
ctest --test-dir "${build}" --output-on-failure --parallel "$(nproc)"
