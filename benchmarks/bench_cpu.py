"""CPU benchmark (not a test): GB/s of the puff advantage at 65536x128 float32,
counting 20 bytes per element (4 inputs read + 1 output written), beside a naive
row loop (PufferLib 3's, -O3) and a multi-threaded memcpy, all in one run.

    python benchmarks/bench_cpu.py [--rows 65536] [--horizon 128] [--repeats 15]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

import puffadv

HERE = Path(__file__).resolve().parent


def build_baselines():
    """Compiles cpu_baselines.c with the same optimisation a release build gets."""
    lib = Path(tempfile.mkdtemp()) / "libpuff_cpu_baselines.so"
    subprocess.run([os.environ.get("CC", "cc"), "-O3", "-fopenmp", "-shared", "-fPIC",
                    str(HERE / "cpu_baselines.c"), "-o", str(lib), "-lm"], check=True)
    so = ctypes.CDLL(str(lib))
    ptr, i64, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    so.naive_puff_advantage.argtypes = [ptr] * 5 + [i64, i64] + [f32] * 4
    so.parallel_memcpy.argtypes = [ptr, ptr, i64, ctypes.c_int]
    return so


def best_seconds(fn, repeats):
    fn()  # warm-up: page faults, thread pool start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), float(np.median(times))


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=65536)
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    rows, horizon = args.rows, args.horizon
    threads = os.cpu_count() or 1

    rng = np.random.default_rng(0)
    values, rewards = (rng.standard_normal((rows, horizon), np.float32) for _ in range(2))
    dones = (rng.random((rows, horizon)) < 0.05).astype(np.float32)
    importance = rng.uniform(0.5, 1.5, (rows, horizon)).astype(np.float32)
    out = np.empty_like(values)
    naive_out = np.empty_like(values)
    params = (0.99, 0.95, 5.0, 1.0)
    kernel_bytes = 20 * rows * horizon

    so = build_baselines()
    src = np.ones(kernel_bytes // 2, np.uint8)  # copy moves read + write = kernel_bytes
    dst = np.empty_like(src)

    def puffadv_with(n):
        def run():
            os.environ["PUFFADV_NUM_THREADS"] = str(n)
            puffadv.compute_puff_advantage(values, rewards, dones, importance, out, *params)
        return run

    def naive():
        so.naive_puff_advantage(values.ctypes.data, rewards.ctypes.data, dones.ctypes.data,
                                importance.ctypes.data, naive_out.ctypes.data, rows, horizon, *params)

    def memcpy_with(n):
        return lambda: so.parallel_memcpy(dst.ctypes.data, src.ctypes.data, src.nbytes, n)

    rows_out = []
    for label, fn in [("memcpy, 1 thread", memcpy_with(1)), (f"memcpy, {threads} threads", memcpy_with(threads)),
                      ("naive row loop (PufferLib 3 CPU), 1 thread", naive),
                      ("puffadv, 1 thread", puffadv_with(1)), (f"puffadv, {threads} threads", puffadv_with(threads))]:
        best, median = best_seconds(fn, args.repeats)
        rows_out.append((label, best, median, kernel_bytes / best / 1e9))
    os.environ.pop("PUFFADV_NUM_THREADS", None)

    err = np.linalg.norm(out.astype(np.float64) - naive_out) / np.linalg.norm(naive_out.astype(np.float64))
    gbps = {label: g for label, _, _, g in rows_out}
    naive_gbps = gbps["naive row loop (PufferLib 3 CPU), 1 thread"]
    copy_gbps = gbps[f"memcpy, {threads} threads"]

    print(f"# CPU benchmark, {rows}x{horizon} float32, {kernel_bytes / 1e6:.0f} MB moved per call")
    print(f"Machine: {cpu_name()}, {threads} cores; {platform.system()} {platform.release()}; "
          f"puffadv {puffadv.__version__}; {date.today().isoformat()}")
    print(f"puffadv vs naive loop: relative difference {err:.1e}\n")
    print("| kernel | best ms | median ms | GB/s | vs naive | vs memcpy (all threads) |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, best, median, g in rows_out:
        print(f"| {label} | {best * 1e3:.2f} | {median * 1e3:.2f} | {g:.2f} | "
              f"{g / naive_gbps:.2f}x | {g / copy_gbps:.2f} |")
    one, all_ = gbps["puffadv, 1 thread"], gbps[f"puffadv, {threads} threads"]
    print(f"\nBars: 1 thread >= 3x naive: {one / naive_gbps:.2f}x "
          f"({'met' if one >= 3 * naive_gbps else 'MISSED'}); all threads >= 0.6x memcpy: "
          f"{all_ / copy_gbps:.2f} ({'met' if all_ >= 0.6 * copy_gbps else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
