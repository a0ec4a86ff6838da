"""Cross-validation against the real peers, installed from PyPI
(requirements-test.txt): TorchRL's functional estimators, Stable-Baselines3's
RolloutBuffer and rlax (JAX on the CPU). A peer that is not installed is
skipped with the reason, never silently.

Every comparison runs on random episodes whose terminations and truncations
fall at random steps, including the buffer's first and last step
(reference.random_episodes). docs/conventions.md explains each mapping; the
peers' known quirks are written down in the tests below, not copied."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
import reference as ref

GAMMA, LAM = 0.97, 0.9
ROWS, HORIZON = 6, 64


def _peer(name):
    try:
        return __import__(name, fromlist=["_"])
    except Exception as error:  # ImportError, or a broken install of its dependencies
        pytest.skip(f"{name} is not usable here ({type(error).__name__}: {error}); "
                    f"pip install -r requirements-test.txt")


@pytest.fixture
def episodes(rng):
    return ref.random_episodes(rng, ROWS, HORIZON, np.float32)


def next_values(e):
    """V(s_{t+1}) for every step, as TorchRL and rlax take it: V_{t+1} inside the
    buffer, the bootstrap at truncations and after the last step, and garbage
    (never to be read) after terminations."""
    nv = np.concatenate([e["values"][:, 1:], e["last_value"][:, None]], axis=1)
    nv = np.where(e["truncated"], e["bootstrap_values"], nv)
    return np.where(e["terminated"], np.float32(1e6), nv).astype(np.float32)


def close(got, want, tol=2e-5):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert ref.relative_error(got, want) <= tol, (got - want)


# ---------------------------------------------------------------- TorchRL

@pytest.fixture
def torchrl_functional():
    _peer("torch")
    return _peer("torchrl.objectives.value.functional")


def _torchrl(x):
    import torch
    return torch.from_numpy(np.ascontiguousarray(x))[..., None]  # [B, T, 1], time_dim=-2


def test_torchrl_gae(torchrl_functional, episodes):
    """TorchRL's next_state_value is passed as bootstrap_values unchanged: puffadv
    reads it only where the buffer does not hold V_{t+1} (truncations, last step)."""
    F, e = torchrl_functional, episodes
    nv = next_values(e)
    done = e["terminated"] | e["truncated"]
    adv, target = F.generalized_advantage_estimate(
        GAMMA, LAM, _torchrl(e["values"]), _torchrl(nv), _torchrl(e["rewards"]), _torchrl(done),
        _torchrl(e["terminated"]))
    ours = puffadv.gae(e["rewards"], e["values"], e["terminated"], e["truncated"], bootstrap_values=nv,
                       gamma=GAMMA, gae_lambda=LAM, time_axis=-1)
    close(ours.advantages, adv[..., 0])
    close(ours.returns, target[..., 0])
    vadv, vtarget = F.vec_generalized_advantage_estimate(
        GAMMA, LAM, _torchrl(e["values"]), _torchrl(nv), _torchrl(e["rewards"]), _torchrl(done),
        _torchrl(e["terminated"]))
    close(ours.advantages, vadv[..., 0], 1e-4)  # its conv1d form sums powers: less exact


def test_torchrl_vectorised_gae_with_gamma_lambda_zero(torchrl_functional, episodes):
    """Quirk: TorchRL's vec_generalized_advantage_estimate fails (IndexError in
    its conv1d helper, torchrl 0.14) when gamma * lambda == 0; the loop version
    gives the one-step TD error, and so does puffadv."""
    F, e = torchrl_functional, episodes
    nv = next_values(e)
    done = e["terminated"] | e["truncated"]
    args = (_torchrl(e["values"]), _torchrl(nv), _torchrl(e["rewards"]), _torchrl(done),
            _torchrl(e["terminated"]))
    loop_adv, _ = F.generalized_advantage_estimate(GAMMA, 0.0, *args)
    ours = puffadv.gae(e["rewards"], e["values"], e["terminated"], e["truncated"], bootstrap_values=nv,
                       gamma=GAMMA, gae_lambda=0.0, time_axis=-1)
    close(ours.advantages, loop_adv[..., 0])
    try:
        vec_adv, _ = F.vec_generalized_advantage_estimate(GAMMA, 0.0, *args)
    except IndexError:
        pass  # the documented quirk; nothing to compare
    else:  # fixed upstream: then it must agree too
        close(ours.advantages, vec_adv[..., 0], 1e-4)


def test_torchrl_td_lambda(torchrl_functional, episodes):
    F, e = torchrl_functional, episodes
    nv = next_values(e)
    done = e["terminated"] | e["truncated"]
    returns = F.td_lambda_return_estimate(GAMMA, LAM, _torchrl(nv), _torchrl(e["rewards"]), _torchrl(done),
                                          _torchrl(e["terminated"]))
    ours = puffadv.td_lambda_returns(e["rewards"], e["values"], e["terminated"], e["truncated"],
                                     bootstrap_values=nv, gamma=GAMMA, lambda_=LAM, time_axis=-1)
    close(ours.returns, returns[..., 0])


@pytest.mark.parametrize("rho_thresh, c_thresh", [(1.0, 1.0), (1.5, 0.8)])
def test_torchrl_vtrace(torchrl_functional, episodes, rho_thresh, c_thresh):
    """TorchRL takes log-probabilities; puffadv the ratio exp(log_pi - log_mu).
    TorchRL clips the pg advantage with rho_thresh: rho_pg_clip = rho_clip; no lambda (1)."""
    import torch
    F, e = torchrl_functional, episodes
    nv = next_values(e)
    done = e["terminated"] | e["truncated"]
    log_mu = np.random.default_rng(1).normal(size=e["rewards"].shape).astype(np.float32)
    log_pi = (log_mu + np.log(e["importance"] + 1e-3)).astype(np.float32)
    adv, vs = F.vtrace_advantage_estimate(
        GAMMA, _torchrl(log_pi), _torchrl(log_mu), _torchrl(e["values"]), _torchrl(nv),
        _torchrl(e["rewards"]), _torchrl(done), _torchrl(e["terminated"]), rho_thresh=rho_thresh,
        c_thresh=c_thresh)
    ratio = torch.exp(torch.from_numpy(log_pi) - torch.from_numpy(log_mu)).numpy()  # TorchRL's own rounding
    ours = puffadv.vtrace(e["rewards"], e["values"], e["terminated"], e["truncated"], bootstrap_values=nv,
                          importance=ratio, gamma=GAMMA, lambda_=1.0, rho_clip=rho_thresh, c_clip=c_thresh,
                          rho_pg_clip=rho_thresh, time_axis=-1)
    close(ours.vs, vs[..., 0])
    close(ours.pg_advantages, adv[..., 0])


# ---------------------------------------------------------------- Stable-Baselines3

def test_sb3_rollout_buffer(episodes):
    """SB3 stores [T, n_envs] (time-major: time_axis=0), marks an episode's end as
    episode_starts[t+1], and handles a time limit while collecting, by adding
    gamma * V(final obs) to that step's reward and then treating it as done
    (OnPolicyAlgorithm.collect_rollouts). puffadv keeps the rewards and takes the
    truncation with its bootstrap value; both give the same advantages."""
    _peer("torch")
    buffers = _peer("stable_baselines3.common.buffers")
    spaces = _peer("gymnasium.spaces")
    import torch
    e = episodes
    done = e["terminated"] | e["truncated"]
    folded = e["rewards"] + np.where(e["truncated"], GAMMA * e["bootstrap_values"], 0.0)
    buf = buffers.RolloutBuffer(HORIZON, spaces.Box(-1, 1, (1,)), spaces.Discrete(2), device="cpu",
                                gamma=GAMMA, gae_lambda=LAM, n_envs=ROWS)
    buf.reset()
    buf.rewards[:] = folded.T
    buf.values[:] = e["values"].T
    buf.episode_starts[:] = 0.0
    buf.episode_starts[1:] = done.T[:-1]
    buf.compute_returns_and_advantage(torch.from_numpy(e["last_value"]), done[:, -1].astype(np.float32))

    # Time-major [T, B] arrays, as SB3 holds them; bootstrap_values at the last step is last_values.
    boot = np.where(e["truncated"], e["bootstrap_values"], e["last_value"][:, None]).T
    ours = puffadv.gae(e["rewards"].T, e["values"].T, e["terminated"].T, e["truncated"].T,
                       bootstrap_values=boot, gamma=GAMMA, gae_lambda=LAM, time_axis=0)
    close(ours.advantages, buf.advantages)
    close(ours.returns, buf.returns)


# ---------------------------------------------------------------- rlax

@pytest.fixture
def rlax():
    _peer("jax")
    return _peer("rlax")


def _per_row(fn, *arrays):
    """rlax works on one [T] trajectory: run it row by row."""
    return np.stack([np.asarray(fn(*(a[b] for a in arrays))) for b in range(arrays[0].shape[0])])


def test_rlax_truncated_gae(rlax, episodes):
    """rlax has no truncation flag: its values[t+1] is used at every step. A time
    limit is expressed as SB3 does it: discount 0 and gamma * V(final obs) folded
    into the reward. discount_t = gamma (1 - done_t); values = [V_0..V_{T-1}, last_value]."""
    e = episodes
    done = e["terminated"] | e["truncated"]
    discount = (GAMMA * (1 - done)).astype(np.float32)
    folded = (e["rewards"] + np.where(e["truncated"], GAMMA * e["bootstrap_values"], 0)).astype(np.float32)
    values = np.concatenate([e["values"], e["last_value"][:, None]], axis=1)
    adv = _per_row(lambda r, d, v: rlax.truncated_generalized_advantage_estimation(r, d, LAM, v),
                   folded, discount, values)
    ours = puffadv.gae(e["rewards"], e["values"], e["terminated"], e["truncated"],
                       bootstrap_values=next_values(e), gamma=GAMMA, gae_lambda=LAM, time_axis=-1)
    close(ours.advantages, adv)


def test_rlax_lambda_returns(rlax, episodes):
    """A per-step lambda_ = lambda (1 - truncated_t) cuts the trace at a time limit
    while discount_t = gamma (1 - terminated_t) still bootstraps from v_t."""
    e = episodes
    nv = next_values(e)
    discount = (GAMMA * (1 - e["terminated"])).astype(np.float32)
    lam = (LAM * (1 - e["truncated"])).astype(np.float32)
    returns = _per_row(rlax.lambda_returns, e["rewards"], discount, nv, lam)
    ours = puffadv.td_lambda_returns(e["rewards"], e["values"], e["terminated"], e["truncated"],
                                     bootstrap_values=nv, gamma=GAMMA, lambda_=LAM, time_axis=-1)
    close(ours.returns, returns)


@pytest.mark.parametrize("lam", [1.0, 0.8])
def test_rlax_vtrace(rlax, episodes, lam):
    """rlax's c_t is min(1, rho) * lambda_ (c_clip = 1). Two quirks, documented here:
    - its pg bootstrap past step t is lambda vs_{t+1} + (1 - lambda) V_{t+1}; SPEC and
      IMPALA use vs_{t+1}, so the pg advantages are compared at lambda = 1 only;
    - with the per-step lambda_ that cuts traces at truncations, its pg bootstrap
      there is v_tm1[t+1] (the next episode's first value), not v_t[t]: those
      steps differ, and are checked against that formula instead."""
    e = episodes
    nv = next_values(e)
    discount = (GAMMA * (1 - e["terminated"])).astype(np.float32)
    lam_t = (lam * (1 - e["truncated"])).astype(np.float32)
    ratio = e["importance"]
    out = [rlax.vtrace_td_error_and_advantage(e["values"][b], nv[b], e["rewards"][b], discount[b], ratio[b],
                                              lam_t[b], clip_rho_threshold=1.3, clip_pg_rho_threshold=1.1)
           for b in range(ROWS)]
    errors = np.stack([np.asarray(o.errors) for o in out])
    pg = np.stack([np.asarray(o.pg_advantage) for o in out])
    ours = puffadv.vtrace(e["rewards"], e["values"], e["terminated"], e["truncated"], bootstrap_values=nv,
                          importance=ratio, gamma=GAMMA, lambda_=lam, rho_clip=1.3, c_clip=1.0,
                          rho_pg_clip=1.1, time_axis=-1)
    close(ours.vs - e["values"], errors)
    if lam != 1.0:
        return
    inside = ~e["truncated"]
    inside[:, -1] = True  # at the last step rlax bootstraps from v_t[-1] as puffadv does
    close(np.where(inside, ours.pg_advantages, 0), np.where(inside, pg, 0))
    v_next = np.concatenate([e["values"][:, 1:], e["values"][:, -1:]], axis=1)
    quirk = np.minimum(ratio, 1.1) * (e["rewards"] + GAMMA * v_next - e["values"])
    close(np.where(inside, 0, quirk), np.where(inside, 0, pg))


# ---------------------------------------------------------------- the estimator family (issue 20)
# docs/conventions.md ("The estimator family") has the mapping tables these tests run.

def test_rlax_discounted_returns(rlax, episodes):
    """rlax's v_t (a scalar here) bootstraps only after the last step; a time limit
    is folded into the reward with discount 0, as for GAE. puffadv reads the
    bootstrap at truncations and the last step from bootstrap_values."""
    e = episodes
    done = e["terminated"] | e["truncated"]
    discount = (GAMMA * (1 - done)).astype(np.float32)
    folded = (e["rewards"] + np.where(e["truncated"], GAMMA * e["bootstrap_values"], 0)).astype(np.float32)
    theirs = np.stack([np.asarray(rlax.discounted_returns(folded[b], discount[b], e["last_value"][b]))
                       for b in range(ROWS)])
    ours = puffadv.discounted_returns(e["rewards"], e["terminated"], e["truncated"], bootstrap_values=next_values(e),
                                      gamma=GAMMA, time_axis=-1)
    close(ours.returns, theirs)
    # No bootstrap at all: v_t = 0 in rlax, nothing passed to puffadv.
    theirs = _per_row(lambda r, d: rlax.discounted_returns(r, d, 0.0), e["rewards"], discount)
    close(puffadv.discounted_returns(e["rewards"], done, gamma=GAMMA, time_axis=-1).returns, theirs)


@pytest.mark.parametrize("n", [1, 3, 5, HORIZON + 3])
@pytest.mark.parametrize("lam", [1.0, 0.8])
def test_rlax_n_step_bootstrapped_returns(rlax, episodes, n, lam):
    """v_t = V(s_{t+1}) is puffadv's bootstrap_values as it is; a time limit is a
    per-step lambda_t = lambda (1 - truncated_t) with discount_t = gamma (1 - terminated_t)."""
    e = episodes
    nv = next_values(e)
    discount = (GAMMA * (1 - e["terminated"])).astype(np.float32)
    lam_t = (lam * (1 - e["truncated"])).astype(np.float32)
    theirs = _per_row(lambda r, d, v, l: rlax.n_step_bootstrapped_returns(r, d, v, n, l), e["rewards"], discount,
                      nv, lam_t)
    ours = puffadv.n_step_returns(e["rewards"], e["values"], e["terminated"], e["truncated"], n=n,
                                  bootstrap_values=nv, gamma=GAMMA, lambda_=lam, time_axis=-1)
    close(ours.returns, theirs)


ACTIONS = 3


def _softmax(x):
    x = np.exp(x - x.max(-1, keepdims=True))
    return (x / x.sum(-1, keepdims=True)).astype(np.float32)


def _action_values(e, rng):
    """Per-state Q and pi tables of a discrete-action trajectory in rlax's layout:
    (q_tm1, a_tm1, q_t, a_t, pi_t, mu_t), each [B, T, ...], and puffadv's
    (q_values, next_values, target_probs, behaviour_probs, greedy). s_T is the state
    after the last step; a truncated step's next state is its final observation
    (its own Q and pi rows, and a behaviour probability of inf: rlax's c_t is then
    min(1, pi / (inf + eps)) = 0, which is how a time limit cuts its trace)."""
    rows, horizon = e["rewards"].shape
    q = rng.standard_normal((rows, horizon + 1, ACTIONS)).astype(np.float32)
    pi = _softmax(rng.standard_normal((rows, horizon + 1, ACTIONS)))
    a = rng.integers(0, ACTIONS, (rows, horizon + 1))
    mu = rng.uniform(0.05, 1.0, (rows, horizon + 1)).astype(np.float32)
    final_q = rng.standard_normal((rows, horizon, ACTIONS)).astype(np.float32)
    final_pi = _softmax(rng.standard_normal((rows, horizon, ACTIONS)))
    trunc = e["truncated"]
    q_t = np.where(trunc[..., None], final_q, q[:, 1:])
    pi_t = np.where(trunc[..., None], final_pi, pi[:, 1:])
    a_t = np.where(trunc, a[:, :-1], a[:, 1:])
    mu_t = np.where(trunc, np.float32(np.inf), mu[:, 1:])
    take = lambda table, actions: np.take_along_axis(table, actions[..., None], -1)[..., 0]
    ours = dict(q_values=take(q[:, :-1], a[:, :-1]), next_values=(pi_t * q_t).sum(-1),
                target_probs=take(pi[:, :-1], a[:, :-1]), behaviour_probs=mu[:, :-1],
                greedy=a[:, :-1] == q[:, :-1].argmax(-1), max_next=q_t.max(-1))
    return (q[:, :-1], a[:, :-1], q_t, a_t, pi_t, mu_t), ours


@pytest.mark.parametrize("lam", [1.0, 0.7])
def test_rlax_retrace(rlax, episodes, lam):
    """rlax.retrace's errors are puffadv's advantages (Delta); its c_t is
    lambda min(1, pi / (mu + 1e-8)): c_clip = 1, and the eps moves c by < 1e-7
    relatively (mu >= 0.05 here)."""
    e = episodes
    (q_tm1, a_tm1, q_t, a_t, pi_t, mu_t), ours = _action_values(e, np.random.default_rng(2))
    discount = (GAMMA * (1 - e["terminated"])).astype(np.float32)
    theirs = np.stack([np.asarray(rlax.retrace(q_tm1[b], q_t[b], a_tm1[b], a_t[b], e["rewards"][b], discount[b],
                                               pi_t[b], mu_t[b], lam)) for b in range(ROWS)])
    got = puffadv.retrace(e["rewards"], ours["q_values"], ours["next_values"], e["terminated"], e["truncated"],
                          target_probs=ours["target_probs"], behaviour_probs=ours["behaviour_probs"], gamma=GAMMA,
                          lambda_=lam, c_clip=1.0, time_axis=-1)
    close(got.advantages, theirs)
    logs = puffadv.retrace(e["rewards"], ours["q_values"], ours["next_values"], e["terminated"], e["truncated"],
                           target_log_probs=np.log(ours["target_probs"]),
                           behaviour_log_probs=np.log(ours["behaviour_probs"]), gamma=GAMMA, lambda_=lam, time_axis=-1)
    close(logs.advantages, theirs)


@pytest.mark.parametrize("c_clip", [1.0, 1.5])
def test_rlax_general_off_policy_returns_from_action_values(rlax, episodes, c_clip):
    """The general form takes c_t itself, indexed by rlax's t (the transition):
    c_t[i] = lambda min(c_clip, target_probs[i+1] / behaviour_probs[i+1]) (1 - truncated[i]),
    the NEXT step's ratio; its result is puffadv's returns (Q_ret)."""
    e = episodes
    (_, _, q_t, a_t, pi_t, _), ours = _action_values(e, np.random.default_rng(3))
    ratio = ours["target_probs"] / ours["behaviour_probs"]
    next_ratio = np.concatenate([ratio[:, 1:], np.ones((ROWS, 1), np.float32)], axis=1)
    c = (LAM * np.minimum(c_clip, next_ratio) * (1 - e["truncated"])).astype(np.float32)
    discount = (GAMMA * (1 - e["terminated"])).astype(np.float32)
    theirs = np.stack([np.asarray(rlax.general_off_policy_returns_from_action_values(
        q_t[b], a_t[b], e["rewards"][b], discount[b], c[b], pi_t[b])) for b in range(ROWS)])
    got = puffadv.retrace(e["rewards"], ours["q_values"], ours["next_values"], e["terminated"], e["truncated"],
                          target_probs=ours["target_probs"], behaviour_probs=ours["behaviour_probs"], gamma=GAMMA,
                          lambda_=LAM, c_clip=c_clip, time_axis=-1)
    close(got.returns, theirs)


@pytest.mark.parametrize("watkins", [False, True])
def test_rlax_q_lambda(rlax, episodes, watkins):
    """rlax.q_lambda's v_t is max_a q_t (puffadv's next_values). Its lambda_ is per
    transition: Watkins' lambda_[t] = lambda * (a_{t+1} greedy) = lambda greedy[t+1] in
    puffadv's flags (one step later), and a time limit cuts the trace with lambda_[t] = 0."""
    e = episodes
    (q_tm1, a_tm1, q_t, _, _, _), ours = _action_values(e, np.random.default_rng(4))
    discount = (GAMMA * (1 - e["terminated"])).astype(np.float32)
    greedy_next = np.concatenate([ours["greedy"][:, 1:], np.ones((ROWS, 1), bool)], axis=1)
    lam_t = LAM * (1 - e["truncated"]) * (greedy_next if watkins else 1)
    theirs = np.stack([np.asarray(rlax.q_lambda(q_tm1[b], a_tm1[b], e["rewards"][b], discount[b], q_t[b],
                                                lam_t[b].astype(np.float32))) for b in range(ROWS)])
    got = puffadv.q_lambda(e["rewards"], ours["q_values"], ours["max_next"], e["terminated"], e["truncated"],
                           greedy=ours["greedy"] if watkins else None, gamma=GAMMA, lambda_=LAM, time_axis=-1)
    close(got.advantages, theirs)


