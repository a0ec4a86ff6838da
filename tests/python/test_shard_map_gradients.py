"""puffadv.jax inside ``jax.shard_map`` with ``check_vma`` at JAX's default (True), on
four forced host CPU devices (forced_devices.py, as test_sharding.py).

A custom call's outputs used to be typed invariant over the manual mesh axes although
they vary with the rows: JAX then summed their cotangents over the devices before the
backward, and ``jax.grad`` of ``shard_map(psum(sum(W * f(...))))`` was silently wrong
(gae with importance, vtrace, n_step_returns, the puff advantage) or raised "Custom VJP
bwd rule must produce an output with the same type" (the others); ``out_specs=P()`` of a
per-device result was accepted. Here every function's gradient through shard_map equals
the same loss's gradient computed on the whole arrays without shard_map."""
from __future__ import annotations

import numpy as np
import pytest

import forced_devices  # before jax: starts JAX with 4 host devices when it can

jax = pytest.importorskip("jax", reason="jax is not installed: the JAX handlers are untested")
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import puffadv.jax as pjax  # noqa: E402

four_devices = forced_devices.on_forced_devices(__file__)
ROWS, HORIZON = 8, 6  # two rows per device


@pytest.fixture(autouse=True)
def on_cpu():
    with jax.default_device(jax.devices("cpu")[0]):
        yield


def _mesh():
    return Mesh(np.array(jax.devices("cpu")[:4]), ("b",))


def _arrays(seed=0):
    """Float arrays by name (the differentiable ones) and flags, [ROWS, HORIZON] or [ROWS]."""
    rng = np.random.default_rng(seed)

    def u(lo, hi, *shape):
        return jnp.asarray(rng.uniform(lo, hi, shape or (ROWS, HORIZON)), jnp.float32)

    floats = {"r": u(-1, 1), "v": u(-1, 1), "lv": u(-1, 1, ROWS), "nv": u(-1, 1), "imp": u(.3, 1.7),
              "g": u(.5, 1), "l": u(.3, 1), "tp": u(.1, 1), "bp": u(.1, 1)}
    flags = {"term": jnp.asarray(rng.random((ROWS, HORIZON)) < .2),
             "greedy": jnp.asarray(rng.random((ROWS, HORIZON)) < .7)}
    return floats, flags


T = dict(time_axis=-1)
# name: (differentiable arrays, call(floats, flags) -> outputs)
CASES = {
    "gae": (("r", "v", "lv"), lambda a, f: pjax.gae(a["r"], a["v"], f["term"], last_value=a["lv"], gamma=.9, **T)),
    "gae(importance)": (("r", "v", "lv", "imp"), lambda a, f: pjax.gae(
        a["r"], a["v"], f["term"], last_value=a["lv"], importance=a["imp"], gamma=.9, **T)),
    "td_lambda(per-step)": (("r", "v", "lv", "g", "l"), lambda a, f: pjax.td_lambda_returns(
        a["r"], a["v"], f["term"], last_value=a["lv"], gamma=a["g"], lambda_=a["l"], **T)),
    "vtrace": (("r", "v", "lv", "imp"), lambda a, f: pjax.vtrace(
        a["r"], a["v"], f["term"], last_value=a["lv"], importance=a["imp"], **T)),
    "discounted_returns": (("r", "lv"), lambda a, f: pjax.discounted_returns(
        a["r"], f["term"], last_value=a["lv"], gamma=.9, **T)),
    "n_step_returns": (("r", "v", "lv"), lambda a, f: pjax.n_step_returns(
        a["r"], a["v"], f["term"], n=3, last_value=a["lv"], gamma=.9, **T)),
    "retrace": (("r", "v", "nv", "tp", "bp"), lambda a, f: pjax.retrace(
        a["r"], a["v"], a["nv"], f["term"], target_probs=a["tp"], behaviour_probs=a["bp"], gamma=.9, **T)),
    "q_lambda": (("r", "v", "nv"), lambda a, f: pjax.q_lambda(
        a["r"], a["v"], a["nv"], f["term"], greedy=f["greedy"], gamma=.9, **T)),
    "episodic_cumsum": (("r", "lv"), lambda a, f: (pjax.episodic_cumsum(a["r"], f["term"], seed=a["lv"], **T),)),
    "eligibility_traces": (("r", "lv"), lambda a, f: (pjax.eligibility_traces(
        a["r"], f["term"], gamma=.9, lambda_=.8, seed=a["lv"], **T),)),
    "compute_puff_advantage": (("v", "r", "g", "imp"), lambda a, f: (pjax.compute_puff_advantage(
        a["v"], a["r"], 1 - a["g"], a["imp"], gamma=.9, gae_lambda=.8),)),  # float dones: differentiable
    "linear_recurrence": (("r", "g", "lv"), lambda a, f: (pjax.linear_recurrence(
        a["r"], a["g"], reverse=True, time_axis=1, seed=a["lv"]),)),
}


