"""The estimator family of issue 20 in torch: the torch.ops.puffadv operators
(discounted_returns, n_step_returns, retrace, q_lambda, episodic_cumsum,
eligibility_traces) against the float64 references and, exactly, the Python
API; their fake kernels (shapes, dtypes, devices), opcheck, the core's named
errors; and torch.compile(fullgraph=True) of the operators and of the public
puffadv functions on torch tensors, equal to eager bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

import reference as ref
from test_family import VARIANTS

torch = pytest.importorskip("torch")
import puffadv  # noqa: E402
import puffadv.torch  # noqa: E402,F401

ops = torch.ops.puffadv
pytestmark = pytest.mark.skipif(not hasattr(ops, "retrace"), reason="op library built without the family")
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and puffadv.backend()["cuda"]["device_count"] else [])
# What each operator returns, in order (the Python API's output names).
OP_OUTPUTS = {"discounted_returns": ("returns",), "n_step_returns": ("returns",),
              "retrace": ("returns", "advantages"), "q_lambda": ("returns", "advantages"),
              "episodic_cumsum": ("out",), "eligibility_traces": ("out",)}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()  # each test compiles its own functions
    yield


def episodes(dtype=np.float32, rows=7, horizon=45, seed=0):
    return ref.random_off_policy(np.random.default_rng(seed), rows, horizon, dtype)


def tensors(variant, e, device="cpu", dtype=None, time_major=False):
    """The variant's call as tensors: (Python API function, args, kw, params, want)."""
    fn, args, kw, params, want = VARIANTS[variant](e)

    def move(x):
        if x is None:
            return None
        x = np.ascontiguousarray(x.T) if time_major and np.ndim(x) == 2 else x
        t = torch.from_numpy(np.asarray(x)).to(device)
        return t.to(dtype) if dtype is not None and t.is_floating_point() else t

    return fn, [move(a) for a in args], {k: move(v) for k, v in kw.items()}, params, want


def op_call(fn, args, kw, params, time_axis=-1):
    """The operator call that matches a Python API call: (op, args, kwargs)."""
    kw, params = dict(kw), dict(params)
    if "target_log_probs" in kw:
        kw["target_probs"], kw["behaviour_probs"] = kw.pop("target_log_probs"), kw.pop("behaviour_log_probs")
        params["log_probs"] = True
    if "boundary" in params:
        params["reset_at_start"] = params.pop("boundary") == "starts_at"
    return getattr(ops, fn.__name__), args, dict(kw, **params, time_axis=time_axis)


def op_results(fn, result):
    """{output name: tensor} of an operator's result."""
    names = OP_OUTPUTS[fn.__name__]
    return dict(zip(names, result if len(names) > 1 else (result,)))


def api_results(fn, result, names):
    return {name: result if name == "out" else getattr(result, name) for name in names}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("time_major", [False, True])
def test_ops_match_reference_and_python_api(device, variant, dtype, time_major):
    e = episodes(dtype)
    fn, args, kw, params, want = tensors(variant, e, device, time_major=time_major)
    axis = 0 if time_major else -1
    op, op_args, op_kw = op_call(fn, args, kw, params, axis)
    got = op_results(fn, op(*op_args, **op_kw))
    names = tuple(got)
    api = api_results(fn, fn(*args, **kw, **params, time_axis=axis,
                             **({} if fn.__name__ in ("episodic_cumsum", "eligibility_traces")
                                else {name: True for name in names})), names)
    for name, tensor in got.items():
        assert tensor.dtype == args[0].dtype and tensor.device.type == device
        assert tensor.shape == args[0].shape and tensor.is_contiguous()
        torch.testing.assert_close(tensor, api[name], rtol=0, atol=0)  # one core, one kernel
        result = tensor.double().cpu().numpy()
        result = result.T if time_major else result
        assert ref.relative_error(result, want[name]) <= ref.TOLERANCE[np.dtype(dtype)], name


