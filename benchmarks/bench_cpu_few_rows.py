"""Time-major calls of few environments on the CPU (issue 33): puffadv.gae (float32,
or --dtype float64) on NumPy arrays [T, B] (SB3's and CleanRL's layout) against the same call on the
batch-major copies [B, T], outputs given, best of ROUNDS x REPS calls. Each
time-major result is first checked against the batch-major one.

    python benchmarks/bench_cpu_few_rows.py [--shapes TxB,...] [--reps 200] [--rounds 5] [--dtype float64]

Time-major calls of fewer rows than a vector's lanes are walked interleaved (W / N
steps of every row per vector; where N does not divide W, 3, 5, 6 or 7 of float32's
8 lanes, the lanes' rows move from block to block), those of more rows up to
kMostFlatRows as one flat row, the rest across rows (src/cpu/engine_run.hpp). Run it
against an older build (PYTHONPATH) for a before column.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import puffadv

SHAPES = ("2048x1,2048x2,2048x3,2048x4,2048x5,2048x6,2048x7,2048x8,128x3,128x6,8192x3,8192x6,2048x12,2048x15,2048x16,2048x24,2048x32,2048x48,"
          "512x8,8192x8,8192x16,128x4096")


def best_us(call, reps: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(reps):
            call()
        best = min(best, (time.perf_counter() - start) / reps)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default=SHAPES, help="comma-separated TxB")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    args = parser.parse_args()
    dtype = np.dtype(args.dtype)
    rng = np.random.default_rng(0)
    print("| T x B | time-major us | batch-major us | time / batch |\n|---|---:|---:|---:|")
    for shape in args.shapes.split(","):
        horizon, rows = (int(x) for x in shape.split("x"))
        r, v = (rng.standard_normal((horizon, rows)).astype(dtype) for _ in range(2))
        done = rng.random((horizon, rows)) < 0.02
        done[0] = done[-1] = True  # episode ends at the first and last steps
        last = rng.standard_normal(rows).astype(dtype)
        out, out_b = np.empty((horizon, rows), dtype), np.empty((rows, horizon), dtype)
        r_b, v_b, done_b = (np.ascontiguousarray(x.T) for x in (r, v, done))

        def time_major():
            puffadv.gae(r, v, done, last_value=last, advantages=out, returns=False, time_axis=0)

        def batch_major():
            puffadv.gae(r_b, v_b, done_b, last_value=last, advantages=out_b, returns=False, time_axis=-1)

        out.fill(np.nan), out_b.fill(np.nan)
        time_major(), batch_major()
        error = np.linalg.norm(out.T - out_b) / np.linalg.norm(out_b)
        if not error <= 1e-5:
            raise SystemExit(f"{shape}: time-major and batch-major differ (relative error {error:.2e})")
        time_us, batch_us = best_us(time_major, args.reps, args.rounds), best_us(batch_major, args.reps, args.rounds)
        print(f"| {shape} | {time_us:.1f} | {batch_us:.1f} | {time_us / batch_us:.2f} |", flush=True)


if __name__ == "__main__":
    main()
