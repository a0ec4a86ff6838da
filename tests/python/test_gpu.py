"""The GPU backend beyond what every framework gets in test_puff.py: each kernel
layout (whole rows, split rows, strided) against the float64 reference, the
caller's stream, a second device, CUDA graph capture, no launch for empty
inputs, misaligned views, 64-bit offsets, the C++ entry point, and backend()."""
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

# Shapes that reach each layout of src/kernels/launch.cuh (round = 1024 steps):
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
        gae = puffadv.gae(on(r, device), on(v, device), on(d, device) > 0.5, last_value=on(v[:, 0].copy(), device))
        bf16 = puffadv.compute_puff_advantage(*(on(x, device, torch.bfloat16) for x in (v, r, d, i)), **PARAMS)
        sliced = puffadv.gae(on(r, device)[:, 1:], on(v, device)[:, 1:], on(d, device)[:, 1:] > 0.5,
                             last_value=on(v[:, 0].copy(), device))  # unaligned: the generic kernel
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


# ---- the estimator family (issue 20): every kernel layout against the CPU backend ----
# (tests/python/test_family.py compares every target, CUDA too, with the float64
# references on small shapes; here the shapes reach each GPU layout: whole rows,
# split rows (three launches, reversed carries for the episodic sums), strided and
# unaligned views, and the n-step window kernel.)

FAMILY_GAMMA, FAMILY_LAMBDA = 0.97, 0.9


def _family_calls(e):
    """name -> (function, positional arrays, keyword arrays, scalars, outputs asked for)."""
    r, term, trunc, dones = e["rewards"], e["terminated"], e["truncated"], e["terminated"] | e["truncated"]
    estimate = ("returns", "advantages", "abs_sums", "sums", "square_sums")
    acting = [r, e["q_values"], e["next_values"], term, trunc]
    g, lam = dict(gamma=FAMILY_GAMMA), dict(gamma=FAMILY_GAMMA, lambda_=FAMILY_LAMBDA)
    return {
        "discounted/bootstrap_values": (puffadv.discounted_returns, [r, term, trunc],
                                        dict(bootstrap_values=e["bootstrap_values"]), g, estimate[:1] + estimate[2:]),
        "discounted/last_value": (puffadv.discounted_returns, [r, dones], dict(last_value=e["last_value"]), g,
                                  estimate[:1] + estimate[2:]),
        "discounted/no-bootstrap": (puffadv.discounted_returns, [r, dones], {}, g, estimate[:1] + estimate[2:]),
        "n_step/3": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                     dict(bootstrap_values=e["bootstrap_values"]), dict(n=3, **lam), estimate),
        "n_step/1": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                     dict(bootstrap_values=e["bootstrap_values"]), dict(n=1, **lam), estimate),
        "n_step/2": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                     dict(bootstrap_values=e["bootstrap_values"]), dict(n=2, **lam), estimate),
        "n_step/4": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                     dict(bootstrap_values=e["bootstrap_values"]), dict(n=4, **lam), estimate),
        "n_step/5": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                     dict(bootstrap_values=e["bootstrap_values"]), dict(n=5, **lam), estimate),
        "n_step/3/bootstrap_values-returns-only": (puffadv.n_step_returns, [r, e["values"], dones],
                                                   dict(bootstrap_values=e["bootstrap_values"]), dict(n=3, **lam),
                                                   ("returns",)),
        "n_step/6/advantages-only": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                                     dict(bootstrap_values=e["bootstrap_values"]),
                                     dict(n=6, returns=False, **lam), ("advantages",)),
        "n_step/7/last_value": (puffadv.n_step_returns, [r, e["values"], dones], dict(last_value=e["last_value"]),
                                dict(n=7, gamma=FAMILY_GAMMA, lambda_=1.0), estimate),
        "n_step/8": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                     dict(bootstrap_values=e["bootstrap_values"]), dict(n=8, **lam), estimate),
        "n_step/9": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                     dict(bootstrap_values=e["bootstrap_values"]), dict(n=9, **lam), estimate),
        "n_step/T+5": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                       dict(bootstrap_values=e["bootstrap_values"]), dict(n=r.shape[1] + 5, **lam), estimate),
        "retrace/probs": (puffadv.retrace, acting, dict(target_probs=e["target_probs"],
                                                        behaviour_probs=e["behaviour_probs"]),
                          dict(c_clip=1.3, **lam), estimate),
        "retrace/log_probs": (puffadv.retrace, acting, dict(target_log_probs=e["target_log_probs"],
                                                            behaviour_log_probs=e["behaviour_log_probs"]),
                              dict(c_clip=0.8, **lam), estimate),
        "q_lambda/peng": (puffadv.q_lambda, acting, {}, lam, estimate),
        "q_lambda/watkins": (puffadv.q_lambda, acting, dict(greedy=e["greedy"]), lam, estimate),
        "q_lambda/returns-only": (puffadv.q_lambda, acting, dict(greedy=e["greedy"]), dict(advantages=False, **lam),
                                  ("returns",)),
        "episodic_cumsum/ends_at": (puffadv.episodic_cumsum, [r, dones], {}, {}, ("out",)),
        "episodic_cumsum/starts_at+seed": (puffadv.episodic_cumsum, [r, dones], dict(seed=e["last_value"]),
                                           dict(boundary="starts_at"), ("out",)),
        "eligibility_traces+seed": (puffadv.eligibility_traces, [r, dones], dict(seed=e["last_value"]), lam,
                                    ("out",)),
    }


