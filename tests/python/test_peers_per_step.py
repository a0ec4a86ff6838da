"""Per-step discounts and lambda (issue 29) against the peers, as their users write
them: rlax's `discount_t` (random in [0, 1], zero at terminations: rlax folds
termination into the discount) and per-step `lambda_`, passed to puffadv as
`gamma=discount_t` with `terminated` all False (and, equally, with `terminated`
where the discount is 0); TorchRL's functional estimators with per-step `gamma`
(and `lmbda`) tensors. docs/conventions.md has the mapping these tests run."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
import reference as ref
from test_peers import _peer, close

ROWS, HORIZON = 5, 48


@pytest.fixture
def steps():
    """Values, rewards, V(s_{t+1}) (v_t), per-step discount (0 at terminations) and lambda."""
    rng = np.random.default_rng(29)
    f = lambda x: np.asarray(x, np.float32)
    values = f(rng.standard_normal((ROWS, HORIZON)))
    last = f(rng.standard_normal(ROWS))
    ends = rng.random((ROWS, HORIZON)) < 0.12
    ends[0, 0] = ends[-1, -1] = ends[0, -1] = True
    discount = f(np.where(ends, 0.0, rng.uniform(0.0, 1.0, (ROWS, HORIZON))))
    return dict(values=values, last_value=last, rewards=f(rng.standard_normal((ROWS, HORIZON))),
                v_t=f(np.concatenate([values[:, 1:], last[:, None]], axis=1)), discount=discount, ends=ends,
                lam=f(rng.uniform(0.0, 1.0, (ROWS, HORIZON))), ratio=f(rng.uniform(0.2, 2.0, (ROWS, HORIZON))))


def _per_row(fn, *arrays):
    return np.stack([np.asarray(fn(*(a[b] for a in arrays))) for b in range(ROWS)])


def _flags(s, folded):
    """terminated all False (the discount holds the ends), or set where it is 0: the same result."""
    return np.zeros_like(s["ends"]) if folded else s["ends"]


@pytest.fixture
def rlax():
    _peer("jax")
    return _peer("rlax")


@pytest.mark.parametrize("folded", [True, False])
def test_rlax_lambda_returns_and_td_lambda(rlax, steps, folded):
    s = steps
    theirs = _per_row(rlax.lambda_returns, s["rewards"], s["discount"], s["v_t"], s["lam"])
    ours = puffadv.td_lambda_returns(s["rewards"], s["values"], _flags(s, folded), last_value=s["last_value"],
                                     gamma=s["discount"], lambda_=s["lam"], advantages=True, time_axis=-1)
    close(ours.returns, theirs)
    errors = _per_row(rlax.td_lambda, s["values"], s["rewards"], s["discount"], s["v_t"], s["lam"])
    close(ours.advantages, errors)
    gae = puffadv.gae(s["rewards"], s["values"], _flags(s, folded), last_value=s["last_value"],
                      gamma=s["discount"], gae_lambda=s["lam"], time_axis=-1)
    close(gae.advantages, errors)


@pytest.mark.parametrize("folded", [True, False])
def test_rlax_discounted_returns(rlax, steps, folded):
    s = steps
    theirs = _per_row(lambda r, d, v: rlax.discounted_returns(r, d, v), s["rewards"], s["discount"], s["v_t"])
    ours = puffadv.discounted_returns(s["rewards"], _flags(s, folded), last_value=s["last_value"],
                                      gamma=s["discount"], time_axis=-1)
    close(ours.returns, theirs)


@pytest.mark.parametrize("n", [1, 4, HORIZON + 2])
def test_rlax_n_step_bootstrapped_returns(rlax, steps, n):
    s = steps
    theirs = _per_row(lambda r, d, v, l: rlax.n_step_bootstrapped_returns(r, d, v, n, l), s["rewards"],
                      s["discount"], s["v_t"], s["lam"])
    ours = puffadv.n_step_returns(s["rewards"], s["values"], _flags(s, True), n=n, last_value=s["last_value"],
                                  gamma=s["discount"], lambda_=s["lam"], time_axis=-1)
    close(ours.returns, theirs)


def test_rlax_vtrace(rlax, steps):
    """rlax's c_t = lambda_t min(1, rho_t): c_clip = 1; its pg advantage mixes V_{t+1} into the
    bootstrap where lambda < 1, so pg is compared with lambda = 1 (per-step discounts still)."""
    s = steps
    errors = _per_row(lambda v, vt, r, d, rho, l: rlax.vtrace(v, vt, r, d, rho, l, clip_rho_threshold=1.3),
                      s["values"], s["v_t"], s["rewards"], s["discount"], s["ratio"], s["lam"])
    ours = puffadv.vtrace(s["rewards"], s["values"], _flags(s, True), last_value=s["last_value"],
                          importance=s["ratio"], gamma=s["discount"], lambda_=s["lam"], rho_clip=1.3, c_clip=1.0,
                          time_axis=-1)
    close(ours.vs - s["values"], errors)
    one = np.ones_like(s["lam"])
    pg = np.stack([np.asarray(rlax.vtrace_td_error_and_advantage(
        s["values"][b], s["v_t"][b], s["rewards"][b], s["discount"][b], s["ratio"][b], one[b],
        clip_rho_threshold=1.3, clip_pg_rho_threshold=1.1).pg_advantage) for b in range(ROWS)])
    ours = puffadv.vtrace(s["rewards"], s["values"], _flags(s, True), last_value=s["last_value"],
                          importance=s["ratio"], gamma=s["discount"], lambda_=1.0, rho_clip=1.3, c_clip=1.0,
                          rho_pg_clip=1.1, time_axis=-1)
    close(ours.pg_advantages, pg)


ACTIONS = 3


def _tables(rng):
    """Discrete-action tables in rlax's layout (q_tm1, a_tm1, q_t, a_t, pi_t, mu_t), and puffadv's
    taken-action arrays: q_values, target/behaviour probabilities (step t's action at t)."""
    q = rng.standard_normal((ROWS, HORIZON + 1, ACTIONS)).astype(np.float32)
    logits = rng.standard_normal((ROWS, HORIZON + 1, ACTIONS))
    pi = (np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)).astype(np.float32)
    a = rng.integers(0, ACTIONS, (ROWS, HORIZON + 1))
    mu = rng.uniform(0.05, 1.0, (ROWS, HORIZON + 1)).astype(np.float32)
    take = lambda table, actions: np.take_along_axis(table, actions[..., None], -1)[..., 0]
    rlax_args = (q[:, :-1], a[:, :-1], q[:, 1:], a[:, 1:], pi[:, 1:], mu[:, 1:])
    ours = dict(q_values=take(q[:, :-1], a[:, :-1]), expected=(pi[:, 1:] * q[:, 1:]).sum(-1),
                greedy_max=q[:, 1:].max(-1), sarsa_next=take(q[:, 1:], a[:, 1:]),
                target_probs=take(pi, a), behaviour_probs=mu)
    ours["target_probs"], ours["behaviour_probs"] = ours["target_probs"][:, :-1], mu[:, :-1]
    return rlax_args, ours


