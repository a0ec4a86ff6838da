"""torch.ops.puffadv: PufferLib's schema, the functional op, opcheck,
torch.compile, bad input, PufferLib alias, and on a GPU machine CUDA graphs,
streams and a second device. All against the float64 reference, poisoned outputs."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import reference

torch = pytest.importorskip("torch")
import puffadv  # noqa: E402
import puffadv.torch  # noqa: E402,F401  (a failure to load is a test failure, not a skip)
from puffadv import _torch_status  # noqa: E402
from puffadv._torch_kernels import ConstantInputWarning  # noqa: E402

ops = torch.ops.puffadv
PUFFERLIB_SCHEMA = (
    "compute_puff_advantage(Tensor(a!) values, Tensor(b!) rewards, Tensor(c!) dones, "
    "Tensor(d!) importance, Tensor(e!) advantages, float gamma, float lambda, "
    "float rho_clip, float c_clip) -> ()")
# gamma, lambda, rho_clip, c_clip: ratios in [0, 3) so both clips bite.
PARAMS = (0.99, 0.95, 1.5, 1.0)

HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
# The core computes CUDA tensors itself only with a CUDA backend and a device;
# otherwise the op's CUDA key takes the (uncapturable) host fallback.
CORE_CUDA = puffadv.backend()["cuda"]["device_count"] > 0
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
needs_core_cuda = pytest.mark.skipif(not (HAS_CUDA and CORE_CUDA),
                                     reason="needs a CUDA device and puffadv's CUDA backend")


def sample_inputs(device, seed=0):
    """(label, [values, rewards, dones, importance]) cases every test shares."""
    rng = np.random.default_rng(seed)

    def put(arrays, view=lambda t: t):
        return [view(torch.from_numpy(np.ascontiguousarray(a)).to(device)) for a in arrays]

    for rows, horizon, dtype in ((33, 67, np.float32), (17, 129, np.float64),
                                 (5, 1, np.float32), (0, 8, np.float32), (300, 2, np.float32)):
        yield f"{rows}x{horizon}-{np.dtype(dtype).name}", put(
            reference.random_puff_inputs(rng, rows, horizon, dtype))
    # Time-major storage seen as [rows, H], and a strided slice of a larger buffer.
    yield "transposed", put([a.T for a in reference.random_puff_inputs(rng, 24, 40)],
                            lambda t: t.T)
    yield "sliced", put(reference.random_puff_inputs(rng, 40, 24), lambda t: t[::2, 3:19])


def expected(inputs):
    return reference.puff_advantage(*(t.cpu().numpy() for t in inputs), *PARAMS)


def check_result(out, inputs):
    host = out.cpu().numpy()
    assert np.isfinite(host).all(), "an element was left unwritten (NaN poison survived)"
    tolerance = reference.TOLERANCE[np.dtype(host.dtype)]
    assert reference.relative_error(host, expected(inputs)) <= tolerance


def poisoned_like(t):
    return torch.full(t.shape, float("nan"), dtype=t.dtype, device=t.device)


def test_schema_is_pufferlibs_character_for_character():
    assert str(ops.compute_puff_advantage.default._schema) == "puffadv::" + PUFFERLIB_SCHEMA


@pytest.mark.parametrize("device", DEVICES)
def test_inplace_op_matches_reference(device):
    for label, inputs in sample_inputs(device):
        out = poisoned_like(inputs[0])
        assert ops.compute_puff_advantage(*inputs, out, *PARAMS) is None, label
        check_result(out, inputs)


@pytest.mark.parametrize("device", DEVICES)
def test_inplace_op_writes_a_strided_output(device):
    _, inputs = next(sample_inputs(device))
    buffer = torch.full((inputs[0].shape[1], inputs[0].shape[0] * 2), float("nan"), device=device)
    out = buffer.T[::2]  # transposed and row-strided
    ops.compute_puff_advantage(*inputs, out, *PARAMS)
    check_result(out, inputs)
    assert torch.isnan(buffer.T[1::2]).all(), "wrote outside the output view"


@pytest.mark.parametrize("device", DEVICES)
def test_functional_op_matches_reference(device):
    for label, inputs in sample_inputs(device):
        out = ops.puff_advantage(*inputs, *PARAMS)
        assert out.is_contiguous() and out.dtype == inputs[0].dtype, label
        assert out.device == inputs[0].device, label
        check_result(out, inputs)


# PufferLib's schema names a parameter `lambda`, a Python keyword, and
# test_schema builds an inspect.Signature from the schema, which refuses it (for
# PufferLib's own operator too). Every other check runs on both ops.
INPLACE_OPCHECKS = ("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic")


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    for label, inputs in sample_inputs(device):
        torch.library.opcheck(ops.puff_advantage, (*inputs, *PARAMS))
        torch.library.opcheck(ops.compute_puff_advantage,
                              (*inputs, poisoned_like(inputs[0]), *PARAMS),
                              test_utils=INPLACE_OPCHECKS)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_matches_eager(device):
    def advantages_and_returns(v, r, d, i):
        advantages = ops.puff_advantage(v, r, d, i, *PARAMS)
        return advantages, advantages + v

    def in_place(v, r, d, i, out):  # as PufferLib calls it, into a strided buffer here
        ops.compute_puff_advantage(v, r, d, i, out, *PARAMS)
        return out + v

    functional, mutating = (torch.compile(f, fullgraph=True) for f in (advantages_and_returns, in_place))
    for label, inputs in sample_inputs(device):
        if label not in ("33x67-float32", "17x129-float64", "transposed"):
            continue  # each new dtype or layout is a recompilation: seconds on a 2-core CI
        eager = advantages_and_returns(*inputs)
        traced = functional(*inputs)
        check_result(traced[0], inputs)
        for a, b in zip(traced, eager):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=label)
        buffer = torch.full((inputs[0].shape[1], inputs[0].shape[0]), float("nan"),
                            dtype=inputs[0].dtype, device=device)
        returns = mutating(*inputs, buffer.T)
        check_result(buffer.T, inputs)
        torch.testing.assert_close(buffer.T, eager[0], rtol=0, atol=0, msg=label)
        torch.testing.assert_close(returns, eager[1], rtol=0, atol=0, msg=label)


@pytest.mark.parametrize("device", DEVICES)
def test_inputs_requiring_grad(device):
    """Issue 30: the functional op records its graph; PufferLib's in-place schema op records
    none, as PufferLib's own (its trainer passes the live ratio), and says so with a warning."""
    _, inputs = next(sample_inputs(device))
    tracked = [inputs[0].clone().requires_grad_(), *inputs[1:]]
    functional = ops.puff_advantage(*tracked, *PARAMS)
    assert functional.requires_grad and functional.grad_fn is not None
    check_result(functional.detach(), inputs)
    out = poisoned_like(inputs[0])
    with pytest.warns(ConstantInputWarning,
                      match="values requires grad, but torch.ops.puffadv.compute_puff_advantage"):
        ops.compute_puff_advantage(*tracked, out, *PARAMS)
    assert not out.requires_grad
    check_result(out, inputs)
    out = poisoned_like(inputs[0])
    with torch.no_grad():
        ops.compute_puff_advantage(*tracked, out, *PARAMS)
    assert not out.requires_grad
    check_result(out, inputs)
    torch.library.opcheck(ops.puff_advantage, (*tracked, *PARAMS),
                          test_utils=("test_autograd_registration", "test_faketensor"))


