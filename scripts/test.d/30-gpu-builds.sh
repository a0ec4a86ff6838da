#!/usr/bin/env bash
# CI has no GPU, but both GPU backends must compile: builds the CUDA backend
# (nvcc, PUFF_CUDA=ON: the release architectures, as the Linux wheels ship) and
# the HIP backend (Debian's hipcc packages: clang 15, gfx90a), each into its own
# folder, and runs the host-side tests against each build: the puff tests on CPU
# arrays, test_gpu.py (backend() must say "compiled, no device") and the
# self-check. A missing compiler skips its build with a notice. Both are asked
# for explicitly: 10-python.sh's plain build (PUFF_CUDA=AUTO) compiles CUDA
# only on a machine with an NVIDIA GPU. First, tests/cmake/check_arch_choice.sh
# checks which architectures AUTO/ON pick (configure only, fake GPUs, ~1 min).
# Measured on a 2-core machine: the HIP build and its tests 1.5 minutes; the
# CUDA build (five architectures, with the conventions kernels) 5 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."

build_and_test() {  # name, pip -C options...
  local name="$1"; shift
  local site="build/ci-$name-site"
  rm -rf "$site"
  echo "--- building the $name backend"
  python -m pip install -q --no-build-isolation --no-deps --target "$site" \
    -C build-dir="build/ci-$name" -C cmake.define.PUFF_TORCH=OFF -C cmake.define.PUFF_JAX=OFF "$@" .
  echo "--- host-side tests of the $name build"
  (cd build && PYTHONPATH="$PWD/../$site" python -m puffadv)
  PYTHONPATH="$PWD/$site" python -m pytest -q -p no:cacheprovider \
    tests/python/test_puff.py tests/python/test_gpu.py tests/python/test_fallback.py tests/python/test_troubleshooting.py
  PYTHONPATH="$PWD/$site" python - "$name" <<'PY'
import sys, puffadv
kind = {"cuda": "cuda", "hip": "hip"}[sys.argv[1]]
report = puffadv.backend()
assert report[kind]["compiled"], f"{kind} backend missing from the build"
if report[kind]["device_count"] == 0:
    assert "no device" in str(report), str(report)
print(f"backend(): {kind} compiled, {report[kind]['device_count']} device(s); "
      f"architectures {report['gpu_architectures']}")
PY
}

echo "--- which architectures AUTO and ON builds pick"
started=$SECONDS
bash tests/cmake/check_arch_choice.sh build/ci-arch-choice
echo "architecture choice: $((SECONDS - started)) s"

if command -v nvcc >/dev/null 2>&1; then
  build_and_test cuda -C cmake.define.PUFF_CUDA=ON -C cmake.define.PUFF_HIP=OFF
else
  echo "NOTICE: nvcc not found; the CUDA backend was not compiled"
fi

if command -v clang++-15 >/dev/null 2>&1 && [ -d /usr/lib/x86_64-linux-gnu/amdgcn/bitcode ]; then
  HIP_PLATFORM=amd build_and_test hip -C cmake.define.PUFF_HIP=ON -C cmake.define.PUFF_CUDA=OFF
else
  echo "NOTICE: Debian's hipcc packages (clang++-15, ROCm device libraries) not found; the HIP backend was not compiled"
fi
