"""Benchmark (not a test): torch.ops.puffadv.compute_puff_advantage against
PufferLib 3.0.0's own kernel (torch.ops.pufferlib.compute_puff_advantage),
float32, contiguous, in one process, on the CPU or on CUDA.

PufferLib's kernel is built from its sdist as its setup.py builds it: the CPU
kernel from pufferlib/extensions/pufferlib.cpp with -O3; with --device cuda also
pufferlib/extensions/cuda/pufferlib.cu (nvcc -O3), which is what setup.py adds
whenever nvcc is on PATH. Needs torch's cpp_extension toolchain (a C++
compiler, ninja, nvcc for CUDA) and PufferLib 3.0.0's unpacked sdist, e.g. the
one scripts/test.d/55-pufferlib.sh fetches into build/pufferlib; or --extension,
that kernel already built (a library registering torch.ops.pufferlib).

CPU: best / median wall time of >= 0.3 s of calls. CUDA: both kernels run on
the same (current) stream; "per call" is CUDA-event time over a burst of
back-to-back calls divided by their number (the throughput a training loop
sees, launch and dispatch included); "kernel" is the device time of the
kernels alone, from the profiler (CUPTI). Results are compared before timing.

    python benchmarks/bench_pufferlib.py [--sdist build/pufferlib/pufferlib-3.0.0]
    python benchmarks/bench_pufferlib.py --device cuda [--extension _C.so] [--shapes 32x64,...]

--compat (CUDA, no PufferLib kernel loaded): what PufferLib's trainer pays where
puffadv serves it, torch.ops.pufferlib.compute_puff_advantage registered by
puffadv.pufferlib_compat, against torch.ops.puffadv called directly.
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


def load_pufferlib_kernel(sdist: Path | None, device: str, extension: Path | None = None):
    if extension is not None:
        torch.ops.load_library(str(extension))
    else:
        sources = [sdist / "pufferlib" / "extensions" / "pufferlib.cpp"]
        if device == "cuda":
            sources.append(sdist / "pufferlib" / "extensions" / "cuda" / "pufferlib.cu")
        cpp_extension.load(name="pufferlib_C", sources=[str(s) for s in sources],
                           extra_cflags=["-O3"], extra_cuda_cflags=["-O3"],
                           build_directory=tempfile.mkdtemp(), is_python_module=False)
    if device == "cuda" and not torch._C._dispatch_has_kernel_for_dispatch_key(
            "pufferlib::compute_puff_advantage", "CUDA"):
        raise SystemExit("PufferLib's extension has no CUDA kernel (built without its .cu file?)")
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
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--extension", type=Path, default=None,
                        help="PufferLib's kernel already built (instead of building it from --sdist)")
    parser.add_argument("--shapes", default=None,
                        help="rows x horizon list, e.g. 32x64,2048x64 (default: " +
                             ",".join(f"{r}x{h}" for r, h in SHAPES) + ")")
    parser.add_argument("--compat", action="store_true",
                        help="CUDA: time torch.ops.pufferlib as puffadv.pufferlib_compat serves it")
    args = parser.parse_args()
    shapes = SHAPES if args.shapes is None else [
        tuple(int(n) for n in shape.split("x")) for shape in args.shapes.split(",")]
    if args.compat:
        compat_main(shapes)
        return
    theirs = load_pufferlib_kernel(args.sdist.resolve(), args.device, args.extension)
    ours = torch.ops.puffadv.compute_puff_advantage
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} torch threads, "
          f"puffadv {puffadv.__version__}, python {sys.version.split()[0]}")
    if args.device == "cuda":
        cuda_main(theirs, ours, shapes)
        return
    print("| rows x horizon | PufferLib us (best / median) | puffadv us (best / median) "
          "| speed-up (best / median) | max abs diff |")
    print("|---|---:|---:|---:|---:|")
    generator = torch.Generator().manual_seed(0)
    for rows, horizon in shapes:
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


def strided_check(theirs, ours, generator, rows=64, horizon=32, device="cpu"):
    """Every other column of a wider buffer (`x[:, ::2]`): each kernel against float64."""
    wide = [torch.randn(rows, 2 * horizon, generator=generator) for _ in range(2)]
    wide.append((torch.rand(rows, 2 * horizon, generator=generator) < 0.05).float())
    wide.append(torch.rand(rows, 2 * horizon, generator=generator) * 2)
    reference = reference_puff_advantage(*(t[:, ::2].numpy() for t in wide), *PARAMS)
    # Sliced on the device: .to() of a strided view would copy it into a packed tensor.
    inputs = [t.to(device)[:, ::2] for t in wide]
    assert all(not t.is_contiguous() for t in inputs)
    for name, kernel in (("PufferLib", theirs), ("puffadv", ours)):
        out = torch.zeros(rows, horizon, device=device)
        kernel(*inputs, out, *PARAMS)
        error = float(np.abs(out.cpu().numpy() - reference).max())
        print(f"{name}: x[:, ::2] inputs, {rows}x{horizon} ({device}): "
              f"max abs error vs float64 {error:.2e}")


def cuda_inputs(rows, horizon, generator):
    values, rewards = (torch.randn(rows, horizon, generator=generator) for _ in range(2))
    dones = (torch.rand(rows, horizon, generator=generator) < 0.05).float()
    ratio = torch.rand(rows, horizon, generator=generator) * 2
    return [t.cuda() for t in (values, rewards, dones, ratio)]


def event_time(fn, calls):
    """Seconds per call: CUDA events around `calls` back-to-back calls, best and median of 7."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(7):
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return min(times), float(np.median(times))