def _bad_calls(device):
    """(label, arrays, params): each is refused by the core's find_puff_problem."""
    rng = np.random.default_rng(1)
    v, r, d, i = (torch.from_numpy(a).to(device) for a in reference.random_puff_inputs(rng, 6, 9))
    out = poisoned_like(v)
    yield "shape", (v, r[:5], d, i, out), PARAMS
    yield "3-D", (v[None], r, d, i, out), PARAMS
    yield "1-D", (v, r, d[0], i, out), PARAMS
    yield "int dtype", (v, r, d.long(), i, out), PARAMS
    yield "float16", (v.half(), r, d, i, out), PARAMS
    yield "mixed float", (v, r.double(), d, i, out), PARAMS
    yield "output dtype", (v, r, d, i, out.double()), PARAMS
    yield "output aliases input", (v, r, d, i, v), PARAMS
    yield "output overlaps itself", (v, r, d, i, out[:1].expand(6, 9)), PARAMS
    yield "gamma", (v, r, d, i, out), (1.5, 0.95, 1.0, 1.0)
    yield "lambda", (v, r, d, i, out), (0.99, -0.1, 1.0, 1.0)
    yield "rho_clip", (v, r, d, i, out), (0.99, 0.95, float("nan"), 1.0)
    yield "c_clip", (v, r, d, i, out), (0.99, 0.95, 1.0, -1.0)
    if device != "cpu":
        yield "mixed devices", (v, r.cpu(), d, i, out), PARAMS


