"""A meta-gradient step on the discount gamma (Xu, van Hasselt and Silver 2018).

The inner step trains a value function toward TD(lambda) returns computed with a
learnable gamma = sigmoid(eta); the outer (meta) loss scores the updated value
function against returns with a fixed evaluation discount on fresh data, and its
gradient flows back through the inner update and through puffadv's returns into eta
(puffadv differentiates gamma when it is passed as a tensor that requires grad).

Run: python examples/meta_gradient_gamma.py  (CPU, a few seconds)
"""
from __future__ import annotations

import torch

import puffadv

BATCH, HORIZON, FEATURES, LAMBDA, INNER_LR, EVAL_GAMMA = 32, 20, 8, 0.9, 0.1, 0.99
torch.manual_seed(0)
dtype = torch.float64


def batch():
    """Random trajectories: features, rewards, terminations, bootstrap features."""
    features = torch.randn(BATCH, HORIZON + 1, FEATURES, dtype=dtype)
    rewards = features[:, :-1, 0] + 0.1 * torch.randn(BATCH, HORIZON, dtype=dtype)
    terminated = torch.rand(BATCH, HORIZON) < 0.05
    return features, rewards, terminated


def returns(theta, data, gamma):
    """TD(lambda) returns of the linear value function theta."""
    features, rewards, terminated = data
    values = features @ theta
    return puffadv.td_lambda_returns(rewards, values[:, :-1], terminated, last_value=values[:, -1],
                                     gamma=gamma, lambda_=LAMBDA, time_axis=-1).returns


def meta_loss(eta, theta, train, test):
    gamma = torch.sigmoid(eta)
    targets = returns(theta.detach(), train, gamma)               # the inner targets depend on gamma
    inner = ((train[0][:, :-1] @ theta - targets) ** 2).mean()
    (grad,) = torch.autograd.grad(inner, theta, create_graph=True)
    updated = theta - INNER_LR * grad                              # theta'(gamma)
    evaluation = returns(theta.detach(), test, EVAL_GAMMA)         # fixed targets: no gamma in them
    return ((test[0][:, :-1] @ updated - evaluation) ** 2).mean()


eta = torch.tensor(1.0, dtype=dtype, requires_grad=True)         # gamma = sigmoid(1) = 0.73
theta = torch.zeros(FEATURES, dtype=dtype, requires_grad=True)
meta_optimizer = torch.optim.SGD([eta], lr=1.0)
for step in range(5):
    train, test = batch(), batch()
    loss = meta_loss(eta, theta, train, test)
    meta_optimizer.zero_grad()
    loss.backward()
    # the meta-gradient equals a central finite difference of the meta-loss in eta
    plus, minus = (meta_loss(eta.detach() + s, theta, train, test).item() for s in (1e-6, -1e-6))
    numeric = (plus - minus) / 2e-6
    assert abs(eta.grad.item() - numeric) <= 1e-6 * max(1.0, abs(numeric)), (eta.grad.item(), numeric)
    meta_optimizer.step()
    with torch.no_grad():  # the inner step, for real
        targets = returns(theta, train, torch.sigmoid(eta))
    inner = ((train[0][:, :-1] @ theta - targets) ** 2).mean()
    theta.data -= INNER_LR * torch.autograd.grad(inner, theta)[0]
    print(f"step {step}: meta loss {loss.item():.5f}, d/d eta {eta.grad.item():+.6f} "
          f"(finite difference {numeric:+.6f}), gamma {torch.sigmoid(eta).item():.4f}")
print("ok: the meta-gradient on gamma matches finite differences")
