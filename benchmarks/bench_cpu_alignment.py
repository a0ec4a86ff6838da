"""CPU benchmark (not a test): GAE and TD(lambda) with returns and advantages on one
thread, [B, T] float32 arrays at chosen offsets from a 4 KiB boundary.

NumPy maps every large array at the same offset from a page (16 bytes here), so
the three inputs and two outputs of a call usually share their low 12 address
bits. On the 2-core AMD EPYC of 2026-12-02 (family 25, model 17: Zen 4) that case
ran 3-4x slower than the same call with any one array moved by 64 bytes. This
script measures it:

    python benchmarks/bench_cpu_alignment.py [--rows 65536] [--horizon 128] [--repeats 7]

Each line: the offsets in floats of rewards, values, terminated, advantages,
returns from a fresh allocation, and the best time of each call.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

import puffadv

OFFSETS = [(0, 0, 0, 0, 0), (0, 0, 0, 16, 16), (0, 0, 0, 0, 16), (0, 16, 32, 48, 64), (0, 0, 0, 256, 256)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=65536)
    p.add_argument("--horizon", type=int, default=128)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    rows, horizon = args.rows, args.horizon
    rng = np.random.default_rng(0)

    def at(offset, fill):
        a = np.empty(rows * horizon + 1024, np.float32)[offset:offset + rows * horizon].reshape(rows, horizon)
        a[...] = fill
        return a

    def best(call):
        call()
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            call()
            times.append(time.perf_counter() - t)
        return 1e3 * min(times)

    rewards = rng.standard_normal((rows, horizon), dtype=np.float32)
    values = rng.standard_normal((rows, horizon), dtype=np.float32)
    terminated = (rng.random((rows, horizon)) < 0.02).astype(np.float32)
    last = rng.standard_normal(rows, dtype=np.float32)
    print(f"{rows}x{horizon} float32, one thread (PUFFADV_NUM_THREADS={os.environ.get('PUFFADV_NUM_THREADS')}); "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    ones = at(0, 1.0)
    print("offsets (floats) r v term adv ret | low 12 bits of each | gae ms | td_lambda (+advantages) ms | "
          "gae, advantages only | puff advantage (ratio at offset 0)")
    for offsets in OFFSETS:
        r, v, d, adv, ret = (at(k, x) for k, x in zip(offsets, (rewards, values, terminated, 0, 0)))
        low = [a.ctypes.data % 4096 for a in (r, v, d, adv, ret)]
        gae = best(lambda: puffadv.gae(r, v, d, last_value=last, advantages=adv, returns=ret, time_axis=-1))
        td = best(lambda: puffadv.td_lambda_returns(r, v, d, last_value=last, returns=ret, advantages=adv, time_axis=-1))
        adv_only = best(lambda: puffadv.gae(r, v, d, last_value=last, advantages=adv, returns=False, time_axis=-1))
        puff = best(lambda: puffadv.compute_puff_advantage(v, r, d, ones, adv, gamma=0.99, gae_lambda=0.95,
                                                           rho_clip=1.0, c_clip=1.0))
        print(f"{offsets} | {low} | {gae:.2f} | {td:.2f} | {adv_only:.2f} | {puff:.2f}", flush=True)


if __name__ == "__main__":
    main()
