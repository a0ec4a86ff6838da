#!/usr/bin/env bash
# GPU machine step (issue 7, ~4 min on the H200): compute-sanitizer initcheck
# and synccheck over the GPU tests (memcheck and racecheck are 15-gpu-sanitizer.sh's;
# without that step they run here too), then three checks in one Python process:
#   1. one call of more than 2^31 elements, row-major and time-major (the strided
#      kernel), checked against the CPU backend on sampled rows;
#   2. concurrent calls on 8 streams from 8 threads, inputs produced on each stream
#      just before the call, equal bitwise to serial calls on the default stream;
#   3. out-of-memory at output allocation (a 4 TB output of zero-stride inputs, and
#      a capped allocator) is a clear Python error, and the next call works;
# Logs: $OUT/reliability-sanitizer.log, $OUT/reliability-checks.log.
set -uo pipefail
OUT="${OUT:-/tmp/puffadv-gpu-out}"; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
status=0
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
log="$OUT/reliability-sanitizer.log"
: > "$log"

tools=(initcheck synccheck)
[ -e scripts/gpu/15-gpu-sanitizer.sh ] || tools+=(memcheck racecheck)
# The GPU tests less the multi-GB cases, plus the target-parametrised suite on torch-cuda/cupy
# (test_nonfinite's GPU cases run unsanitized in 10-gpu-tests.sh: no time for them here).
selection=(tests/python/test_gpu.py tests/python/test_gpu_family.py tests/python/test_puff.py tests/python/test_conventions.py
           -k "(test_gpu or cuda or cupy) and not 300007 and not 131072 and not 2_31 and not 50001")
# Kernel filter: only puffadv's kernels are instrumented (torch's would need their own
# triage). Not for initcheck: it must see torch's kernels write the inputs.
# (compute-sanitizer 2025 spells it --kernel-name; older ones --filter.)
filter=(--kernel-name kns=puffadv)
"$sanitizer" --help > "$OUT/sanitizer-help.txt" 2>&1
grep -q -- "--kernel-name" "$OUT/sanitizer-help.txt" || filter=(--filter kns=puffadv)
rm -f "$OUT/sanitizer-help.txt"
for tool in "${tools[@]}"; do
  flags=("${filter[@]}")
  [ "$tool" = initcheck ] && flags=()
  echo "=== compute-sanitizer --tool $tool ${flags[*]}" >> "$log"
  # No caching allocator: an out-of-bounds access meets unallocated memory.
  PUFFADV_UNDER_SANITIZER=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 \
    "$sanitizer" --tool "$tool" --error-exitcode 99 "${flags[@]}" \
    python3 -m pytest -q -p no:cacheprovider "${selection[@]}" >> "$log" 2>&1
  rc=$?
  echo "=== $tool: exit status $rc" | tee -a "$log"
  [ "$rc" -eq 0 ] || status=1
done
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" "$log" | tail -12

timeout 150 python3 - > "$OUT/reliability-checks.log" 2>&1 <<'EOF'
import sys, threading, time
import numpy as np
import torch
import puffadv

PARAMS = dict(gamma=0.99, gae_lambda=0.95, rho_clip=5.0, c_clip=1.0)
failures = []


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + (": " + detail if detail else ""), flush=True)
    if not ok:
        failures.append(name)