@pytest.mark.parametrize("device", DEVICES)
def test_bad_input_gets_the_cores_error(device):
    """Same exception type and message as puffadv.compute_puff_advantage: one check, in the core."""
    for label, arrays, params in _bad_calls(device):
        with pytest.raises((TypeError, ValueError)) as api:
            puffadv.compute_puff_advantage(*arrays, *params)
        with pytest.raises(api.type) as op:
            ops.compute_puff_advantage(*arrays, *params)
        assert str(op.value) == str(api.value), label
        if label in ("shape", "int dtype", "float16", "gamma", "lambda"):
            with pytest.raises(api.type) as functional:
                ops.puff_advantage(*arrays[:4], *params)
            assert str(functional.value) == str(api.value), label


def test_none_for_a_tensor_is_a_type_error_naming_it():
    _, inputs = next(sample_inputs("cpu"))
    for k, name in enumerate(("values", "rewards", "dones", "importance")):
        arrays = list(inputs)
        arrays[k] = None
        for call in (lambda: ops.puff_advantage(*arrays, *PARAMS),
                     lambda: ops.compute_puff_advantage(*arrays, poisoned_like(inputs[0]), *PARAMS)):
            with pytest.raises(TypeError, match=f"^{name} must be a tensor, got None$"):
                call()
    with pytest.raises(TypeError, match="^advantages must be a tensor, got None$"):
        ops.compute_puff_advantage(*inputs, None, *PARAMS)


def test_a_complex_gamma_is_refused_by_torchs_schema_check():
    """Scalars reach the kernels as doubles after torch's own conversion of `float`
    arguments (Python numbers, 0-d real tensors); what it cannot convert it refuses
    by name before puffadv runs."""
    _, inputs = next(sample_inputs("cpu"))
    with pytest.raises(RuntimeError, match="argument 'gamma'"):
        ops.puff_advantage(*inputs, torch.tensor(0.5 + 0.3j), *PARAMS[1:])


def test_meta_tensor_among_cpu_tensors_is_a_mixed_device_error():
    """Meta outranks CPU in dispatch, so such a call reaches the fake kernel, whose
    empty result would pass for an answer."""
    _, inputs = next(sample_inputs("cpu"))
    meta = inputs[0].to("meta")
    with pytest.raises(ValueError, match="^rewards is on cpu but values is on meta; all arrays must be "
                                         "on one device$"):
        ops.puff_advantage(meta, *inputs[1:], *PARAMS)
    out = poisoned_like(inputs[0])
    with pytest.raises(ValueError, match="^advantages is on meta but values is on cpu"):
        ops.compute_puff_advantage(*inputs, out.to("meta"), *PARAMS)
    with pytest.raises(ValueError, match="^importance is on meta but values is on cpu"):
        ops.compute_puff_advantage(*inputs[:3], inputs[3].to("meta"), out, *PARAMS)
    assert torch.isnan(out).all()
    assert ops.puff_advantage(*(t.to("meta") for t in inputs), *PARAMS).device.type == "meta"


