"""Issue 29's forms against the real peers (docs/conventions.md, "Independent next
values, sample masks, leaky V-trace"): TorchRL's functional estimators with an
independent next_state_value, rlax's V-trace with sample_mask, leaky V-trace,
lambda-returns and n-step returns with independent v_t, rlax's Retrace with a
target network; and the peers' quirks found on the way, each shown, not copied.
Both time layouts of puffadv are compared with the peer's one."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
import reference as ref

GAMMA, LAM = 0.875, 0.75  # exact in float32: TorchRL's float32 gamma is then the same number
ROWS, HORIZON = 5, 40


def _peer(name):
    try:
        return __import__(name, fromlist=["_"])
    except Exception as error:
        pytest.skip(f"{name} is not usable here ({type(error).__name__}: {error}); "
                    f"pip install -r requirements-test.txt")


def _episodes(rng, dtype=np.float64, truncations=True):
    e = ref.random_episodes(rng, ROWS, HORIZON, dtype)
    if not truncations:
        e["terminated"] = e["terminated"] | e["truncated"]
        e["truncated"] = np.zeros_like(e["truncated"])
    e["next_values"] = rng.standard_normal((ROWS, HORIZON)).astype(dtype)  # another network's V(s_{t+1})
    e["sample_mask"] = rng.random((ROWS, HORIZON)) > 0.3
    return e


def close(got, want, tol):
    assert ref.relative_error(np.asarray(got, np.float64), np.asarray(want, np.float64)) <= tol


def both_layouts(function, *arrays, **kw):
    """The result of `function` on batch-major arrays, and on their time-major copies
    (time_axis=0), each as batch-major NumPy arrays."""
    out = function(*arrays, **kw, time_axis=-1)
    t = lambda x: np.ascontiguousarray(x.T) if isinstance(x, np.ndarray) and x.ndim == 2 else x
    out_t = function(*(t(a) for a in arrays), **{k: t(v) for k, v in kw.items()}, time_axis=0)
    return out, type(out)(*(None if x is None else np.asarray(x).T for x in out_t))


# ---------------------------------------------------------------- TorchRL

@pytest.fixture
def torchrl():
    _peer("torch")
    return _peer("torchrl.objectives.value.functional")


def _t(x):
    import torch
    return torch.from_numpy(np.ascontiguousarray(x))[..., None]


def test_torchrl_gae_with_independent_next_state_value(torchrl, rng):
    e = _episodes(rng)
    done = e["terminated"] | e["truncated"]
    args = (_t(e["values"]), _t(e["next_values"]), _t(e["rewards"]), _t(done), _t(e["terminated"]))
    adv, target = torchrl.generalized_advantage_estimate(GAMMA, LAM, *args)
    vadv, vtarget = torchrl.vec_generalized_advantage_estimate(GAMMA, LAM, *args)
    for ours in both_layouts(puffadv.gae, e["rewards"], e["values"], e["terminated"], e["truncated"],
                             next_values=e["next_values"], gamma=GAMMA, gae_lambda=LAM):
        close(ours.advantages, adv[..., 0], 1e-12)
        close(ours.returns, target[..., 0], 1e-12)
        close(ours.advantages, vadv[..., 0], 1e-5)  # its conv1d form sums powers
        close(ours.returns, vtarget[..., 0], 1e-5)


def test_torchrl_td_lambda_with_independent_next_state_value(torchrl, rng):
    e = _episodes(rng)
    done = e["terminated"] | e["truncated"]
    args = (_t(e["next_values"]), _t(e["rewards"]), _t(done), _t(e["terminated"]))
    ret = torchrl.td_lambda_return_estimate(GAMMA, LAM, *args)
    vret = torchrl.vec_td_lambda_return_estimate(GAMMA, LAM, *args)
    for ours in both_layouts(puffadv.td_lambda_returns, e["rewards"], e["values"], e["terminated"],
                             e["truncated"], next_values=e["next_values"], gamma=GAMMA, lambda_=LAM):
        close(ours.returns, ret[..., 0], 1e-12)
        close(ours.returns, vret[..., 0], 1e-5)
    # Not gae(...).returns: the lambda-return bootstraps from next_values, A + V from values[t+1].
    gae = puffadv.gae(e["rewards"], e["values"], e["terminated"], e["truncated"], next_values=e["next_values"],
                      gamma=GAMMA, gae_lambda=LAM, time_axis=-1)
    assert ref.relative_error(gae.returns, ret[..., 0].numpy()) > 1e-3


def test_torchrl_vtrace_with_independent_next_state_value(torchrl, rng):
    """TorchRL 0.14 bootstraps the pg advantage from next_state_value where done, as
    puffadv does. Its thresholds become float32 tensors (torch.tensor(1.3)): dyadic
    thresholds here, so that float64 results agree to rounding."""
    e = _episodes(rng)
    done = e["terminated"] | e["truncated"]
    log_pi, log_mu = rng.normal(0, 0.5, (2, ROWS, HORIZON))
    adv, vs = torchrl.vtrace_advantage_estimate(GAMMA, _t(log_pi), _t(log_mu), _t(e["values"]),
                                                _t(e["next_values"]), _t(e["rewards"]), _t(done),
                                                _t(e["terminated"]), rho_thresh=1.25, c_thresh=0.875)
    for ours in both_layouts(puffadv.vtrace, e["rewards"], e["values"], e["terminated"], e["truncated"],
                             next_values=e["next_values"], importance=np.exp(log_pi - log_mu), gamma=GAMMA,
                             lambda_=1.0, rho_clip=1.25, c_clip=0.875, rho_pg_clip=1.25):
        close(ours.vs, vs[..., 0], 1e-12)
        close(ours.pg_advantages, adv[..., 0], 1e-12)


def test_torchrl_rounds_a_python_float_gamma_to_float32(torchrl, rng):
    """Documented quirk (torchrl 0.14): float64 inputs, gamma=0.97 as a Python float."""
    e = _episodes(rng)
    done = e["terminated"] | e["truncated"]
    adv, _ = torchrl.generalized_advantage_estimate(0.97, LAM, _t(e["values"]), _t(e["next_values"]),
                                                    _t(e["rewards"]), _t(done), _t(e["terminated"]))
    kw = dict(next_values=e["next_values"], gae_lambda=LAM)
    args = (e["rewards"], e["values"], e["terminated"], e["truncated"])
    rounded = puffadv.gae(*args, gamma=float(np.float32(0.97)), **{"time_axis": -1, **kw}).advantages
    exact = puffadv.gae(*args, gamma=0.97, **{"time_axis": -1, **kw}).advantages
    close(rounded, adv[..., 0], 1e-14)
    assert ref.relative_error(exact, adv[..., 0].numpy()) > 1e-9


# ---------------------------------------------------------------- rlax

@pytest.fixture
def rlax():
    _peer("jax")
    return _peer("rlax")


def _rows(fn, *arrays):
    return [fn(*(a[b] for a in arrays)) for b in range(ROWS)]


@pytest.mark.parametrize("alpha", [None, 0.6])
def test_rlax_vtrace_with_sample_mask_and_independent_v_t(rlax, rng, alpha):
    """rlax has no truncation flag: terminations only here (its discount_t = gamma (1 - term))."""
    e = _episodes(rng, np.float32, truncations=False)
    discount = (GAMMA * (1 - e["terminated"])).astype(np.float32)
    ratio = e["importance"]
    if alpha is None:
        fn = lambda v, vt, r, d, rho, m: rlax.vtrace_td_error_and_advantage(
            v, vt, r, d, rho, 1.0, 1.3, 1.1, sample_mask=m)
    else:
        fn = lambda v, vt, r, d, rho, m: rlax.leaky_vtrace_td_error_and_advantage(
            v, vt, r, d, rho, alpha, 1.0, 1.3, 1.1, sample_mask=m)
    out = _rows(fn, e["values"], e["next_values"], e["rewards"], discount, ratio, e["sample_mask"])
    errors = np.stack([np.asarray(o.errors) for o in out])
    pg = np.stack([np.asarray(o.pg_advantage) for o in out])
    kw = dict(next_values=e["next_values"], importance=ratio, sample_mask=e["sample_mask"], gamma=GAMMA,
              lambda_=1.0, rho_clip=1.3, c_clip=1.0, rho_pg_clip=1.1)
    if alpha is not None:
        kw["alpha"] = alpha
    for ours in both_layouts(puffadv.vtrace, e["rewards"], e["values"], e["terminated"], **kw):
        close(ours.vs - e["values"], errors, 2e-5)
        close(ours.pg_advantages, pg, 2e-5)


@pytest.mark.parametrize("n", [1, 3, HORIZON + 2])
def test_rlax_n_step_and_lambda_returns_with_independent_v_t(rlax, rng, n):
    """A time limit in rlax is lambda_t = 0 there with discount_t = gamma (1 - terminated):
    puffadv's truncated, with next_values as its bootstrap."""
    e = _episodes(rng, np.float32)
    discount = (GAMMA * (1 - e["terminated"])).astype(np.float32)
    lam_t = (LAM * (1 - e["truncated"])).astype(np.float32)
    nv = e["next_values"]
    theirs = np.stack(_rows(lambda r, d, v, l: np.asarray(rlax.n_step_bootstrapped_returns(r, d, v, n, l)),
                            e["rewards"], discount, nv, lam_t))
    for ours in both_layouts(puffadv.n_step_returns, e["rewards"], e["values"], e["terminated"], e["truncated"],
                             n=n, next_values=nv, gamma=GAMMA, lambda_=LAM):
        close(ours.returns, theirs, 2e-5)
    theirs = np.stack(_rows(lambda r, d, v, l: np.asarray(rlax.lambda_returns(r, d, v, l)),
                            e["rewards"], discount, nv, lam_t))
    for ours in both_layouts(puffadv.td_lambda_returns, e["rewards"], e["values"], e["terminated"],
                             e["truncated"], next_values=nv, gamma=GAMMA, lambda_=LAM):
        close(ours.returns, theirs, 2e-5)


