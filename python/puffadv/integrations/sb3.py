"""Stable-Baselines3 on puffadv: its rollout buffers with puffadv's GAE.

One line, either per model::

    from puffadv.integrations.sb3 import RolloutBuffer
    model = PPO("MlpPolicy", env, rollout_buffer_class=RolloutBuffer)   # DictRolloutBuffer for dict observations

or for every on-policy algorithm of the process (PPO, A2C)::

    puffadv.integrations.sb3.patch()

The numbers are SB3's own: ``compute_returns_and_advantage(last_values, dones)``
reads SB3's buffer as it is (``[buffer_size, n_envs]`` float32, time-major) and
SB3's meaning of it: an episode's end is stored one step late, in
``episode_starts[t + 1]`` (``dones`` for the last step), and ``last_values`` is
the torch ``[n_envs, 1]`` value of the observation after the last step. SB3
handles a time limit while collecting (``rewards[t] += gamma * V(final obs)``,
and the step counts as done), so that arrives here already folded in. Equal to
SB3's loop bitwise on real buffers (tests/trainers/test_sb3.py).
"""
from __future__ import annotations

import numpy as np

import puffadv

from . import calls
from ._optional import require

_buffers = require("stable_baselines3.common.buffers", "stable-baselines3", "sb3")

__all__ = ["RolloutBuffer", "DictRolloutBuffer", "compute_returns_and_advantage", "patch", "unpatch"]


def compute_returns_and_advantage(self, last_values, dones: np.ndarray) -> None:
    """SB3's ``RolloutBuffer.compute_returns_and_advantage``, computed by :func:`puffadv.gae`:
    fills ``self.advantages`` (in place) and ``self.returns`` (``advantages + values``)."""
    # No detach: the buffers are NumPy, so a last_values that requires grad cannot keep it, and
    # SB3's own method refuses it (torch's "Can't call numpy() on Tensor that requires grad").
    last_value = np.asarray(last_values.cpu().numpy(), dtype=self.values.dtype).reshape(-1)
    # Step t ended when the observation after it started an episode: SB3's flags one step late.
    ends = np.concatenate((self.episode_starts[1:], np.asarray(dones, dtype=self.values.dtype)[None]))
    out = puffadv.gae(self.rewards, self.values, ends, last_value=last_value, gamma=self.gamma,
                      gae_lambda=self.gae_lambda, time_axis=0, advantages=self.advantages, returns=True)
    self.returns = out.returns
    calls["sb3"] += 1


class RolloutBuffer(_buffers.RolloutBuffer):
    """SB3's ``RolloutBuffer`` whose returns and advantages puffadv computes."""
    compute_returns_and_advantage = compute_returns_and_advantage


class DictRolloutBuffer(_buffers.DictRolloutBuffer):
    """SB3's ``DictRolloutBuffer`` (dict observations) whose returns and advantages puffadv computes."""
    compute_returns_and_advantage = compute_returns_and_advantage


_sb3_own = _buffers.RolloutBuffer.__dict__["compute_returns_and_advantage"]


def patch() -> None:
    """Make SB3's own ``RolloutBuffer`` (and ``DictRolloutBuffer``, which inherits the method)
    compute with puffadv, for every model made afterwards or before. Idempotent."""
    _buffers.RolloutBuffer.compute_returns_and_advantage = compute_returns_and_advantage


def unpatch() -> None:
    """Give SB3's ``RolloutBuffer`` its own method back."""
    _buffers.RolloutBuffer.compute_returns_and_advantage = _sb3_own
