"""CleanRL on puffadv: its GAE loop as one call, in CleanRL's own variables.

In ``ppo.py`` (and ``ppo_continuous_action.py``, ``ppo_atari.py``), the block
``with torch.no_grad(): next_value = ...; advantages = ...; for t in reversed(...)``
becomes::

    from puffadv.integrations.cleanrl import gae
    with torch.no_grad():
        next_value = agent.get_value(next_obs).reshape(1, -1)
        advantages, returns = gae(rewards, values, dones, next_done, next_value, args.gamma, args.gae_lambda)

Equal to CleanRL's loop (tests/trainers/test_cleanrl.py). CleanRL stores
``dones[t]`` = "the observation at t starts an episode", so step ``t`` ended when
``dones[t + 1]`` (``next_done`` for the last step); and it merges a time limit
into termination (``next_done = terminations | truncations``), which cuts the
value of a time-limited episode's final observation.

Correct time limits: store each step's ``terminations`` and ``truncations`` as
``env.step`` returned them (the same step as ``rewards[step]``) and, where a step
was truncated, ``final_values[step] = V(final observation)`` (Gymnasium >= 1.0:
``gym.vector.SyncVectorEnv(..., autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)``
puts it in ``infos["final_obs"]``); then pass them by keyword and ``dones`` /
``next_done`` are not read. A step flagged both terminated and truncated is
terminated (Gymnasium's meaning). docs/integrations.md has the whole recipe.
"""
from __future__ import annotations

import puffadv

from . import calls
from ._optional import require

torch = require("torch", "torch", "cleanrl")

__all__ = ["gae"]


def gae(rewards, values, dones, next_done, next_value, gamma: float, gae_lambda: float, *,
        terminations=None, truncations=None, final_values=None) -> tuple:
    """CleanRL's GAE: ``(advantages, returns)``, each ``[num_steps, num_envs]`` like ``rewards``.

    ``rewards``, ``values``, ``dones``: ``[num_steps, num_envs]`` (CleanRL's buffers);
    ``next_done``: ``[num_envs]``; ``next_value``: ``[1, num_envs]`` (or ``[num_envs]``),
    V of the observation after the last step. With ``terminations``, ``truncations``
    and ``final_values`` (all three, ``[num_steps, num_envs]``, flags of the step that
    produced ``rewards[step]``), a truncated step bootstraps from its final
    observation's value and only a terminated one cuts it.
    """
    last_value = next_value.reshape(-1)
    time_limits = (terminations, truncations, final_values)
    if all(a is None for a in time_limits):
        # Step t ended when the observation after it started an episode: CleanRL's flags one step late.
        ends = torch.cat((dones[1:], next_done.reshape(1, -1).to(dones.dtype)))
        out = puffadv.gae(rewards, values, ends, last_value=last_value, gamma=gamma, gae_lambda=gae_lambda,
                          time_axis=0)
    elif any(a is None for a in time_limits):
        missing = ", ".join(n for n, a in zip(("terminations", "truncations", "final_values"), time_limits)
                            if a is None)
        raise ValueError(f"gae: time limits need terminations, truncations and final_values together; "
                         f"missing: {missing}")
    else:
        terminated = terminations != 0
        truncated = (truncations != 0) & ~terminated  # both flagged: terminated (Gymnasium's meaning)
        # The bootstrap is read at truncated steps and the last step; there, a step that was
        # not truncated bootstraps from next_value (its next observation is next_obs).
        bootstrap = final_values.clone()
        bootstrap[-1] = torch.where(truncated[-1], final_values[-1], last_value.to(final_values.dtype))
        out = puffadv.gae(rewards, values, terminated, truncated, bootstrap_values=bootstrap, gamma=gamma,
                          gae_lambda=gae_lambda, time_axis=0)
    calls["cleanrl"] += 1
    return out.advantages, out.returns