def test_rlax_retrace(rlax, steps):
    """rlax's c_t = lambda_[t] min(1, pi_t[a_t] / mu_t): step t's lambda scales the next step's
    ratio, as puffadv's lambda_t does (k_t = gamma_t lambda_t min(c_clip, ratio_{t+1}))."""
    s = steps
    (q_tm1, a_tm1, q_t, a_t, pi_t, mu_t), ours = _tables(np.random.default_rng(8))
    theirs = np.stack([np.asarray(rlax.retrace(q_tm1[b], q_t[b], a_tm1[b], a_t[b], s["rewards"][b],
                                               s["discount"][b], pi_t[b], mu_t[b], s["lam"][b]))
                       for b in range(ROWS)])
    got = puffadv.retrace(s["rewards"], ours["q_values"], ours["expected"], _flags(s, True),
                          target_probs=ours["target_probs"], behaviour_probs=ours["behaviour_probs"],
                          gamma=s["discount"], lambda_=s["lam"], c_clip=1.0, time_axis=-1)
    close(got.advantages, theirs)


def test_rlax_q_lambda_and_sarsa_lambda(rlax, steps):
    s = steps
    (q_tm1, a_tm1, q_t, a_t, _, _), ours = _tables(np.random.default_rng(9))
    theirs = np.stack([np.asarray(rlax.q_lambda(q_tm1[b], a_tm1[b], s["rewards"][b], s["discount"][b], q_t[b],
                                                s["lam"][b])) for b in range(ROWS)])
    got = puffadv.q_lambda(s["rewards"], ours["q_values"], ours["greedy_max"], _flags(s, True),
                           gamma=s["discount"], lambda_=s["lam"], time_axis=-1)
    close(got.advantages, theirs)
    # Sarsa(lambda): the same recursion on q_t[a_t] (next_values of the action taken next).
    theirs = np.stack([np.asarray(rlax.sarsa_lambda(q_tm1[b], a_tm1[b], s["rewards"][b], s["discount"][b],
                                                    q_t[b], a_t[b], s["lam"][b])) for b in range(ROWS)])
    got = puffadv.q_lambda(s["rewards"], ours["q_values"], ours["sarsa_next"], _flags(s, True),
                           gamma=s["discount"], lambda_=s["lam"], time_axis=-1)
    close(got.advantages, theirs)


# ---------------------------------------------------------------- TorchRL

@pytest.fixture
def torchrl_functional():
    _peer("torch")
    return _peer("torchrl.objectives.value.functional")


def _t(x):
    import torch
    return torch.from_numpy(np.ascontiguousarray(x))[..., None]  # [B, T, 1], time_dim=-2


@pytest.fixture
def torchrl_steps():
    """TorchRL's dialect: gamma per step, terminated/truncated flags, next_state_value independent."""
    e = ref.random_episodes(np.random.default_rng(30), ROWS, HORIZON, np.float32)
    rng = np.random.default_rng(31)
    e["gamma"] = rng.uniform(0.5, 1.0, (ROWS, HORIZON)).astype(np.float32)
    e["lam"] = rng.uniform(0.0, 1.0, (ROWS, HORIZON)).astype(np.float32)
    nv = np.concatenate([e["values"][:, 1:], e["last_value"][:, None]], axis=1)
    nv = np.where(e["truncated"], e["bootstrap_values"], nv)
    e["next"] = np.where(e["terminated"], np.float32(1e6), nv).astype(np.float32)
    e["done"] = e["terminated"] | e["truncated"]
    return e


