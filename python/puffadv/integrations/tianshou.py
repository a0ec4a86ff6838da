"""Tianshou on puffadv: ``Algorithm.compute_episodic_return`` (A2C, PPO, NPG, TRPO,
REINFORCE and the rest of Tianshou 2's on-policy algorithms) computed by puffadv.

One line, before training::

    import puffadv.integrations.tianshou
    puffadv.integrations.tianshou.patch()

or call :func:`compute_episodic_return` where Tianshou's would be called (same
arguments, same ``(returns, advantages)``). Tianshou's buffers are 1-D: the
sub-buffers of a ``VectorReplayBuffer`` concatenated, episodes one after another,
each ended by ``terminated | truncated`` or by being unfinished (the last step
collected). Every step bootstraps from ``v_s_``, the value of its own
``obs_next`` (0 after a termination), so a truncated episode is bootstrapped from
its final observation. Tianshou's preprocessing is kept as it is; puffadv runs
the recurrence (Tianshou's ``_gae``), in float64 like Tianshou.
"""
from __future__ import annotations

import numpy as np

import puffadv

from . import calls
from ._optional import require

_base = require("tianshou.algorithm.algorithm_base", "tianshou", "tianshou")
_data = require("tianshou.data", "tianshou", "tianshou")

__all__ = ["compute_episodic_return", "patch", "unpatch"]


def compute_episodic_return(batch, buffer, indices, v_s_=None, v_s=None, gamma: float = 0.99,
                            gae_lambda: float = 0.95):
    """Tianshou's ``Algorithm.compute_episodic_return``: ``(returns, advantages)``, 1-D float64."""
    # Tianshou's own preparation of its arguments, unchanged (tianshou/algorithm/algorithm_base.py).
    rew = batch.rew
    if v_s_ is None:
        assert np.isclose(gae_lambda, 1.0)
        v_s_ = np.zeros_like(rew)
    else:
        v_s_ = _data.to_numpy(v_s_.flatten())
        v_s_ = v_s_ * _base.Algorithm.value_mask(buffer, indices)
    v_s = np.roll(v_s_, 1) if v_s is None else _data.to_numpy(v_s.flatten())
    end_flag = np.logical_or(batch.terminated, batch.truncated)
    end_flag[np.isin(indices, buffer.unfinished_index())] = True
    advantage = _gae(rew, v_s, v_s_, end_flag, gamma, gae_lambda)
    calls["tianshou"] += 1
    return advantage + v_s, advantage


def _gae(rewards, values, next_values, ends, gamma: float, gae_lambda: float):
    """Tianshou's ``_gae`` of one 1-D float64 buffer, every step bootstrapping from its own
    next value: ``A_t = r_t + gamma * next_values[t] - values[t] + gamma * lambda * (1 -
    ends[t]) * A_{t+1}`` (``next_values`` already 0 where Tianshou must not read them).

    puffadv's next_values= reads V'_t = next_values[t] at every step; each end is a
    truncation there (it cuts the trace and bootstraps from next_values[t], which is 0
    where Tianshou says the episode terminated), so nothing is folded into the rewards."""
    rewards, values, next_values = (np.asarray(a, dtype=np.float64) for a in (rewards, values, next_values))
    ends = np.asarray(ends, dtype=bool)
    out = puffadv.gae(rewards[None], values[None], np.zeros((1, ends.size), dtype=bool), ends[None],
                      next_values=next_values[None], gamma=gamma, gae_lambda=gae_lambda, time_axis=-1,
                      returns=False)
    return out.advantages[0]


_tianshou_own = _base.Algorithm.__dict__["compute_episodic_return"]


def patch() -> None:
    """Make ``tianshou.algorithm.Algorithm.compute_episodic_return`` (inherited by every
    algorithm) puffadv's. Idempotent."""
    _base.Algorithm.compute_episodic_return = staticmethod(compute_episodic_return)


def unpatch() -> None:
    """Give Tianshou its own ``compute_episodic_return`` back."""
    _base.Algorithm.compute_episodic_return = _tianshou_own