FAMILY_KINDS = list(_family_calls(reference.random_off_policy(np.random.default_rng(0), 1, 2)))


def _family_run(name, e, move, time_axis, out_like):
    """Runs `name` on `e` moved by `move`, into NaN-poisoned outputs (out_like(rows, horizon)
    makes one in the caller's layout); returns {output: [B, T] or [B] NumPy float64}."""
    fn, args, kw, scalars, wanted = _family_calls(e)[name]
    rows = e["rewards"].shape[0]
    given = {}
    for out in wanted:
        if out in ("returns", "advantages", "out"):
            given[out] = out_like()
    asked = {out: given.get(out, True) for out in wanted}
    result = fn(*map(move, args), **{k: move(v) for k, v in kw.items()}, **scalars, **asked, time_axis=time_axis)
    got = {}
    for out in wanted:
        x = result if out == "out" else getattr(result, out)
        if out in given:
            assert x is given[out]
        x = np.asarray(x.double().cpu().numpy() if torch is not None and torch.is_tensor(x) else x, np.float64)
        got[out] = x.T if x.ndim == 2 and time_axis == 0 else x
        assert got[out].shape[0] == rows
    return got


def _family_compare(name, e, dtype, layout, flag_dtype=None):
    """The CUDA result of `name` against the CPU backend's on the same arrays."""
    time_axis = 0 if layout == "time-major" else -1
    rows, horizon = e["rewards"].shape
    tdtype = getattr(torch, np.dtype(dtype).name) if not isinstance(dtype, str) else getattr(torch, dtype)

    def arrange(x, device):
        t = torch.from_numpy(np.ascontiguousarray(x))
        if t.dtype == torch.bool:
            t = t.to(flag_dtype or torch.bool)
        elif t.is_floating_point():
            t = t.to(tdtype)
        t = t.to(device)
        if t.ndim != 2:
            return t
        if layout == "time-major":
            return t.T.contiguous()
        if layout == "every-other-step":
            return torch.repeat_interleave(t, 2, dim=1)[:, ::2]
        if layout == "offset-base":
            flat = torch.empty(rows * horizon + 1, dtype=t.dtype, device=device)[1:].view(rows, horizon)
            return flat.copy_(t)
        return t

    def out_like(device):
        out_dtype = torch.float32 if tdtype in (torch.bfloat16, torch.float16) else tdtype
        shape = (horizon, rows) if layout == "time-major" else (rows, horizon)
        return lambda: torch.full(shape, float("nan"), dtype=out_dtype, device=device)

    cpu = _family_run(name, e, lambda x: arrange(x, "cpu"), time_axis, out_like("cpu"))
    gpu = _family_run(name, e, lambda x: arrange(x, "cuda"), time_axis, out_like("cuda"))
    torch.cuda.synchronize()
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for out in cpu:
        assert not np.isnan(gpu[out]).any(), f"{name} {out}: unwritten or NaN on the GPU"
        err = relative_error(gpu[out], cpu[out])
        assert err <= tol * (10 if "sums" in out else 1), f"{name} {out}: GPU vs CPU rel err {err:.2e}"


