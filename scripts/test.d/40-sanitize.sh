#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer (PUFF_SANITIZE=ON, Debug,
# -fno-sanitize-recover): the core library, its C++ tests (ctest) and the Python
# module (pytest), CPU backend only. Any report aborts the run, so green means clean.
#
# Python: the ASan runtime is preloaded into the stock interpreter (it must be
# the first library loaded), with libstdc++ beside it: CPython does not link
# libstdc++, and without it ASan's __cxa_throw interceptor finds no real
# function and every C++ exception aborts. detect_leaks=0 because CPython
# leaks by design; PYTHONMALLOC=malloc so Python objects go through ASan too.
#
# Cost on a 2-core machine (2026-11-30): C++ build + ctest ~20 s, module build ~1 min,
# pytest ~2 min (all of tests/python; GPU tests skip; the fuzz at 300 cases per
# function): about 3.5 min from a fresh build dir.
# PUFF_SANITIZE_PYTEST="..." narrows the pytest selection.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(realpath -m "${PUFF_SANITIZE_BUILD_DIR:-build/sanitize}")"
mkdir -p "$root"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
jobs="$(nproc 2>/dev/null || echo 2)"
started=$SECONDS
off_gpu=(-DPUFF_CUDA=OFF -DPUFF_HIP=OFF)  # ASan covers host code; GPU code has compute-sanitizer

echo "--- C++: core + GoogleTest under ASan/UBSan"
cmake -S . -B "$root/cmake" "${generator[@]}" -DCMAKE_BUILD_TYPE=Debug -DPUFF_SANITIZE=ON -DPUFF_TESTS=ON \
  -DPUFF_PYTHON=OFF -DPUFF_TORCH=OFF -DPUFF_JAX=OFF "${off_gpu[@]}" > "$root/cmake.log" 2>&1 \
  || { cat "$root/cmake.log"; exit 1; }
cmake --build "$root/cmake" -j "$jobs" > "$root/build.log" 2>&1 || { tail -60 "$root/build.log"; exit 1; }
# -L unit: the package tests (20-cpp.sh runs them) build consumer executables that
# load the sanitized library without the ASan runtime first, which ASan refuses.
ASAN_OPTIONS=abort_on_error=1:detect_stack_use_after_return=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$root/cmake" -j "$jobs" --output-on-failure --no-tests=error -L unit
echo "C++ under sanitizers: $((SECONDS - started)) s so far"

echo "--- Python module under ASan/UBSan"
python -m pip install -q --no-build-isolation --no-deps --upgrade --target "$root/site" \
  -C build-dir="$root/wheel" -C cmake.build-type=Debug -C cmake.define.PUFF_SANITIZE=ON \
  -C cmake.define.PUFF_CUDA=OFF -C cmake.define.PUFF_HIP=OFF . \
  > "$root/pip.log" 2>&1 || { tail -60 "$root/pip.log"; exit 1; }

preload="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)"
for lib in $preload; do
  [ -e "$lib" ] || { echo "sanitizer runtime not found: $lib"; exit 1; }
done
export LD_PRELOAD="$preload"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1
export PYTHONMALLOC=malloc
export PYTHONPATH="$root/site${PYTHONPATH:+:$PYTHONPATH}"
export PUFFADV_FUZZ_DEADLINE_MS=20000  # ASan is 2-5x slower; the deadline still catches hangs

# The module under test must be the sanitized one, not the one 10-python.sh installed.
python - "$root/site" <<'EOF'
import sys, puffadv
assert puffadv.__file__.startswith(sys.argv[1]), f"imported {puffadv.__file__}, not the sanitized build"
assert puffadv.backend()["sanitizers"], "the module was not built with sanitizers"
print("sanitized module:", puffadv.__file__)
EOF

# test_gpu.py needs a GPU (skips here); everything else runs.
selection=(${PUFF_SANITIZE_PYTEST:-tests/python})
python -m pytest -q -p no:cacheprovider "${selection[@]}"
echo "sanitizer step: $((SECONDS - started)) s"
