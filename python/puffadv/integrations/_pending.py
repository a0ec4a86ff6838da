"""THE one place to switch when two puffadv features land (issue 33; the lead merges them):

- NEXT_VALUES: GAE with an independent next value for every step (TorchRL's
  ``next_state_value``, Tianshou's ``v_s_``), the "nextvalues" helper's work;
- AUTOGRAD: gradients through puffadv's torch path (TorchRL's ``differentiable=True``,
  inputs that require grad with grad enabled), the "gradients" helper's work.

Until then, puffadv.integrations.torchrl hands those cases back to TorchRL (with
one warning), and Tianshou's GAE takes its next values through
:func:`gae_from_next_values` below, which is exact today only because Tianshou
computes in float64. When NEXT_VALUES lands: set it True, make
:func:`next_values_keywords` return puffadv's argument for them, and
:func:`gae_from_next_values` one ``puffadv.gae`` call with it. (Set True alone,
torchrl raises NotImplementedError: never a silently wrong estimate.) When
AUTOGRAD lands: set it True; torchrl then checks that gradients came through.
"""
from __future__ import annotations

import numpy as np

import puffadv

NEXT_VALUES = False  # puffadv.gae takes independent next values
AUTOGRAD = True      # puffadv's torch path is differentiable


def next_values_keywords(next_values) -> dict:
    """puffadv.gae / puffadv.vtrace's keyword arguments for next values that are not the next
    step's values inside an episode, [rows, T] like the rewards."""
    raise NotImplementedError("puffadv.integrations: NEXT_VALUES is set, but next_values_keywords() does not "
                              "say yet how puffadv takes independent next values")


def gae_from_next_values(rewards, values, next_values, ends, gamma: float, gae_lambda: float):
    """GAE of one 1-D float64 trajectory buffer where every step bootstraps from its own next
    value: ``A_t = r_t + gamma * next_values[t] - values[t] + gamma * lambda * (1 - ends[t]) * A_{t+1}``
    (``next_values`` already 0 where the value must not be read). Returns the advantages.

    Today: puffadv's GAE reads ``values[t + 1]`` inside an episode, so the difference
    ``next_values[t] - values[t + 1]`` goes into the reward (an identity; one float64
    rounding of the reward), every end is terminal (no bootstrap of puffadv's own) and the
    trace is cut there."""
    rewards, values, next_values = (np.asarray(a, dtype=np.float64) for a in (rewards, values, next_values))
    ends = np.asarray(ends, dtype=bool)
    following = np.append(values[1:], 0.0)
    folded = rewards + gamma * (next_values - np.where(ends, 0.0, following))
    out = puffadv.gae(folded[None], values[None], ends[None], last_value=np.zeros(1), gamma=gamma,
                      gae_lambda=gae_lambda, time_axis=-1, returns=False)
    return out.advantages[0]
