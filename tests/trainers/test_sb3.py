"""Stable-Baselines3 (stable-baselines3 pinned by 56-trainers.sh) on puffadv."""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import A2C, PPO
from stable_baselines3.common import buffers
from stable_baselines3.common.env_util import make_vec_env

from puffadv import integrations
from puffadv.integrations import sb3


def assert_float32_close(ours, theirs):
    """Equal to float32 rounding (bitwise on 2026-12-03; the kernels may order their float32
    operations differently from SB3's NumPy loop, so the tests do not insist on it)."""
    np.testing.assert_allclose(ours, theirs, rtol=2e-6, atol=2e-6)


class _Recording(buffers.RolloutBuffer):
    """SB3's own buffer, keeping a copy of itself and its arguments at each computation."""
    seen: list = []

    def compute_returns_and_advantage(self, last_values, dones):
        _Recording.seen.append((copy.deepcopy(self), last_values.clone(), np.array(dones)))
        super().compute_returns_and_advantage(last_values, dones)
        _Recording.seen[-1] += (self.advantages.copy(), self.returns.copy())


def _short_cartpole(n_envs: int):
    # A 25-step time limit: episodes end often, by termination and by truncation (which SB3
    # folds into the rewards while collecting).
    return make_vec_env(lambda: gym.make("CartPole-v1", max_episode_steps=25), n_envs=n_envs, seed=3)


def test_equal_to_sb3_on_real_rollout_buffers():
    _Recording.seen = []
    model = PPO("MlpPolicy", _short_cartpole(4), n_steps=128, batch_size=128, n_epochs=1, seed=1,
                rollout_buffer_class=_Recording)
    model.learn(3 * 128 * 4)
    assert len(_Recording.seen) == 3
    for buffer, last_values, dones, advantages, returns in _Recording.seen:
        assert buffer.episode_starts[1:].any() and last_values.shape == (4, 1)
        before = integrations.calls["sb3"]
        sb3.compute_returns_and_advantage(buffer, last_values, dones)
        assert integrations.calls["sb3"] == before + 1
        assert_float32_close(buffer.advantages, advantages)
        assert_float32_close(buffer.returns, returns)


@pytest.mark.parametrize("flag_last_step", [False, True])
def test_equal_to_sb3_on_random_buffers_with_ends_at_the_edges(rng, flag_last_step):
    own = buffers.RolloutBuffer(64, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), n_envs=5,
                                gamma=0.97, gae_lambda=0.9)
    own.rewards[:] = rng.standard_normal(own.rewards.shape)
    own.values[:] = rng.standard_normal(own.values.shape)
    own.episode_starts[:] = rng.random(own.episode_starts.shape) < 0.1
    own.episode_starts[0] = 1  # ignored by SB3 (a start before the first step ends nothing in the buffer)
    own.episode_starts[1, 0] = own.episode_starts[-1, 1] = 1
    ours = copy.deepcopy(own)
    last_values = torch.from_numpy(rng.standard_normal((5, 1)).astype(np.float32))
    dones = np.zeros(5, dtype=bool)
    dones[2] = dones[4] = flag_last_step
    buffers.RolloutBuffer.compute_returns_and_advantage(own, last_values, dones)
    sb3.compute_returns_and_advantage(ours, last_values, dones)
    assert_float32_close(ours.advantages, own.advantages)
    assert_float32_close(ours.returns, own.returns)


def test_last_values_that_require_grad_are_refused_as_sb3_refuses_them():
    """The buffers are NumPy: a gradient cannot reach last_values. SB3's own method raises
    torch's error; puffadv's detached them without a word."""
    buffer = buffers.RolloutBuffer(8, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), n_envs=2)
    last_values = torch.zeros(2, 1, requires_grad=True)
    with pytest.raises(RuntimeError) as own:
        buffers.RolloutBuffer.compute_returns_and_advantage(buffer, last_values, np.zeros(2, dtype=bool))
    with pytest.raises(RuntimeError) as ours:
        sb3.compute_returns_and_advantage(buffer, last_values, np.zeros(2, dtype=bool))
    assert str(ours.value) == str(own.value) and "requires grad" in str(own.value)


def test_dict_rollout_buffer():
    space = gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2,)), "b": gym.spaces.Discrete(3)})
    ours = sb3.DictRolloutBuffer(16, space, gym.spaces.Discrete(2), n_envs=2)
    own = buffers.DictRolloutBuffer(16, space, gym.spaces.Discrete(2), n_envs=2)
    for buffer in (ours, own):
        buffer.rewards[:] = np.linspace(-1, 1, 32).reshape(16, 2)
        buffer.values[:] = np.cos(np.arange(32)).reshape(16, 2)
        buffer.episode_starts[5] = 1
    last, dones = torch.tensor([[0.5], [-2.0]]), np.array([True, False])
    ours.compute_returns_and_advantage(last, dones)
    own.compute_returns_and_advantage(last, dones)
    assert_float32_close(ours.advantages, own.advantages)
    assert_float32_close(ours.returns, own.returns)


def test_ppo_trains_cartpole_through_rollout_buffer_class():
    before = integrations.calls["sb3"]
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=256, batch_size=256, n_epochs=1, seed=0,
                rollout_buffer_class=sb3.RolloutBuffer)
    model.learn(2048)
    assert model.num_timesteps == 2048
    assert integrations.calls["sb3"] - before == 2048 // 256  # every rollout's advantages came from puffadv


def test_patch_reaches_a2c_and_unpatch_restores():
    before = integrations.calls["sb3"]
    sb3.patch()
    try:
        model = A2C("MlpPolicy", "CartPole-v1", n_steps=16, seed=0)
        model.learn(512)
    finally:
        sb3.unpatch()
    assert integrations.calls["sb3"] - before == 512 // 16
    assert buffers.RolloutBuffer.compute_returns_and_advantage is not sb3.compute_returns_and_advantage
    A2C("MlpPolicy", "CartPole-v1", n_steps=16, seed=0).learn(64)
    assert integrations.calls["sb3"] - before == 512 // 16