def kernel_time(fn, calls=50):
    """Seconds of device (kernel) time per call, from the profiler's CUDA events."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    device_us = [e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA]
    return sum(device_us) / 1e6 / calls if device_us else float("nan")  # nan: no CUPTI


def cuda_main(theirs, ours, shapes):
    print(f"GPU: {torch.cuda.get_device_name()}, torch CUDA {torch.version.cuda}")
    print("| rows x horizon | PufferLib per call us (best / median) | puffadv per call us "
          "(best / median) | speed-up | PufferLib kernel us | puffadv kernel us | speed-up "
          "| max abs diff | max abs error vs float64 (PufferLib / puffadv) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    generator = torch.Generator().manual_seed(0)
    for rows, horizon in shapes:
        inputs = cuda_inputs(rows, horizon, generator)
        out_theirs = torch.zeros(rows, horizon, device="cuda")
        out_ours = torch.full((rows, horizon), float("nan"), device="cuda")  # poisoned
        theirs(*inputs, out_theirs, *PARAMS)  # PufferLib leaves column H-1 as it was: zero
        ours(*inputs, out_ours, *PARAMS)
        torch.cuda.synchronize()
        diff = float((out_theirs - out_ours).abs().max())
        if rows * horizon <= 1 << 22:  # the float64 reference is a Python-level loop over time
            reference = reference_puff_advantage(*(t.cpu().double().numpy() for t in inputs), *PARAMS)
            errors = [float(np.abs(o.cpu().double().numpy() - reference).max())
                      for o in (out_theirs, out_ours)]
            error = f"{errors[0]:.1e} / {errors[1]:.1e}"
        else:
            error = "-"
        if not diff <= 1e-4 * max(1.0, float(out_ours.abs().max())):
            raise SystemExit(f"{rows}x{horizon}: the kernels disagree by {diff}")
        run_theirs = lambda: theirs(*inputs, out_theirs, *PARAMS)  # noqa: E731
        run_ours = lambda: ours(*inputs, out_ours, *PARAMS)  # noqa: E731
        run_theirs(), run_ours()
        single = event_time(run_theirs, 1)[1]  # sizes the burst: ~20 ms, 10 to 1000 calls
        calls = int(min(1000, max(10, 0.02 / max(single, 1e-7))))
        t_best, t_median = event_time(run_theirs, calls)
        o_best, o_median = event_time(run_ours, calls)
        t_kernel, o_kernel = kernel_time(run_theirs), kernel_time(run_ours)
        print(f"| {rows}x{horizon} | {t_best * 1e6:.1f} / {t_median * 1e6:.1f} "
              f"| {o_best * 1e6:.1f} / {o_median * 1e6:.1f} | {t_median / o_median:.1f}x "
              f"| {t_kernel * 1e6:.2f} | {o_kernel * 1e6:.2f} | {t_kernel / o_kernel:.1f}x "
              f"| {diff:.1e} | {error} |", flush=True)
    strided_check(theirs, ours, generator, device="cuda")
    graph_capture(theirs, ours)


def compat_main(shapes):
    import puffadv.pufferlib_compat as compat
    served = compat.kernel()
    if served["kernel"] != "puffadv":
        raise SystemExit(f"--compat: puffadv does not serve torch.ops.pufferlib here: {served}")
    via, direct = torch.ops.pufferlib.compute_puff_advantage, torch.ops.puffadv.compute_puff_advantage
    print("torch.ops.pufferlib.compute_puff_advantage served by puffadv.pufferlib_compat "
          "(PufferLib's trainer's path) against torch.ops.puffadv called directly; CUDA")
    print("| rows x horizon | via torch.ops.pufferlib us (best / median) "
          "| torch.ops.puffadv us (best / median) | results equal |")
    print("|---|---:|---:|---|")
    generator = torch.Generator().manual_seed(0)
    for rows, horizon in shapes:
        inputs = cuda_inputs(rows, horizon, generator)
        out_via = torch.full((rows, horizon), float("nan"), device="cuda")
        out_direct = torch.full((rows, horizon), float("nan"), device="cuda")
        run_via = lambda: via(*inputs, out_via, *PARAMS)  # noqa: E731
        run_direct = lambda: direct(*inputs, out_direct, *PARAMS)  # noqa: E731
        run_via(), run_direct()
        same = torch.equal(out_via, out_direct)
        calls = 1000 if rows * horizon <= 1 << 20 else 100
        v_best, v_median = event_time(run_via, calls)
        d_best, d_median = event_time(run_direct, calls)
        print(f"| {rows}x{horizon} | {v_best * 1e6:.1f} / {v_median * 1e6:.1f} "
              f"| {d_best * 1e6:.1f} / {d_median * 1e6:.1f} | {same} |", flush=True)


def graph_capture(theirs, ours, rows=2048, horizon=64):
    """Can each kernel be captured in a CUDA graph (torch.compile's reduce-overhead mode,
    torch.cuda.graphs)? Capture runs on a side stream, so a kernel must launch on
    torch's current stream to be captured. Last: a failed capture may upset later work."""
    inputs = cuda_inputs(rows, horizon, torch.Generator().manual_seed(1))
    for name, kernel in (("puffadv", ours), ("PufferLib", theirs)):
        out, expected = (torch.zeros(rows, horizon, device="cuda") for _ in range(2))
        kernel(*inputs, expected, *PARAMS)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                kernel(*inputs, out, *PARAMS)
            out.zero_()
            graph.replay()
            torch.cuda.synchronize()
            same = torch.equal(out, expected)
            print(f"{name}: captured in a CUDA graph; replay {'equals' if same else 'DIFFERS FROM'} "
                  "an eager call")
        except Exception as e:  # noqa: BLE001 - reported, it is the measurement
            print(f"{name}: CUDA graph capture failed: {type(e).__name__}: "
                  f"{' '.join(str(e).split())[:300]}")


if __name__ == "__main__":
    main()
