"""puffadv.jax under vmap: batch axes, unbatched arguments, nested vmap, and the
standard conventions vmapped (shared pieces: jax_cases.py)."""
from __future__ import annotations

import numpy as np

import reference
from jax_cases import device, jax, on_cpu, pjax, put  # noqa: F401  (skips this module without jax)


def test_vmap_over_batch_axis(device, rng):
    batch = [reference.random_puff_inputs(rng, 6, 21) for _ in range(4)]
    stacked = [np.stack(parts) for parts in zip(*batch)]  # [4, 6, 21] each
    out = jax.jit(jax.vmap(lambda *a: pjax.compute_puff_advantage(*a, gamma=0.9)))(
        *put(device, stacked))
    assert out.shape == (4, 6, 21)
    for b, inputs in enumerate(batch):
        ref = reference.puff_advantage(*inputs, gamma=0.9)
        assert reference.relative_error(out[b], ref) <= 1e-5


def test_vmap_with_unbatched_argument_and_other_axis(device, rng):
    v, r, d, i = reference.random_puff_inputs(rng, 3 * 5, 12)
    v3 = v.reshape(3, 5, 12)
    # batch axis 1 of a [5, 3, 12] array; dones shared by every batch element
    v_axis1 = np.ascontiguousarray(v3.transpose(1, 0, 2))
    d_shared = d[:5]
    r3, i3 = r.reshape(3, 5, 12), i.reshape(3, 5, 12)
    f = jax.vmap(pjax.compute_puff_advantage, in_axes=(1, 0, None, 0))
    out = jax.jit(f)(*put(device, [v_axis1, r3, d_shared, i3]))
    for b in range(3):
        ref = reference.puff_advantage(v3[b], r3[b], d_shared, i3[b])
        assert reference.relative_error(out[b], ref) <= 1e-5


def test_nested_vmap(device, rng):
    inputs = reference.random_puff_inputs(rng, 2 * 3 * 4, 9)
    shaped = [x.reshape(2, 3, 4, 9) for x in inputs]
    out = jax.jit(jax.vmap(jax.vmap(pjax.compute_puff_advantage)))(*put(device, shaped))
    ref = reference.puff_advantage(*inputs).reshape(2, 3, 4, 9)
    assert reference.relative_error(out, ref) <= 1e-5


def test_conventions_vmap(on_cpu, rng):
    parts = [reference.random_episodes(rng, 4, 16) for _ in range(3)]
    stacked = {k: np.stack([p[k] for p in parts]) for k in parts[0]}
    f = jax.vmap(lambda r, v, t, tr, b, i: pjax.vtrace(r, v, t, tr, bootstrap_values=b, importance=i, time_axis=-1))
    vs, pg = jax.jit(f)(*(stacked[k] for k in ("rewards", "values", "terminated", "truncated",
                                                "bootstrap_values", "importance")))[:2]
    g = jax.vmap(lambda r, v, t, lv: pjax.gae(r.T, v.T, t.T, last_value=lv, time_axis=0))
    adv = jax.jit(g)(*(stacked[k] for k in ("rewards", "values", "terminated", "last_value")))[0]
    for b, p in enumerate(parts):
        ref_pg, ref_vs = reference.standard_estimate(
            "vtrace", p["rewards"], p["values"], p["terminated"], p["truncated"],
            bootstrap_values=p["bootstrap_values"], importance=p["importance"], gamma=0.99, lam=1.0)
        assert reference.relative_error(vs[b], ref_vs) <= 1e-5
        assert reference.relative_error(pg[b], ref_pg) <= 1e-5
        ref_adv = reference.standard_estimate("gae", p["rewards"], p["values"], p["terminated"],
                                              last_value=p["last_value"], gamma=0.99, lam=0.95)[0]
        assert reference.relative_error(adv[b].T, ref_adv) <= 1e-5
