"""skrl (skrl pinned by 56-trainers.sh) on puffadv: skrl's own compute_gae and
puffadv.integrations.skrl.compute_gae on the memories of a real PPO CartPole run,
and a PPO run trained through patch()."""
from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import skrl
import skrl.agents.torch.ppo.ppo as skrl_ppo
from skrl.agents.torch.ppo import PPO
from skrl.envs.wrappers.torch import wrap_env
from skrl.memories.torch import RandomMemory
from skrl.models.torch import CategoricalMixin, DeterministicMixin, Model
from skrl.trainers.torch import SequentialTrainer

from puffadv import integrations
from puffadv.integrations import skrl as puff_skrl

SKRL_OWN = skrl_ppo.compute_gae
# skrl's trainers log "Closing environment" when they are collected, after pytest has closed the
# stream skrl's handler writes to: keep its info lines out.
skrl.logger.setLevel(logging.WARNING)


class Policy(CategoricalMixin, Model):
    def __init__(self, observation_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        CategoricalMixin.__init__(self, unnormalized_log_prob=True)
        self.net = nn.Sequential(nn.Linear(self.num_observations, 32), nn.Tanh(), nn.Linear(32, self.num_actions))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    def __init__(self, observation_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        DeterministicMixin.__init__(self)
        self.net = nn.Sequential(nn.Linear(self.num_observations, 32), nn.Tanh(), nn.Linear(32, 1))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def train(tmp_path, timesteps, time_limit_bootstrap, rollouts=128, num_envs=4):
    torch.manual_seed(0)
    env = wrap_env(gym.make_vec("CartPole-v1", num_envs=num_envs, max_episode_steps=30,
                                vectorization_mode="sync"))
    memory = RandomMemory(memory_size=rollouts, num_envs=env.num_envs, device=env.device)
    models = {"policy": Policy(env.observation_space, env.action_space, env.device),
              "value": Value(env.observation_space, env.action_space, env.device)}
    cfg = {"rollouts": rollouts, "learning_epochs": 1, "mini_batches": 2, "time_limit_bootstrap": time_limit_bootstrap,
           "experiment": {"directory": str(tmp_path), "write_interval": 0, "checkpoint_interval": 0}}
    agent = PPO(models=models, memory=memory, observation_space=env.observation_space,
                action_space=env.action_space, device=env.device, cfg=cfg)
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": timesteps, "headless": True,
                                                  "disable_progressbar": True}).train()


@pytest.mark.parametrize("time_limit_bootstrap", [False, True])
def test_equal_to_skrl_on_real_memories(tmp_path, monkeypatch, time_limit_bootstrap):
    compared = []

    def both(**kwargs):
        own = SKRL_OWN(**kwargs)
        compared.append((puff_skrl.compute_gae(**kwargs), own, kwargs))
        return own

    monkeypatch.setattr(skrl_ppo, "compute_gae", both)
    train(tmp_path, 3 * 128, time_limit_bootstrap)
    assert len(compared) == 3
    for (returns, advantages), (own_returns, own_advantages), inputs in compared:
        assert inputs["rewards"].shape == (128, 4, 1) and inputs["last_values"].shape == (4, 1)
        assert inputs["terminated"].any() and inputs["truncated"].any()  # both kinds of end were seen
        torch.testing.assert_close(returns, own_returns, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(advantages, own_advantages, rtol=1e-5, atol=1e-5)


def test_ppo_trains_cartpole_through_patch(tmp_path):
    before = integrations.calls["skrl"]
    puff_skrl.patch()
    try:
        assert skrl_ppo.compute_gae is puff_skrl.compute_gae
        train(tmp_path, 2048, time_limit_bootstrap=True)
    finally:
        puff_skrl.unpatch()
    assert skrl_ppo.compute_gae is SKRL_OWN
    assert integrations.calls["skrl"] - before == 2048 // 128  # every update's advantages came from puffadv


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equal_to_skrl_with_ends_at_the_edges(rng, dtype):
    T, N = 40, 5
    rewards, values = (torch.tensor(rng.standard_normal((T, N, 1)), dtype=dtype) for _ in range(2))
    terminated = torch.tensor(rng.random((T, N, 1)) < 0.1)
    truncated = torch.tensor(rng.random((T, N, 1)) < 0.1)
    terminated[0, 0] = terminated[-1, 1] = truncated[-1, 2] = truncated[0, 3] = True
    terminated[7, 4] = truncated[7, 4] = True
    last_values = torch.tensor(rng.standard_normal((N, 1)), dtype=dtype)
    for bootstrap in (False, True):
        kwargs = dict(rewards=rewards, terminated=terminated, truncated=truncated, values=values,
                      last_values=last_values, discount_factor=0.97, lambda_coefficient=0.9,
                      time_limit_bootstrap=bootstrap)
        ours, own = puff_skrl.compute_gae(**kwargs), SKRL_OWN(**kwargs)
        for a, b in zip(ours, own):
            # float32 rounding even for float64: skrl's `discount_factor * not_done[i]` (a Python
            # float times a bool tensor) is float32, so its gamma is 0.97 rounded to float32.
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