@pytest.mark.parametrize("variant", ["discounted/bootstrap_values", "retrace/log_probs", "q_lambda/watkins",
                                     "n_step/3", "episodic_cumsum/starts_at+seed", "eligibility_traces"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_computes_float32(variant, dtype):
    fn, args, kw, params, want = tensors(variant, episodes(), dtype=dtype)
    op, op_args, op_kw = op_call(fn, args, kw, params)
    for name, tensor in op_results(fn, op(*op_args, **op_kw)).items():
        assert tensor.dtype == torch.float32
        assert not torch.isnan(tensor).any(), name


@pytest.mark.parametrize("variant", VARIANTS)
def test_fake_kernels_describe_the_outputs(variant):
    """On meta tensors the fake kernel runs: rewards' shape, the output dtype, meta device."""
    for dtype, out_dtype in ((torch.float64, torch.float64), (torch.bfloat16, torch.float32)):
        fn, args, kw, params, _ = tensors(variant, episodes(rows=5, horizon=11), "meta", dtype)
        op, op_args, op_kw = op_call(fn, args, kw, params)
        for name, tensor in op_results(fn, op(*op_args, **op_kw)).items():
            assert tensor.device.type == "meta" and tensor.shape == (5, 11) and tensor.dtype == out_dtype


@pytest.mark.parametrize("variant", ["discounted/last_value", "retrace/probs", "q_lambda/peng", "n_step/3",
                                     "episodic_cumsum/ends_at"])
def test_a_meta_tensor_among_cpu_tensors_is_named(variant):
    fn, args, kw, params, _ = tensors(variant, episodes(rows=3, horizon=5))
    op, op_args, op_kw = op_call(fn, args, kw, params)
    op_args[1] = op_args[1].to("meta")
    first, second = (a.name for a in op.default._schema.arguments[:2])
    with pytest.raises(ValueError, match=f"^{second} is on meta but {first} is on cpu"):
        op(*op_args, **op_kw)


@pytest.mark.parametrize("variant", ["discounted/bootstrap_values", "discounted/no-bootstrap", "n_step/3",
                                     "retrace/probs", "retrace/log_probs", "q_lambda/watkins",
                                     "episodic_cumsum/starts_at+seed", "eligibility_traces+seed"])
def test_opcheck(variant):
    fn, args, kw, params, _ = tensors(variant, episodes(rows=4, horizon=9))
    op, op_args, op_kw = op_call(fn, args, kw, params)
    torch.library.opcheck(op, op_args, op_kw)


@pytest.mark.parametrize("variant", VARIANTS)
def test_ops_compile_fullgraph_equal_eager(variant):
    fn, args, kw, params, _ = tensors(variant, episodes())
    op, op_args, op_kw = op_call(fn, args, kw, params)

    def step(*arrays):
        result = op(*arrays, **op_kw)
        return result if isinstance(result, tuple) else (result,)

    compiled = torch.compile(step, fullgraph=True)
    for got, want in zip(compiled(*op_args), step(*op_args)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_public_functions_compile_fullgraph_equal_eager(device, variant):
    """puffadv.<estimator> on torch tensors under torch.compile(fullgraph=True)."""
    fn, args, kw, params, want = tensors(variant, episodes(), device)
    requests = {} if "out" in want else {name: True for name in want}

    def step(*arrays):
        result = fn(*arrays, **kw, **params, **requests, time_axis=-1)
        return tuple(api_results(fn, result, tuple(want)).values())

    compiled = torch.compile(step, fullgraph=True)
    for got, expected in zip(compiled(*args), step(*args)):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_a_graph_when_inputs_require_grad():
    """Issue 30: the ops record their graph (test_gradients_ops.py checks the gradients)."""
    fn, args, kw, params, _ = tensors("retrace/probs", episodes())
    args[1] = args[1].clone().requires_grad_(True)
    op, op_args, op_kw = op_call(fn, args, kw, params)
    returns, advantages = op(*op_args, **op_kw)
    assert returns.requires_grad and advantages.requires_grad
    with torch.no_grad():
        returns, advantages = op(*op_args, **op_kw)
    assert not returns.requires_grad and not advantages.requires_grad


def test_errors_are_the_cores_naming_the_callers_arguments():
    e = {k: torch.from_numpy(np.asarray(v)) for k, v in episodes().items()}
    with pytest.raises(ValueError, match=r"\bn\b"):
        ops.n_step_returns(e["rewards"], e["values"], e["terminated"], e["truncated"], None,
                           e["bootstrap_values"], n=0, time_axis=-1)
    with pytest.raises(TypeError, match="^q_values must be a tensor, got None$"):
        ops.q_lambda(e["rewards"], None, e["next_values"], e["terminated"], time_axis=-1)
    with pytest.raises(TypeError, match="^inputs has dtype int64"):
        ops.episodic_cumsum(e["rewards"].long(), e["terminated"], time_axis=-1)
    with pytest.raises(ValueError, match="seed"):  # [B] expected
        ops.eligibility_traces(e["rewards"], e["terminated"], 0.9, 0.9, seed=e["rewards"], time_axis=-1)
    with pytest.raises(ValueError, match="target_probs|behaviour_probs"):
        ops.retrace(e["rewards"], e["q_values"], e["next_values"], e["terminated"],
                    target_probs=e["target_probs"], time_axis=-1)
    with pytest.raises(ValueError, match="gamma"):
        ops.discounted_returns(e["rewards"], e["terminated"], gamma=1.5, time_axis=-1)
    with pytest.raises(ValueError, match="time_axis must be 0 or -2 .* got 2"):
        ops.discounted_returns(e["rewards"], e["terminated"], time_axis=2)
    bad = e["terminated"].clone()
    bad[2, 5] = True
    truncated = torch.zeros_like(bad)
    truncated[2, 5] = True
    # Flagged both: terminated (issue 33), no error: the call with truncated cleared there.
    got = ops.discounted_returns(e["rewards"], bad, truncated, None, e["bootstrap_values"], time_axis=-1)
    want = ops.discounted_returns(e["rewards"], bad, torch.zeros_like(bad), None, e["bootstrap_values"], time_axis=-1)
    assert torch.equal(got, want)
