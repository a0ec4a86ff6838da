"""THE one place that said when two puffadv features landed (issue 33): both have.

- NEXT_VALUES: GAE, TD(lambda) and V-trace with an independent next value for every
  step (TorchRL's ``next_state_value``, Tianshou's ``v_s_``): puffadv's ``next_values=``
  (issue 29), differentiable since the merge of issue 33's layouts;
- AUTOGRAD: gradients through puffadv's torch path (TorchRL's ``differentiable=True``,
  inputs that require grad with grad enabled).

puffadv.integrations.torchrl passes independent next values as ``next_values=`` (their
gradient reaches next_state_value, as through TorchRL's own), and Tianshou's GAE takes
its next values through :func:`gae_from_next_values` below, one ``puffadv.gae`` call.
"""
from __future__ import annotations

import numpy as np

import puffadv

NEXT_VALUES = True   # puffadv.gae takes independent next values
AUTOGRAD = True      # puffadv's torch path is differentiable


def next_values_keywords(next_values) -> dict:
    """puffadv.gae / td_lambda_returns / vtrace's keyword arguments for next values that are
    not the next step's values inside an episode, [rows, T] like the rewards."""
    return {"next_values": next_values}


def gae_from_next_values(rewards, values, next_values, ends, gamma: float, gae_lambda: float):
    """GAE of one 1-D float64 trajectory buffer where every step bootstraps from its own next
    value: ``A_t = r_t + gamma * next_values[t] - values[t] + gamma * lambda * (1 - ends[t]) * A_{t+1}``
    (``next_values`` already 0 where the value must not be read). Returns the advantages.

    puffadv's next_values= reads V'_t = next_values[t] at every step; every end is a
    truncation there (it cuts the trace; its bootstrap is next_values[t], 0 where Tianshou
    says the episode terminated), so nothing is folded into the rewards."""
    rewards, values, next_values = (np.asarray(a, dtype=np.float64) for a in (rewards, values, next_values))
    ends = np.asarray(ends, dtype=bool)
    out = puffadv.gae(rewards[None], values[None], np.zeros((1, ends.size), dtype=bool), ends[None],
                      next_values=next_values[None], gamma=gamma, gae_lambda=gae_lambda, time_axis=-1,
                      returns=False)
    return out.advantages[0]
