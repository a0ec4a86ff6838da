#!/usr/bin/env bash
# GPU machine step (issue 16): PufferLib 3.0.0's own trainer (PuffeRL) on CUDA
# tensors through puffadv, and its advantage step timed against PufferLib's own
# CUDA kernel. The machine has no network: scripts/gpu/prepare_pufferlib.sh
# (run where there is one) fills .gpu/pufferlib with PufferLib 3.0.0's unpacked
# sdist and wheels of its pure-Python dependencies for CPython 3.12; pass
# carry [".gpu"]. PUFF_PUFFERLIB_GPU_DIR names that folder when it is elsewhere.
#
# 1. puffadv with CUDA (sm_90), unless this Python already has it (run_all.sh
#    builds it first); meanwhile PufferLib's own extension from its sdist
#    (pufferlib.cpp + cuda/pufferlib.cu, -O3, as its setup.py builds it when
#    nvcc is on PATH), with torch.utils.cpp_extension.
# 2. benchmarks/bench_pufferlib.py --device cuda: equality, then the timing;
#    then --compat: torch.ops.pufferlib as puffadv serves it to the trainer.
# 3. `python -m puffadv.pufferlib_compat install`, then tests/pufferlib/
#    train_pysquared.py with device=cuda (16 envs, batch 2048, horizon 64,
#    adam, 8192 steps: 8 advantage calls of 32x64): once on puffadv (no
#    PufferLib extension: its sdist as a user has it), once with PufferLib's
#    own extension beside it; the calls counted by namespace and device, one
#    call checked against the float64 reference.
# Logs in $OUT: pufferlib-cuda.txt (summary), bench-pufferlib-cuda.txt, the
# builds' logs, the trainers' reports and stderr. ~5 min on 16 cores when
# puffadv has to be built.
# PUFF_PUFFERLIB_DEVICE=cpu: the same steps on the CPU, with the puffadv
# already installed (a dry run of this script on a machine without a GPU).
set -uo pipefail
OUT="${OUT:-/tmp/puffadv-gpu-out}"; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python3}"
device="${PUFF_PUFFERLIB_DEVICE:-cuda}"
prep="$(realpath -m "${PUFF_PUFFERLIB_GPU_DIR:-.gpu/pufferlib}")"
sdist="$prep/pufferlib-3.0.0"
steps="${PUFF_PUFFERLIB_STEPS:-8192}"
calls_expected=$((2 * steps / 2048))  # one call per epoch and one per minibatch
summary="$OUT/pufferlib-cuda.txt"
if [ ! -f "$sdist/pufferlib/pufferl.py" ] || ! ls "$prep"/wheels/numpy-*.whl > /dev/null 2>&1; then
  echo "55-pufferlib-cuda: $prep lacks PufferLib 3.0.0's tree or the wheels: run" \
       "scripts/gpu/prepare_pufferlib.sh where there is a network, carry .gpu" | tee "$summary"
  exit 1
fi
work="$(mktemp -d /tmp/puffadv-pufferlib.XXXX)"
status=0
started=$SECONDS
# PufferLib 3.0.0's trainer keeps advantages on the GPU only when nvcc is on PATH
# (its ADVANTAGE_CUDA); otherwise it moves them to the CPU for its kernel.
command -v nvcc > /dev/null || export PATH="/usr/local/cuda/bin:$PATH"
say() { echo "$*" | tee -a "$summary"; }
: > "$summary"
{
  [ "$device" = cuda ] && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "nvcc: $(command -v nvcc || echo none); $(nproc) cores; $(date -u '+%Y-%m-%d %H:%M UTC')"
  "$PYTHON" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
} 2>&1 | tee -a "$summary"

echo "--- 1. puffadv with CUDA; PufferLib's extension from its sdist"
ext="$work/extension"; mkdir -p "$ext"
sources=("$sdist/pufferlib/extensions/pufferlib.cpp")
[ "$device" = cuda ] && sources+=("$sdist/pufferlib/extensions/cuda/pufferlib.cu")
TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=4 "$PYTHON" -c '
import sys, torch.utils.cpp_extension as ce
ce.load(name="_C", sources=sys.argv[2:], build_directory=sys.argv[1], extra_cflags=["-O3"],
        extra_cuda_cflags=["-O3"], is_python_module=False, verbose=True)' "$ext" "${sources[@]}" \
  > "$OUT/pufferlib-extension-build.log" 2>&1 &
ext_pid=$!
has_cuda='import puffadv, sys; sys.exit(0 if puffadv.backend()["cuda"]["compiled"] else 1)'
if [ "$device" = cuda ] && ! "$PYTHON" -c "$has_cuda" 2> /dev/null; then
  t=$SECONDS
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$PYTHON" -m pip install -q --no-build-isolation \
    -C build-dir=build/gpu-pufferlib -C cmake.define.PUFF_CUDA=ON \
    -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 -C cmake.define.PUFF_JAX=OFF . \
    > "$OUT/puffadv-build.log" 2>&1 || { tail -40 "$OUT/puffadv-build.log"; exit 1; }
  say "puffadv built with CUDA (sm_90) in $((SECONDS - t)) s"
