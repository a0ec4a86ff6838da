"""Per-step gamma and lambda (issue 29) on every surface besides NumPy: torch tensors
through the Python API (eager and torch.compile), torch.ops.puffadv (the optional
gamma_steps / lambda_steps tensors appended to each schema, positional calls
unchanged), and puffadv.jax (eager, jit with traced arrays and traced 0-d scalars,
vmap). Each equals the NumPy call, itself checked against the float64 reference
(test_per_step.py)."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
import reference as ref

ROWS, HORIZON = 6, 37


@pytest.fixture
def e():
    rng = np.random.default_rng(12)
    d = ref.random_off_policy(rng, ROWS, HORIZON, np.float32)
    d["gamma"] = rng.uniform(0.0, 1.0, (ROWS, HORIZON)).astype(np.float32)
    d["lam"] = rng.uniform(0.0, 1.0, (ROWS, HORIZON)).astype(np.float32)
    return d


def _numpy_gae(e, time_major=False):
    t = (lambda x: np.ascontiguousarray(x.T)) if time_major else (lambda x: x)
    return puffadv.gae(t(e["rewards"]), t(e["values"]), t(e["terminated"]), t(e["truncated"]),
                       bootstrap_values=t(e["bootstrap_values"]), importance=t(e["importance"]), gamma=t(e["gamma"]),
                       gae_lambda=t(e["lam"]), time_axis=0 if time_major else -1)


# ---------------------------------------------------------------- torch

@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("time_major", [False, True])
def test_torch_tensors_through_the_python_api(torch, e, time_major):
    t = lambda x: torch.from_numpy(np.ascontiguousarray(x.T if time_major else x))
    got = puffadv.gae(t(e["rewards"]), t(e["values"]), t(e["terminated"]), t(e["truncated"]),
                      bootstrap_values=t(e["bootstrap_values"]), importance=t(e["importance"]), gamma=t(e["gamma"]),
                      gae_lambda=t(e["lam"]), time_axis=0 if time_major else -1)
    want = _numpy_gae(e, time_major)
    np.testing.assert_array_equal(got.advantages.numpy(), want.advantages)
    np.testing.assert_array_equal(got.returns.numpy(), want.returns)


def test_torch_ops_take_the_appended_optional_tensors(torch, e):
    pytest.importorskip("puffadv.torch")
    ops = torch.ops.puffadv
    t = torch.from_numpy
    args = (t(e["rewards"]), t(e["values"]), t(e["terminated"]), t(e["truncated"]), None, t(e["bootstrap_values"]),
            t(e["importance"]))
    adv, ret = ops.gae(*args, 0.5, 0.5, 1.0, 1.0, -1, t(e["gamma"]), t(e["lam"]))
    want = _numpy_gae(e)
    np.testing.assert_array_equal(adv.numpy(), want.advantages)
    np.testing.assert_array_equal(ret.numpy(), want.returns)
    # By name, one of the two: the other is the scalar.
    ret = ops.td_lambda_returns(*args, gamma=0.9, lambda_=0.8, gamma_steps=None, lambda_steps=t(e["lam"]),
                                 time_axis=-1)
    want = puffadv.td_lambda_returns(e["rewards"], e["values"], e["terminated"], e["truncated"],
                                     bootstrap_values=e["bootstrap_values"], importance=e["importance"], gamma=0.9,
                                     lambda_=e["lam"], time_axis=-1)
    np.testing.assert_array_equal(ret.numpy(), want.returns)
    got = ops.discounted_returns(t(e["rewards"]), t(e["terminated"]), gamma_steps=t(e["gamma"]), time_axis=-1)
    want = puffadv.discounted_returns(e["rewards"], e["terminated"], gamma=e["gamma"], time_axis=-1)
    np.testing.assert_array_equal(got.numpy(), want.returns)
    got = ops.eligibility_traces(t(e["rewards"]), t(e["terminated"]), 1.0, 1.0, gamma_steps=t(e["gamma"]),
                                 lambda_steps=t(e["lam"]), time_axis=-1)
    want = puffadv.eligibility_traces(e["rewards"], e["terminated"], gamma=e["gamma"], lambda_=e["lam"],
                                      time_axis=-1)
    np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(ValueError, match=r"^gamma has shape \[6, 36\] but rewards has shape \[6, 37\]"):
        ops.gae(*args, gamma_steps=t(e["gamma"][:, 1:].copy()), time_axis=-1)
    with pytest.raises(TypeError, match=r"^gae_lambda has dtype float64 but rewards has float32"):
        ops.gae(*args, lambda_steps=t(e["lam"].astype(np.float64)), time_axis=-1)


def test_torch_compile(torch, e):
    t = torch.from_numpy

    @torch.compile(fullgraph=True, backend="eager")
    def compiled(r, v, term, trunc, boot, imp, g, lam):
        return puffadv.gae(r, v, term, trunc, bootstrap_values=boot, importance=imp, gamma=g, gae_lambda=lam,
                           time_axis=-1)

    got = compiled(t(e["rewards"]), t(e["values"]), t(e["terminated"]), t(e["truncated"]), t(e["bootstrap_values"]),
                   t(e["importance"]), t(e["gamma"]), t(e["lam"]))
    want = _numpy_gae(e)
    np.testing.assert_array_equal(got.advantages.numpy(), want.advantages)


# ---------------------------------------------------------------- JAX

@pytest.fixture
def jax():
    jax = pytest.importorskip("jax")
    with jax.default_device(jax.devices("cpu")[0]):
        yield jax


@pytest.mark.parametrize("time_major", [False, True])
def test_jax_eager_and_jit(jax, e, time_major):
    import puffadv.jax as pjax
    t = (lambda x: np.ascontiguousarray(x.T)) if time_major else (lambda x: x)
    axis = 0 if time_major else -1
    want = _numpy_gae(e)  # XLA hands time-major data over transposed: the batch-major call's numbers
    back = (lambda x: np.asarray(x).T) if time_major else np.asarray

    def call(r, v, term, trunc, boot, imp, g, lam):
        return pjax.gae(r, v, term, trunc, bootstrap_values=boot, importance=imp, gamma=g, gae_lambda=lam,
                        time_axis=axis)

    arrays = [t(e[k]) for k in ("rewards", "values", "terminated", "truncated", "bootstrap_values", "importance",
                                "gamma", "lam")]
    for fn in (call, jax.jit(call)):
        got = fn(*arrays)
        np.testing.assert_array_equal(back(got.advantages), want.advantages)
        np.testing.assert_array_equal(back(got.returns), want.returns)


def test_jax_traced_zero_d_gamma_is_broadcast(jax, e):
    import jax.numpy as jnp
    import puffadv.jax as pjax
    fn = jax.jit(lambda r, term, g: pjax.discounted_returns(r, term, gamma=g, time_axis=-1).returns)
    got = fn(e["rewards"], e["terminated"], jnp.float32(0.9))
    want = puffadv.discounted_returns(e["rewards"], e["terminated"], gamma=0.9, time_axis=-1).returns
    np.testing.assert_array_equal(np.asarray(got), want)


def test_jax_vmap(jax, e):
    import jax.numpy as jnp
    import puffadv.jax as pjax
    rng = np.random.default_rng(3)
    gammas = rng.uniform(0.0, 1.0, (3, ROWS, HORIZON)).astype(np.float32)
    fn = jax.vmap(lambda g: pjax.q_lambda(e["rewards"], e["q_values"], e["next_values"], e["terminated"],
                                          e["truncated"], gamma=g, lambda_=e["lam"], time_axis=-1).returns)
    got = np.asarray(fn(jnp.asarray(gammas)))
    for k in range(3):
        want = puffadv.q_lambda(e["rewards"], e["q_values"], e["next_values"], e["terminated"], e["truncated"],
                                gamma=gammas[k], lambda_=e["lam"], time_axis=-1).returns
        np.testing.assert_array_equal(got[k], want)