def test_rlax_retrace_with_a_target_network(rlax, rng):
    """rlax's trace term reads the target network's q_t[a_t] while its error is against
    the online q_tm1[a_tm1]. The mapping that scans with the online values is off by
    a large amount; scanning with the target network's values of the taken actions and
    subtracting the online ones afterwards gives rlax's errors."""
    actions, lam = 3, 0.9
    q_online = rng.standard_normal((ROWS, HORIZON, actions)).astype(np.float32)
    q_next = rng.standard_normal((ROWS, HORIZON, actions)).astype(np.float32)  # target network, s_{t+1}
    pi = rng.dirichlet(np.ones(actions), (ROWS, HORIZON)).astype(np.float32)
    a_tm1 = rng.integers(0, actions, (ROWS, HORIZON))
    a_t = np.concatenate([a_tm1[:, 1:], rng.integers(0, actions, (ROWS, 1))], axis=1)
    mu = rng.uniform(0.1, 1.0, (ROWS, HORIZON)).astype(np.float32)
    r = rng.standard_normal((ROWS, HORIZON)).astype(np.float32)
    term = rng.random((ROWS, HORIZON)) < 0.1
    discount = (GAMMA * (1 - term)).astype(np.float32)
    theirs = np.stack(_rows(lambda *x: np.asarray(rlax.retrace(*x, lam)), q_online, q_next, a_tm1, a_t, r,
                            discount, pi, mu))
    take = lambda q, a: np.take_along_axis(q, a[..., None], -1)[..., 0]
    online = take(q_online, a_tm1)
    next_values = (pi * q_next).sum(-1)
    pi_taken = take(pi, a_t)  # pi(a_{t+1} | s_{t+1}): puffadv's target_probs at t + 1
    target_probs = np.concatenate([np.ones((ROWS, 1), np.float32), pi_taken[:, :-1]], axis=1)
    behaviour = np.concatenate([np.ones((ROWS, 1), np.float32), mu[:, :-1]], axis=1)
    kw = dict(target_probs=target_probs, behaviour_probs=behaviour, gamma=GAMMA, lambda_=lam, c_clip=1.0)
    old = puffadv.retrace(r, online, next_values, term, **{"time_axis": -1, **kw}).advantages
    assert np.abs(old - theirs).max() > 0.1  # the mapping documented before issue 29
    target_q = np.concatenate([online[:, :1], take(q_next, a_t)[:, :-1]], axis=1)  # q_values[t+1] = q_t[t, a_t]
    for ours in both_layouts(puffadv.retrace, r, target_q, next_values, term, **kw):
        close(ours.returns - online, theirs, 2e-5)
