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
# pytest runs the files below, with two workers (pytest-xdist), and
# test_concurrency.py, test_fork.py and test_signals.py after them on their own
# (see 10-python.sh for why).
# PUFF_SANITIZE_PYTEST="..." replaces the selection (e.g. tests/python: all of it).
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

# The selection: every CPU kernel and every binding, each reached through each
# layer that calls it, so that all of the sanitized native code runs:
#   kernels  test_puff (the puff advantage), test_conventions (GAE, V-trace,
#            TD(lambda): both layouts, every dtype, threaded tiles and blocks,
#            streamed large outputs), test_family (the six family estimators),
#            test_nonfinite (NaN/inf through every kernel), test_fuzz (hostile
#            shapes, strides and values into every function);
#   nanobind test_bad_input, test_family_errors (every refused argument and its
#            message), test_dlpack, test_call_path (DLPack producers, capsules,
#            the C exchange API), test_dispatch, test_fallback;
#   torch    test_torch_ops, test_torch_conventions, test_family_torch (every
#            operator, opcheck, fake kernels, torch.compile of each);
#   JAX      test_jax, test_jax_vmap, test_jax_errors, test_family_jax (every XLA
#            FFI handler under jit and vmap);
#   threads  test_concurrency, test_fork, test_signals (the pool, fork, signals:
#            use-after-free probes).
# Left to 10-python.sh, which runs them unsanitized: test_compile (torch.compile
# graphs over the same operators), test_sharding (JAX sharding over the same
# handlers; the slowest file, ~90 s unsanitized), test_peers (rlax / TorchRL /
# SB3 agreement: other libraries' code), test_distributed and
# test_pufferlib_compat (torchrun ranks and import hooks in subprocesses, calling
# the kernels above), test_packaging and test_troubleshooting (metadata, docs and
# CMake configure runs), test_torch_versions (its own venv) and the GPU files (no
# GPU here).
default_selection="test_puff.py test_conventions.py test_family.py test_nonfinite.py test_fuzz.py
  test_bad_input.py test_family_errors.py test_dlpack.py test_call_path.py test_dispatch.py
  test_fallback.py test_torch_ops.py test_torch_conventions.py test_family_torch.py test_jax.py
  test_jax_vmap.py test_jax_errors.py test_family_jax.py"
if [ -n "${PUFF_SANITIZE_PYTEST:-}" ]; then
  python -m pytest -q -p no:cacheprovider ${PUFF_SANITIZE_PYTEST}
else
  read -r -a selection <<< "$(echo ${default_selection})"
  python -m pytest -q -p no:cacheprovider -n "${PUFF_PYTEST_WORKERS:-2}" "${selection[@]/#/tests/python/}"
  python -m pytest -q -p no:cacheprovider tests/python/test_concurrency.py tests/python/test_fork.py \
    tests/python/test_signals.py
fi
echo "sanitizer step: $((SECONDS - started)) s"
