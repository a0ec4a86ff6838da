"""Float64 references written with torch ops, one step at a time, so that torch's
autograd differentiates them: the oracle for puffadv's gradients (tests/python/
test_gradients_reference.py). Written from docs/semantics.md, not from _vjp.py, and
deliberately naive. Arrays are batch-major [B, T]; flags bool; gamma and lambda may
be tensors: numbers, 0-d, or per step ([B, T]: step t reads column t, `_at`)."""
from __future__ import annotations

import torch


def _fmin(x, clip, alpha=1.0):
    """min(x, clip); leaky V-trace's alpha < 1 mixes the raw x in."""
    clipped = torch.where(x < clip, x, torch.as_tensor(clip, dtype=x.dtype))
    return clipped if alpha == 1.0 else alpha * clipped + (1 - alpha) * x


def _at(x, t):
    """Step t's gamma or lambda: column t of a per-step [B, T] tensor, else x itself."""
    return x[:, t] if isinstance(x, torch.Tensor) and x.ndim == 2 else x


def _next_value(values, truncated, last_value, bootstrap_values, t):
    """V'_t for every row: values[t+1] inside the row, the bootstrap at a truncation or the end."""
    horizon = truncated.shape[1]
    if bootstrap_values is not None:
        boot = bootstrap_values[:, t]
    elif last_value is not None:
        boot = last_value
    else:
        boot = torch.zeros(truncated.shape[0], dtype=torch.float64)
    if t == horizon - 1 or values is None:
        return boot if t == horizon - 1 else torch.where(truncated[:, t], boot, torch.zeros_like(boot))
    return torch.where(truncated[:, t], boot, values[:, t + 1])


def _flags(x, like):
    return torch.zeros(like.shape, dtype=torch.bool) if x is None else x


def standard(kind, rewards, values, terminated, truncated=None, last_value=None, bootstrap_values=None,
             importance=None, gamma=0.99, lam=0.95, rho_clip=1.0, c_clip=1.0, rho_pg_clip=1.0, next_values=None,
             sample_mask=None, alpha=1.0):
    """gae / td_lambda: (advantages, returns); vtrace: (pg advantages, vs). next_values: V'_t at every
    step (td_lambda then scans the lambda-return itself: q_lambda on state values). sample_mask
    (rlax): A_t = A_{t+1} where it is False; alpha: leaky V-trace's mix of each clipped ratio."""
    truncated = _flags(truncated, rewards)
    if next_values is not None:
        next_values = torch.where(terminated, 0.0, next_values)  # never read there (may be NaN)
        if kind == "td_lambda":
            return q_lambda(rewards, values, next_values, terminated, truncated, None, gamma, lam)
    horizon = rewards.shape[1]
    ones = torch.ones(rewards.shape[0], dtype=torch.float64)
    nv = [next_values[:, t] if next_values is not None else
          _next_value(values, truncated, last_value, bootstrap_values, t) for t in range(horizon)]
    a, adv = torch.zeros_like(ones), [None] * horizon
    for t in range(horizon - 1, -1, -1):
        rho = ones if importance is None else _fmin(importance[:, t], rho_clip, alpha)
        c = ones if importance is None else _fmin(importance[:, t], c_clip, alpha)
        term, done = terminated[:, t], terminated[:, t] | truncated[:, t]
        g, l = _at(gamma, t), _at(lam, t)
        delta = rho * (rewards[:, t] + torch.where(term, 0.0, g * nv[t]) - values[:, t])
        step = delta + torch.where(done, 0.0, g * l * c * a)
        a = step if sample_mask is None else torch.where(sample_mask[:, t], step, a)
        adv[t] = a
    adv = torch.stack(adv, 1)
    if kind != "vtrace":
        return adv, adv + values
    vs = adv + values
    pg = []
    for t in range(horizon):
        rho_pg = ones if importance is None else _fmin(importance[:, t], rho_pg_clip, alpha)
        inside = ~(terminated[:, t] | truncated[:, t]) & (t < horizon - 1)
        vs_next = torch.where(inside, vs[:, min(t + 1, horizon - 1)], nv[t])
        pg.append(rho_pg * (rewards[:, t] + torch.where(terminated[:, t], 0.0, _at(gamma, t) * vs_next)
                            - values[:, t]))
    return torch.stack(pg, 1), vs


def discounted_returns(rewards, terminated, truncated=None, last_value=None, bootstrap_values=None, gamma=0.99):
    truncated = _flags(truncated, rewards)
    g, out = torch.zeros(rewards.shape[0], dtype=torch.float64), [None] * rewards.shape[1]
    for t in range(rewards.shape[1] - 1, -1, -1):
        boot = _next_value(None, truncated, last_value, bootstrap_values, t)
        done = terminated[:, t] | truncated[:, t]
        gt = _at(gamma, t)
        g = rewards[:, t] + torch.where(terminated[:, t], 0.0, gt * boot) + torch.where(done, 0.0, gt * g)
        out[t] = g
    return torch.stack(out, 1)


