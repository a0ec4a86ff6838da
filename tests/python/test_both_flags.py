"""Issue 33: a step flagged both terminated and truncated is terminated (Gymnasium's
meaning), in every estimator, kernel and layout: the same numbers as the call with
truncated cleared there, and its bootstrap (NaN here) never read."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv

import reference as ref

try:
    import torch
except ImportError:
    torch = None


def _call(function, e, put, time_axis):
    """One call on the episodes `e` ([B, T] NumPy) moved by `put`; every output as NumPy."""
    lay = (lambda x: x) if time_axis == -1 else (lambda x: x.T)
    m = lambda k: put(lay(e[k]))
    sums = dict(sums=True, abs_sums=True)
    if function == "gae":
        out = puffadv.gae(m("rewards"), m("values"), m("terminated"), m("truncated"),
                          bootstrap_values=m("bootstrap_values"), importance=m("importance"), **sums,
                          time_axis=time_axis)
    elif function == "td_lambda_returns":
        out = puffadv.td_lambda_returns(m("rewards"), m("values"), m("terminated"), m("truncated"),
                                        bootstrap_values=m("bootstrap_values"), advantages=True, **sums,
                                        time_axis=time_axis)
    elif function == "vtrace":
        out = puffadv.vtrace(m("rewards"), m("values"), m("terminated"), m("truncated"),
                             bootstrap_values=m("bootstrap_values"), importance=m("importance"), **sums,
                             time_axis=time_axis)
    elif function == "discounted_returns":
        out = puffadv.discounted_returns(m("rewards"), m("terminated"), m("truncated"),
                                         bootstrap_values=m("bootstrap_values"), **sums, time_axis=time_axis)
    elif function in ("n_step_returns", "n_step_long"):
        out = puffadv.n_step_returns(m("rewards"), m("values"), m("terminated"), m("truncated"),
                                     n=3 if function == "n_step_returns" else 1000,
                                     bootstrap_values=m("bootstrap_values"), advantages=True, **sums,
                                     time_axis=time_axis)
    elif function == "retrace":
        out = puffadv.retrace(m("rewards"), m("q_values"), m("next_values"), m("terminated"), m("truncated"),
                              target_probs=m("target_probs"), behaviour_probs=m("behaviour_probs"), **sums,
                              time_axis=time_axis)
    else:
        out = puffadv.q_lambda(m("rewards"), m("q_values"), m("next_values"), m("terminated"), m("truncated"),
                               greedy=m("greedy"), **sums, time_axis=time_axis)
    get = (lambda x: x.float().numpy()) if torch is not None and torch.is_tensor(out[0]) else np.asarray
    return {name: get(x) for name, x in out._asdict().items() if x is not None}


FUNCTIONS = ["gae", "td_lambda_returns", "vtrace", "discounted_returns", "n_step_returns", "n_step_long",
             "retrace", "q_lambda"]


def _episodes(rng, rows, horizon, dtype):
    """Random episodes with steps flagged both at the first, last and inner steps; the
    bootstrap and next values NaN there. Returns (both, cleared)."""
    e = ref.random_off_policy(rng, rows, horizon, dtype, end_rate=0.1)
    both = rng.random((rows, horizon)) < 0.05
    both[0, 0] = both[-1, -1] = both[rows // 2, horizon // 2] = True
    e["terminated"] = e["terminated"] | both
    e["truncated"] = e["truncated"] | both
    e["bootstrap_values"] = np.where(both, np.nan, e["bootstrap_values"]).astype(dtype)
    e["next_values"] = np.where(e["terminated"], np.nan, e["next_values"]).astype(dtype)
    return e, dict(e, truncated=e["truncated"] & ~e["terminated"])


def _compare(got, want):
    assert set(got) == set(want)
    for name in want:
        assert np.isfinite(got[name]).all(), name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("time_axis", [-1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("strided", [False, True])
def test_both_flags_are_terminated(rng, function, time_axis, dtype, strided):
    """Contiguous arrays run the engine; strided views (every other row, every third
    step of a wider buffer) the general kernels."""
    e, cleared = _episodes(rng, 37, 70, dtype)
    put = (lambda x: x) if not strided else (lambda x: np.repeat(np.repeat(x, 2, 0), 3, 1)[::2, ::3])
    _compare(_call(function, e, put, time_axis), _call(function, cleared, put, time_axis))


@pytest.mark.skipif(torch is None, reason="bfloat16 arrays come from torch")
@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("time_axis", [-1, 0])
def test_both_flags_are_terminated_in_16_bit(rng, function, time_axis):
    e, cleared = _episodes(rng, 21, 40, np.float32)
    put = lambda x: torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16 if x.dtype == np.float32 else
                                                                  torch.from_numpy(np.ascontiguousarray(x)).dtype)
    _compare(_call(function, e, put, time_axis), _call(function, cleared, put, time_axis))


def test_both_flags_against_the_reference(rng):
    """The cleared call itself against the float64 reference (terminated alone)."""
    e, cleared = _episodes(rng, 9, 33, np.float64)
    got = _call("gae", e, lambda x: x, -1)
    cleared = dict(cleared, bootstrap_values=np.nan_to_num(cleared["bootstrap_values"]))
    adv, ret = ref.standard_estimate("gae", cleared["rewards"], cleared["values"], cleared["terminated"],
                                     cleared["truncated"], None, cleared["bootstrap_values"],
                                     cleared["importance"])
    assert ref.relative_error(got["advantages"], adv) <= 1e-12
    assert ref.relative_error(got["returns"], ret) <= 1e-12