def _family_episodes(rng, rows, horizon, dtype=np.float32, end_rate=0.05):
    return reference.random_off_policy(rng, rows, horizon, dtype, end_rate)


@needs_gpu
@pytest.mark.parametrize("name", FAMILY_KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(7, 37), (33, 36), (64, 1024), (50, 1000), (3000, 64), (2, 40000), (3, 50001)])
def test_family_every_layout_matches_the_cpu(rng, name, dtype, shape):
    if UNDER_SANITIZER and shape[0] * shape[1] > 100_000:
        pytest.skip("long under the sanitizer")
    if name == "n_step/T+5" and shape[1] > 5000:
        pytest.skip("the CPU backend's window is O(T n): minutes here (the GPU runs the TD(lambda) scan)")
    _family_compare(name, _family_episodes(rng, *shape, dtype), dtype, "batch-major")


@needs_gpu
@pytest.mark.parametrize("name", FAMILY_KINDS)
@pytest.mark.parametrize("layout", ["time-major", "every-other-step", "offset-base"])
@pytest.mark.parametrize("flag_dtype", ["bool", "uint8", "float"])
def test_family_strided_views_and_flag_types(rng, name, layout, flag_dtype):
    flags = {"bool": torch.bool, "uint8": torch.uint8, "float": torch.float32}[flag_dtype] if torch else None
    _family_compare(name, _family_episodes(rng, 33, 2500), np.float32, layout, flags)


@needs_gpu
@pytest.mark.parametrize("name", FAMILY_KINDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_family_reduced_precision(rng, name, dtype):
    e = _family_episodes(rng, 20, 3000)
    rounded = {k: (torch.from_numpy(v).to(getattr(torch, dtype)).float().numpy() if v.dtype == np.float32 else v)
               for k, v in e.items()} if torch else e
    _family_compare(name, rounded, dtype, "batch-major", torch.uint8 if torch else None)


@needs_gpu
@pytest.mark.parametrize("name", FAMILY_KINDS)
@pytest.mark.parametrize("shape", [(40, 128), (3, 20000)])  # whole rows; split rows
def test_family_nan_stays_in_its_row(rng, name, shape):
    """A NaN reward poisons only its own row: the other rows are bitwise those of a clean run."""
    e = _family_episodes(rng, *shape, np.float32)
    move = lambda x: torch.from_numpy(np.ascontiguousarray(x)).to("cuda")  # noqa: E731
    out_like = lambda: torch.full(shape, float("nan"), device="cuda")  # noqa: E731
    clean = _family_run(name, e, move, -1, out_like)
    e["rewards"][1, shape[1] // 2] = np.nan
    dirty = _family_run(name, e, move, -1, out_like)
    torch.cuda.synchronize()
    for out in clean:
        others = np.delete(np.arange(shape[0]), 1)
        assert np.array_equal(dirty[out][others], clean[out][others]), out
        assert np.isnan(dirty[out][1]).any(), out


# ---- the n-step vector kernel (src/kernels/n_step_window.cuh) ----
# It takes contiguous rows whose horizon is a multiple of N = 4 (n <= 4) or 8
# (n <= 8): each thread N outputs, a warp of 32 lanes 31 chunks (its top lane's
# chunk only feeds the lane below), one shuffle of W per round of the window.
# These shapes put row ends at every lane and warp position: rows of one or two
# chunks, rows of exactly one warp (31 chunks of 4), rows that end mid-warp, a
# horizon that is a multiple of 4 but not 8 (n > 4 takes the generic kernel).
N_STEP_SHAPES = [(1000, 8), (37, 12), (31, 124), (33, 248), (70001, 8), (3, 4096)]


def _n_step_run(e, n, flags, bootstrap, device, dtype):
    """returns and advantages of n_step_returns on `device` (NaN-poisoned outputs), as float64 NumPy."""
    tdtype = getattr(torch, np.dtype(dtype).name)
    move = lambda x: torch.from_numpy(np.ascontiguousarray(x)).to(device)  # noqa: E731
    shape = e["rewards"].shape
    out = lambda: torch.full(shape, float("nan"), dtype=tdtype, device=device)  # noqa: E731
    result = puffadv.n_step_returns(move(e["rewards"]), move(e["values"]), *map(move, flags), n=n,
                                    **{k: move(e[k]) for k in bootstrap}, gamma=FAMILY_GAMMA, lambda_=FAMILY_LAMBDA,
                                    returns=out(), advantages=out())
    if device != "cpu":
        torch.cuda.synchronize()
    return {k: getattr(result, k).double().cpu().numpy() for k in ("returns", "advantages")}


def _n_step_flags(e, case):
    """Positional flags and bootstrap keywords: truncations with bootstrap_values, or
    done flags with bootstrap_values (read at the row's last step only) or last_value."""
    if case == "truncations":
        return [e["terminated"], e["truncated"]], ["bootstrap_values"]
    dones = e["terminated"] | e["truncated"]
    return [dones], ["bootstrap_values" if case == "bootstrap_values" else "last_value"]


@needs_gpu
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8])
@pytest.mark.parametrize("shape", N_STEP_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["truncations", "bootstrap_values", "last_value"])
def test_family_n_step_vector_kernel_matches_the_cpu(rng, n, shape, dtype, case):
    if UNDER_SANITIZER and shape[0] * shape[1] > 100_000:
        pytest.skip("long under the sanitizer")
    e = _family_episodes(rng, *shape, dtype)
    flags, bootstrap = _n_step_flags(e, case)
    cpu = _n_step_run(e, n, flags, bootstrap, "cpu", dtype)
    gpu = _n_step_run(e, n, flags, bootstrap, "cuda", dtype)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for out in cpu:
        assert not np.isnan(gpu[out]).any(), f"{out}: unwritten or NaN on the GPU"
        err = relative_error(gpu[out], cpu[out])
        assert err <= tol, f"{out}: GPU vs CPU rel err {err:.2e}"