def test_torchrl_reward2go(torchrl_functional, episodes):
    """reward2go reads a 2-D array as [T, B] (time_dim=-2, the default; pass time_dim=-1
    for [B, T]), has no bootstrap (an episode's end, and the buffer's, add nothing) and
    sums a geometric series cut where gamma^k < 1e-7 (a relative error near 1e-7)."""
    import torch
    F, e = torchrl_functional, episodes
    done = e["terminated"] | e["truncated"]
    theirs = F.reward2go(torch.from_numpy(e["rewards"].T.copy()), torch.from_numpy(done.T.copy()), GAMMA)
    ours = puffadv.discounted_returns(e["rewards"].T, done.T, gamma=GAMMA, time_axis=0)
    close(ours.returns, theirs)
    batch_major = F.reward2go(torch.from_numpy(e["rewards"]), torch.from_numpy(done), GAMMA, time_dim=-1)
    close(puffadv.discounted_returns(e["rewards"], done, gamma=GAMMA, time_axis=-1).returns, batch_major)


def test_torchrl_td0_and_td1_returns(torchrl_functional, episodes):
    """td0_return_estimate is the one-step target r + gamma (1 - terminated) V(s'):
    n_step_returns with n = 1; td1_return_estimate bootstraps from
    next_state_value at truncations and after the last step: discounted_returns
    with bootstrap_values = next_state_value."""
    F, e = torchrl_functional, episodes
    nv = next_values(e)
    done = e["terminated"] | e["truncated"]
    td0 = F.td0_return_estimate(GAMMA, _torchrl(nv), _torchrl(e["rewards"]), _torchrl(e["terminated"]))
    ours = puffadv.n_step_returns(e["rewards"], e["values"], e["terminated"], e["truncated"], n=1,
                                  bootstrap_values=nv, gamma=GAMMA, time_axis=-1)
    close(ours.returns, td0[..., 0])
    td1 = F.td1_return_estimate(GAMMA, _torchrl(nv), _torchrl(e["rewards"]), _torchrl(done),
                                _torchrl(e["terminated"]))
    ours = puffadv.discounted_returns(e["rewards"], e["terminated"], e["truncated"], bootstrap_values=nv, gamma=GAMMA, time_axis=-1)
    close(ours.returns, td1[..., 0])
