"""puffadv.jax's errors and derivatives (differentiable since issue 30; zero through stopped
inputs), every refused argument with the NumPy path's type and message, before
lowering, and a step both terminated and truncated when run (shared pieces:
jax_cases.py)."""
from __future__ import annotations

import numpy as np
import pytest

import reference
from jax_cases import KINDS, _x64, jax, jnp, on_cpu, pjax  # noqa: F401  (skips this module without jax)

import puffadv  # noqa: E402


# ----------------------------------------------------------------- autodiff


def test_grad():
    """Issue 30: differentiable (test_gradients_jax.py checks the gradients)."""
    inputs = [jnp.asarray(x) for x in reference.random_puff_inputs(np.random.default_rng(), 4, 8)]

    def loss(v):
        return pjax.compute_puff_advantage(v, *inputs[1:]).sum()

    grad = jax.grad(loss)(inputs[0])
    assert grad.shape == inputs[0].shape and float(jnp.abs(grad).sum()) > 0


def test_grad_through_stopped_inputs_is_zero():
    v, r, d, i = [jnp.asarray(x) for x in reference.random_puff_inputs(np.random.default_rng(), 4, 8)]

    def loss(v):
        a = pjax.compute_puff_advantage(jax.lax.stop_gradient(v), r, d, i)
        return (a * v).sum()  # the usual use: advantages weigh a differentiated term

    grad = jax.grad(loss)(v)
    assert np.allclose(grad, pjax.compute_puff_advantage(v, r, d, i))


# ----------------------------------------------------------------- bad input


def _numpy_error(args, kwargs):
    with pytest.raises((TypeError, ValueError)) as info:
        puffadv.compute_puff_advantage(*args, **kwargs)
    return info


def _bad_cases():
    ok = np.ones((4, 8), np.float32)
    return {
        "3-D values": ([ok[None], ok, ok, ok], {}),
        "1-D importance": ([ok, ok, ok, ok[0]], {}),
        "shape mismatch": ([ok, ok[:, :7], ok, ok], {}),
        "int dones": ([ok, ok, ok.astype(np.int32), ok], {}),
        "int16 values": ([ok.astype(np.int16)] * 4, {}),  # float16 is read since issue 6
        "mixed dtype": ([ok, ok.astype(np.float16), ok, ok], {}),
        "uint8 values": ([ok.astype(np.uint8), ok, ok, ok], {}),
        "float64 dones": ([ok, ok, ok.astype(np.float64), ok], {}),
        "gamma > 1": ([ok] * 4, {"gamma": 1.5}),
        "nan lambda": ([ok] * 4, {"gae_lambda": float("nan")}),
        "negative rho_clip": ([ok] * 4, {"rho_clip": -0.5}),
        "inf c_clip": ([ok] * 4, {"c_clip": float("inf")}),
        "string gamma": ([ok] * 4, {"gamma": "0.9"}),
    }


@pytest.mark.parametrize("case", list(_bad_cases()))
def test_bad_input_matches_core_message(case):
    """Raised before lowering, with the type and message the NumPy path raises."""
    args, kwargs = _bad_cases()[case]
    expected = _numpy_error(args, kwargs)
    with _x64(), pytest.raises(expected.type) as got:  # x64: float64 stays float64
        jax.jit(lambda *a: pjax.compute_puff_advantage(*a, **kwargs))(*[jnp.asarray(a) for a in args])
    assert str(got.value) == str(expected.value)


def test_traced_parameter_is_a_type_error():
    ok = jnp.ones((4, 8), jnp.float32)
    with pytest.raises(TypeError, match="gamma must be a concrete number.*static_argnames"):
        jax.jit(lambda g: pjax.compute_puff_advantage(ok, ok, ok, ok, gamma=g))(0.9)


def test_non_array_is_a_type_error():
    ok = jnp.ones((4, 8), jnp.float32)
    with pytest.raises(TypeError, match="rewards must be an array"):
        pjax.compute_puff_advantage(ok, [[1.0] * 8] * 4, ok, ok)


def test_refuses_an_older_jaxlib(monkeypatch):
    built = puffadv._core.jax_ffi_build()["api_version"]
    from puffadv import _jax_common  # where registration lives (puffadv.jax and its family share it)
    monkeypatch.setattr(_jax_common, "_registered", False)
    monkeypatch.setattr(_jax_common, "_running_ffi_api", lambda: (built[0], built[1] - 1))
    with pytest.raises(RuntimeError, match=r"compiled against XLA FFI API \d+\.\d+ .*cannot load"):
        pjax.compute_puff_advantage(*[jnp.ones((2, 3))] * 4)


# ----------------------------------------------------------------- standard conventions

def test_conventions_grad(on_cpu, rng):
    """Issue 30: differentiable (test_gradients_jax.py checks every function)."""
    e = reference.random_episodes(rng, 3, 8)
    grad = jax.grad(lambda v: pjax.gae(e["rewards"], v, e["terminated"],
                                       last_value=e["last_value"], time_axis=-1).advantages.sum())(jnp.asarray(e["values"]))
    assert grad.shape == e["values"].shape and bool(jnp.isfinite(grad).all()) and float(jnp.abs(grad).sum()) > 0


