"""Decays whose product overflows while the recurrence stays finite (issue 31).

The vectorised scans compose W steps' maps at once, multiplying W decays
k_t = gamma lambda c_t together. With large importance ratios and clips that
product overflows (1e5 ** 8 > float32's range) where every step's own
arithmetic is finite, and inf * 0 then put NaN where the recurrence gives 0
(GAE on a [1, 64] zero input: 57 NaN of 64). Every layout must give the
recurrence's value: compared here with the float64 step-by-step references.
"""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
import reference

DTYPES = [np.float32, np.float64]
HORIZONS = [1, 7, 8, 9, 64, 129]


def _layout(x, time_axis):
    """[rows, horizon] data in the layout of time_axis (1: as is; 0: a [horizon, rows] copy)."""
    return np.ascontiguousarray(x) if time_axis == 1 else np.ascontiguousarray(x.T)


def _back(x, time_axis):
    return np.asarray(x) if time_axis == 1 else np.asarray(x).T


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("horizon", HORIZONS)
@pytest.mark.parametrize("time_axis", [0, 1])
def test_zero_inputs_with_huge_decays_give_zero(dtype, horizon, time_axis):
    rows = 3
    zero = _layout(np.zeros((rows, horizon), dtype), time_axis)
    ratio = _layout(np.full((rows, horizon), 1e5, dtype), time_axis)
    done = _layout(np.zeros((rows, horizon), bool), time_axis)
    last = np.zeros(rows, dtype)
    big = dict(importance=ratio, rho_clip=1e5, c_clip=1e5, gamma=1.0, time_axis=time_axis)
    gae = puffadv.gae(zero, zero, done, last_value=last, gae_lambda=1.0, **{"time_axis": -1, **big})
    td = puffadv.td_lambda_returns(zero, zero, done, last_value=last, lambda_=1.0, advantages=True, **{"time_axis": -1, **big})
    vt = puffadv.vtrace(zero, zero, done, last_value=last, lambda_=1.0, rho_pg_clip=1e5, **{"time_axis": -1, **big})
    target = _layout(np.full((rows, horizon), 1.0, dtype), time_axis)
    behaviour = _layout(np.full((rows, horizon), 1e-5, dtype), time_axis)
    rt = puffadv.retrace(zero, zero, zero, done, target_probs=target, behaviour_probs=behaviour, gamma=1.0,
                         lambda_=1.0, c_clip=1e5, time_axis=time_axis)
    for out in (gae.advantages, gae.returns, td.returns, td.advantages, vt.vs, vt.pg_advantages,
                rt.returns, rt.advantages):
        assert np.array_equal(np.asarray(out), np.zeros_like(np.asarray(out))), out
    puff = puffadv.compute_puff_advantage(zero.T.copy() if time_axis == 0 else zero, zero.T.copy()
                                          if time_axis == 0 else zero, np.zeros((rows, horizon), dtype),
                                          np.full((rows, horizon), 1e5, dtype), None, 1.0, 1.0, 1e5, 1e5)
    assert np.array_equal(puff, np.zeros_like(puff))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("time_axis", [0, 1])
def test_episodes_cut_between_huge_decays_match_the_reference(dtype, time_axis):
    # Episodes of 1 to 3 steps with decays of 1e10: within an episode the values stay
    # finite, but W = 8 (4) decays multiplied across the episode ends overflowed and
    # met the done's 0 (inf * 0 = NaN).
    rng = np.random.default_rng(31)
    rows, horizon = 5, 97
    rewards = rng.standard_normal((rows, horizon)).astype(dtype)
    values = rng.standard_normal((rows, horizon)).astype(dtype)
    terminated = np.zeros((rows, horizon), bool)
    terminated[:, ::3] = True
    terminated[:, 1::7] = True
    ratio = np.full((rows, horizon), 1e10 if dtype == np.float32 else 1e100, dtype)
    last = rng.standard_normal(rows).astype(dtype)
    scalars = dict(gamma=1.0, rho_clip=1.0, c_clip=float(ratio[0, 0]))
    want_adv, want_ret = reference.standard_estimate("gae", rewards, values, terminated, last_value=last,
                                                     importance=ratio, lam=1.0, **scalars)
    assert np.isfinite(want_adv).all()
    got = puffadv.gae(_layout(rewards, time_axis), _layout(values, time_axis), _layout(terminated, time_axis),
                      last_value=last, importance=_layout(ratio, time_axis), gae_lambda=1.0,
                      time_axis=time_axis, **scalars)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(_back(got.advantages, time_axis), want_adv, rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(_back(got.returns, time_axis), want_ret, rtol=tol, atol=tol * 10)
    # The puff advantage (PufferLib's index convention: dones[t + 1] ends step t).
    dones = terminated.astype(dtype)
    want = reference.puff_advantage(values, rewards, dones, ratio, 1.0, 1.0, 1.0, float(ratio[0, 0]))
    got = puffadv.compute_puff_advantage(values, rewards, dones, ratio, None, 1.0, 1.0, 1.0, float(ratio[0, 0]))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 10)


def test_a_nan_input_still_reaches_the_formulas_places():
    # The step-by-step pass that replaces an overflowing row keeps IEEE arithmetic:
    # a NaN reward is NaN at its step and every earlier one of its row, nowhere else.
    rng = np.random.default_rng(7)
    rewards = rng.standard_normal((3, 40)).astype(np.float32)
    values = rng.standard_normal((3, 40)).astype(np.float32)
    terminated = np.zeros((3, 40), bool)
    rewards[1, 20] = np.nan
    got = puffadv.gae(rewards, values, terminated, last_value=np.zeros(3, np.float32), time_axis=1).advantages
    assert np.isnan(got[1, :21]).all() and np.isfinite(got[1, 21:]).all()
    assert np.isfinite(got[[0, 2]]).all()
