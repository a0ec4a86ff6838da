#!/usr/bin/env bash
# GPU machine step for two or more GPUs (issue 19; scripts/gpu/run_all.sh runs it
# after building with CUDA, or run it alone with puffadv installed):
#  1. torchrun, two ranks on NCCL, one GPU each: every rank computes its own rows
#     (puff advantage and time-major GAE with fused sums/square_sums) and the ranks
#     normalise globally with one all_reduce; checked against one process over all
#     rows and the float64 reference (tests/python/distributed_worker.py);
#  2. JAX on a two-GPU mesh: the sharding tests (tests/python/test_sharding.py,
#     which include the two-GPU case), then benchmarks/bench_jax_sharding.py: jit
#     over row-sharded inputs keeps the sharding, time per call on two GPUs vs one
#     for 2 x 262144 x 128;
#  3. the existing two-device tests of test_gpu.py and test_torch_ops.py.
# With fewer than two GPUs (or PUFFADV_MULTI_GPU_DRY_RUN=1) the same steps run as
# a dry run on the CPU: gloo instead of NCCL, forced host devices instead of GPUs,
# a smaller batch; its numbers say nothing of GPU scaling.
# Logs in $OUT/multi-gpu-*.txt. PYTHON picks the interpreter (default python3).
set -uo pipefail
export PYTHONUNBUFFERED=1
# Keep NVLink multicast off (the lending machines require it; see KINDS.md).
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}" TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-/tmp/puffadv-gpu-out}"; mkdir -p "$OUT"
PYTHON="${PYTHON:-python3}"
cd "$(dirname "$0")/../.."
start=$SECONDS
status=0

gpus=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [ "${PUFFADV_MULTI_GPU_DRY_RUN:-0}" = 1 ] || [ "$gpus" -lt 2 ]; then
  mode=dry-run; device=cpu; rows_per_device=4096
  echo "DRY RUN on the CPU ($gpus GPU(s) visible; PUFFADV_MULTI_GPU_DRY_RUN=${PUFFADV_MULTI_GPU_DRY_RUN:-0}):" \
       "gloo ranks, forced host devices; no GPU is exercised"
else
  mode=gpu; device=cuda; rows_per_device=262144
fi
{
  echo "mode $mode, $gpus GPU(s), $(date -u '+%Y-%m-%d %H:%M UTC')"
  [ "$mode" = gpu ] && nvidia-smi --query-gpu=index,name,memory.total --format=csv && nvidia-smi topo -m
  "$PYTHON" -c 'import torch, jax, puffadv; print("torch", torch.__version__, "jax", jax.__version__); print(puffadv.backend())'
} 2>&1 | tee "$OUT/multi-gpu-env.txt"

echo "=== 1. torchrun: two ranks on $([ "$mode" = gpu ] && echo NCCL || echo gloo), one all_reduce for global normalisation"
ranks="$OUT/multi-gpu-ranks"; rm -rf "$ranks"
port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(
  [ "$mode" = dry-run ] && export GLOO_SOCKET_IFNAME=lo PUFFADV_NUM_THREADS=1
  timeout 300 "$PYTHON" -m torch.distributed.run --nnodes 1 --nproc-per-node 2 \
    --master-addr 127.0.0.1 --master-port "$port" \
    tests/python/distributed_worker.py --out "$ranks" --device "$device" \
  && "$PYTHON" tests/python/distributed_worker.py --verify "$ranks"
) > "$OUT/multi-gpu-torchrun.txt" 2>&1
rc=$?; tail -5 "$OUT/multi-gpu-torchrun.txt"; [ $rc -eq 0 ] || { echo "FAILED: torchrun ranks (exit $rc)"; status=1; }
rm -rf "$ranks"  # the device tool returns few files: keep the logs only

echo "=== 2. JAX: sharding tests, then jit over rows on $([ "$mode" = gpu ] && echo "two GPUs" || echo "two host devices") vs one"
(
  timeout 600 "$PYTHON" -m pytest -q -rs -p no:cacheprovider tests/python/test_sharding.py
  rc=$?
  [ "$mode" = dry-run ] && export PUFFADV_NUM_THREADS=1  # two host devices share two cores here
  timeout 300 "$PYTHON" benchmarks/bench_jax_sharding.py --platform "$([ "$mode" = gpu ] && echo gpu || echo cpu)" \
    --devices 2 --rows-per-device "$rows_per_device" --horizon 128 || rc=1
  exit $rc
) > "$OUT/multi-gpu-jax.txt" 2>&1
rc=$?; grep -E "passed|failed|SKIPPED|^\|" "$OUT/multi-gpu-jax.txt" | tail -12
[ $rc -eq 0 ] || { echo "FAILED: JAX sharding (exit $rc)"; status=1; }
if [ "$mode" = gpu ] && grep -q "needs two GPUs" "$OUT/multi-gpu-jax.txt"; then
  echo "FAILED: the two-GPU JAX test skipped itself on $gpus GPUs"; status=1
fi

echo "=== 3. the two-device tests of test_gpu.py and test_torch_ops.py"
timeout 300 "$PYTHON" -m pytest -q -rs -p no:cacheprovider tests/python/test_gpu.py tests/python/test_torch_ops.py \
  -k "second_device" > "$OUT/multi-gpu-two-device-tests.txt" 2>&1
rc=$?; tail -8 "$OUT/multi-gpu-two-device-tests.txt"
[ $rc -eq 0 ] || { echo "FAILED: two-device tests (exit $rc)"; status=1; }
if [ "$mode" = gpu ] && grep -q "skipped" "$OUT/multi-gpu-two-device-tests.txt"; then
  echo "FAILED: a two-device test skipped itself on $gpus GPUs"; status=1
fi

echo "--- 80-multi-gpu.sh ($mode) took $((SECONDS - start)) s, exit status $status"
exit $status
