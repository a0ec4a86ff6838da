"""skrl on puffadv: its ``compute_gae`` (PyTorch agents), computed by puffadv.

One line, before the agents are made or trained::

    import puffadv.integrations.skrl
    puffadv.integrations.skrl.patch()   # PPO, A2C, RPO, TRPO, IPPO, MAPPO (torch)

or call :func:`compute_gae` where skrl's would be called: same keyword
arguments, same ``(returns, advantages)`` result, advantages standardised as
skrl does. skrl's memory is time-major, ``[memory_size, num_envs, 1]``, and
``last_values`` is ``[num_envs, 1]``. skrl's meaning is kept: without
``time_limit_bootstrap``, ``truncated`` is not read (a truncated episode's last
step bootstraps from the next episode's first value, as in skrl); with it, skrl
has already added ``discount_factor * V(final obs)`` to the reward while
collecting, and a truncated step ends its episode. The recurrent agents'
``compute_gae`` (``*_rnn``, another signature) and the JAX/Warp agents are not
patched.
"""
from __future__ import annotations

import importlib
import inspect
import warnings

import puffadv

from . import calls
from ._optional import require

require("skrl", "skrl", "skrl")

__all__ = ["compute_gae", "patch", "unpatch"]

# The modules whose compute_gae is skrl's GAE with this signature (skrl 2.1).
AGENT_MODULES = ("skrl.agents.torch.ppo.ppo", "skrl.agents.torch.a2c.a2c", "skrl.agents.torch.rpo.rpo",
                 "skrl.agents.torch.trpo.trpo", "skrl.multi_agents.torch.ippo.ippo",
                 "skrl.multi_agents.torch.mappo.mappo")


def compute_gae(*, rewards, terminated, truncated, values, last_values, discount_factor: float = 0.99,
                lambda_coefficient: float = 0.95, time_limit_bootstrap: bool = False):
    """skrl's ``compute_gae``: ``(returns, advantages)``, ``returns = A + values`` and the
    advantages standardised (``(A - mean) / (std + 1e-8)``), shaped like ``rewards``."""
    steps = rewards.shape[0]
    ends = (terminated | truncated) if time_limit_bootstrap else terminated
    # [memory_size, num_envs, 1] -> [memory_size, num_envs]: views of skrl's contiguous memory.
    out = puffadv.gae(rewards.reshape(steps, -1), values.reshape(steps, -1), ends.reshape(steps, -1),
                      last_value=last_values.reshape(-1).to(values.dtype), gamma=discount_factor,
                      gae_lambda=lambda_coefficient, time_axis=0)
    advantages = out.advantages.reshape(rewards.shape)
    returns = out.returns.reshape(rewards.shape)
    calls["skrl"] += 1
    return returns, (advantages - advantages.mean()) / (advantages.std() + 1e-8)


_skrl_own: dict = {}


def patch() -> None:
    """Make skrl's torch agents (the modules of AGENT_MODULES) compute their GAE with puffadv.
    A module whose ``compute_gae`` does not have skrl 2.1's signature is left alone, with a warning."""
    expected = inspect.signature(compute_gae)
    for name in AGENT_MODULES:
        module = importlib.import_module(name)
        own = _skrl_own.get(name, module.compute_gae)
        if inspect.signature(own).parameters.keys() != expected.parameters.keys():
            warnings.warn(f"puffadv.integrations.skrl: {name}.compute_gae has another signature "
                          f"{inspect.signature(own)}; left unpatched", stacklevel=2)
            continue
        _skrl_own[name] = own
        module.compute_gae = compute_gae


def unpatch() -> None:
    """Give the patched skrl modules their own ``compute_gae`` back."""
    for name, own in _skrl_own.items():
        importlib.import_module(name).compute_gae = own
    _skrl_own.clear()
