"""Tianshou (tianshou pinned by 56-trainers.sh) on puffadv: Tianshou's own
Algorithm.compute_episodic_return and puffadv.integrations.tianshou's on the
buffers of a real PPO CartPole run (a VectorReplayBuffer: sub-buffers
concatenated, episodes ended by termination, truncation or being unfinished),
and a PPO run trained through patch()."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from tianshou.algorithm import PPO
from tianshou.algorithm.algorithm_base import Algorithm
from tianshou.algorithm.modelfree.reinforce import DiscreteActorPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Batch, Collector, ReplayBuffer, VectorReplayBuffer
from tianshou.env import DummyVectorEnv
from tianshou.trainer import OnPolicyTrainerParams
from tianshou.utils.net.common import Net
from tianshou.utils.net.discrete import DiscreteActor, DiscreteCritic

from puffadv import integrations
from puffadv.integrations import tianshou as puff_tianshou

TIANSHOU_OWN = Algorithm.compute_episodic_return


def make_ppo(envs):
    torch.manual_seed(0)
    space = envs.observation_space[0]
    actions = envs.action_space[0]
    actor = DiscreteActor(preprocess_net=Net(state_shape=space.shape, hidden_sizes=[32]), action_shape=actions.n)
    critic = DiscreteCritic(preprocess_net=Net(state_shape=space.shape, hidden_sizes=[32]))
    policy = DiscreteActorPolicy(actor=actor, action_space=actions)
    return PPO(policy=policy, critic=critic, optim=AdamOptimizerFactory(lr=1e-3), gamma=0.97, gae_lambda=0.9)


def cartpole_envs(n=4):
    return DummyVectorEnv([lambda: gym.make("CartPole-v1", max_episode_steps=30)] * n)


def train(epochs, step_num_env_steps=512):
    envs = cartpole_envs()
    envs.seed(0)
    algorithm = make_ppo(envs)
    collector = Collector(algorithm, envs, VectorReplayBuffer(step_num_env_steps, len(envs)))
    algorithm.run_training(OnPolicyTrainerParams(
        training_collector=collector, max_epochs=epochs, epoch_num_steps=step_num_env_steps,
        collection_step_num_env_steps=step_num_env_steps, update_step_num_repetitions=1, batch_size=256,
        test_in_training=False, test_step_num_episodes=0, verbose=False, show_progress=False))


def test_equal_to_tianshou_on_real_buffers(monkeypatch):
    compared = []

    def both(batch, buffer, indices, v_s_=None, v_s=None, gamma=0.99, gae_lambda=0.95):
        own = TIANSHOU_OWN(batch, buffer, indices, v_s_, v_s, gamma, gae_lambda)
        compared.append((puff_tianshou.compute_episodic_return(batch, buffer, indices, v_s_, v_s, gamma,
                                                               gae_lambda), own, batch))
        return own

    monkeypatch.setattr(Algorithm, "compute_episodic_return", staticmethod(both))
    train(epochs=2)
    assert len(compared) >= 2
    for (returns, advantages), (own_returns, own_advantages), batch in compared:
        assert batch.terminated.any() and batch.truncated.any()  # both kinds of end were seen
        np.testing.assert_allclose(advantages, own_advantages, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(returns, own_returns, rtol=1e-12, atol=1e-12)


def test_ppo_trains_cartpole_through_patch():
    before = integrations.calls["tianshou"]
    puff_tianshou.patch()
    try:
        train(epochs=4)
    finally:
        puff_tianshou.unpatch()
    assert Algorithm.__dict__["compute_episodic_return"].__func__ is TIANSHOU_OWN
    assert integrations.calls["tianshou"] - before == 4  # every update's advantages came from puffadv


@pytest.mark.parametrize("given_v_s", [False, True])
def test_equal_to_tianshou_with_ends_at_the_edges(rng, given_v_s):
    n = 50
    buffer = ReplayBuffer(n)
    terminated = rng.random(n) < 0.1
    truncated = rng.random(n) < 0.1
    terminated[0] = truncated[-1] = True
    terminated[20] = truncated[20] = True
    for t in range(n):
        buffer.add(Batch(obs=np.zeros(2), act=0, rew=rng.standard_normal(), terminated=terminated[t],
                         truncated=truncated[t], obs_next=np.zeros(2), info={}))
    batch, indices = buffer.sample(0)
    v_s_ = torch.tensor(rng.standard_normal(n), dtype=torch.float32)
    v_s = torch.tensor(rng.standard_normal(n), dtype=torch.float32) if given_v_s else None
    ours = puff_tianshou.compute_episodic_return(batch, buffer, indices, v_s_, v_s, gamma=0.9, gae_lambda=0.8)
    own = TIANSHOU_OWN(batch, buffer, indices, v_s_, v_s, gamma=0.9, gae_lambda=0.8)
    for a, b in zip(ours, own):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