def _loss(call, floats, flags, weights):
    """sum_k sum(W_k * output_k): every output's cotangent differs from row to row."""
    outputs = [o for o in call(floats, flags) if o is not None]
    return sum(jnp.sum(w * o) for w, o in zip(weights, outputs))


def _close(got, want):
    for name in want:
        np.testing.assert_allclose(np.asarray(got[name]), np.asarray(want[name]), rtol=2e-5, atol=2e-6,
                                   err_msg=name)


@four_devices
@pytest.mark.parametrize("case", list(CASES))
def test_grad_through_shard_map_psum_equals_the_whole_arrays_grad(case):
    names, call = CASES[case]
    floats, flags = _arrays()
    floats = {k: floats[k] for k in names}
    rng = np.random.default_rng(1)
    weights = [jnp.asarray(rng.uniform(-1, 1, (ROWS, HORIZON)), jnp.float32) for _ in range(2)]

    def block(floats, flags, weights):
        return jax.lax.psum(_loss(call, floats, flags, weights), "b")

    sharded = jax.shard_map(block, mesh=_mesh(), in_specs=P("b"), out_specs=P())  # check_vma: default
    want = jax.grad(lambda a: _loss(call, a, flags, weights))(floats)
    _close(jax.jit(jax.grad(sharded))(floats, flags, weights), want)
    _close(jax.grad(sharded)(floats, flags, weights), want)  # eager too
    np.testing.assert_allclose(float(sharded(floats, flags, weights)), float(_loss(call, floats, flags, weights)),
                               rtol=1e-5)


@four_devices
def test_an_operand_invariant_over_the_mesh_gets_its_gradient_summed_over_devices():
    """decay replicated (in_specs P()): every device reads the same [2, T] block, so its
    gradient is the sum of the four blocks' gradients (JAX's psum, transposing the cast)."""
    floats, _ = _arrays()
    x, decay, w = floats["r"], floats["g"][:2], floats["v"]

    def block(x, decay, w):
        y = pjax.linear_recurrence(x, decay, reverse=False, time_axis=1)
        return jax.lax.psum(jnp.sum(w * y), "b")

    sharded = jax.shard_map(block, mesh=_mesh(), in_specs=(P("b"), P(), P("b")), out_specs=P())
    got = jax.jit(jax.grad(sharded, (0, 1)))(x, decay, w)
    whole = lambda x, d: jnp.sum(w * pjax.linear_recurrence(x, jnp.tile(d, (4, 1)), reverse=False,  # noqa: E731
                                                            time_axis=1))
    want = jax.grad(whole, (0, 1))(x, decay)
    _close(dict(enumerate(got)), dict(enumerate(want)))


@four_devices
def test_traced_scalar_gamma_through_shard_map():
    """A meta-gradient: a 0-d gamma, replicated, differentiated through every device's rows."""
    floats, flags = _arrays()
    r, v, lv, w = floats["r"], floats["v"], floats["lv"], floats["nv"]

    def loss(gamma, r, v, lv, term, w):
        return jnp.sum(w * pjax.gae(r, v, term, last_value=lv, gamma=gamma, **T).advantages)

    sharded = jax.shard_map(lambda g, *a: jax.lax.psum(loss(g, *a), "b"), mesh=_mesh(),
                            in_specs=(P(),) + (P("b"),) * 5, out_specs=P())
    got = jax.jit(jax.grad(sharded))(jnp.float32(.9), r, v, lv, flags["term"], w)
    want = jax.grad(loss)(jnp.float32(.9), r, v, lv, flags["term"], w)
    np.testing.assert_allclose(float(got), float(want), rtol=2e-5)


@four_devices
@pytest.mark.parametrize("function", ["gae", "linear_recurrence", "compute_puff_advantage"])
def test_a_per_device_result_is_not_replicated(function):
    """out_specs=P() claims the result is the same on every device; it is each device's own
    rows, and JAX refuses the claim (as for its own operations) now that the type says so."""
    floats, flags = _arrays()
    calls = {"gae": lambda a, f: pjax.gae(a["r"], a["v"], f["term"], last_value=a["lv"], **T).advantages,
             "linear_recurrence": lambda a, f: pjax.linear_recurrence(a["r"], a["g"], reverse=False, time_axis=1),
             "compute_puff_advantage": lambda a, f: pjax.compute_puff_advantage(a["v"], a["r"], f["term"], a["imp"])}
    body = jax.shard_map(calls[function], mesh=_mesh(), in_specs=P("b"), out_specs=P())
    with pytest.raises(ValueError, match="out_specs"):
        body(floats, flags)
    # with the right out_specs, the rows come back in place
    rows = jax.shard_map(calls[function], mesh=_mesh(), in_specs=P("b"), out_specs=P("b"))(floats, flags)
    np.testing.assert_allclose(np.asarray(rows), np.asarray(calls[function](floats, flags)), rtol=1e-5, atol=1e-6)
