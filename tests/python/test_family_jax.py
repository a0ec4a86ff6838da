"""The estimator family of issue 20 in puffadv.jax (discounted_returns,
n_step_returns, retrace, q_lambda, episodic_cumsum, eligibility_traces): equal
to the float64 references and to the NumPy Python API, eagerly and under
jax.jit, time-major, under vmap, float64 and reduced inputs (sharding: test_sharding.py);
named errors before lowering (the NumPy function's message); not differentiable."""
from __future__ import annotations

import numpy as np
import pytest

import reference as ref
from test_family import VARIANTS

jax = pytest.importorskip("jax", reason="jax is not installed: the JAX handlers are untested")
import jax.numpy as jnp  # noqa: E402

import puffadv  # noqa: E402
import puffadv.jax as pjax  # noqa: E402

ONE_OUTPUT = ("episodic_cumsum", "eligibility_traces")


def _platforms():
    try:
        return ["cpu"] + (["gpu"] if jax.devices("gpu") else [])
    except RuntimeError:  # no GPU backend in this jaxlib
        return ["cpu"]


@pytest.fixture(autouse=True)
def cpu_by_default():
    """NumPy inputs are computed on the CPU (the exact comparisons with the NumPy API
    need its kernels); test_matches_reference runs on every platform."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


def _x64():
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64
    return enable_x64()


def episodes(dtype=np.float32, rows=7, horizon=45, seed=0):
    return ref.random_off_policy(np.random.default_rng(seed), rows, horizon, dtype)


def split(variant, e, time_major=False):
    """The variant's call with NumPy arrays: (jax function, arrays, params, want); arrays
    are the positional ones then the keyword ones, `params` the scalars."""
    fn, args, kw, params, want = VARIANTS[variant](e)
    layout = (lambda x: np.ascontiguousarray(x.T)) if time_major else (lambda x: x)
    move = lambda x: None if x is None else layout(x) if np.ndim(x) == 2 else x
    return getattr(pjax, fn.__name__), [move(a) for a in args], {k: move(v) for k, v in kw.items()}, params, want


def results(fn, result):
    """{output name: array} of a JAX function's result (sums are not an output here)."""
    if fn.__name__ in ONE_OUTPUT:
        return {"out": result}
    return {name: getattr(result, name) for name in ("returns", "advantages") if getattr(result, name) is not None}


def bind(fn, args, kw, params, **extra):
    """(call, arrays): `call(*arrays)` is fn on the given arrays, with the absent
    (None) ones and the scalars closed over, for jax.jit and jax.vmap to trace."""
    arrays = [a for a in (*args, *kw.values()) if a is not None]

    def call(*traced):
        it = iter(traced)
        return fn(*[None if a is None else next(it) for a in args],
                  **{k: None if v is None else next(it) for k, v in kw.items()}, **params,
                  **{"time_axis": -1, **extra})

    return call, arrays


def jitted(fn, args, kw, params, time_axis):
    call, arrays = bind(fn, args, kw, params, time_axis=time_axis)
    return jax.jit(call)(*arrays)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("use_jit", [False, True])
@pytest.mark.parametrize("platform", _platforms())
def test_matches_reference(variant, time_major, use_jit, platform):
    fn, args, kw, params, want = split(variant, episodes(), time_major)
    axis = 0 if time_major else -1
    with jax.default_device(jax.devices(platform)[0]):
        result = jitted(fn, args, kw, params, axis) if use_jit else fn(*args, **kw, **params, time_axis=axis)
    got = results(fn, result)
    assert got and set(got) <= set(want)
    if fn.__name__ == "n_step_returns":
        assert set(got) == {"returns", "advantages"}
    for name, array in got.items():
        assert array.dtype == jnp.float32 and array.shape == args[0].shape
        expected = {"cpu"} if platform == "cpu" else {"gpu", "cuda", "rocm"}
        assert {d.platform for d in array.devices()} <= expected
        out = np.asarray(array, np.float64)
        assert ref.relative_error(out.T if time_major else out, want[name]) <= 1e-5, name


@pytest.mark.parametrize("variant", ["discounted/last_value", "n_step/T+5", "retrace/log_probs",
                                     "q_lambda/watkins", "episodic_cumsum/starts_at+seed", "eligibility_traces"])
def test_equal_to_the_python_api(variant):
    """The same core and kernel as puffadv.<estimator> on NumPy arrays: equal bit for bit."""
    fn, args, kw, params, _ = split(variant, episodes())
    api = getattr(puffadv, fn.__name__)
    got = results(fn, fn(*args, **kw, **params, time_axis=-1))
    requests = {} if fn.__name__ in ONE_OUTPUT else {name: True for name in got}
    want = api(*args, **kw, **params, **requests, time_axis=-1)
    for name, array in got.items():
        np.testing.assert_array_equal(np.asarray(array), want if name == "out" else getattr(want, name))


@pytest.mark.parametrize("variant", ["discounted/bootstrap_values", "n_step/3", "retrace/probs",
                                     "q_lambda/peng", "eligibility_traces+seed"])
def test_float64_under_x64(variant):
    fn, args, kw, params, want = split(variant, episodes(np.float64))
    with _x64():
        for name, array in results(fn, jitted(fn, args, kw, params, -1)).items():
            assert array.dtype == jnp.float64
            assert ref.relative_error(np.asarray(array), want[name]) <= 1e-12, name


