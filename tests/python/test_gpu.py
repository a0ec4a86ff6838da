"""The GPU backend beyond what every framework gets in test_puff.py: each kernel
layout (whole rows, split rows, strided) against the float64 reference, the
caller's stream, a second device, CUDA graph capture, no launch for empty
inputs, misaligned views, 64-bit offsets, the C++ entry point, and backend().
The estimator family's kernels: test_gpu_family.py."""
from __future__ import annotations

import ctypes
import glob
import os
from pathlib import Path

import numpy as np
import pytest

import puffadv
import reference
from reference import TOLERANCE, random_puff_inputs, relative_error

try:
    import torch
    HAS_TORCH_CUDA = torch.cuda.is_available()
except ImportError:
    torch = None
    HAS_TORCH_CUDA = False

REPORT = puffadv.backend()
CUDA_BUILT = bool(REPORT["cuda"]["compiled"])
needs_gpu = pytest.mark.skipif(not (HAS_TORCH_CUDA and CUDA_BUILT and REPORT["cuda"]["device_count"] > 0),
                               reason="needs torch with CUDA and a CUDA build of puffadv with a device")
# compute-sanitizer makes the multi-gigabyte cases take minutes; scripts/gpu sets this.
UNDER_SANITIZER = os.environ.get("PUFFADV_UNDER_SANITIZER") == "1"

PARAMS = dict(gamma=0.99, gae_lambda=0.95, rho_clip=5.0, c_clip=1.0)
# Carries that survive ~1000s of steps: they must cross rounds, blocks and segments.
LONG_MEMORY = dict(gamma=0.999, gae_lambda=1.0, rho_clip=1.0, c_clip=1.0)

# Shapes that reach each layout of src/gpu/launch.cuh (round = 1024 steps):
# Row groups (scan_row_groups.cuh: aligned rows of up to 8 warp rounds): (7, 4)
# one lane a row, (33, 36) 16 lanes for 9 steps' worth (the last warp half
# real rows), (50, 1000) and (129, 520) several rounds, the first partial.
WHOLE_ROWS = [(1, 1), (3, 2), (5, 3), (7, 4), (1000, 8), (33, 36), (333, 91), (64, 128), (9, 1023),
              (4, 1024), (50, 1000), (129, 520), (3, 1025), (10, 4096), (20000, 64), (20000, 63),
              (1500, 5000), (4300, 4100)]
SPLIT_ROWS = [(2, 6000), (3, 50001), (64, 16384), (8, 131072), (1, 300007)]


def reference_for(inputs, **params):
    """Float64 reference; the step-vectorised form for long rows."""
    if inputs[0].shape[0] * inputs[0].shape[1] <= 200_000:
        return reference.puff_advantage(*inputs, **params)
    return reference.puff_advantage_by_step(*inputs, **params)


def on_gpu(arrays, device="cuda"):
    return [torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in arrays]


def run_cuda(inputs, dtype, device="cuda", **params):
    """Computes on `device` into a NaN-poisoned output; returns NumPy."""
    arrays = on_gpu(inputs, device)
    out = torch.full(arrays[0].shape, float("nan"), dtype=arrays[0].dtype, device=device)
    puffadv.compute_puff_advantage(*arrays, out, **params)
    torch.cuda.synchronize(device)
    return out.cpu().numpy()


def test_backend_report_says_what_this_machine_has():
    text = str(REPORT)
    if not CUDA_BUILT:
        assert "not compiled" in text
        return
    assert "cuda" in REPORT["compiled"]
    assert REPORT["gpu_architectures"]
    if REPORT["cuda"]["device_count"] == 0:
        assert "cuda" not in REPORT["usable"]
        assert "no device" in text and REPORT["cuda"]["error"]
    else:
        assert "cuda" in REPORT["usable"]
        assert len(REPORT["cuda"]["device_names"]) == REPORT["cuda"]["device_count"]
        assert REPORT["cuda"]["runtime_version"] >= 12000


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", WHOLE_ROWS + SPLIT_ROWS)
def test_every_layout_matches_reference(rng, shape, dtype):
    inputs = random_puff_inputs(rng, *shape, dtype)
    out = run_cuda(inputs, dtype, **PARAMS)
    assert np.isfinite(out).all()
    assert (out[:, -1] == 0).all()
    assert relative_error(out, reference_for(inputs, **PARAMS)) <= TOLERANCE[np.dtype(dtype)]


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(16, 3000), (4, 4096), (5, 9000), (2, 65536), (1, 300007)])
def test_long_memory_carries_cross_blocks(rng, shape, dtype):
    values, rewards, dones, _ = random_puff_inputs(rng, *shape, dtype, done_rate=0.0005)
    inputs = (values, rewards, dones, np.ones_like(values))
    out = run_cuda(inputs, dtype, **LONG_MEMORY)
    ref = reference_for(inputs, **LONG_MEMORY)
    assert relative_error(out, ref) <= {np.float32: 2e-5, np.float64: 1e-11}[dtype]