def test_torchrl_gae_with_gamma_and_lambda_tensors(torchrl_functional, torchrl_steps):
    F, e = torchrl_functional, torchrl_steps
    import torch
    adv, target = F.generalized_advantage_estimate(
        torch.from_numpy(e["gamma"])[..., None], torch.from_numpy(e["lam"])[..., None], _t(e["values"]),
        _t(e["next"]), _t(e["rewards"]), _t(e["done"]), _t(e["terminated"]))
    ours = puffadv.gae(e["rewards"], e["values"], e["terminated"], e["truncated"], bootstrap_values=e["next"],
                       gamma=e["gamma"], gae_lambda=e["lam"], time_axis=-1)
    close(ours.advantages, adv[..., 0])
    close(ours.returns, target[..., 0])


def test_torchrl_gae_and_vtrace_with_gamma_tensors_and_next_state_value(torchrl_functional, torchrl_steps):
    """TorchRL's default dialect in full: per-step gamma (and lmbda) tensors beside an
    independent next_state_value (the critic's value of each next observation: random
    here, not values[t+1]), as puffadv's per-step arrays with next_values."""
    F, e = torchrl_functional, torchrl_steps
    import torch
    rng = np.random.default_rng(32)
    nv = rng.standard_normal(e["rewards"].shape).astype(np.float32)
    gamma, lam = torch.from_numpy(e["gamma"])[..., None], torch.from_numpy(e["lam"])[..., None]
    adv, target = F.generalized_advantage_estimate(gamma, lam, _t(e["values"]), _t(nv), _t(e["rewards"]),
                                                   _t(e["done"]), _t(e["terminated"]))
    ours = puffadv.gae(e["rewards"], e["values"], e["terminated"], e["truncated"], next_values=nv, gamma=e["gamma"],
                       gae_lambda=e["lam"], time_axis=-1)
    close(ours.advantages, adv[..., 0])
    close(ours.returns, target[..., 0])
    log_mu = np.log(rng.uniform(0.1, 1.0, e["rewards"].shape)).astype(np.float32)
    log_pi = np.log(rng.uniform(0.1, 1.0, e["rewards"].shape)).astype(np.float32)
    adv, vs = F.vtrace_advantage_estimate(gamma, _t(log_pi), _t(log_mu), _t(e["values"]), _t(nv), _t(e["rewards"]),
                                          _t(e["done"]), _t(e["terminated"]), rho_thresh=1.3, c_thresh=0.9)
    ours = puffadv.vtrace(e["rewards"], e["values"], e["terminated"], e["truncated"], next_values=nv,
                          importance=np.exp(log_pi - log_mu), gamma=e["gamma"], lambda_=1.0, rho_clip=1.3,
                          rho_pg_clip=1.3, c_clip=0.9, time_axis=-1)
    close(ours.pg_advantages, adv[..., 0], 1e-4)
    close(ours.vs, vs[..., 0], 1e-4)


def test_torchrl_td0_td1_and_td_lambda_with_gamma_tensors(torchrl_functional, torchrl_steps):
    """rolling_gamma=True: each gamma_t belongs to its own step (g1 v2 + g1 g2 v3 + ...), puffadv's
    definition. (rolling_gamma=False, a gamma tied to the whole upcoming trajectory, has no puffadv form.)"""
    F, e = torchrl_functional, torchrl_steps
    import torch
    gamma = torch.from_numpy(e["gamma"])[..., None]
    td0 = F.td0_return_estimate(gamma, _t(e["next"]), _t(e["rewards"]), _t(e["terminated"]))
    ours = puffadv.n_step_returns(e["rewards"], e["values"], e["terminated"], e["truncated"], n=1,
                                  bootstrap_values=e["next"], gamma=e["gamma"], time_axis=-1)
    close(ours.returns, td0[..., 0])
    td1 = F.vec_td1_return_estimate(gamma, _t(e["next"]), _t(e["rewards"]), _t(e["done"]), _t(e["terminated"]),
                                    rolling_gamma=True)
    ours = puffadv.discounted_returns(e["rewards"], e["terminated"], e["truncated"], bootstrap_values=e["next"],
                                      gamma=e["gamma"], time_axis=-1)
    close(ours.returns, td1[..., 0], 1e-4)
    lam = 0.8
    tdl = F.vec_td_lambda_return_estimate(gamma, lam, _t(e["next"]), _t(e["rewards"]), _t(e["done"]),
                                          _t(e["terminated"]), rolling_gamma=True)
    ours = puffadv.td_lambda_returns(e["rewards"], e["values"], e["terminated"], e["truncated"],
                                     bootstrap_values=e["next"], gamma=e["gamma"], lambda_=lam, time_axis=-1)
    close(ours.returns, tdl[..., 0], 1e-4)
