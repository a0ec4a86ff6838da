"""Float64 references every test compares against. Written from SPEC.md, not
from the kernels, and deliberately naive."""
from __future__ import annotations

import numpy as np


def puff_advantage(values, rewards, dones, importance, gamma=0.99, gae_lambda=0.95,
                   rho_clip=1.0, c_clip=1.0):
    """SPEC section 1, one row at a time, in float64 (NaN importance -> the clip, as fmin)."""
    v, r, d, imp = (np.asarray(a, dtype=np.float64) for a in (values, rewards, dones, importance))
    rows, horizon = v.shape
    out = np.zeros((rows, horizon))
    for row in range(rows):
        a = 0.0
        for t in range(horizon - 2, -1, -1):
            nnt = 1.0 - d[row, t + 1]
            rho = np.fmin(imp[row, t], rho_clip)
            c = np.fmin(imp[row, t], c_clip)
            delta = rho * (r[row, t + 1] + gamma * v[row, t + 1] * nnt - v[row, t])
            a = delta + gamma * gae_lambda * c * a * nnt
            out[row, t] = a
    return out


def puff_advantage_by_step(values, rewards, dones, importance, gamma=0.99, gae_lambda=0.95,
                           rho_clip=1.0, c_clip=1.0):
    """The same recurrence, all rows at once (one NumPy step per time step): for
    long rows, where the row loop above is too slow."""
    v, r, d, imp = (np.asarray(a, dtype=np.float64) for a in (values, rewards, dones, importance))
    out = np.zeros(v.shape)
    a = np.zeros(v.shape[0])
    for t in range(v.shape[1] - 2, -1, -1):
        nnt = 1.0 - d[:, t + 1]
        delta = np.fmin(imp[:, t], rho_clip) * (r[:, t + 1] + gamma * v[:, t + 1] * nnt - v[:, t])
        a = delta + gamma * gae_lambda * np.fmin(imp[:, t], c_clip) * a * nnt
        out[:, t] = a
    return out


def relative_error(out, ref) -> float:
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    scale = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / (scale if scale > 0 else 1.0))


def sums_error(sums, rows) -> float:
    """Row sums against the float64 [B, T] rows they sum: the largest |sum - sum(row)|
    over sqrt(T) ||row||, the most that terms within relative_error of their own could
    move it. relative_error of the sums alone is ill-conditioned where a row's terms
    cancel: a float32 row of 150 terms of size 1-4 summing to 0.036 missed 1e-4 with
    every term right to 1e-7 (CI, 2026-12-02, test_n_step_long_windows_match_the_reference).
    A wrong or missing term still counts about 1 / (sqrt(T) ||row||) of its size."""
    rows = np.asarray(rows, dtype=np.float64)
    sums = np.asarray(sums, dtype=np.float64)
    scale = np.sqrt(rows.shape[1]) * np.linalg.norm(rows, axis=1)
    return float(np.max(np.abs(sums - rows.sum(1)) / np.where(scale > 0, scale, 1.0)))


TOLERANCE = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}


def random_puff_inputs(rng, rows, horizon, dtype=np.float32, done_rate=0.1):
    """Fresh random inputs, never all zeros: normal values/rewards, sparse dones,
    importance ratios spread around 1 so both clips bite."""
    return (rng.standard_normal((rows, horizon)).astype(dtype),
            rng.standard_normal((rows, horizon)).astype(dtype),
            (rng.random((rows, horizon)) < done_rate).astype(dtype),
            rng.uniform(0.0, 3.0, (rows, horizon)).astype(dtype))


# ---- standard conventions (SPEC section 6) ----

def per_step(x, shape):
    """gamma or lambda as a float64 array of `shape`: a scalar at every step, or the
    per-step array itself (gamma_t, lambda_t: each estimator reads step t's)."""
    return np.broadcast_to(np.asarray(x, dtype=np.float64), shape)