def _views(kind, rows, horizon, dtype):
    """An uninitialised [rows, horizon] CUDA view of the given kind."""
    t = getattr(torch, np.dtype(dtype).name)
    if kind == "offset-base":  # dense rows, but not 16-byte aligned
        return torch.empty(rows * horizon + 1, dtype=t, device="cuda")[1:].view(rows, horizon)
    if kind == "padded-rows":  # row stride not a multiple of 4
        return torch.empty(rows, horizon + 3, dtype=t, device="cuda")[:, :horizon]
    if kind == "time-major":  # [horizon, rows] memory seen as [rows, horizon]
        return torch.empty(horizon, rows, dtype=t, device="cuda").t()
    if kind == "every-other-step":
        return torch.empty(rows, 2 * horizon, dtype=t, device="cuda")[:, ::2]
    raise ValueError(kind)


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["offset-base", "padded-rows", "time-major", "every-other-step"])
@pytest.mark.parametrize("shape", [(300, 64), (37, 91), (3, 7000)])
def test_unaligned_and_strided_views(rng, kind, shape, dtype):
    inputs = random_puff_inputs(rng, *shape, dtype)
    arrays = []
    for a in inputs:
        view = _views(kind, *shape, dtype)
        view.copy_(torch.from_numpy(a))
        arrays.append(view)
    out = _views(kind, *shape, dtype).fill_(float("nan"))
    puffadv.compute_puff_advantage(*arrays, out, **PARAMS)
    torch.cuda.synchronize()
    assert relative_error(out.cpu().numpy(), reference_for(inputs, **PARAMS)) <= TOLERANCE[np.dtype(dtype)]


def _poisoned_then_filled(stream, sources, shape):
    """Inputs that hold NaN until `stream`, after a long sleep, copies the real data in."""
    arrays = [torch.full(shape, float("nan"), device="cuda") for _ in sources]
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)  # ~25 ms: anything not ordered after it reads NaN
        for a, s in zip(arrays, sources):
            a.copy_(s, non_blocking=True)
    return arrays


@needs_gpu
@pytest.mark.parametrize("shape", [(256, 128), (4, 20000)])
def test_runs_on_the_current_torch_stream(rng, shape):
    inputs = random_puff_inputs(rng, *shape)
    sources = on_gpu(inputs)
    side = torch.cuda.Stream()  # non-blocking: no implicit order with the legacy stream
    arrays = _poisoned_then_filled(side, sources, shape)
    with torch.cuda.stream(side):
        out = torch.empty(shape, device="cuda")
        puffadv.compute_puff_advantage(*arrays, out, **PARAMS)
        # No host synchronisation. (Under compute-sanitizer initcheck launches complete
        # before they return, so the stream is idle by now whatever puffadv does.)
        assert UNDER_SANITIZER or not side.query(), "the call waited for the stream"
    side.synchronize()
    assert relative_error(out.cpu().numpy(), reference_for(inputs, **PARAMS)) <= 1e-5


@needs_gpu
def test_explicit_stream_argument(rng):
    inputs = random_puff_inputs(rng, 64, 300)
    sources = on_gpu(inputs)
    side = torch.cuda.Stream()
    arrays = _poisoned_then_filled(side, sources, (64, 300))
    out = torch.empty((64, 300), device="cuda")
    puffadv.compute_puff_advantage(*arrays, out, stream=side, **PARAMS)  # current stream is the default
    side.synchronize()
    assert relative_error(out.cpu().numpy(), reference_for(inputs, **PARAMS)) <= 1e-5