NEGATIVE_VIEW_SCRIPT = """
import torch, puffadv.torch
x = torch.rand(4, 8)
def negative():
    return torch.zeros(4, 8, dtype=torch.complex64).conj().imag
for mode in (torch.enable_grad, torch.inference_mode):
    for position, name in enumerate(("values", "rewards", "dones", "importance", "advantages")):
        with mode():
            args = [x.clone() for _ in range(5)]
            args[position] = negative()
            try:
                torch.ops.puffadv.compute_puff_advantage(*args, 0.99, 0.95, 1.0, 1.0)
            except ValueError as e:
                print(type(e).__name__, e)
print("inputs intact:", bool(torch.isfinite(x).all()), float(x.sum()) == float(x.sum()))
"""


def test_negative_view_is_refused_by_name_without_a_crash():
    """torch's fallback for the neg bit would compute into a resolved copy and then
    fail an internal assert putting it back (every tensor of PufferLib's schema is
    mutable), crashing the process: run in a child."""
    done = subprocess.run([sys.executable, "-c", NEGATIVE_VIEW_SCRIPT], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    names = ("values", "rewards", "dones", "importance", "advantages")
    assert lines[:-1] == [f"ValueError {name} is a negative view (torch's neg bit: its memory holds -x); "
                          "call .resolve_neg() first" for name in names * 2]
    assert lines[-1] == "inputs intact: True True"


def test_functional_op_reads_a_negative_view_as_its_values():
    """The functional ops mutate nothing, so torch's Negative fallback hands them a
    resolved copy: the answer is that of -x."""
    _, inputs = next(sample_inputs("cpu"))
    storage = torch.complex(torch.zeros_like(inputs[0]), -inputs[0])
    negative_view = storage.conj().imag  # holds -(-values) = values, with the neg bit
    assert negative_view.is_neg()
    check_result(ops.puff_advantage(negative_view, *inputs[1:], *PARAMS), inputs)


def test_inplace_write_bumps_the_version_like_torchs_inplace_ops():
    """A backward that saved the output before the write must fail, not use new values."""
    _, inputs = next(sample_inputs("cpu"))
    out = torch.zeros_like(inputs[0])
    weight = torch.ones_like(out, requires_grad=True)
    loss = (weight * out).sum()  # saves out for the gradient of weight
    before = out._version
    ops.compute_puff_advantage(*inputs, out, *PARAMS)
    assert out._version > before
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
    view = torch.zeros(inputs[0].shape[1], inputs[0].shape[0]).T  # a view shares the counter
    base_before = view._base._version
    ops.compute_puff_advantage(*inputs, view, *PARAMS)
    assert view._base._version > base_before
    check_result(view, inputs)


def _outputs_refused_under_grad_mode():
    """(label, output, message): a leaf that requires grad and a view of one, which
    torch's in-place ops refuse, and a non-leaf that requires grad, whose history
    torch would rebase onto its differentiable op but puffadv's has no gradient."""
    leaf = torch.zeros((33, 67), requires_grad=True)
    yield "leaf", leaf, "^a leaf Variable that requires grad is being used in an in-place operation: advantages"
    yield "view of a leaf", leaf[:, :], "^a view of a leaf Variable that requires grad is being used"
    yield "non-leaf", leaf * 1, "^advantages requires grad, but puffadv's outputs are training targets"


def test_outputs_requiring_grad_are_refused_and_left_unwritten():
    _, inputs = next(sample_inputs("cpu"))
    for label, out, message in _outputs_refused_under_grad_mode():
        before = out.detach().clone()
        with pytest.raises(RuntimeError, match=message):  # the kind torch's in-place ops raise
            ops.compute_puff_advantage(*inputs, out, *PARAMS)
        assert torch.equal(out.detach(), before), label
        if out.is_leaf or out._base is not None:
            with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
                out.add_(1)
    with torch.no_grad():  # torch allows these writes there, as optimizers do
        for label, out, _ in _outputs_refused_under_grad_mode():
            ops.compute_puff_advantage(*inputs, out, *PARAMS)
            check_result(out.detach(), inputs)


def test_inference_tensor_is_written_only_inside_inference_mode():
    _, inputs = next(sample_inputs("cpu"))
    with torch.inference_mode():
        out = torch.full(inputs[0].shape, float("nan"))
    with pytest.raises(RuntimeError) as torch_own:
        out.add_(1)
    with pytest.raises(torch_own.type, match="^Inplace update to inference tensor outside InferenceMode "
                                             "is not allowed: advantages"):
        ops.compute_puff_advantage(*inputs, out, *PARAMS)
    assert torch.isnan(out).all()
    with torch.inference_mode():
        ops.compute_puff_advantage(*inputs, out, *PARAMS)
        normal = poisoned_like(inputs[0])  # a normal tensor may be written there too
        ops.compute_puff_advantage(*inputs, normal, *PARAMS)
    check_result(out, inputs)
    check_result(normal, inputs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_compile_inplace_with_half_inputs_and_a_float32_output_equals_eager(dtype):
    _, inputs = next(sample_inputs("cpu"))
    halves = [t.to(dtype) for t in inputs]

    def in_place(v, r, d, i, out):
        ops.compute_puff_advantage(v, r, d, i, out, *PARAMS)
        return out * 2

    eager_out = poisoned_like(inputs[0])
    eager = in_place(*halves, eager_out)
    compiled_out = poisoned_like(inputs[0])
    compiled = torch.compile(in_place, fullgraph=True)(*halves, compiled_out)
    assert compiled_out.dtype == torch.float32
    torch.testing.assert_close(compiled_out, eager_out, rtol=0, atol=0)
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
    reference_result = reference.puff_advantage(*(t.double().numpy() for t in halves), *PARAMS)
    assert reference.relative_error(compiled_out.numpy(), reference_result) <= 1e-5


def test_compile_refuses_the_output_dtypes_eager_refuses():
    """The compiled form computes out of place and copies: it must not convert into
    an output the eager op refuses."""
    _, inputs = next(sample_inputs("cpu"))

    def in_place(v, r, d, i, out):
        ops.compute_puff_advantage(v, r, d, i, out, *PARAMS)
        return out

    for dtype in (torch.float64, torch.bool):
        out = torch.zeros(inputs[0].shape, dtype=dtype)
        with pytest.raises(TypeError) as eager:
            in_place(*inputs, out)
        torch._dynamo.reset()
        with pytest.raises(Exception) as compiled:
            torch.compile(in_place, fullgraph=True)(*inputs, out)
        assert str(eager.value) in str(compiled.value)
        assert not out.any()


def test_pufferlib_alias_runs_pufferlib_calls():
    import puffadv.pufferlib_compat as compat
    op = torch.ops.pufferlib.compute_puff_advantage
    assert str(op.default._schema) == "pufferlib::" + PUFFERLIB_SCHEMA
    assert compat.registered_here
    for device in DEVICES:
        _, inputs = next(sample_inputs(device))
        out = poisoned_like(inputs[0])
        op(*inputs, out, *PARAMS)  # positional, as PufferLib's trainer calls it
        check_result(out, inputs)


def test_pufferlib_alias_leaves_pufferlibs_own_operator_alone():
    script = (
        "import torch\n"
        "lib = torch.library.Library('pufferlib', 'DEF')\n"
        f"lib.define({PUFFERLIB_SCHEMA!r})\n"
        "def fake_kernel(*a):\n    a[4].fill_(7.0)\n"
        "lib.impl('compute_puff_advantage', fake_kernel, 'CPU')\n"
        "import puffadv.pufferlib_compat as c\n"
        "x = torch.zeros(2, 3)\n"
        "torch.ops.pufferlib.compute_puff_advantage(x, x, x, x, x, 0.9, 0.9, 1.0, 1.0)\n"
        "print(c.registered_here, float(x[0, 0]))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "7.0"]


def test_backend_reports_the_op_library():
    report = puffadv.backend()["torch_ops"]
    assert report["built"] and report["loaded"], report
    assert report["built_against"] == ops._built_with_torch()
    assert report["torch_floor"] == "2.10"
    assert report["error"] is None
    assert f"built for torch >= {report['torch_floor']} (Stable ABI" in str(puffadv.backend())


def test_only_a_torch_older_than_the_floor_is_refused():
    """One build serves every torch from the floor on (test_torch_versions.py loads it
    into a second release); older ones lack the Stable ABI it needs."""
    for running in ("2.10.0", "2.13.0+cpu", "2.14.1+cu130", "2.15.0a0+git1234", "3.0.0"):
        assert _torch_status.too_old("2.10", running) is None, running
    message = _torch_status.too_old("2.10", "2.9.1+cu128")
    assert "needs torch >= 2.10" in message and "uses torch 2.9.1+cu128" in message


def test_unloadable_library_gives_an_actionable_import_error(tmp_path, monkeypatch):
    broken = tmp_path / "libpuffadv_torch.so"
    broken.write_bytes(b"not a shared library")
    monkeypatch.setattr(_torch_status, "_loaded", False)
    monkeypatch.setattr(_torch_status, "library_path", lambda: broken)
    with pytest.raises(ImportError, match="pip install --no-build-isolation") as error:
        _torch_status.load(torch)
    assert "does not load into torch" in str(error.value) and error.value.__cause__ is None


def test_missing_library_says_how_to_build_it(monkeypatch):
    monkeypatch.setattr(_torch_status, "_loaded", False)
    monkeypatch.setattr(_torch_status, "build_facts", lambda: None)
    with pytest.raises(ImportError, match="--no-build-isolation"):
        _torch_status.load(torch)


def test_cuda_stream_shim_is_found_in_cuda_builds_of_torch():
    """The library links no CUDA: torch's current-stream shim is looked up in the
    running torch. Found in a CUDA (or ROCm) torch even without a GPU; absent in a
    CPU-only one (test_torch_versions.py runs this under PyPI's CUDA torch)."""
    where = ops._cuda_stream_shim()
    if torch.version.hip:
        assert where in ("global", "libtorch_hip.so")
    elif torch.version.cuda:
        assert where in ("global", "libtorch_cuda.so")
    else:
        assert where == ""


# ---- GPU machine ---------------------------------------------------------------

@needs_cuda
def test_stream_handle_is_torchs_current_stream():
    x = torch.zeros(1, device="cuda")
    assert ops._current_stream_handle(x) == torch.cuda.current_stream().cuda_stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert ops._current_stream_handle(x) == side.cuda_stream
    assert side.cuda_stream != torch.cuda.current_stream().cuda_stream


@needs_cuda
def test_side_stream_work_is_ordered_without_a_sync():
    """Inputs written on a side stream behind a long sleep: a kernel on any other
    stream would read the NaN poison still there."""
    _, inputs = next(sample_inputs("cuda"))
    targets = [torch.full_like(t, float("nan")) for t in inputs]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # ~50 ms of GPU time
        for target, source in zip(targets, inputs):
            target.copy_(source)
        out = poisoned_like(targets[0])
        ops.compute_puff_advantage(*targets, out, *PARAMS)
        functional = ops.puff_advantage(*targets, *PARAMS)
    side.synchronize()
    check_result(out, inputs)
    check_result(functional, inputs)


@needs_core_cuda
def test_cuda_graph_capture_and_replay():
    _, inputs = next(sample_inputs("cuda"))
    static = [t.clone() for t in inputs]
    out = poisoned_like(static[0])
    side = torch.cuda.Stream()  # warm-up off the capture stream, as torch asks
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ops.compute_puff_advantage(*static, out, *PARAMS)
        ops.puff_advantage(*static, *PARAMS)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.compute_puff_advantage(*static, out, *PARAMS)
        functional = ops.puff_advantage(*static, *PARAMS)
    for seed in (5, 6):
        _, fresh = next(sample_inputs("cuda", seed))
        for s, f in zip(static, fresh):
            s.copy_(f)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check_result(out, fresh)
        check_result(functional, fresh)


@pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_second_device_under_default_current_device():
    assert torch.cuda.current_device() == 0
    _, inputs = next(sample_inputs("cuda:1"))
    out = poisoned_like(inputs[0])
    ops.compute_puff_advantage(*inputs, out, *PARAMS)
    functional = ops.puff_advantage(*inputs, *PARAMS)
    assert functional.device == torch.device("cuda:1")
    torch.cuda.synchronize(1)
    check_result(out, inputs)
    check_result(functional, inputs)
    x = torch.zeros(1, device="cuda:1")
    assert ops._current_stream_handle(x) == torch.cuda.current_stream(1).cuda_stream


@pytest.mark.skipif(not HAS_CUDA or CORE_CUDA,
                    reason="needs a CUDA torch with a CPU-only puffadv (scripts/gpu/30-torch.sh)")
def test_cuda_tensors_without_cuda_backend_fall_back_visibly(monkeypatch):
    """The core's fallback policy, shared with puffadv.compute_puff_advantage:
    one warning per process, one count, PUFFADV_FALLBACK=error refuses."""
    monkeypatch.delenv("PUFFADV_FALLBACK", raising=False)
    _, inputs = next(sample_inputs("cuda"))
    before = puffadv.backend()["fallback"]["calls"]
    out = poisoned_like(inputs[0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ops.compute_puff_advantage(*inputs, out, *PARAMS)
        functional = ops.puff_advantage(*inputs, *PARAMS)
    check_result(out, inputs)
    check_result(functional, inputs)
    assert out.device.type == "cuda" and functional.device.type == "cuda"
    messages = [str(w.message) for w in caught if "computed on the CPU instead" in str(w.message)]
    assert len(messages) == (1 if before == 0 else 0), messages  # once per process
    if messages:
        assert "pip install . -C cmake.define.PUFF_CUDA=ON" in messages[0]
        assert [w.category for w in caught if str(w.message) == messages[0]] == [puffadv.FallbackWarning]
    assert puffadv.backend()["fallback"]["calls"] == before + 2
    monkeypatch.setenv("PUFFADV_FALLBACK", "error")
    with pytest.raises(RuntimeError, match="PUFFADV_FALLBACK=error"):
        ops.compute_puff_advantage(*inputs, poisoned_like(inputs[0]), *PARAMS)


FIRST_FALLBACK_SCRIPT = """
import warnings, torch, puffadv, puffadv.torch
x = torch.rand(4, 8, device="cuda")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    torch.ops.puffadv.puff_advantage(x, x, torch.zeros_like(x), torch.ones_like(x), 0.9, 0.9, 1.0, 1.0)
    torch.ops.puffadv.puff_advantage(x, x, torch.zeros_like(x), torch.ones_like(x), 0.9, 0.9, 1.0, 1.0)
print([(w.category.__name__, "computed on the CPU instead" in str(w.message)) for w in caught])
"""


@pytest.mark.skipif(not HAS_CUDA or CORE_CUDA,
                    reason="needs a CUDA torch with a CPU-only puffadv (scripts/gpu/30-torch.sh)")
def test_first_fallback_of_a_process_warns_once():
    """In a fresh process, so that this really is the first fallback."""
    done = subprocess.run([sys.executable, "-c", FIRST_FALLBACK_SCRIPT], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), PUFFADV_FALLBACK="warn"),
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == "[('FallbackWarning', True)]"