def test_terminated_and_truncated_on_one_step_is_terminated(on_cpu, rng):
    """Gymnasium's meaning (issue 33): the step's bootstrap is never read."""
    e = reference.random_episodes(rng, 3, 8)
    both = e["terminated"]
    poisoned = np.where(both, np.nan, e["bootstrap_values"]).astype(np.float32)
    got = pjax.gae(e["rewards"], e["values"], both, both | e["truncated"], bootstrap_values=poisoned, time_axis=-1)
    want = pjax.gae(e["rewards"], e["values"], both, e["truncated"] & ~both, bootstrap_values=poisoned,
                    time_axis=-1)
    np.testing.assert_array_equal(np.asarray(got.advantages), np.asarray(want.advantages))
    assert np.isfinite(np.asarray(got.advantages)).all()


def _bad_convention_cases():
    e = reference.random_episodes(np.random.default_rng(1), 4, 6)
    base = (e["rewards"], e["values"], e["terminated"])
    return {
        "no bootstrap": ("gae", base, {}),
        "both bootstraps": ("gae", base, {"last_value": e["last_value"],
                                          "bootstrap_values": e["bootstrap_values"]}),
        "truncated without bootstrap_values": ("gae", base + (e["truncated"],),
                                               {"last_value": e["last_value"]}),
        "last_value shape": ("vtrace", base, {"last_value": e["last_value"][:3]}),
        "values shape": ("gae", (e["rewards"], e["values"][:, :5], e["terminated"]),
                         {"last_value": e["last_value"]}),
        "int rewards": ("gae", (e["rewards"].astype(np.int32),) + base[1:], {"last_value": e["last_value"]}),
        "float64 terminated": ("gae", base[:2] + (e["terminated"].astype(np.float64),),
                               {"last_value": e["last_value"]}),
        "time_axis 2": ("gae", base, {"last_value": e["last_value"], "time_axis": 2}),
        "time_axis str": ("gae", base, {"last_value": e["last_value"], "time_axis": "0"}),
        "gamma > 1": ("gae", base, {"last_value": e["last_value"], "gamma": 1.2}),
        "negative lambda_": ("td_lambda", base, {"last_value": e["last_value"], "lambda_": -0.1}),
        "nan rho_pg_clip": ("vtrace", base, {"last_value": e["last_value"], "rho_pg_clip": float("nan")}),
    }


@pytest.mark.parametrize("case", list(_bad_convention_cases()))
def test_conventions_bad_input_matches_numpy(case):
    kind, args, kwargs = _bad_convention_cases()[case]
    numpy_function = {"gae": puffadv.gae, "td_lambda": puffadv.td_lambda_returns,
                      "vtrace": puffadv.vtrace}[kind]
    with pytest.raises((TypeError, ValueError)) as expected:
        numpy_function(*args, **kwargs)
    with _x64(), pytest.raises(expected.type) as got:
        KINDS[kind][1](*args, **kwargs)
    assert str(got.value) == str(expected.value)


# ------------------------------------------- the NumPy-style API under JAX transforms

TRACER_WORDS = ("is a JAX tracer ({}): this function reads concrete arrays and cannot run inside jax.jit, "
                "grad or vmap; call the function of the same name in puffadv.jax there")


@pytest.mark.parametrize("transform", ["jit", "grad", "vmap"])
@pytest.mark.parametrize("traced", ["first", "later"])
def test_numpy_style_api_on_tracers_says_to_use_puffadv_jax(transform, traced):
    """Found by issue 31's probe: DLPack export messages (ConcretizationTypeError), or "terminated
    is a numpy array but rewards is a jax array" when the tracer met a NumPy argument."""
    e = reference.random_episodes(np.random.default_rng(3), 4, 6, np.float32)
    rewards, terminated, last_value = e["rewards"], e["terminated"], e["last_value"]

    def api(x):
        if traced == "first":
            out = puffadv.gae(x, rewards, terminated, last_value=last_value, time_axis=-1).advantages
        else:
            out = puffadv.episodic_cumsum(rewards, x * 0.0, time_axis=-1)  # float dones: traced under grad too
        return out.sum()

    run = {"jit": jax.jit(api), "grad": jax.grad(api), "vmap": jax.vmap(lambda x: api(x[None])[None])}[transform]
    name = "rewards" if traced == "first" else "dones"
    with pytest.raises(TypeError) as error:
        run(jnp.asarray(rewards))
    assert str(error.value).startswith(f"{name} " + TRACER_WORDS.split("(")[0]), str(error.value)
    assert "puffadv.jax" in str(error.value)


def test_linear_recurrence_and_the_puff_advantage_on_tracers_too():
    x = jnp.ones((2, 3), jnp.float32)
    with pytest.raises(TypeError, match="^inputs is a JAX tracer"):
        jax.jit(lambda a: puffadv.linear_recurrence(a, 0.5, reverse=False, time_axis=-1))(x)
    with pytest.raises(TypeError, match="^values is a JAX tracer"):
        jax.jit(lambda a: puffadv.compute_puff_advantage(a, a, a, a))(x)


def test_time_major_shapes_and_time_axis_name_the_callers_arrays():
    """Issue 31: the caller's [T, B] shapes (not their transposes), each kind's own names."""
    x, d = jnp.ones((6, 4)), jnp.zeros((6, 4), bool)
    with pytest.raises(ValueError, match=r"for the 2-D inputs, got 2$"):
        pjax.episodic_cumsum(x, d, time_axis=2)
    with pytest.raises(ValueError, match=r"^dones has shape \[5, 4\] but inputs has shape \[6, 4\]; "):
        pjax.episodic_cumsum(x, d[:5], time_axis=0)
    with pytest.raises(ValueError, match=r"^values has shape \[5, 4\] but rewards has shape \[6, 4\]; "):
        pjax.gae(x, x[:5], d, last_value=x[0], time_axis=0)