def standard_estimate(kind, rewards, values, terminated, truncated=None, last_value=None,
                      bootstrap_values=None, importance=None, gamma=0.99, lam=0.95, rho_clip=1.0,
                      c_clip=1.0, rho_pg_clip=1.0):
    """GAE / TD(lambda) / V-trace on batch-major [B, T] arrays, in float64, one
    step at a time. Returns (advantages, returns): A and A + V for 'gae' and
    'td_lambda'; the IMPALA pg advantages and vs = V + A for 'vtrace'."""
    r, v = (np.asarray(a, dtype=np.float64) for a in (rewards, values))
    term = np.asarray(terminated).astype(bool)
    trunc = np.zeros_like(term) if truncated is None else np.asarray(truncated).astype(bool)
    boot = None if bootstrap_values is None else np.asarray(bootstrap_values, dtype=np.float64)
    ratio = None if importance is None else np.asarray(importance, dtype=np.float64)
    rows, horizon = r.shape
    gammas, lams = per_step(gamma, r.shape), per_step(lam, r.shape)
    adv = np.zeros((rows, horizon))
    pg = np.zeros((rows, horizon))
    for b in range(rows):
        next_value = np.zeros(horizon)  # V'_t
        for t in range(horizon):
            if trunc[b, t] or t == horizon - 1:
                next_value[t] = (float(last_value[b]) if boot is None else boot[b, t])
            else:
                next_value[t] = v[b, t + 1]
        a = 0.0
        for t in range(horizon - 1, -1, -1):
            assert not (term[b, t] and trunc[b, t])
            done = term[b, t] or trunc[b, t]
            rho = 1.0 if ratio is None else np.fmin(ratio[b, t], rho_clip)
            c = 1.0 if ratio is None else np.fmin(ratio[b, t], c_clip)
            bootstrap = 0.0 if term[b, t] else gammas[b, t] * next_value[t]
            delta = rho * (r[b, t] + bootstrap - v[b, t])
            a = delta + (0.0 if done else gammas[b, t] * lams[b, t] * c * a)
            adv[b, t] = a
        vs = adv[b] + v[b]
        for t in range(horizon):
            rho_pg = 1.0 if ratio is None else np.fmin(ratio[b, t], rho_pg_clip)
            inside = not (term[b, t] or trunc[b, t]) and t < horizon - 1
            vs_next = vs[t + 1] if inside else next_value[t]
            pg[b, t] = rho_pg * (r[b, t] + (0.0 if term[b, t] else gammas[b, t] * vs_next) - v[b, t])
    if kind == "vtrace":
        return pg, adv + v
    return adv, adv + v


def td_lambda_return(rewards, values, terminated, truncated=None, last_value=None,
                     bootstrap_values=None, gamma=0.99, lam=0.95):
    """TD(lambda) returns by their own recursion (no advantages):
    G_t = r_t + gamma (1 - term_t) [(1 - lambda) V'_t + lambda G_{t+1}], G_{t+1} -> V'_t at a done."""
    r, v = (np.asarray(a, dtype=np.float64) for a in (rewards, values))
    term = np.asarray(terminated).astype(bool)
    trunc = np.zeros_like(term) if truncated is None else np.asarray(truncated).astype(bool)
    boot = None if bootstrap_values is None else np.asarray(bootstrap_values, dtype=np.float64)
    rows, horizon = r.shape
    gammas, lams = per_step(gamma, r.shape), per_step(lam, r.shape)
    out = np.zeros((rows, horizon))
    for b in range(rows):
        g = 0.0
        for t in range(horizon - 1, -1, -1):
            if trunc[b, t] or t == horizon - 1:
                nv = float(last_value[b]) if boot is None else boot[b, t]
            else:
                nv = v[b, t + 1]
            if term[b, t] or trunc[b, t] or t == horizon - 1:
                g = nv
            g = r[b, t] + (0.0 if term[b, t] else gammas[b, t] * ((1 - lams[b, t]) * nv + lams[b, t] * g))
            out[b, t] = g
    return out