@pytest.mark.parametrize("variant", ["discounted/bootstrap_values", "retrace/probs", "episodic_cumsum/ends_at"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_reduced_inputs_compute_float32(variant, dtype):
    fn, args, kw, params, _ = split(variant, episodes())
    cast = lambda x: x if x is None or x.dtype == bool else jnp.asarray(x).astype(dtype)
    exact = results(fn, fn(*[cast(a).astype(jnp.float32) if a is not None and a.dtype != bool else a
                             for a in args],
                           **{k: None if v is None else cast(v).astype(jnp.float32) for k, v in kw.items()},
                           **params, time_axis=-1))
    got = results(fn, fn(*map(cast, args), **{k: cast(v) for k, v in kw.items()}, **params, time_axis=-1))
    for name, array in got.items():
        assert array.dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(array), np.asarray(exact[name]))


@pytest.mark.parametrize("variant", ["discounted/last_value", "retrace/log_probs", "q_lambda/watkins",
                                     "n_step/3", "eligibility_traces+seed"])
def test_vmap_over_a_leading_axis(variant):
    """vmap stacks calls into one: each slice equals its own call."""
    calls = [split(variant, episodes(seed=s)) for s in range(3)]
    fn, args, kw, params, _ = calls[0]
    stack = lambda xs: None if xs[0] is None else jnp.stack(xs)
    call, arrays = bind(fn, [stack([c[1][i] for c in calls]) for i in range(len(args))],
                        {k: stack([c[2][k] for c in calls]) for k in kw}, params)
    batched = jax.vmap(call)(*arrays)
    for s, (_, a, k, _, _) in enumerate(calls):
        one = results(fn, fn(*a, **k, **params, time_axis=-1))
        for name, array in results(fn, batched).items():
            np.testing.assert_array_equal(np.asarray(array[s]), np.asarray(one[name]))


def test_grad():
    """Issue 30: differentiable (test_gradients_jax.py checks every function)."""
    e = episodes()
    for grad in (jax.grad(lambda r: pjax.discounted_returns(r, e["terminated"], time_axis=-1).returns.sum())(
                     jnp.asarray(e["rewards"])),
                 jax.grad(lambda x: pjax.eligibility_traces(x, e["terminated"], gamma=0.9, lambda_=0.9, time_axis=-1).sum())(
                     jnp.asarray(e["rewards"]))):
        assert grad.shape == e["rewards"].shape and float(jnp.abs(grad).sum()) > 0


def _both(fn_name, *args, **kwargs):
    """The exception the NumPy function raises, and the JAX one's."""
    caught = []
    for module in (puffadv, pjax):
        with pytest.raises((TypeError, ValueError)) as info:
            getattr(module, fn_name)(*args, **{"time_axis": -1, **kwargs})
        caught.append(info.value)
    return caught


BAD = {
    "n=0": ("n_step_returns", lambda e: ((e["rewards"], e["values"], e["terminated"]),
                                        dict(n=0, last_value=e["last_value"]))),
    "n=True": ("n_step_returns", lambda e: ((e["rewards"], e["values"], e["terminated"]),
                                           dict(n=True, last_value=e["last_value"]))),
    "retrace mix": ("retrace", lambda e: ((e["rewards"], e["q_values"], e["next_values"], e["terminated"]),
                                          dict(target_probs=e["target_probs"],
                                               behaviour_log_probs=e["behaviour_log_probs"]))),
    "retrace half a pair": ("retrace", lambda e: ((e["rewards"], e["q_values"], e["next_values"],
                                                   e["terminated"]), dict(target_probs=e["target_probs"]))),
    "greedy shape": ("q_lambda", lambda e: ((e["rewards"], e["q_values"], e["next_values"], e["terminated"]),
                                            dict(greedy=e["greedy"][:, :-1]))),
    "boundary": ("episodic_cumsum", lambda e: ((e["rewards"], e["terminated"]), dict(boundary="middle"))),
    "seed shape": ("eligibility_traces", lambda e: ((e["rewards"], e["terminated"]),
                                                    dict(gamma=0.9, lambda_=0.9, seed=e["rewards"]))),
    "int8 inputs": ("episodic_cumsum", lambda e: ((e["rewards"].astype(np.int8), e["terminated"]), dict())),
    "gamma": ("discounted_returns", lambda e: ((e["rewards"], e["terminated"]), dict(gamma=1.5))),
    "short dones": ("discounted_returns", lambda e: ((e["rewards"], e["terminated"][:, :-1]), dict())),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_matches_numpy(case):
    fn_name, make = BAD[case]
    args, kwargs = make(episodes())
    numpy_error, jax_error = _both(fn_name, *args, **kwargs)
    assert type(jax_error) is type(numpy_error)
    assert str(jax_error) == str(numpy_error)


def test_terminated_and_truncated_on_one_step_is_terminated():
    """Gymnasium's meaning (issue 33): the call with truncated cleared there."""
    e = episodes()
    terminated, truncated = e["terminated"].copy(), e["truncated"].copy()
    terminated[2, 5] = truncated[2, 5] = True
    run = lambda u: np.asarray(pjax.discounted_returns(e["rewards"], terminated, u,
                                                       bootstrap_values=e["bootstrap_values"], time_axis=-1).returns)
    np.testing.assert_array_equal(run(truncated), run(truncated & ~terminated))