def n_step_returns(rewards, values, terminated, truncated=None, last_value=None, bootstrap_values=None,
                   n=1, gamma=0.99, lam=1.0, next_values=None):
    """W1, W2, ... in turn over the whole buffer (gamma, lambda per step as they are:
    elementwise). next_values: V'_s at every step."""
    truncated = _flags(truncated, rewards)
    horizon = rewards.shape[1]
    if next_values is not None:
        nv = torch.where(terminated, 0.0, next_values)  # never read there (may be NaN)
    else:
        nv = torch.stack([_next_value(values, truncated, last_value, bootstrap_values, t) for t in range(horizon)], 1)
    one = rewards + torch.where(terminated, 0.0, gamma * nv)
    last = torch.zeros_like(terminated)
    last[:, -1] = True
    cut = terminated | truncated | last
    w = one
    for _ in range(min(n, horizon) - 1):
        later = torch.cat([w[:, 1:], torch.zeros_like(w[:, :1])], 1)
        w = torch.where(cut, one, rewards + gamma * ((1 - lam) * nv + lam * later))
    return w


def retrace(rewards, q_values, next_values, terminated, truncated=None, target_probs=None, behaviour_probs=None,
            log_probs=False, gamma=0.99, lam=1.0, c_clip=1.0):
    """(Delta, Delta + q)."""
    truncated = _flags(truncated, rewards)
    ratio = torch.exp(target_probs - behaviour_probs) if log_probs else target_probs / behaviour_probs
    next_values = torch.where(terminated, 0.0, next_values)  # never read there (may be NaN: keep it out of d/dgamma)
    horizon = rewards.shape[1]
    delta, out = torch.zeros(rewards.shape[0], dtype=torch.float64), [None] * horizon
    for t in range(horizon - 1, -1, -1):
        done = terminated[:, t] | truncated[:, t]
        g, l = _at(gamma, t), _at(lam, t)
        later = torch.zeros_like(delta) if t + 1 == horizon else \
            torch.where(done, 0.0, g * l * _fmin(ratio[:, t + 1], c_clip) * delta)
        delta = rewards[:, t] + torch.where(terminated[:, t], 0.0, g * next_values[:, t]) - q_values[:, t] + later
        out[t] = delta
    out = torch.stack(out, 1)
    return out, out + q_values


def q_lambda(rewards, q_values, next_values, terminated, truncated=None, greedy=None, gamma=0.99, lam=0.9):
    """(G - q, G)."""
    truncated = _flags(truncated, rewards)
    next_values = torch.where(terminated, 0.0, next_values)  # never read there (may be NaN: keep it out of d/dgamma)
    horizon = rewards.shape[1]
    g, out = torch.zeros(rewards.shape[0], dtype=torch.float64), [None] * horizon
    for t in range(horizon - 1, -1, -1):
        cut = terminated[:, t] | truncated[:, t] | (t + 1 == horizon)
        gt, lam_t = _at(gamma, t), _at(lam, t)
        if greedy is not None and t + 1 < horizon:
            lam_t = lam_t * greedy[:, t + 1].double()
        ended = rewards[:, t] + torch.where(terminated[:, t], 0.0, gt * next_values[:, t])
        going = rewards[:, t] + gt * ((1 - lam_t) * next_values[:, t] + lam_t * g)
        g = torch.where(cut, ended, going)
        out[t] = g
    out = torch.stack(out, 1)
    return out - q_values, out


def episodic_sum(inputs, dones, seed=None, decay=1.0, reset_at_start=False):
    c = torch.zeros(inputs.shape[0], dtype=torch.float64) if seed is None else seed
    out = []
    for t in range(inputs.shape[1]):
        reset = dones[:, t] if reset_at_start else (dones[:, t - 1] if t > 0 else torch.zeros_like(dones[:, 0]))
        c = inputs[:, t] + torch.where(reset, 0.0, _at(decay, t) * c)
        out.append(c)
    return torch.stack(out, 1)


def puff_advantage(values, rewards, dones, importance, gamma=0.99, gae_lambda=0.95, rho_clip=1.0, c_clip=1.0):
    horizon = values.shape[1]
    a = torch.zeros(values.shape[0], dtype=torch.float64)
    out = [torch.zeros_like(a)] * horizon
    for t in range(horizon - 2, -1, -1):
        going = dones[:, t + 1] == 0
        delta = _fmin(importance[:, t], rho_clip) * (
            rewards[:, t + 1] + torch.where(going, gamma * values[:, t + 1], 0.0) - values[:, t])
        a = delta + torch.where(going, gamma * gae_lambda * _fmin(importance[:, t], c_clip) * a, 0.0)
        out[t] = a
    return torch.stack(out, 1)
