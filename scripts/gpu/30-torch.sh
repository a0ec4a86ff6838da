#!/usr/bin/env bash
# GPU machine step (scripts/gpu/run_all.sh runs it after building with CUDA):
# the torch operator tests on CUDA tensors: opcheck, torch.compile(fullgraph)
# vs eager, CUDA graph capture/replay, a side stream behind a long sleep, the
# stream-handle identity (the CUDA stream shim found at run time == torch's
# current stream), cuda:1 when there are two GPUs. Then the same tests with a CPU-only
# core (PUFF_CUDA=OFF) to run the CUDA key's host fallback on real CUDA tensors.
# Logs: $OUT/torch-ops.txt, $OUT/torch-ops-cpu-only.txt. ~3 min on 16 cores.
set -uo pipefail
OUT="${OUT:-/tmp/puffadv-gpu-out}"; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
status=0

facts='import torch, puffadv, puffadv.torch, puffadv._torch_status as s
print("torch", torch.__version__, "cuda", torch.version.cuda, "GPUs", torch.cuda.device_count())
print("op library", s.library_path(), "built with torch", torch.ops.puffadv._built_with_torch())
print(puffadv.backend())'
{
  python3 -c "$facts"
  # One binary for CPU and CUDA torch (Stable ABI): only libtorch_cpu, no libtorch_cuda / libcudart.
  readelf -d "$(python3 -c 'import puffadv._torch_status as s; print(s.library_path())')" | grep NEEDED
  python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_torch_ops.py
} 2>&1 | tee "$OUT/torch-ops.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

# Same flags and build dir as 70-fallback.sh, so whichever runs second rebuilds nothing.
SITE="$(mktemp -d /tmp/puffadv-torch-cpuonly.XXXX)"
if python3 -m pip install -q --no-build-isolation --no-deps --target "$SITE" -C build-dir=build/gpu-cpuonly \
     -C cmake.define.PUFF_CUDA=OFF -C cmake.define.PUFF_HIP=OFF -C cmake.define.PUFF_JAX=OFF . \
     > "$OUT/torch-cpu-only-build.log" 2>&1; then
  {
    PYTHONPATH="$SITE" python3 -c "$facts"
    PYTHONPATH="$SITE" python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_torch_ops.py
  } 2>&1 | tee "$OUT/torch-ops-cpu-only.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
else
  tail -30 "$OUT/torch-cpu-only-build.log"; status=1
fi
rm -rf "$SITE"
exit $status
