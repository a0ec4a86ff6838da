#!/usr/bin/env bash
# The HIP kernels executed on the CPU: ROCm's HIP CPU Runtime (header-only,
# 64-lane wavefronts as fibers) at ../shared/vendor/hip-cpu beside the repository
# (CI: a fresh clone beside a copy of shared/). Builds tests/hip_cpu
# (cmake -DPUFF_HIP_CPU=<path>: the HIP units as plain C++ with g++, the core's
# C++ sources with PUFFADV_HAS_HIP=1) and runs `ctest -L hip_cpu`: every
# estimator through detail::estimate_hip against the CPU backend, every
# traversal. Without the runtime it says so and passes: there is nothing to run.
# The runtime needs GCC's parallel algorithms with TBB (Debian's libtbb-dev),
# installed here when missing and apt-get can. Measured on a 2-core machine
# shared with other jobs (load ~12, 2026-12-03), from an empty build folder:
# build 413 s wall (3.0 CPU minutes; gpu/conventions_hip.cpp alone 1.5), tests 7 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
hip_cpu="$(realpath -m "${PUFF_HIP_CPU_DIR:-../shared/vendor/hip-cpu}")"
if [ ! -f "${hip_cpu}/include/hip/hip_runtime.h" ]; then
  echo "NOTICE: the HIP CPU Runtime is not at ${hip_cpu}: the HIP kernels were NOT run on the CPU (hip_cpu tests skipped)"
  exit 0
fi
if [ ! -f /usr/include/tbb/tbb.h ] && [ ! -f /usr/include/oneapi/tbb.h ]; then
  echo "--- installing libtbb-dev (GCC's parallel algorithms need TBB)"
  sudo_=(); [ "$(id -u)" -ne 0 ] && sudo_=(sudo)
  "${sudo_[@]}" apt-get install -y -q libtbb-dev >/dev/null || {
    "${sudo_[@]}" apt-get update -q >/dev/null && "${sudo_[@]}" apt-get install -y -q libtbb-dev >/dev/null; }
fi
build="$(realpath -m "${PUFF_HIP_CPU_BUILD_DIR:-build/hip-cpu}")"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
started=$SECONDS
cmake -S . -B "${build}" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DPUFF_TESTS=OFF -DPUFF_PYTHON=OFF \
      -DPUFF_TORCH=OFF -DPUFF_JAX=OFF -DPUFF_CUDA=OFF -DPUFF_HIP=OFF -DPUFF_HIP_CPU="${hip_cpu}"
cmake --build "${build}" --target puffadv_hip_cpu_tests --parallel "$(nproc)"
built=$SECONDS
ctest --test-dir "${build}" -L hip_cpu --output-on-failure --parallel "$(nproc)"
if ! ctest --test-dir "${build}" -N -L hip_cpu | grep -q "Total Tests: [1-9]"; then
  echo "25-hip-cpu: no hip_cpu tests registered" >&2
  exit 1
fi
echo "hip_cpu: build $((built - started)) s, tests $((SECONDS - built)) s"
