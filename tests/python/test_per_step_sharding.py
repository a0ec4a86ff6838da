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
