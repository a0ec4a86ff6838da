"""n_step_returns with 64 < n < T (the CPU's O(T) long-window pass) in float64 (issue 31).

That pass took the TD(lambda) return minus the part past the window, which cancelled:
with n = 65 and a bootstrap of 1e15 that the window never reaches, G_0 was 4.375 where
it is 4.34537. docs/semantics.md promises 1e-12 in float64, for every n.
"""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
import reference


@pytest.mark.parametrize("n", [64, 65, 66, 100, 129, 200])
@pytest.mark.parametrize("time_axis", [0, 1])
def test_long_windows_keep_float64_accuracy_beside_huge_values(n, time_axis):
    rng = np.random.default_rng(n)
    rows, horizon = 3, 301
    rewards = rng.standard_normal((rows, horizon))
    values = rng.standard_normal((rows, horizon))
    terminated = rng.random((rows, horizon)) < 0.004
    truncated = np.zeros((rows, horizon), bool)
    truncated[:, -1] = True
    truncated[0, 150] = True  # an episode end inside some windows
    terminated &= ~truncated
    bootstrap = rng.standard_normal((rows, horizon))
    bootstrap[:, -1] = 1e15  # read only by the windows that reach the row's end
    values[1, 250] = 1e14  # one huge value past many windows
    want = reference.n_step_returns(rewards, values, terminated, truncated, bootstrap_values=bootstrap, n=n,
                                    gamma=0.99, lam=0.9)

    def lay(x):
        return np.ascontiguousarray(x if time_axis == 1 else x.T)

    got = puffadv.n_step_returns(lay(rewards), lay(values), lay(terminated), lay(truncated), n=n,
                                 bootstrap_values=lay(bootstrap), gamma=0.99, lambda_=0.9, time_axis=time_axis,
                                 advantages=True)
    returns = got.returns if time_axis == 1 else got.returns.T
    advantages = got.advantages if time_axis == 1 else got.advantages.T
    scale = np.maximum(1.0, np.abs(want))
    assert (np.abs(returns - want) / scale).max() <= 1e-12
    assert (np.abs(advantages - (want - values)) / np.maximum(1.0, np.abs(want - values))).max() <= 1e-12


def test_the_issue_example():
    horizon, n = 100, 65
    rewards = np.ones((1, horizon))
    values = np.zeros((1, horizon))
    no = np.zeros((1, horizon), bool)
    got = puffadv.n_step_returns(rewards, values, no, n=n, last_value=np.array([1e15]), gamma=0.99,
                                 lambda_=1.0, time_axis=1).returns
    want = reference.n_step_returns(rewards, values, no, last_value=np.array([1e15]), n=n, gamma=0.99, lam=1.0)
    assert abs(got[0, 0] - want[0, 0]) <= 1e-12 * abs(want[0, 0])
    np.testing.assert_allclose(got, want, rtol=1e-12)
