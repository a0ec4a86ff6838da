"""Per-step gamma and lambda (issue 29) in puffadv.jax under sharding, on four forced
host CPU devices (forced_devices.py, as test_sharding.py): the arrays sharded over the
rows like every other input stay sharded through jax.jit, with no collective, and
the results equal the unsharded call's."""
from __future__ import annotations

import re

import numpy as np
import pytest

import forced_devices  # before jax: starts JAX with 4 host devices when it can

jax = pytest.importorskip("jax", reason="jax is not installed: the JAX handlers are untested")
from jax.sharding import AxisType, Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import puffadv.jax as pjax  # noqa: E402
import reference  # noqa: E402

four_devices = forced_devices.on_forced_devices(__file__)
COLLECTIVE = re.compile(r"\b(all-gather|all-to-all|collective-permute|all-reduce|reduce-scatter)")


@four_devices
@pytest.mark.parametrize("explicit", [False, True], ids=["auto", "explicit"])
def test_per_step_arrays_keep_row_sharding(explicit):
    kind = AxisType.Explicit if explicit else AxisType.Auto
    mesh = Mesh(np.array(jax.devices("cpu")[:4]), ("b",), axis_types=(kind,))
    sharding = NamedSharding(mesh, P("b", None))
    rng = np.random.default_rng(6)
    e = reference.random_episodes(rng, 64, 24)
    e["gamma"] = rng.uniform(0.0, 1.0, (64, 24)).astype(np.float32)
    e["lam"] = rng.uniform(0.0, 1.0, (64, 24)).astype(np.float32)
    names = ("rewards", "values", "terminated", "truncated", "bootstrap_values", "gamma", "lam")

    def f(r, v, term, trunc, boot, g, lam):
        out = pjax.vtrace(r, v, term, trunc, bootstrap_values=boot, gamma=g, lambda_=lam, time_axis=-1)
        return out.vs, out.pg_advantages

    args = [jax.device_put(e[k], sharding) for k in names]
    jitted = jax.jit(f)
    hlo = jitted.lower(*args).compile().as_text()
    assert not COLLECTIVE.search(hlo)
    vs, pg = jitted(*args)
    assert vs.sharding.is_equivalent_to(sharding, 2) and pg.sharding.is_equivalent_to(sharding, 2)
    # unsharded on one of the same host devices (NumPy inputs would go to the default backend,
    # a GPU where there is one, whose kernel may round differently)
    want_vs, want_pg = f(*(jax.device_put(e[k], jax.devices("cpu")[0]) for k in names))
    np.testing.assert_array_equal(np.asarray(vs), np.asarray(want_vs))
    np.testing.assert_array_equal(np.asarray(pg), np.asarray(want_pg))
    pg_ref, vs_ref = reference.standard_estimate("vtrace", e["rewards"], e["values"], e["terminated"],
                                                 e["truncated"], bootstrap_values=e["bootstrap_values"],
                                                 gamma=e["gamma"], lam=e["lam"])
    assert reference.relative_error(np.asarray(vs), vs_ref) <= 2e-5
    assert reference.relative_error(np.asarray(pg), pg_ref) <= 2e-5


@four_devices
def test_gradients_under_explicit_axes_with_a_replicated_operand():
    """A replicated operand beside row-sharded ones under Explicit axes (a traced 0-d gamma,
    made per step, included): the forward worked, but every gradient failed with JAX's "Custom
    VJP bwd rule must produce an output with the same type as the args" (third audit,
    2026-12-06). Each gradient now has its input's sharding and equals the unsharded call's."""
    mesh = Mesh(np.array(jax.devices("cpu")[:4]), ("b",), axis_types=(AxisType.Explicit,))
    rows, replicated = NamedSharding(mesh, P("b", None)), NamedSharding(mesh, P())
    rng = np.random.default_rng(8)
    r, v, i = (rng.standard_normal((8, 6)).astype(np.float32) for _ in range(3))
    i = np.abs(i) + 0.5
    d = rng.uniform(size=(8, 6)) < 0.2
    cases = {
        "gae: gamma, values replicated": (
            lambda g, v, r, d: pjax.gae(r, v, d, bootstrap_values=v, gamma=g, time_axis=-1).advantages,
            (np.float32(0.9), v), (None, replicated)),
        "linear_recurrence: 0-d decay": (
            lambda a, x, r, d: pjax.linear_recurrence(x, a, reverse=True, time_axis=1),
            (np.float32(0.8), r), (None, rows)),
        "linear_recurrence: decay replicated": (
            lambda a, x, r, d: pjax.linear_recurrence(x, a, reverse=False, time_axis=1),
            (i * 0.5, r), (replicated, rows)),
        "compute_puff_advantage: importance replicated": (
            lambda imp, v, r, d: pjax.compute_puff_advantage(v, r, d.astype(np.float32), imp),
            (i, v), (replicated, rows)),
    }
    for name, (f, (a, b), (a_sharding, b_sharding)) in cases.items():
        def loss(a, b, r, d):
            return (jax.numpy.sin(f(a, b, r, d)) * np.float32(1.5)).sum()

        cpu = jax.devices("cpu")[0]
        want = jax.grad(loss, (0, 1))(*(jax.device_put(x, cpu) for x in (a, b, r, d)))
        with jax.sharding.use_mesh(mesh) if hasattr(jax.sharding, "use_mesh") else jax.set_mesh(mesh):
            placed = [x if s is None else jax.device_put(x, s) for x, s in zip((a, b), (a_sharding, b_sharding))]
            got = jax.jit(jax.grad(loss, (0, 1)))(*placed, jax.device_put(r, rows), jax.device_put(d, rows))
        for g, w, x in zip(got, want, placed):
            assert np.abs(np.asarray(w)).max() > 0, name
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=2e-5, err_msg=name)
            if hasattr(x, "sharding") and np.ndim(x) == 2:
                assert g.sharding.is_equivalent_to(x.sharding, 2), name
