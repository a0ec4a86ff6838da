"""puffadv.jax on several devices of one host: jax.jit over row-sharded inputs.

The same global float32 batch of devices x rows_per_device rows is computed on
one device, then sharded over rows (NamedSharding, PartitionSpec("rows", None))
on `devices` devices. Checked on the way: the sharded program has no collective
in its compiled HLO, its output is sharded like the inputs, and it equals the
one-device result. Each call is timed by itself with block_until_ready (median
of repeats, bench_jax.time_call). Prints a markdown table.

    python benchmarks/bench_jax_sharding.py --platform gpu --devices 2               # 2 x 262144 x 128
    python benchmarks/bench_jax_sharding.py --platform cpu --devices 2 --rows-per-device 4096
The CPU form forces host devices (XLA_FLAGS): a dry run of the same code path;
host "devices" share the machine's cores, so its times say nothing of scaling.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

COLLECTIVE = re.compile(r"\b(all-gather|all-to-all|collective-permute|all-reduce|reduce-scatter)"
                        r"(-start)?(\.\d+)? = ")
PARAMS = dict(gamma=0.99, gae_lambda=0.95, rho_clip=1.0, c_clip=1.0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--rows-per-device", type=int, default=262144)
    parser.add_argument("--horizon", type=int, default=128)
    args = parser.parse_args(argv)
    if args.platform == "cpu":  # before jax starts: XLA reads it once
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={args.devices}").strip()

    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    import puffadv.jax as pjax
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_jax import time_call

    devices = jax.devices(args.platform)
    if len(devices) < args.devices:
        print(f"needs {args.devices} {args.platform} devices, found {len(devices)}", file=sys.stderr)
        return 1
    devices = devices[:args.devices]
    rows, horizon = args.devices * args.rows_per_device, args.horizon
    rng = np.random.default_rng(0)
    host = [rng.standard_normal((rows, horizon), dtype=np.float32),
            rng.standard_normal((rows, horizon), dtype=np.float32),
            (rng.random((rows, horizon), dtype=np.float32) < 0.05).astype(np.float32),
            rng.uniform(0.5, 1.5, (rows, horizon)).astype(np.float32)]
    call = jax.jit(lambda *a: pjax.compute_puff_advantage(*a, **PARAMS))
    print(f"{devices[0].device_kind} ({args.platform}), jax {jax.__version__}; global batch "
          f"{rows}x{horizon} float32 ({args.devices} x {args.rows_per_device} rows)\n")
    print("| devices | sharding | µs per call | GB/s (all devices) | speedup |")
    print("|---:|---|---:|---:|---:|")

    single = [jax.device_put(a, devices[0]) for a in host]
    expected = np.asarray(call(*single))
    t_one = time_call(call, single)
    rate = 20 * rows * horizon  # 4 inputs read + 1 output written, float32
    print(f"| 1 | none | {t_one * 1e6:.0f} | {rate / t_one / 1e9:.0f} | 1.00x |", flush=True)
    del single

    mesh = Mesh(np.array(devices), ("rows",))
    sharding = NamedSharding(mesh, PartitionSpec("rows", None))
    sharded = [jax.device_put(a, sharding) for a in host]
    problems = []
    hlo = call.lower(*sharded).compile().as_text()
    found = sorted({m.group(1) for m in COLLECTIVE.finditer(hlo)})
    if found:
        problems.append(f"collectives in the sharded program: {found}")
    out = call(*sharded)
    if not out.sharding.is_equivalent_to(sharding, out.ndim):
        problems.append(f"output sharding {out.sharding} is not the inputs' {sharding}")
    got = np.asarray(out)
    error = float(np.linalg.norm(got - expected) / max(np.linalg.norm(expected), 1e-30))
    if not error <= 1e-6:  # same kernels, rows planned over other block counts: equal or nearly
        problems.append(f"the sharded result differs from the one-device result (relative {error:.1e})")
    t_many = time_call(call, sharded)
    print(f"| {args.devices} | rows over {args.devices} | {t_many * 1e6:.0f} | {rate / t_many / 1e9:.0f} | "
          f"{t_one / t_many:.2f}x |")
    print("\nsharded program: no collective, output sharded like the inputs, equal to one device"
          if not problems else "\nFAILED: " + "; ".join(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
