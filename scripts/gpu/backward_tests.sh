#!/usr/bin/env bash
# The GPU checks of the backward kernels (issue 30) that fit one device call of 10
# minutes, in order of need: the CUDA wheel of this checkout (sm_90, ~250 s on 16 cores;
# it comes back in $OUT/wheels: put it in .gpu/wheels and carry .gpu to skip the build
# next time), then
# - tests/python/test_gradients_gpu.py: CUDA gradients equal to the CPU's (n-step returns'
#   fused backward included), 0-d gamma / lambda read on the device with no
#   synchronisation, CUDA-graph capture of the meta-gradient backward;
# - test_gradients_fused.py's CUDA cases of n-step returns, Retrace and Q(lambda) (whose
#   fused backwards changed since the last GPU run), and of per-step, time-major,
#   decay-gradient calls (the True-True-True ids).
# Device tool, from the checkout's root:  END=540 bash scripts/gpu/backward_tests.sh
# (carry [".gpu"] with a wheel in it). END: this script's own end, in seconds, inside the
# call's limit. Logs in $OUT; a summary of each on stdout.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/puffadv-gpu-out}"
cd "$(dirname "$0")/../.."
start=$SECONDS
END=${END:-540}
left() { local l=$(( $1 - (SECONDS - start) )); [ $l -lt 5 ] && l=5; echo $l; }
mkdir -p "$OUT/wheels"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; date -u; nproc
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__)'; } \
  > "$OUT/machine.txt" 2>&1
build_here() {
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" python3 -m pip wheel -q --no-build-isolation --no-deps -w "$OUT/wheels" \
    -C build-dir=build/gpu -C cmake.define.PUFF_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 . \
    > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  python3 -m pip install -q --no-deps --force-reinstall "$OUT"/wheels/*.whl >> "$OUT/machine.txt" 2>&1
}
carried="$(ls -t .gpu/wheels/*.whl 2>/dev/null | head -1)"
if [ -n "$carried" ]; then
  echo "carried wheel: $carried" >> "$OUT/machine.txt"
  python3 -m pip install -q --no-deps --force-reinstall "$carried" >> "$OUT/machine.txt" 2>&1
  (cd /tmp && timeout 60 python3 -c "import puffadv, puffadv.torch, torch
assert 'cuda' in puffadv.backend()['usable'], puffadv.backend()") >> "$OUT/machine.txt" 2>&1 \
    || { echo "carried wheel unusable: building here" | tee -a "$OUT/machine.txt"; build_here; }
else
  build_here
fi
echo "wheel ready at $((SECONDS - start)) s" | tee -a "$OUT/machine.txt"
(cd /tmp && python3 -m puffadv) >> "$OUT/machine.txt" 2>&1
rm -rf python/puffadv.egg-info  # the tests import the installed wheel, not the source tree
pytest=(python3 -m pytest -q -rs -p no:cacheprovider --tb=short --durations=8 -n "$(nproc)")
timeout "$(left $((END - 70)))" "${pytest[@]}" tests/python/test_gradients_gpu.py > "$OUT/gradients_gpu.log" 2>&1
echo "test_gradients_gpu.py rc=$? at $((SECONDS - start)) s" | tee -a "$OUT/machine.txt"
timeout "$(left "$END")" "${pytest[@]}" tests/python/test_gradients_fused.py -k "cuda and (n_step or retrace or q_lambda or td_lambda_next or True-True-True)" \
  > "$OUT/gradients_fused_cuda.log" 2>&1
echo "test_gradients_fused.py (CUDA cases) rc=$? at $((SECONDS - start)) s" | tee -a "$OUT/machine.txt"
for f in "$OUT"/gradients_*.log; do echo "== $f"; grep -E "^(FAILED|ERROR)" "$f" | head -20; tail -4 "$f"; done
