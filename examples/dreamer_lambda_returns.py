"""A Dreamer-style actor loss backpropagated through puffadv's lambda-returns.

Dreamer (Hafner et al.; TorchRL's DreamerActorLoss) imagines rollouts with its world
model, scores them with lambda-returns of the imagined rewards and the critic's values,
discounted at each step by the world model's predicted continuation (DreamerV2's
`gamma * p(continue)`: a per-step gamma), and trains the actor by backpropagating
-mean(returns) through the returns into the reward model, the critic, the continuation
predictor and, through them, the imagined states and the actor.
puffadv.td_lambda_returns computes those returns with its kernel and differentiates
them with the reverse recurrence: every input that requires grad gets its gradient.

Run: python examples/dreamer_lambda_returns.py  (CPU, a few seconds)
"""
from __future__ import annotations

import torch

import puffadv

HORIZON, BATCH, LATENT, GAMMA, LAMBDA = 15, 64, 16, 0.99, 0.95
torch.manual_seed(0)
dtype = torch.float64  # float64 only to check against the loop below to 1e-12; float32 works alike

actor = torch.nn.Sequential(torch.nn.Linear(LATENT, 32), torch.nn.Tanh(), torch.nn.Linear(32, LATENT)).to(dtype)
dynamics = torch.nn.Linear(2 * LATENT, LATENT).to(dtype)     # the world model's transition (frozen here)
reward_head = torch.nn.Linear(LATENT, 1).to(dtype)           # the world model's reward predictor
critic = torch.nn.Linear(LATENT, 1).to(dtype)
continuation = torch.nn.Linear(LATENT, 1).to(dtype)          # the world model's p(episode continues)
dynamics.requires_grad_(False)
optimizer = torch.optim.Adam(actor.parameters(), lr=1e-3)


def imagine(start):
    """Imagined latent states [HORIZON + 1, BATCH, LATENT] from the actor's actions."""
    states = [start]
    for _ in range(HORIZON):
        states.append(torch.tanh(dynamics(torch.cat([states[-1], actor(states[-1])], -1))))
    return torch.stack(states)


def discounts(states):
    """gamma_t = GAMMA * p(continue) of each imagined step [HORIZON, BATCH]."""
    return GAMMA * torch.sigmoid(continuation(states[1:])).squeeze(-1)


def lambda_returns_loop(rewards, values, bootstrap, gamma):
    """The same returns by autograd of a Python loop (what Dreamer implementations do)."""
    out, g = [], bootstrap
    for t in range(HORIZON - 1, -1, -1):
        g = rewards[t] + gamma[t] * ((1 - LAMBDA) * values[t + 1] + LAMBDA * g) if t + 1 < HORIZON else \
            rewards[t] + gamma[t] * bootstrap
        out.insert(0, g)
    return torch.stack(out)


for step in range(5):
    states = imagine(torch.randn(BATCH, LATENT, dtype=dtype))
    rewards = reward_head(states[1:]).squeeze(-1)             # [HORIZON, BATCH], time-major
    values = critic(states).squeeze(-1)                       # [HORIZON + 1, BATCH]
    never = torch.zeros(HORIZON, BATCH, dtype=torch.bool)     # imagined episodes do not end here
    returns = puffadv.td_lambda_returns(rewards, values[:-1], never, last_value=values[-1],
                                        gamma=discounts(states), lambda_=LAMBDA, time_axis=0).returns
    actor_loss = -returns.mean()
    optimizer.zero_grad()
    actor_loss.backward()
    optimizer.step()
    print(f"step {step}: actor loss {actor_loss.item():+.5f}, "
          f"|grad actor| {sum(p.grad.norm() for p in actor.parameters()):.4f}")

# The gradients into the rewards, values and per-step discounts equal autograd of the loop.
states = imagine(torch.randn(BATCH, LATENT, dtype=dtype)).detach()
rewards = reward_head(states[1:]).squeeze(-1).detach().requires_grad_()
values = critic(states).squeeze(-1).detach().requires_grad_()
gamma = discounts(states).detach().requires_grad_()
ours = puffadv.td_lambda_returns(rewards, values[:-1], torch.zeros(HORIZON, BATCH, dtype=torch.bool),
                                 last_value=values[-1], gamma=gamma, lambda_=LAMBDA, time_axis=0).returns
theirs = lambda_returns_loop(rewards, values, values[-1], gamma)
g_ours = torch.autograd.grad(-ours.mean(), (rewards, values, gamma))
g_theirs = torch.autograd.grad(-theirs.mean(), (rewards, values, gamma))
torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
for a, b in zip(g_ours, g_theirs):
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
print("ok: lambda-return gradients into rewards, values and per-step discounts equal autograd of the loop")