@needs_gpu
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("shape", [(40, 128), (40, 124)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_family_n_step_nan_stays_in_its_episode(rng, n, shape, dtype):
    """A window cut by an episode's end takes W1 by a select: a NaN reward or value
    just after the end (which the step before computes with, then drops) reaches
    no output of the ended episode, and a step both terminated and truncated (a
    NaN, which only the GPU computes: the CPU raises) poisons exactly the windows
    that reach it. Every row has its end at another lane/chunk position."""
    rows, horizon = shape
    e = _family_episodes(rng, rows, horizon, dtype)
    term, trunc = e["terminated"], e["truncated"]
    both = np.zeros_like(term)
    for i in range(rows):
        cut = (13 * i + 1) % (horizon - 1)
        term[i, cut], trunc[i, cut] = True, False
        e["rewards"][i, cut + 1] = np.nan
        if i % 2:
            e["values"][i, cut + 1] = np.nan
        if i % 3 == 0:
            both[i, (cut + 50) % horizon] = True
    gpu_flags = [term | both, trunc | both]
    cpu_flags = [term | both, trunc & ~both]  # the CPU refuses both: terminated alone there
    gpu = _n_step_run(e, n, gpu_flags, ["bootstrap_values"], "cuda", dtype)
    cpu = _n_step_run(e, n, cpu_flags, ["bootstrap_values"], "cpu", dtype)
    done = term | trunc | both
    poisoned = np.zeros((rows, horizon), bool)  # windows that reach a step both terminated and truncated
    for i, d in zip(*np.nonzero(both)):
        for t in range(max(0, d - n + 1), d + 1):
            poisoned[i, t] = not done[i, t:d].any()
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for out in cpu:
        expected_nan = np.isnan(cpu[out]) | poisoned
        assert np.array_equal(np.isnan(gpu[out]), expected_nan), out
        keep = ~expected_nan
        assert relative_error(gpu[out][keep], cpu[out][keep]) <= tol, out
