#!/usr/bin/env bash
# Plain CMake build of the C++ core with its tests (no Python module, no torch),
# then ctest: the GoogleTest unit tests (label "unit") and the CMake package
# tests (label "package": install into a fresh prefix, then build and run
# examples/cpp against it and against the build tree); then the same consumer
# against the wheel that 10-python.sh pip-installed. About 1 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
build="$(realpath -m "${PUFF_CPP_BUILD_DIR:-build/ctest}")"
generator=() consumer_generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja) consumer_generator=(-DGENERATOR=Ninja); fi
# One CUDA architecture is enough to test the package of a CUDA build (when nvcc exists).
export CUDAARCHS="${CUDAARCHS:-90}"

# The torch operator is built and tested by 10-python.sh; here it would only cost time.
cmake -S . -B "${build}" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DPUFF_TESTS=ON -DPUFF_TORCH=OFF
cmake --build "${build}" --parallel "$(nproc)"
# Without GoogleTest (libgtest-dev) the unit tests are skipped at configure time: not a pass.
if ! ctest --test-dir "${build}" -N -L unit | grep -q "Total Tests: [1-9]"; then
  echo "20-cpp: no C++ unit tests registered; is libgtest-dev installed?" >&2
  exit 1
fi
ctest --test-dir "${build}" --output-on-failure --parallel "$(nproc)"

# The wheel route: the pip-installed package's CMake config, found through
# `python -m puffadv --cmake-dir`, with the same consumer project and checks.
if ! python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('puffadv') is None)"; then
  echo "20-cpp: puffadv is not pip-installed in this Python: wheel route NOT checked" >&2
  exit 0
fi
cmake_dir="$(python -m puffadv --cmake-dir)"
cmake -DSOURCE_DIR="${PWD}/tests/cpp/consumer" -DBINARY_DIR="${build}/consumer-wheel" \
      -DPACKAGE_PREFIX="${cmake_dir}" -DEXPECTED_DIR="${cmake_dir}" -DEXAMPLE_DIR="${PWD}/examples/cpp" \
      -DEXPECTED_OUTPUT="${PWD}/tests/cpp/consumer/expected_output.txt" -DCONFIG=Release \
      -DVERSION="$(python -c 'import puffadv; print(puffadv.__version__)')" "${consumer_generator[@]}" \
      -P tests/cpp/run_consumer.cmake