def random_episodes(rng, rows, horizon, dtype=np.float32, end_rate=0.15):
    """Rewards, values, terminated, truncated, bootstrap values and ratios of
    random episodes: ends at random steps, always including some at the first
    and the last step, never terminated and truncated on one step."""
    ends = rng.random((rows, horizon)) < end_rate
    ends[0, 0] = ends[-1, -1] = True
    if horizon > 1:
        ends[-1, 0] = ends[0, -1] = True
    kind = rng.random((rows, horizon)) < 0.5
    terminated = ends & kind
    truncated = ends & ~kind
    terminated[0, 0], truncated[0, 0] = True, False
    terminated[-1, -1], truncated[-1, -1] = False, True
    if horizon > 1:
        terminated[-1, 0], truncated[-1, 0] = False, True
        terminated[0, -1], truncated[0, -1] = True, False
    f = lambda a: a.astype(dtype)
    return dict(rewards=f(rng.standard_normal((rows, horizon))),
                values=f(rng.standard_normal((rows, horizon))),
                terminated=terminated, truncated=truncated,
                bootstrap_values=f(rng.standard_normal((rows, horizon))),
                last_value=f(rng.standard_normal(rows)),
                importance=f(rng.uniform(0.0, 3.0, (rows, horizon))))


# ---- the estimator family (issue 20; /work/wt/FAMILY.md, docs/semantics.md) ----
# Each takes batch-major [B, T] arrays and returns float64 arrays, one row and
# one step at a time, written from the recurrences, not from the kernels.

def _flags(x, like):
    return np.zeros(like.shape, bool) if x is None else np.asarray(x).astype(bool)


def _bootstrap(values, truncated, last_value, bootstrap_values, b, t):
    """V'_t: values[t+1] inside the buffer, the bootstrap at a truncation or the last step."""
    horizon = truncated.shape[1]
    if truncated[b, t] or t == horizon - 1:
        if bootstrap_values is not None:
            return float(bootstrap_values[b, t])
        return 0.0 if last_value is None else float(last_value[b])
    return float(values[b, t + 1])


def discounted_returns(rewards, terminated, truncated=None, last_value=None, bootstrap_values=None, gamma=0.99):
    """G_t = r_t + gamma (1 - term_t) B_t + gamma (1 - done_t) G_{t+1}; B_t the bootstrap at
    truncations and the last step (0 elsewhere, and 0 everywhere without one)."""
    r = np.asarray(rewards, np.float64)
    term, trunc = _flags(terminated, r), _flags(truncated, r)
    boot = None if bootstrap_values is None else np.asarray(bootstrap_values, np.float64)
    gammas = per_step(gamma, r.shape)
    out = np.zeros(r.shape)
    for b in range(r.shape[0]):
        g = 0.0
        for t in range(r.shape[1] - 1, -1, -1):
            gamma = gammas[b, t]
            at_end = trunc[b, t] or t == r.shape[1] - 1
            bootstrap = _bootstrap(r, trunc, last_value, boot, b, t) if at_end else 0.0
            done = term[b, t] or trunc[b, t]
            g = r[b, t] + (0.0 if term[b, t] else gamma * bootstrap) + (0.0 if done else gamma * g)
            out[b, t] = g
    return out


def n_step_returns(rewards, values, terminated, truncated=None, last_value=None, bootstrap_values=None,
                   n=1, gamma=0.99, lam=1.0):
    """G^(n)_t = Wn_t: W1_s = r_s + gamma (1 - term_s) V'_s; Wj_s = r_s + gamma (1 - term_s)
    [(1 - lam) V'_s + lam W(j-1)_{s+1}] if not done_s and s + 1 < T, else W1_s. W1, W2, ...
    in turn, each a NumPy expression over the row's steps (O(T n))."""
    r, v = np.asarray(rewards, np.float64), np.asarray(values, np.float64)
    term, trunc = _flags(terminated, r), _flags(truncated, r)
    boot = None if bootstrap_values is None else np.asarray(bootstrap_values, np.float64)
    rows, horizon = r.shape
    gammas, lams = per_step(gamma, r.shape), per_step(lam, r.shape)
    out = np.zeros(r.shape)
    for b in range(rows):
        gamma, lam = gammas[b], lams[b]
        nv = np.array([_bootstrap(v, trunc, last_value, boot, b, t) for t in range(horizon)])
        one = r[b] + np.where(term[b], 0.0, gamma * nv)
        cut = term[b] | trunc[b] | (np.arange(horizon) == horizon - 1)
        w = one
        for _ in range(min(n, horizon) - 1):  # the window never reaches past the row
            later = np.append(w[1:], 0.0)
            w = np.where(cut, one, r[b] + gamma * ((1 - lam) * nv + lam * later))
        out[b] = w
    return out