def relative_error(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


print(puffadv.backend(), flush=True)

# 1. More than 2^31 elements in one call.
for layout in ("row-major", "time-major"):
    rows, horizon = 2**21 + 3, 1024  # row 2^21 starts at element 2^31
    t0 = time.perf_counter()
    g = torch.Generator(device="cuda").manual_seed(7)
    shape = (rows, horizon) if layout == "row-major" else (horizon, rows)
    make = lambda f: f(shape).t() if layout == "time-major" else f(shape)
    values = make(lambda s: torch.randn(s, device="cuda", generator=g))
    rewards = make(lambda s: torch.randn(s, device="cuda", generator=g))
    dones = make(lambda s: (torch.rand(s, device="cuda", generator=g) < 0.1).float())
    importance = make(lambda s: torch.rand(s, device="cuda", generator=g) * 3)
    out = torch.full((rows, horizon), float("nan"), device="cuda")
    puffadv.compute_puff_advantage(values, rewards, dones, importance, out, **PARAMS)
    torch.cuda.synchronize()
    no_nan = not bool(torch.isnan(out).any())
    sample = torch.cat([torch.randint(0, rows, (256,), generator=torch.Generator().manual_seed(3)),
                        torch.tensor([0, 2**21 - 1, 2**21, 2**21 + 1, rows - 1])]).cuda()
    host = [x.index_select(0, sample).cpu().numpy() for x in (values, rewards, dones, importance)]
    cpu = puffadv.compute_puff_advantage(*host, **PARAMS)
    err = relative_error(out.index_select(0, sample).cpu().numpy(), cpu)
    check(f">2^31 elements ({rows}x{horizon}, {layout}) vs CPU on {len(sample)} rows",
          no_nan and err <= 1e-5, f"no NaN left: {no_nan}, relative error {err:.2e}, "
          f"{time.perf_counter() - t0:.1f} s")
    del values, rewards, dones, importance, out
    torch.cuda.empty_cache()

# 2. Concurrent calls on several streams, from several threads.
shapes = [(1024, 128), (64, 16384), (8, 131072), (4096, 1024), (300, 91), (1, 300007), (65536, 32), (7, 5)]
streams = [torch.cuda.Stream() for _ in shapes]
serial, produced = [], []
for i, shape in enumerate(shapes):
    g = torch.Generator(device="cuda").manual_seed(100 + i)
    inputs = (torch.randn(shape, device="cuda", generator=g), torch.randn(shape, device="cuda", generator=g),
              (torch.rand(shape, device="cuda", generator=g) < 0.1).float(),
              torch.rand(shape, device="cuda", generator=g) * 3)
    serial.append(puffadv.compute_puff_advantage(*inputs, **PARAMS))
    produced.append(inputs)
torch.cuda.synchronize()
results, errors = {}, []
barrier = threading.Barrier(len(shapes))


def on_stream(i):
    try:
        stream = streams[i]
        barrier.wait()
        with torch.cuda.stream(stream):
            for repeat in range(10):
                # The inputs are written on this stream behind a ~1 ms sleep: a kernel
                # on any other stream would read them before they exist.
                torch.cuda._sleep(2_000_000)
                inputs = [x.clone() for x in produced[i]]
                results[(i, repeat)] = puffadv.compute_puff_advantage(*inputs, **PARAMS)
        stream.synchronize()
    except Exception as e:  # noqa: BLE001
        errors.append(repr(e))


threads = [threading.Thread(target=on_stream, args=(i,)) for i in range(len(shapes))]
for t in threads:
    t.start()
for t in threads:
    t.join()
torch.cuda.synchronize()
same = all(torch.equal(results[(i, r)], serial[i]) for i in range(len(shapes)) for r in range(10))
check(f"{len(shapes)} threads x 10 calls on {len(streams)} streams equal serial calls bitwise",
      not errors and same and len(results) == 10 * len(shapes), "; ".join(errors[:3]))

# 3. Out of memory at output allocation.
huge = torch.zeros(1, 1, device="cuda").expand(2**20, 2**20)  # 4 TB of float32, no memory
try:
    puffadv.compute_puff_advantage(huge, huge, huge, huge)
    check("4 TB output of zero-stride inputs", False, "no error")
except Exception as e:  # noqa: BLE001
    check("4 TB output of zero-stride inputs", isinstance(e, (MemoryError, RuntimeError))
          and "out of memory" in str(e).lower(), f"{type(e).__name__}: {str(e)[:160]}")

shape = (2**19, 1024)  # 2 GiB per array
inputs = [torch.rand(shape, device="cuda") for _ in range(4)]
torch.cuda.empty_cache()
total = torch.cuda.mem_get_info()[1]
cap = torch.cuda.memory_reserved() + (1 << 30)  # 1 GiB more than the inputs hold: too little
torch.cuda.set_per_process_memory_fraction(cap / total)
for name, fn in (("compute_puff_advantage", lambda: puffadv.compute_puff_advantage(*inputs, **PARAMS)),
                 ("gae", lambda: puffadv.gae(inputs[1], inputs[0], inputs[2] > 0.5, last_value=inputs[0][:, 0]))):
    try:
        fn()
        check(f"{name}: output beyond the allocator's cap", False, "no error")
    except Exception as e:  # noqa: BLE001
        check(f"{name}: output beyond the allocator's cap", isinstance(e, torch.OutOfMemoryError),
              f"{type(e).__name__}: {str(e)[:160]}")
torch.cuda.set_per_process_memory_fraction(1.0)
small = [x[:1000] for x in inputs]
after = puffadv.compute_puff_advantage(*small, **PARAMS)
again = puffadv.compute_puff_advantage(*[x.cpu() for x in small], **PARAMS)
check("the next call after OOM works", relative_error(after.cpu(), again) <= 1e-5)

try:
    import cupy
    pool = cupy.get_default_memory_pool()
    arrays = [cupy.random.rand(1 << 14, 1 << 14, dtype=cupy.float32) for _ in range(4)]
    pool.set_limit(size=pool.used_bytes() + (256 << 20))
    try:
        puffadv.compute_puff_advantage(*arrays)
        check("cupy: output beyond the pool's limit", False, "no error")
    except cupy.cuda.memory.OutOfMemoryError as e:
        check("cupy: output beyond the pool's limit", True, str(e)[:120])
    pool.set_limit(size=0)
except ImportError:
    print("cupy not installed: its OOM check skipped")

print("reliability checks:", "FAILED " + ", ".join(failures) if failures else "all passed")
sys.exit(1 if failures else 0)
EOF
rc=$?
grep -E "^(PASS|FAIL)|reliability checks|Error|error" "$OUT/reliability-checks.log" | tail -20
[ "$rc" -eq 0 ] || { echo "reliability checks: exit status $rc"; status=1; }
exit $status
