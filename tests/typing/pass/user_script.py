"""A user's training-step code: must type-check against the installed puffadv."""
from __future__ import annotations

import numpy as np
import numpy.typing as npt
from typing_extensions import assert_type

import puffadv
from puffadv import _core


def advantages_and_returns(values: npt.NDArray[np.float32], rewards: npt.NDArray[np.float32],
                           dones: npt.NDArray[np.float32], ratio: npt.NDArray[np.float32],
                           ) -> tuple[object, object]:
    advantages = puffadv.compute_puff_advantage(values, rewards, dones, ratio,
                                                gamma=0.99, gae_lambda=0.95, rho_clip=5.0, c_clip=1.0)
    estimate = puffadv.gae(rewards, values, dones, last_value=values[:, -1], gamma=0.99,
                           gae_lambda=0.95, time_axis=-1, abs_sums=True)
    return advantages, estimate.returns


def off_policy_targets(rewards: npt.NDArray[np.float32], q: npt.NDArray[np.float32],
                       next_q: npt.NDArray[np.float32], terminated: npt.NDArray[np.bool_],
                       pi: npt.NDArray[np.float32], mu: npt.NDArray[np.float32]) -> tuple[object, object, object]:
    """The estimator family (issue 20): Retrace, n-step and returns-to-go, episodic sums."""
    retrace = puffadv.retrace(rewards, q, next_q, terminated, target_probs=pi, behaviour_probs=mu,
                              gamma=0.99, lambda_=0.95, c_clip=1.0, abs_sums=True, time_axis=-1)
    assert_type(retrace, puffadv.Estimate)
    n_step = puffadv.n_step_returns(rewards, q, terminated, n=3, last_value=q[:, -1], time_axis=-1)
    to_go = puffadv.discounted_returns(rewards, terminated, gamma=0.99, time_axis=-1)
    counter = puffadv.episodic_cumsum(np.ones_like(rewards), terminated, boundary="starts_at", time_axis=-1)
    return retrace.returns, n_step.returns, (to_go.returns, counter)


def refuse_fallback() -> None:
    puffadv.set_fallback("error")
    try:
        print(puffadv.backend())
    except puffadv.BackendUnavailableError as error:
        print(error)


# The compiled core's stubs (_core.pyi) are installed: its results are typed, not Any.
assert_type(_core.cpu_thread_count(), int)
assert_type(_core.fallback_mode(), str)
