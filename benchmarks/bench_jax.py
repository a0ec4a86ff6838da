"""puffadv.jax against jax.lax.scan, inside jax.jit, on JAX's default device.

Both sides compute the same puff advantage (SPEC section 1, float32). The
lax.scan baseline is written the way JAX RL code writes GAE (PureJaxRL, rlax): a
reverse scan over time on time-major [H, rows] arrays, prepared outside the
timed region so the baseline pays no transpose. Each call is timed by itself
with block_until_ready (median of repeats); "copy" is an XLA elementwise
read+write of 1 GiB measured in the same run, the floor of SPEC section 5.

Prints a markdown table for docs/benchmarks.md.
    python benchmarks/bench_jax.py                       # SPEC section 5 shapes
    python benchmarks/bench_jax.py --shapes 64x128 4096x128 --check-bar
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import puffadv
import puffadv.jax as pjax

SPEC_SHAPES = ["1024x128", "4096x64", "8192x64", "8192x91", "16384x64", "65536x128",
               "262144x128", "1048576x32", "1048576x8", "4096x1024", "64x16384", "8x131072"]
BAR_SHAPES = {"4096x128": 20.0, "65536x128": 20.0}  # issue 8: >= 20x lax.scan on the H200
PARAMS = dict(gamma=0.99, gae_lambda=0.95, rho_clip=1.0, c_clip=1.0)


@jax.jit
def scan_puff_advantage(values, rewards, dones, importance):
    """Time-major [H, rows] inputs; returns [H, rows]."""
    gamma, lam = PARAMS["gamma"], PARAMS["gae_lambda"]
    nnt = 1.0 - dones[1:]
    rho = jnp.minimum(importance[:-1], PARAMS["rho_clip"])
    c = jnp.minimum(importance[:-1], PARAMS["c_clip"])
    delta = rho * (rewards[1:] + gamma * values[1:] * nnt - values[:-1])

    def step(a, xs):
        d, k = xs
        a = d + gamma * lam * k * a
        return a, a

    _, out = jax.lax.scan(step, jnp.zeros(values.shape[1], values.dtype), (delta, c * nnt), reverse=True)
    return jnp.concatenate([out, jnp.zeros((1, values.shape[1]), values.dtype)])


ffi_puff_advantage = jax.jit(lambda v, r, d, i: pjax.compute_puff_advantage(v, r, d, i, **PARAMS))


def time_call(fn, args, budget_s=1.0, max_repeats=200):
    """Median seconds of one blocking call (after a warm-up that compiles)."""
    fn(*args).block_until_ready()
    times = []
    start = time.perf_counter()
    while len(times) < 3 or (len(times) < max_repeats and time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn(*args).block_until_ready()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_bandwidth(device) -> float:
    """Bytes read + written per second by an XLA elementwise pass over 1 GiB."""
    x = jax.device_put(jnp.ones(1 << 28, jnp.float32), device)
    scale = jax.jit(lambda a: a * 1.000001)
    seconds = time_call(scale, (x,), budget_s=0.5)
    return 2 * x.nbytes / seconds


def inputs(rows, horizon, rng, device):
    v = rng.standard_normal((rows, horizon), dtype=np.float32)
    r = rng.standard_normal((rows, horizon), dtype=np.float32)
    d = (rng.random((rows, horizon), dtype=np.float32) < 0.05).astype(np.float32)
    i = rng.uniform(0.5, 1.5, (rows, horizon)).astype(np.float32)
    row_major = [jax.device_put(a, device) for a in (v, r, d, i)]
    time_major = [jax.device_put(np.ascontiguousarray(a.T), device) for a in (v, r, d, i)]
    return row_major, time_major


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=SPEC_SHAPES, help="ROWSxH ...")
    parser.add_argument("--check-bar", action="store_true",
                        help="exit 1 unless the issue-8 bar (>= 20x at 4096x128 and 65536x128) holds")
    args = parser.parse_args(argv)
    shapes = list(args.shapes)
    if args.check_bar:
        shapes += [s for s in BAR_SHAPES if s not in shapes]

    device = jax.devices()[0]
    rng = np.random.default_rng(0)
    bandwidth = copy_bandwidth(device)
    build = puffadv._core.jax_ffi_build()
    import jaxlib.version
    print(f"device: {device.device_kind} ({device.platform}); jax {jax.__version__}, jaxlib "
          f"{jaxlib.version.__version__}; puffadv {puffadv.__version__} handlers built against "
          f"FFI API {build['api_version'][0]}.{build['api_version'][1]} (jaxlib {build['jaxlib_version']})")
    print(f"copy bandwidth (XLA elementwise, read+write, 1 GiB): {bandwidth / 1e9:.0f} GB/s\n")
    print("| shape | puffadv.jax (µs) | lax.scan (µs) | speedup | puffadv GB/s | % of copy |")
    print("|---|---:|---:|---:|---:|---:|")
    failed = []
    for shape in shapes:
        rows, horizon = (int(n) for n in shape.split("x"))
        row_major, time_major = inputs(rows, horizon, rng, device)
        ffi_out = ffi_puff_advantage(*row_major)
        scan_out = scan_puff_advantage(*time_major)
        error = float(jnp.linalg.norm(ffi_out - scan_out.T) / jnp.maximum(jnp.linalg.norm(scan_out), 1e-30))
        if not error <= 1e-4:
            print(f"{shape}: puffadv.jax and lax.scan disagree (relative error {error:.2e})", file=sys.stderr)
            failed.append(shape)
        t_ffi = time_call(ffi_puff_advantage, row_major)
        t_scan = time_call(scan_puff_advantage, time_major, budget_s=2.0, max_repeats=50)
        speedup = t_scan / t_ffi
        rate = 20 * rows * horizon / t_ffi  # 4 inputs read + 1 output written, float32
        print(f"| {shape} | {t_ffi * 1e6:.0f} | {t_scan * 1e6:.0f} | {speedup:.1f}x | "
              f"{rate / 1e9:.0f} | {100 * rate / bandwidth:.1f} |", flush=True)
        if args.check_bar and shape in BAR_SHAPES and speedup < BAR_SHAPES[shape]:
            failed.append(f"{shape} ({speedup:.1f}x < {BAR_SHAPES[shape]:.0f}x)")
    if failed:
        print(f"\nFAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    if args.check_bar:
        print(f"\nbar met: >= 20x lax.scan at {' and '.join(BAR_SHAPES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
