#!/usr/bin/env bash
# One short device call for kernel work, without building the Python package
# (run from the checkout's root; logs packed into $OUT/logs.tar.gz):
#   1. the kernel-variant harness (benchmarks/gpu_scan_variants.cu) over its shapes
#      (SHAPES=RxH,... to choose), every output checked against float64 first;
#   2. Nsight Compute on the harness's kernels: NCU="RxH:variant,variant RxH:..."
#      (one untimed launch of each case), with the warp-state and source sections;
#   3. with NCU_PEER=RxH: rl-triton's GAE kernel at that shape under the same sections.
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
pack(){ tar -C $OUT -czf $OUT/logs.tar.gz logs; }; trap pack EXIT
stamp(){ echo "--- $(date -u +%T) ${SECONDS}s $*" | tee -a $L/timeline.txt; }
stamp start; git log --oneline -1 > $L/commit.txt 2>&1; git status --short >> $L/commit.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/machine.txt 2>&1
# DEFINES2="-DNAME=1 ...": a second harness binary with those macros, run after the first (ONLY2, SHAPES2).
if [ -n "${DEFINES2:-}" ]; then
  nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Xptxas -v -Isrc $DEFINES2 benchmarks/gpu_scan_variants.cu \
    -o /tmp/variants2 > $L/variants2-ptxas.txt 2>&1 &
fi
nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Xptxas -v -Isrc benchmarks/gpu_scan_variants.cu \
  -o /tmp/variants > $L/variants-ptxas.txt 2>&1 || { tail -30 $L/variants-ptxas.txt; exit 1; }
wait
stamp built
# RUNS="RxH:variant,variant RxH:...": one harness run per shape with its own
# variants (a variant that reads aligned vectors needs a horizon that allows them).
run_specs(){  # binary log specs...
  local bin=$1 log=$2; shift 2
  for spec in "$@"; do
    timeout ${VARIANTS_LIMIT:-300} $bin --shape ${spec%%:*} --variant ${spec#*:} >> $log 2>&1
    echo "exit $? ($spec)" >> $log
  done
  grep -E "exit|MISMATCH|FAILED" $log
}
if [ -n "${RUNS:-}" ]; then
  run_specs /tmp/variants $L/variants.txt $RUNS
else
  timeout ${VARIANTS_LIMIT:-300} /tmp/variants ${SHAPES:+--shape $SHAPES} ${ONLY:+--variant $ONLY} > $L/variants.txt 2>&1
  echo "exit $?" >> $L/variants.txt; tail -2 $L/variants.txt
fi
if [ -x /tmp/variants2 ] && [ -n "${RUNS2:-}" ]; then  # RUNS2: as RUNS, for the second binary
  run_specs /tmp/variants2 $L/variants2.txt $RUNS2
elif [ -x /tmp/variants2 ]; then
  timeout ${VARIANTS_LIMIT:-300} /tmp/variants2 ${SHAPES2:+--shape $SHAPES2} ${ONLY2:+--variant $ONLY2} > $L/variants2.txt 2>&1
  echo "exit $?" >> $L/variants2.txt; tail -2 $L/variants2.txt
fi
# The stores each binary's kernels issue (SASS), by width.
for b in /tmp/variants /tmp/variants2; do
  [ -x $b ] && { echo "$b:"; cuobjdump -sass $b | grep -oE "STG\.E[.A-Z0-9]*" | sort | uniq -c; } >> $L/sass-stores.txt 2>&1
done
cat $L/sass-stores.txt 2>/dev/null
stamp variants
SECTIONS="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis"
for spec in ${NCU:-}; do
  shape=${spec%%:*}; vars=${spec#*:}
  timeout 120 ncu $SECTIONS -k regex:scan_ /tmp/variants --profile --shape $shape --variant $vars > $L/ncu-$shape.txt 2>&1
  grep -E "^  void|^ +[0-9]+x[0-9]+ |Duration|DRAM Throughput|Compute \(SM\) Throughput|Executed Instructions  |Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Stall" $L/ncu-$shape.txt | head -60
done
stamp ncu
if [ -n "${NCU_PEER:-}" ]; then
  cat > /tmp/peer_gae.py <<'PY'
import sys, torch
sys.path.insert(0, ".gpu/peers")
import rl_triton
r, h = map(int, sys.argv[1].split("x"))
g = torch.Generator(device="cuda").manual_seed(0)
x = lambda: torch.randn(r, h, device="cuda", generator=g)
rew, val = x(), x()
term = (torch.rand(r, h, device="cuda", generator=g) < 0.05).float()
lv = torch.randn(r, device="cuda", generator=g)
for _ in range(3): rl_triton.compute_gae(rew, val, term, last_value=lv)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
rl_triton.compute_gae(rew, val, term, last_value=lv)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
PY
  timeout 120 ncu --profile-from-start off $SECTIONS python3 /tmp/peer_gae.py $NCU_PEER > $L/ncu-peer.txt 2>&1
  grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Executed Instructions  |Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Grid Size|Block Size" $L/ncu-peer.txt | head -30
fi
stamp done
# SASS_FUN=<mangled name>: that kernel's SASS from the first binary (for counting instructions).
[ -n "${SASS_FUN:-}" ] && cuobjdump -sass -fun "$SASS_FUN" /tmp/variants > $L/sass-fun.txt 2>&1
