#!/usr/bin/env bash
# The second device call for the backward kernels (issue 30), after backward_tests.sh
# (carry [".gpu"] with the wheel it returned in .gpu/wheels): the fused backward
# workload under compute-sanitizer memcheck and racecheck side by side, then
# bench_backward.py over the fused estimators of docs/gradients.md's GPU table (GAE with
# and without gamma / lambda gradients, TD(lambda), discounted and n-step returns,
# V-trace's vs, the puff advantage through values, Retrace, Watkins' Q(lambda)) with its
# kernel-by-kernel profile
# ($OUT/profile.txt: where each backward's time goes), then the operators' host cost
# (issue 33) on this host: bench_overhead.py --quick and bench_operator_floor.py.
# Device tool, from the checkout's root:  bash scripts/gpu/backward_bench.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/puffadv-gpu-out}"
cd "$(dirname "$0")/../.."
start=$SECONDS
left() { local l=$(( $1 - (SECONDS - start) )); [ $l -lt 5 ] && l=5; echo $l; }
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; date -u; nproc; } > "$OUT/machine.txt" 2>&1
wheel="$(ls -t .gpu/wheels/*.whl 2>/dev/null | head -1)"
[ -n "$wheel" ] || { echo "no wheel in .gpu/wheels: run backward_tests.sh first"; exit 1; }
python3 -m pip install -q --no-deps --force-reinstall "$wheel" >> "$OUT/machine.txt" 2>&1
rm -rf python/puffadv.egg-info
san="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
for tool in memcheck racecheck; do
  ( PUFFADV_UNDER_SANITIZER=1 timeout 330 "$san" --tool "$tool" --error-exitcode 99 \
      python3 scripts/gpu/backward_workload.py > "$OUT/$tool.log" 2>&1
    echo "$tool rc=$?" >> "$OUT/$tool.log" ) &
done
wait
echo "sanitizers done at $((SECONDS - start)) s" | tee -a "$OUT/machine.txt"
timeout "$(left 480)" python3 benchmarks/bench_backward.py --shapes 65536x128 \
  --estimators gae,gae_meta,td_lambda_returns,discounted_returns,vtrace_vs,puff_values,retrace,q_lambda,n_step,n_step_long \
  --profile "$OUT/profile.txt" > "$OUT/bench_backward.log" 2>&1
echo "bench_backward rc=$? at $((SECONDS - start)) s" | tee -a "$OUT/machine.txt"
timeout "$(left 540)" python3 benchmarks/bench_overhead.py --quick > "$OUT/overhead.log" 2>&1
echo "bench_overhead rc=$? at $((SECONDS - start)) s" | tee -a "$OUT/machine.txt"
timeout "$(left 585)" python3 benchmarks/bench_operator_floor.py --device cuda > "$OUT/operator_floor.log" 2>&1
echo "bench_operator_floor rc=$? at $((SECONDS - start)) s" | tee -a "$OUT/machine.txt"
tail -3 "$OUT/memcheck.log" "$OUT/racecheck.log"; tail -30 "$OUT/bench_backward.log"
tail -20 "$OUT/overhead.log" "$OUT/operator_floor.log"