fi
"$PYTHON" -c 'import puffadv; r = puffadv.backend(); print("puffadv", puffadv.__version__, puffadv.__file__, "cuda compiled:", r["cuda"]["compiled"])' 2>&1 | tee -a "$summary"
wait "$ext_pid" || { tail -40 "$OUT/pufferlib-extension-build.log"; exit 1; }
say "PufferLib's extension built: $ext/_C.so"
# PufferLib's tree with that extension in it (links to the sdist's files), as a user who could build it has it.
tree="$work/tree-with-extension"; mkdir -p "$tree/pufferlib"
for entry in "$sdist"/pufferlib/*; do ln -s "$entry" "$tree/pufferlib/"; done
ln -s "$ext/_C.so" "$tree/pufferlib/_C.so"

echo "--- 2. the advantage step: puffadv against PufferLib's kernel"
"$PYTHON" benchmarks/bench_pufferlib.py --device "$device" --extension "$ext/_C.so" --sdist "$sdist" \
  --shapes "${PUFF_PUFFERLIB_SHAPES:-32x64,256x64,1024x64,2048x64,8192x64,16384x64,1024x256,4096x256,16384x256,65536x128}" \
  2>&1 | tee "$OUT/bench-pufferlib-$device.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { say "bench FAILED"; status=1; }
if [ "$device" = cuda ]; then  # the trainer's path where puffadv serves it: torch.ops.pufferlib
  "$PYTHON" benchmarks/bench_pufferlib.py --device cuda --compat --shapes 32x64,2048x64,16384x256 \
    2>&1 | tee -a "$OUT/bench-pufferlib-$device.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { say "bench --compat FAILED"; status=1; }
fi

echo "--- 3. PufferLib's trainer on $device"
deps="$work/deps"
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$deps" "$prep"/wheels/*.whl \
  > "$OUT/deps-install.log" 2>&1 || { tail -20 "$OUT/deps-install.log"; exit 1; }
"$PYTHON" -m puffadv.pufferlib_compat install 2>&1 | tee -a "$summary"
pysquared="$sdist/pufferlib/ocean/pysquared/pysquared.py"
train() {  # name pythonpath
  local t=$SECONDS
  PYTHONPATH="$deps:$2" "$PYTHON" tests/pufferlib/train_pysquared.py "$pysquared" "$steps" \
    "$OUT/train-$1.json" "$device" > "$OUT/train-$1.stdout" 2> "$OUT/train-$1.stderr"
  local rc=$?
  say "trainer ($1): exit status $rc, $((SECONDS - t)) s"
  [ $rc -eq 0 ] || { tail -30 "$OUT/train-$1.stderr"; status=1; }
}
train puffadv "$sdist"
train pufferlib-extension "$tree"
"$PYTHON" -m puffadv.pufferlib_compat uninstall > /dev/null
OUT="$OUT" DEVICE="$device" CALLS="$calls_expected" SDIST="$sdist" TREE="$tree" "$PYTHON" - <<'PY' 2>&1 | tee -a "$summary"
import json, os, sys
out, device, calls = os.environ["OUT"], os.environ["DEVICE"], int(os.environ["CALLS"])
failed = False
for name, namespace, path in (("puffadv", "puffadv", os.environ["SDIST"]),
                              ("pufferlib-extension", "pufferlib", os.environ["TREE"])):
    try:
        report = json.load(open(f"{out}/train-{name}.json"))
    except OSError as e:
        print(f"{name}: no report ({e})"); failed = True; continue
    said = [l for l in open(f"{out}/train-{name}.stderr").read().splitlines() if l.startswith("puffadv: ")]
    c = report["checked_call"]
    checks = {
        "PufferLib 3.0.0 from the tree given": report["pufferlib"] == 3.0 and report["pufferlib_file"].startswith(path),
        f"{calls} calls, all {namespace}": report["calls"] == {namespace: calls},
        f"all on {device} tensors": report["call_devices"] == {device: calls},
        "one call vs float64 <= 1e-5 x scale": c["max_abs_error"] <= 1e-5 * c["scale"],
        "puffadv said one line": len(said) == 1,
    }
    for what, ok in checks.items():
        failed |= not ok
    print(f"{name}: steps {report['steps']}, epochs {report['epochs']}, calls {report['calls']} on "
          f"{report['call_devices']}, checked call {c['namespace']} {c['shape']} max abs error "
          f"{c['max_abs_error']:.2e} (scale {c['scale']:.2f}); import {report['seconds']['import']:.1f} s, "
          f"train {report['seconds']['train']:.1f} s; extension {report['extension']}")
    print("  " + "; ".join(f"{what}: {'ok' if ok else 'FAILED'}" for what, ok in checks.items()))
    print("  " + (said[0] if said else "(puffadv said nothing)"))
sys.exit(1 if failed else 0)
PY
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
say "55-pufferlib-cuda: $((SECONDS - started)) s, exit status $status"
rm -rf "$work"
exit $status
