"""CleanRL's ppo.py on puffadv: its GAE loop (copied below from cleanrl/ppo.py, the
block after "bootstrap value if not done") against puffadv.integrations.cleanrl.gae
on the buffers of a real CartPole run, and the time-limit recipe of
docs/integrations.md against a float64 reference."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from puffadv import integrations
from puffadv.integrations.cleanrl import gae


def cleanrl_gae(rewards, values, dones, next_done, next_value, gamma, gae_lambda):
    """CleanRL's own loop (ppo.py), unchanged but for `args.`."""
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - dones[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
    returns = advantages + values
    return advantages, returns


def reference_time_limits(rewards, values, terminated, truncated, final_values, next_value, gamma, lam):
    """float64: truncated steps bootstrap from their final observation, terminated ones from nothing."""
    r, v, term, trunc, fv = (np.asarray(a, dtype=np.float64) for a in
                             (rewards, values, terminated, truncated, final_values))
    term, trunc = term != 0, (trunc != 0) & (term == 0)
    T = r.shape[0]
    adv, last = np.zeros_like(r), np.zeros(r.shape[1])
    for t in reversed(range(T)):
        nxt = np.where(trunc[t], fv[t], v[t + 1] if t < T - 1 else np.asarray(next_value, np.float64).reshape(-1))
        delta = r[t] + gamma * (1 - term[t]) * nxt - v[t]
        last = delta + gamma * lam * (1 - (term[t] | trunc[t])) * last
        adv[t] = last
    return adv, adv + v


class Agent(nn.Module):
    def __init__(self, envs):
        super().__init__()
        n_obs, n_act = envs.single_observation_space.shape[0], envs.single_action_space.n
        self.critic = nn.Sequential(nn.Linear(n_obs, 64), nn.Tanh(), nn.Linear(64, 1))
        self.actor = nn.Sequential(nn.Linear(n_obs, 64), nn.Tanh(), nn.Linear(64, n_act))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        probs = torch.distributions.Categorical(logits=self.actor(x))
        action = probs.sample() if action is None else action
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def train_cartpole(total_timesteps, num_envs=4, num_steps=128, time_limits=False, max_episode_steps=500):
    """A CleanRL ppo.py loop (CartPole-v1), its GAE block replaced by the one line; returns
    the (puffadv, CleanRL loop) advantages and returns of every iteration."""
    torch.manual_seed(0)
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=max_episode_steps)] * num_envs,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)  # CleanRL's (Gymnasium 0.29's) autoreset
    agent = Agent(envs)
    optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
    shape = (num_steps, num_envs)
    obs = torch.zeros(shape + envs.single_observation_space.shape)
    actions, logprobs, rewards, dones, values = (torch.zeros(shape) for _ in range(5))
    terminations, truncations, final_values = (torch.zeros(shape) for _ in range(3))
    next_obs = torch.Tensor(envs.reset(seed=1)[0])
    next_done = torch.zeros(num_envs)
    compared = []
    for _ in range(total_timesteps // (num_envs * num_steps)):
        for step in range(num_steps):
            obs[step], dones[step] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step], logprobs[step] = action, logprob
            next_obs, reward, term, trunc, infos = envs.step(action.numpy())
            next_done = np.logical_or(term, trunc)
            rewards[step] = torch.tensor(reward).view(-1)
            terminations[step], truncations[step] = torch.tensor(term), torch.tensor(trunc)
            if "final_obs" in infos:
                with torch.no_grad():
                    for i in np.flatnonzero(infos["_final_obs"]):
                        final_values[step, i] = agent.get_value(torch.Tensor(infos["final_obs"][i])).item()
            next_obs, next_done = torch.Tensor(next_obs), torch.Tensor(next_done)
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            if time_limits:
                advantages, returns = gae(rewards, values, dones, next_done, next_value, 0.99, 0.95,
                                          terminations=terminations, truncations=truncations,
                                          final_values=final_values)
                own = reference_time_limits(rewards, values, terminations, truncations, final_values,
                                            next_value, 0.99, 0.95)
            else:
                advantages, returns = gae(rewards, values, dones, next_done, next_value, 0.99, 0.95)
                own = cleanrl_gae(rewards, values, dones, next_done, next_value, 0.99, 0.95)
            compared.append(((advantages, returns), own))
        b_obs, b_actions = obs.reshape(-1, obs.shape[-1]), actions.reshape(-1)
        b_logprobs, b_adv, b_ret = logprobs.reshape(-1), advantages.reshape(-1), returns.reshape(-1)
        for _epoch in range(2):
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs, b_actions.long())
            ratio = (newlogprob - b_logprobs).exp()
            adv = (b_adv - b_adv.mean()) / (b_adv.std() + 1e-8)
            pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)).mean()
            loss = pg_loss - 0.01 * entropy.mean() + 0.5 * ((newvalue.view(-1) - b_ret) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    envs.close()
    return compared


def test_cleanrl_ppo_trains_cartpole_and_matches_its_own_loop():
    before = integrations.calls["cleanrl"]
    compared = train_cartpole(2048)
    assert integrations.calls["cleanrl"] - before == 2048 // (4 * 128) == len(compared)
    for (advantages, returns), (own_advantages, own_returns) in compared:
        # float32 rounding (bitwise on 2026-12-03; the kernels may order their operations otherwise)
        torch.testing.assert_close(advantages, own_advantages, rtol=2e-6, atol=2e-6)
        torch.testing.assert_close(returns, own_returns, rtol=2e-6, atol=2e-6)


def test_time_limit_recipe_on_cartpole_matches_the_reference():
    # 40-step episodes: most end by truncation, and their final observation's value is bootstrapped.
    compared = train_cartpole(1024, time_limits=True, max_episode_steps=40)
    for (advantages, returns), (own_advantages, own_returns) in compared:
        np.testing.assert_allclose(advantages.numpy(), own_advantages, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(returns.numpy(), own_returns, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_time_limits_with_both_flags_and_ends_at_the_edges(rng, dtype):
    T, N = 33, 6
    rewards, values, final_values = (torch.tensor(rng.standard_normal((T, N)), dtype=dtype) for _ in range(3))
    terminations = torch.tensor(rng.random((T, N)) < 0.1)
    truncations = torch.tensor(rng.random((T, N)) < 0.1)
    terminations[0, 0] = truncations[0, 1] = truncations[-1, 2] = terminations[-1, 3] = True
    terminations[5, 4] = truncations[5, 4] = True  # Gymnasium may flag both: it is terminated
    final_values[~truncations] = float("nan")  # read only where truncated
    next_value = torch.tensor(rng.standard_normal((1, N)), dtype=dtype)
    dones = torch.full((T, N), float("nan"), dtype=dtype)  # not read with time limits
    advantages, returns = gae(rewards, values, dones, dones[0], next_value, 0.97, 0.9,
                              terminations=terminations, truncations=truncations, final_values=final_values)
    want_adv, want_ret = reference_time_limits(rewards, values, terminations, truncations,
                                               torch.nan_to_num(final_values), next_value, 0.97, 0.9)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    np.testing.assert_allclose(advantages.numpy(), want_adv, rtol=tol, atol=tol)
    np.testing.assert_allclose(returns.numpy(), want_ret, rtol=tol, atol=tol)


def test_time_limits_need_all_three():
    x = torch.zeros(4, 2)
    with pytest.raises(ValueError, match="missing: final_values"):
        gae(x, x, x, x[0], x[:1], 0.99, 0.95, terminations=x, truncations=x)