def retrace(rewards, q_values, next_values, terminated, truncated=None, target_probs=None,
            behaviour_probs=None, log_probs=False, gamma=0.99, lam=1.0, c_clip=1.0):
    """Delta_t = r_t + gamma (1 - term_t) nv_t - q_t + gamma (1 - done_t) c_{t+1} Delta_{t+1},
    c_t = lam min(c_clip, pi_t / mu_t) (log-probs: exp(pi_t - mu_t)), Delta after the row 0.
    Returns (Delta, Q_ret = q + Delta)."""
    r, q, nv = (np.asarray(a, np.float64) for a in (rewards, q_values, next_values))
    pi, mu = np.asarray(target_probs, np.float64), np.asarray(behaviour_probs, np.float64)
    ratio = np.exp(pi - mu) if log_probs else pi / mu
    term, trunc = _flags(terminated, r), _flags(truncated, r)
    gammas, lams = per_step(gamma, r.shape), per_step(lam, r.shape)
    out = np.zeros(r.shape)
    for b in range(r.shape[0]):
        delta = 0.0
        for t in range(r.shape[1] - 1, -1, -1):
            gamma, lam = gammas[b, t], lams[b, t]  # step t's: lambda_t scales c_{t+1}
            done = term[b, t] or trunc[b, t]
            later = 0.0
            if not done and t + 1 < r.shape[1]:
                later = gamma * lam * min(c_clip, ratio[b, t + 1]) * delta
            delta = r[b, t] + (0.0 if term[b, t] else gamma * nv[b, t]) - q[b, t] + later
            out[b, t] = delta
    return out, out + q


def q_lambda(rewards, q_values, next_values, terminated, truncated=None, greedy=None, gamma=0.99, lam=0.9):
    """G_t = r_t + gamma (1 - term_t) [(1 - lam_t) nv_t + lam_t G_{t+1}] inside an episode and the
    row, else r_t + gamma (1 - term_t) nv_t; lam_t = lam (Peng) or lam greedy_{t+1} (Watkins).
    Returns (G - q, G)."""
    r, q, nv = (np.asarray(a, np.float64) for a in (rewards, q_values, next_values))
    term, trunc = _flags(terminated, r), _flags(truncated, r)
    gammas, lams = per_step(gamma, r.shape), per_step(lam, r.shape)
    out = np.zeros(r.shape)
    for b in range(r.shape[0]):
        g = 0.0
        for t in range(r.shape[1] - 1, -1, -1):
            gamma, lam = gammas[b, t], lams[b, t]
            bootstrap = 0.0 if term[b, t] else gamma * nv[b, t]
            if term[b, t] or trunc[b, t] or t + 1 == r.shape[1]:
                g = r[b, t] + bootstrap
            else:
                lam_t = lam if greedy is None else lam * float(bool(greedy[b, t + 1]))
                g = r[b, t] + gamma * ((1 - lam_t) * nv[b, t] + lam_t * g)
            out[b, t] = g
    return out - q, out


def episodic_sum(inputs, dones, seed=None, decay=1.0, reset_at_start=False):
    """C_t = x_t + decay (1 - reset_t) C_{t-1}, C_{-1} = seed (or 0); reset_t = dones[t-1]
    ('ends_at', dones[-1] = 0) or dones[t] ('starts_at'). A forward scan. `decay` is
    gamma lambda, a scalar or per step: C_t reads decay_t, its own step's."""
    x = np.asarray(inputs, np.float64)
    d = _flags(dones, x)
    decays = per_step(decay, x.shape)
    out = np.zeros(x.shape)
    for b in range(x.shape[0]):
        c = 0.0 if seed is None else float(seed[b])
        for t in range(x.shape[1]):
            reset = d[b, t] if reset_at_start else (t > 0 and d[b, t - 1])
            c = x[b, t] + (0.0 if reset else decays[b, t] * c)
            out[b, t] = c
    return out