@needs_gpu
def test_cupy_arrays_on_a_cupy_stream(rng):
    cupy = pytest.importorskip("cupy")
    inputs = random_puff_inputs(rng, 128, 333)
    spin = cupy.RawKernel(r'''extern "C" __global__ void spin(long long cycles) {
        long long start = clock64(); while (clock64() - start < cycles) {} }''', "spin")
    sources = [cupy.asarray(a) for a in inputs]
    arrays = [cupy.full(inputs[0].shape, cupy.nan, dtype=cupy.float32) for _ in inputs]
    out = cupy.empty(inputs[0].shape, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:  # the real data arrives only after the spin, on this stream
        spin((1,), (1,), (np.int64(50_000_000),))
        for a, source in zip(arrays, sources):
            cupy.copyto(a, source)
        puffadv.compute_puff_advantage(*arrays, out, **PARAMS)
    stream.synchronize()
    assert relative_error(out.get(), reference_for(inputs, **PARAMS)) <= 1e-5


@needs_gpu
@pytest.mark.skipif(not HAS_TORCH_CUDA or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_second_device_and_current_device_kept(rng):
    inputs = random_puff_inputs(rng, 100, 200)
    torch.cuda.set_device(0)
    out = run_cuda(inputs, np.float32, device="cuda:1", **PARAMS)
    assert torch.cuda.current_device() == 0
    assert relative_error(out, reference_for(inputs, **PARAMS)) <= 1e-5


@needs_gpu
@pytest.mark.skipif(not HAS_TORCH_CUDA or torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("shape", [(64, 512), (2, 40000)])  # whole rows; split rows (three launches)
def test_second_device_conventions_and_reduced_precision(rng, shape):
    """The storage-typed and generic kernels, on cuda:1 while cuda:0 is current, equal the CPU's."""
    torch.cuda.set_device(0)
    v, r, d, i = random_puff_inputs(rng, *shape)
    on = lambda x, device, dtype=torch.float32: torch.from_numpy(x).to(dtype).to(device)
    results = {}
    for device in ("cpu", "cuda:1"):
        gae = puffadv.gae(on(r, device), on(v, device), on(d, device) > 0.5, last_value=on(v[:, 0].copy(), device), time_axis=-1)
        bf16 = puffadv.compute_puff_advantage(*(on(x, device, torch.bfloat16) for x in (v, r, d, i)), **PARAMS)
        sliced = puffadv.gae(on(r, device)[:, 1:], on(v, device)[:, 1:], on(d, device)[:, 1:] > 0.5,
                             last_value=on(v[:, 0].copy(), device), time_axis=-1)  # unaligned: the generic kernel
        results[device] = [gae.advantages, gae.returns, bf16, sliced.advantages]
    assert torch.cuda.current_device() == 0
    for cpu, gpu in zip(results["cpu"], results["cuda:1"]):
        assert gpu.device == torch.device("cuda:1")
        assert relative_error(gpu.cpu().double().numpy(), cpu.double().numpy()) <= 1e-5


@needs_gpu
def test_current_device_is_restored(rng):
    before = torch.cuda.current_device()
    run_cuda(random_puff_inputs(rng, 8, 8), np.float32, device=f"cuda:{before}", **PARAMS)
    assert torch.cuda.current_device() == before


def _puffadv_kernels_launched(call):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if "puffadv" in e.name]


@needs_gpu
@pytest.mark.skipif(UNDER_SANITIZER, reason="the profiler and the sanitizer both want CUPTI")
def test_empty_inputs_launch_nothing():
    def call(rows, horizon):
        arrays = [torch.ones(rows, horizon, device="cuda") for _ in range(5)]
        return lambda: puffadv.compute_puff_advantage(*arrays[:4], arrays[4])
    assert _puffadv_kernels_launched(call(4, 16)), "the control call shows no kernel: the check is blind"
    assert _puffadv_kernels_launched(call(0, 16)) == []
    assert _puffadv_kernels_launched(call(16, 0)) == []


@needs_gpu
@pytest.mark.parametrize("shape", [(512, 64), (4, 20000)])
def test_cuda_graph_capture_and_replay(rng, shape):
    static = [torch.zeros(shape, device="cuda") for _ in range(4)]
    out = torch.full(shape, float("nan"), device="cuda")
    puffadv.compute_puff_advantage(*static, out, **PARAMS)  # warm-up outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        puffadv.compute_puff_advantage(*static, out, **PARAMS)
    for _ in range(2):  # fresh data each replay
        inputs = random_puff_inputs(rng, *shape)
        for s, a in zip(static, inputs):
            s.copy_(torch.from_numpy(a))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert relative_error(out.cpu().numpy(), reference_for(inputs, **PARAMS)) <= 1e-5


def _core_library():
    found = sorted(glob.glob(str(Path(puffadv.__file__).parent / "lib" / "libpuffadv.so*")))
    if not found:
        pytest.skip("libpuffadv.so not found beside the package")
    return ctypes.CDLL(found[0])


@needs_gpu
def test_cpp_entry_point_compute_puff_advantage_cuda(rng):
    """puffadv::compute_puff_advantage_cuda(const float*..., rows, horizon, ..., stream)."""
    fn = _core_library()._ZN7puffadv27compute_puff_advantage_cudaEPKfS1_S1_S1_PfllffffPv
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 2 + [ctypes.c_float] * 4 + [ctypes.c_void_p]
    inputs = random_puff_inputs(rng, 70, 130)
    arrays = on_gpu(inputs)
    out = torch.full((70, 130), float("nan"), device="cuda")
    stream = torch.cuda.current_stream()
    fn(*[a.data_ptr() for a in arrays], out.data_ptr(), 70, 130, 0.99, 0.95, 5.0, 1.0, stream.cuda_stream)
    stream.synchronize()
    assert relative_error(out.cpu().numpy(), reference_for(inputs, **PARAMS)) <= 1e-5


def _check_windows(arrays, out, windows):
    """Compares out[row, a:b] with the reference on that window: dones at rate 0.1
    make A_t depend on at most a few dozen later steps, so 512 more suffice."""
    horizon = out.shape[1]
    for row, a, b in windows:
        end = min(horizon, b + 512)
        part = [x[row:row + 1, a:end].double().cpu().numpy() for x in arrays]
        ref = reference.puff_advantage_by_step(*part, **PARAMS)[:, :b - a]
        got = out[row:row + 1, a:b].cpu().numpy()
        assert relative_error(got, ref) <= 1e-5, (row, a, b)


@needs_gpu
@pytest.mark.skipif(UNDER_SANITIZER, reason="43 GB under the sanitizer takes too long")
@pytest.mark.parametrize("shape", [(2**21 + 3, 1024), (2, 2**30 + 8)])
def test_more_than_2_31_elements(shape):
    rows, horizon = shape
    if torch.cuda.mem_get_info()[0] < 5 * rows * horizon * 4 + (8 << 30):
        pytest.skip("not enough free GPU memory for five arrays of 2^31 floats")
    g = torch.Generator(device="cuda").manual_seed(1234)
    values = torch.randn(shape, device="cuda", generator=g)
    rewards = torch.randn(shape, device="cuda", generator=g)
    dones = (torch.rand(shape, device="cuda", generator=g) < 0.1).float()
    importance = torch.rand(shape, device="cuda", generator=g) * 3
    out = torch.full(shape, float("nan"), device="cuda")
    arrays = (values, rewards, dones, importance)
    puffadv.compute_puff_advantage(*arrays, out, **PARAMS)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any()
    if rows > 2:  # whole rows; row 2^21 starts at element 2^31
        mid = 2**31 // horizon
        windows = [(r, 0, horizon) for r in (0, mid - 1, mid, mid + 1, rows - 1)]
    else:  # split rows; element 2^31 is near the end of row 1
        windows = [(r, a, a + 4096) for r in range(rows)
                   for a in (0, 2**29, 2**31 - horizon - 2048, horizon - 4096)]
    _check_windows(arrays, out, windows)
    del values, rewards, dones, importance, out
    torch.cuda.empty_cache()
