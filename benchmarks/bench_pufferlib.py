"""CPU benchmark (not a test): torch.ops.puffadv.compute_puff_advantage against
PufferLib 3.0.0's own CPU kernel (torch.ops.pufferlib.compute_puff_advantage,
built from its sdist's pufferlib/extensions/pufferlib.cpp with -O3, the flag
its setup.py passes), float32, contiguous, in one process. Needs torch's
cpp_extension toolchain (a C++ compiler, ninja) and PufferLib 3.0.0's unpacked
sdist, e.g. the one scripts/test.d/55-pufferlib.sh fetches into build/pufferlib.

    python benchmarks/bench_pufferlib.py [--sdist build/pufferlib/pufferlib-3.0.0]
"""
from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
import torch.utils.cpp_extension as cpp_extension

import puffadv
import puffadv.torch  # noqa: F401  torch.ops.puffadv

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from reference import puff_advantage as reference_puff_advantage  # noqa: E402

SHAPES = [(32, 64), (256, 64), (2048, 64), (1024, 256), (16384, 256), (65536, 128)]
PARAMS = (0.95, 0.90, 1.0, 1.0)  # puffer_pysquared's gamma and lambda, PufferLib's clips


def load_pufferlib_kernel(sdist: Path):
    source = sdist / "pufferlib" / "extensions" / "pufferlib.cpp"
    cpp_extension.load(name="pufferlib_C", sources=[str(source)], extra_cflags=["-O3"],
                       build_directory=tempfile.mkdtemp(), is_python_module=False)
    return torch.ops.pufferlib.compute_puff_advantage


def timed(fn, budget=0.3, least=5):
    """Best and median seconds per call over at least `least` calls and ~`budget` s."""
    fn()
    times, start = [], time.perf_counter()
    while len(times) < least or time.perf_counter() - start < budget:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), float(np.median(times))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sdist", type=Path, default=Path("build/pufferlib/pufferlib-3.0.0"))
    args = parser.parse_args()
    theirs = load_pufferlib_kernel(args.sdist.resolve())
    ours = torch.ops.puffadv.compute_puff_advantage
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} torch threads, "
          f"puffadv {puffadv.__version__}, python {sys.version.split()[0]}")
    print("| rows x horizon | PufferLib us (best / median) | puffadv us (best / median) "
          "| speed-up (best / median) | max abs diff |")
    print("|---|---:|---:|---:|---:|")
    generator = torch.Generator().manual_seed(0)
    for rows, horizon in SHAPES:
        values, rewards = (torch.randn(rows, horizon, generator=generator) for _ in range(2))
        dones = (torch.rand(rows, horizon, generator=generator) < 0.05).float()
        ratio = torch.rand(rows, horizon, generator=generator) * 2
        out_theirs, out_ours = torch.zeros(rows, horizon), torch.zeros(rows, horizon)
        t_best, t_median = timed(lambda: theirs(values, rewards, dones, ratio, out_theirs, *PARAMS))
        o_best, o_median = timed(lambda: ours(values, rewards, dones, ratio, out_ours, *PARAMS))
        diff = float((out_theirs - out_ours).abs().max())
        print(f"| {rows}x{horizon} | {t_best * 1e6:.1f} / {t_median * 1e6:.1f} "
              f"| {o_best * 1e6:.1f} / {o_median * 1e6:.1f} "
              f"| {t_best / o_best:.1f}x / {t_median / o_median:.1f}x | {diff:.1e} |")
    strided_check(theirs, ours, generator)


def strided_check(theirs, ours, generator, rows=64, horizon=32):
    """Every other column of a wider buffer (`x[:, ::2]`): each kernel against float64."""
    inputs = [torch.randn(rows, 2 * horizon, generator=generator)[:, ::2] for _ in range(2)]
    inputs.append((torch.rand(rows, 2 * horizon, generator=generator) < 0.05).float()[:, ::2])
    inputs.append((torch.rand(rows, 2 * horizon, generator=generator) * 2)[:, ::2])
    reference = reference_puff_advantage(*(t.numpy() for t in inputs), *PARAMS)
    for name, kernel in (("PufferLib", theirs), ("puffadv", ours)):
        out = torch.zeros(rows, horizon)
        kernel(*inputs, out, *PARAMS)
        error = float(np.abs(out.numpy() - reference).max())
        print(f"{name}: x[:, ::2] inputs, {rows}x{horizon}: max abs error vs float64 {error:.2e}")


if __name__ == "__main__":
    main()