def random_off_policy(rng, rows, horizon, dtype=np.float32, end_rate=0.15):
    """random_episodes plus what Retrace and Q(lambda) read: q_values, next_values
    (never read after a termination: garbage there), probabilities of the taken
    actions in (0.05, 1] (ratios around 1, so that c_clip bites) and greedy flags."""
    e = random_episodes(rng, rows, horizon, dtype, end_rate)
    f = lambda a: a.astype(dtype)
    e["q_values"] = f(rng.standard_normal((rows, horizon)))
    e["next_values"] = f(np.where(e["terminated"], 1e3, rng.standard_normal((rows, horizon))))
    e["target_probs"] = f(rng.uniform(0.05, 1.0, (rows, horizon)))
    e["behaviour_probs"] = f(rng.uniform(0.05, 1.0, (rows, horizon)))
    e["target_log_probs"] = np.log(e["target_probs"]).astype(dtype)
    e["behaviour_log_probs"] = np.log(e["behaviour_probs"]).astype(dtype)
    e["greedy"] = rng.random((rows, horizon)) < 0.7
    return e


# ---- issue 29: next_values, V-trace's sample_mask and leaky alpha ----

def with_next_values(kind, rewards, values, terminated, truncated, next_values, importance=None, gamma=0.99,
                     lam=0.95, rho_clip=1.0, c_clip=1.0, rho_pg_clip=1.0, sample_mask=None, alpha=1.0):
    """GAE / TD(lambda) / V-trace with next_values_t = V'_t at every step, in float64,
    one step at a time, from docs/conventions.md. Returns (advantages, returns):
    gae: A, A + V; td_lambda: G - V, G (G the lambda-return scanned itself);
    vtrace: pg, vs = V + A with vs'_t = V_{t+1} + A_{t+1} inside an episode and
    next_values_t where it ends; a step with sample_mask 0 has A_t = A_{t+1} (rlax);
    alpha mixes every clipped ratio with the raw one (leaky V-trace)."""
    r, v, nv = (np.asarray(a, dtype=np.float64) for a in (rewards, values, next_values))
    term, trunc = _flags(terminated, r), _flags(truncated, r)
    mask = np.ones(r.shape, bool) if sample_mask is None else np.asarray(sample_mask).astype(bool)
    ratio = np.ones(r.shape) if importance is None else np.asarray(importance, dtype=np.float64)
    mix = lambda x, clip: alpha * np.fmin(x, clip) + (1 - alpha) * x if alpha != 1.0 else np.fmin(x, clip)
    rows, horizon = r.shape
    adv, ret = np.zeros(r.shape), np.zeros(r.shape)
    for b in range(rows):
        a = 0.0  # A_{t+1} (td_lambda: G_{t+1})
        for t in range(horizon - 1, -1, -1):
            assert not (term[b, t] and trunc[b, t])
            done = term[b, t] or trunc[b, t]
            boot = 0.0 if term[b, t] else gamma * nv[b, t]
            if kind == "td_lambda":
                cut = done or t == horizon - 1
                a = r[b, t] + (boot if cut else gamma * (1 - lam) * nv[b, t] + gamma * lam * a)
                adv[b, t], ret[b, t] = a - v[b, t], a
                continue
            td = r[b, t] + boot - v[b, t]
            later = a
            if mask[b, t]:
                a = mix(ratio[b, t], rho_clip) * td + (0.0 if done else gamma * lam * mix(ratio[b, t], c_clip) * a)
            ret[b, t] = a + v[b, t]
            if kind == "gae":
                adv[b, t] = a
                continue
            inside = not done and t < horizon - 1
            vs_next = v[b, t + 1] + later if inside else nv[b, t]
            adv[b, t] = mix(ratio[b, t], rho_pg_clip) * (r[b, t] + (0.0 if term[b, t] else gamma * vs_next) - v[b, t])
    return adv, ret


def n_step_with_next_values(rewards, terminated, truncated, next_values, n=1, gamma=0.99, lam=1.0):
    """n_step_returns with V'_s = next_values_s at every step (rlax's v_t)."""
    r, nv = np.asarray(rewards, np.float64), np.asarray(next_values, np.float64)
    term, trunc = _flags(terminated, r), _flags(truncated, r)
    rows, horizon = r.shape
    out = np.zeros(r.shape)
    for b in range(rows):
        one = r[b] + np.where(term[b], 0.0, gamma * nv[b])
        cut = term[b] | trunc[b] | (np.arange(horizon) == horizon - 1)
        w = one
        for _ in range(min(n, horizon) - 1):
            later = np.append(w[1:], 0.0)
            w = np.where(cut, one, r[b] + gamma * ((1 - lam) * nv[b] + lam * later))
        out[b] = w
    return out
