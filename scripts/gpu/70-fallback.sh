#!/usr/bin/env bash
# GPU machine: the automatic CPU fallback on real GPU arrays. Builds a CPU-only
# puffadv (PUFF_CUDA=OFF, torch ops included) into a private folder, then runs
# CUDA torch tensors, CuPy arrays (and JAX GPU arrays, if present) through it:
# results against the float64 reference, in the caller's framework and device,
# one puffadv.FallbackWarning per process, PUFFADV_FALLBACK=error, and the cost per call.
# Log: $OUT/fallback.log. Build: ~2 min on 16 cores.
set -uo pipefail
OUT="${OUT:-/tmp/puffadv-gpu-out}"; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
SITE="$(mktemp -d /tmp/puffadv-cpuonly.XXXX)"
python3 -m pip install -q --no-build-isolation --no-deps --target "$SITE" -C build-dir=build/gpu-cpuonly \
  -C cmake.define.PUFF_CUDA=OFF -C cmake.define.PUFF_HIP=OFF -C cmake.define.PUFF_JAX=OFF . \
  > "$OUT/fallback-build.log" 2>&1 || { tail -30 "$OUT/fallback-build.log"; exit 1; }

PYTHONPATH="$SITE:$PWD/tests/python" python3 - <<'EOF' 2>&1 | tee "$OUT/fallback.log"
import sys, time, warnings
import numpy as np
import torch
import puffadv
from reference import puff_advantage as reference

info = puffadv.backend()
assert not info["cuda"]["compiled"], "this step needs a CPU-only build"
print("build:", info["compiled"], "| torch", torch.__version__, "| GPU", torch.cuda.get_device_name(0))
params = dict(gamma=0.99, gae_lambda=0.95, rho_clip=5.0, c_clip=1.0)
rng = np.random.default_rng()
failures = []

def inputs(rows, horizon, dtype):
    return (rng.standard_normal((rows, horizon)).astype(dtype), rng.standard_normal((rows, horizon)).astype(dtype),
            (rng.random((rows, horizon)) < 0.1).astype(dtype), rng.uniform(0.2, 2.0, (rows, horizon)).astype(dtype))

def check(label, got_host, host, tol):
    ref = reference(*host, **params)
    err = float(np.linalg.norm(got_host - ref) / np.linalg.norm(ref))
    ok = np.isfinite(got_host).all() and err <= tol
    print(f"  {label:<44} relative error {err:.1e} {'PASS' if ok else 'FAIL'}")
    if not ok:
        failures.append(label)

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    frameworks = [("torch", lambda a, d: torch.from_numpy(a).to(d), lambda x: x.cpu().numpy())]
    try:
        import cupy
        frameworks.append(("cupy", lambda a, d: cupy.asarray(a), lambda x: x.get()))
    except ImportError:
        print("  CuPy not installed: not checked")
    for name, put, get in frameworks:
        for dtype, tol in ((np.float32, 1e-5), (np.float64, 1e-12)):
            host = inputs(1000, 67, dtype)
            dev = [put(a, "cuda") for a in host]
            out = put(np.full(host[0].shape, np.nan, dtype), "cuda")
            res = puffadv.compute_puff_advantage(*dev, out, **params)
            assert res is out
            check(f"{name} cuda {np.dtype(dtype).name} into advantages=", get(out), host, tol)
            res = puffadv.compute_puff_advantage(*dev, **params)
            assert type(res) is type(dev[0]) and str(res.device) == str(dev[0].device), (type(res), res.device)
            check(f"{name} cuda {np.dtype(dtype).name} returned ({res.device})", get(res), host, tol)
        # A time-major buffer viewed as [rows, H]: strided GPU views go through too.
        host_t = [np.ascontiguousarray(a.T) for a in inputs(300, 41, np.float32)]
        dev_t = [put(a, "cuda").T for a in host_t]
        check(f"{name} cuda transposed views", get(puffadv.compute_puff_advantage(*dev_t, **params)),
              [a.T for a in host_t], 1e-5)
    if torch.cuda.device_count() > 1:
        host = inputs(100, 33, np.float32)
        res = puffadv.compute_puff_advantage(*(torch.from_numpy(a).to("cuda:1") for a in host), **params)
        assert res.device == torch.device("cuda:1")
        check("torch cuda:1", res.cpu().numpy(), host, 1e-5)
    try:
        import jax, jax.numpy as jnp
        if jax.default_backend() == "gpu":
            host = inputs(200, 19, np.float32)
            res = puffadv.compute_puff_advantage(*(jnp.asarray(a) for a in host), **params)
            check(f"jax gpu returned ({type(res).__name__})", np.asarray(res), host, 1e-5)
    except Exception as e:  # reported, not fatal: JAX output write-back needs CuPy or torch
        print(f"  jax gpu: {type(e).__name__}: {e}")

ours = [w for w in caught if issubclass(w.category, puffadv.FallbackWarning) and "puffadv" in str(w.message)]
print(f"FallbackWarnings from puffadv: {len(ours)} (expect 1)")
for w in ours:
    print("  ", w.filename, w.lineno, "|", w.message)
if len(ours) != 1:
    failures.append("warning count")
print(next(line for line in str(puffadv.backend()).splitlines() if "CPU fallback" in line))

# Error mode.
puffadv.set_fallback("error")
try:
    puffadv.compute_puff_advantage(*(torch.ones(4, 5, device="cuda") for _ in range(4)))
    failures.append("error mode did not raise")
except puffadv.BackendUnavailableError as e:
    print("error mode:", type(e).__name__, "|", e)
puffadv.set_fallback("warn")

# The torch ops (src/torch) on CUDA tensors in this CPU-only build.
try:
    import puffadv.torch  # noqa: F401
    host = inputs(500, 64, np.float32)
    dev = [torch.from_numpy(a).cuda() for a in host]
    out = torch.full_like(dev[0], float("nan"))
    with warnings.catch_warnings(record=True) as torch_caught:
        warnings.simplefilter("always")
        torch.ops.puffadv.compute_puff_advantage(*dev, out, 0.99, 0.95, 5.0, 1.0)
        torch.ops.puffadv.compute_puff_advantage(*dev, out, 0.99, 0.95, 5.0, 1.0)
    check("torch.ops.puffadv on cuda (CPU-only build)", out.cpu().numpy(), host, 1e-5)
    for w in torch_caught:
        print("   torch op warning:", w.category.__name__, "|", w.message)
except Exception as e:
    failures.append(f"torch ops: {e}")
    print("torch ops:", type(e).__name__, e)

# Cost: one fallback call against the same call on host arrays (65536 x 128 float32, 168 MB moved).
host = inputs(65536, 128, np.float32)
dev = [torch.from_numpy(a).cuda() for a in host]
out_dev, out_host = torch.empty_like(dev[0]), np.empty_like(host[0])
def best(fn, n=5):
    times = []
    for _ in range(n):
        torch.cuda.synchronize(); t = time.perf_counter(); fn(); torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return min(times) * 1e3
t_fb = best(lambda: puffadv.compute_puff_advantage(*dev, out_dev, **params))
t_cpu = best(lambda: puffadv.compute_puff_advantage(*host, out_host, **params))
print(f"cost at 65536x128 float32: fallback {t_fb:.1f} ms/call vs {t_cpu:.1f} ms on host arrays")
print("FALLBACK CHECK:", "PASS" if not failures else f"FAIL {failures}")
sys.exit(1 if failures else 0)
EOF
status=${PIPESTATUS[0]}
rm -rf "$SITE"
exit $status
