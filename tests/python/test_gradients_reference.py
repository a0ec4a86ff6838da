"""puffadv's gradients against autograd of float64 references written with torch ops
(grad_reference.py) for every estimator and every differentiable argument, gamma
and lambda included; and against the peers' own autodiff where they meet: jax.grad
of rlax (stop_target_gradients=False) and torch autograd of TorchRL's functional
estimators."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import grad_reference as R  # noqa: E402
from gradient_cases import CASES, episode_arrays, make_call  # noqa: E402


def _reference(case: str, a: dict, const: dict, fixed: dict):
    """The [B, T] series the public call returns, in its order, from the reference."""
    g = a.get("gamma")
    lam = a.get("gae_lambda", a.get("lambda_"))
    t, tr = const.get("terminated"), const.get("truncated")
    boot = {"last_value": a.get("last_value"), "bootstrap_values": a.get("bootstrap_values")}
    clips = {k: v for k, v in fixed.items() if k in ("rho_clip", "c_clip", "rho_pg_clip")}
    nxt = {"next_values": a.get("next_values")}  # gae, td_lambda, vtrace: issue 29's V'_t at every step
    if case.startswith(("gae", "td_lambda")):
        return R.standard("td_lambda" if case.startswith("td_lambda") else "gae", a["rewards"], a["values"], t, tr,
                          **boot, **nxt, importance=a.get("importance"), gamma=g, lam=lam, **clips)
    if case.startswith("vtrace"):
        pg, vs = R.standard("vtrace", a["rewards"], a["values"], t, tr, **boot, **nxt, importance=a.get("importance"),
                            gamma=g, lam=lam, **clips, sample_mask=const.get("sample_mask"),
                            alpha=fixed.get("alpha", 1.0))
        return vs, pg
    if case.startswith("discounted"):
        return (R.discounted_returns(a["rewards"], t, tr, **boot, gamma=g),)
    if case.startswith("n_step"):
        returns = R.n_step_returns(a["rewards"], a["values"], t, tr, **boot, n=fixed["n"], gamma=g, lam=lam, **nxt)
        return returns - a["values"], returns
    if case.startswith("retrace"):
        logs = case.endswith("log_probs")
        pi, mu = (a["target_log_probs"], a["behaviour_log_probs"]) if logs else (a["target_probs"],
                                                                                 a["behaviour_probs"])
        return R.retrace(a["rewards"], a["q_values"], a["next_values"], t, tr, pi, mu, logs, g, lam, **clips)
    if case.startswith("q_lambda"):
        return R.q_lambda(a["rewards"], a["q_values"], a["next_values"], t, tr, const.get("greedy"), g, lam)
    if case.startswith(("episodic", "eligibility")):
        decay = 1.0 if g is None else g * lam
        return (R.episodic_sum(a["inputs"], const["dones"], a["seed"], decay, fixed.get("boundary") == "starts_at"),)
    if case == "compute_puff_advantage":
        adv = R.puff_advantage(a["values"], a["rewards"], const["dones"], a["importance"], g, lam, **clips)
        return adv, adv + a["values"]
    raise AssertionError(case)


@pytest.mark.parametrize("case", sorted(CASES))
def test_against_autograd_of_the_reference(case):
    call, leaves, names = make_call(case, seed=11)
    arrays, flags, fixed, scalars, _ = CASES[case]
    data = episode_arrays(11)
    const = {f: torch.tensor(data[f]) for f in flags}
    ours = [o for o in call(*leaves) if o.ndim == 2]
    theirs = _reference(case, dict(zip(names, leaves)), const, fixed)
    assert len(ours) == len(theirs)
    weights = [torch.randn_like(o) for o in ours]
    for o, t in zip(ours, theirs):
        torch.testing.assert_close(o, t, rtol=1e-12, atol=1e-12)
    got = torch.autograd.grad(sum((o * w).sum() for o, w in zip(ours, weights)), leaves)
    want = torch.autograd.grad(sum((t * w).sum() for t, w in zip(theirs, weights)), leaves, allow_unused=True)
    for name, g, w in zip(names, got, want):
        w = torch.zeros_like(g) if w is None else w
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-11, msg=name)


# ---------------------------------------------------------------- peers

def _episodes(seed=12):
    e = episode_arrays(seed, rows=4, horizon=9)
    nv = np.concatenate([e["values"][:, 1:], e["last_value"][:, None]], axis=1)
    e["nv"] = np.where(e["truncated"], e["bootstrap_values"], nv)
    return e


def test_rlax_lambda_returns_gradients():
    """rlax.lambda_returns(stop_target_gradients=False): d/d rewards, next values, gamma, lambda.
    puffadv's values[t+1] and bootstrap_values both come from rlax's v_t (one leaf)."""
    jax = pytest.importorskip("jax")
    rlax = pytest.importorskip("rlax")
    import puffadv
    e = _episodes()
    gamma, lam = 0.9, 0.8
    w = np.random.default_rng(0).standard_normal(e["rewards"].shape)
    with jax.enable_x64(True):
        import jax.numpy as jnp

        def theirs(r, v, g, l):
            discount = g * (1 - jnp.asarray(e["terminated"], jnp.float64))
            lam_t = l * (1 - jnp.asarray(e["truncated"], jnp.float64))
            out = jax.vmap(lambda *a: rlax.lambda_returns(*a, stop_target_gradients=False))(r, discount, v, lam_t)
            return (out * w).sum()

        expected = jax.grad(theirs, argnums=(0, 1, 2, 3))(e["rewards"], e["nv"], gamma, lam)
    r, nv = torch.tensor(e["rewards"], requires_grad=True), torch.tensor(e["nv"], requires_grad=True)
    g, l = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (gamma, lam))
    values = torch.cat([nv[:, :1] * 0, nv[:, :-1]], 1)  # values[t+1] = nv[t]; read only inside episodes
    out = puffadv.td_lambda_returns(r, values, torch.tensor(e["terminated"]), torch.tensor(e["truncated"]),
                                    bootstrap_values=nv, gamma=g, lambda_=l, time_axis=-1).returns
    got = torch.autograd.grad((out * torch.tensor(w)).sum(), (r, nv, g, l))
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a.numpy(), np.asarray(b), rtol=1e-10, atol=1e-12)


def test_rlax_vtrace_gradients():
    """rlax.vtrace_td_error_and_advantage(stop_target_gradients=False): the td errors vs - v
    by values, rewards, the bootstrap and the importance ratios (c_clip = 1, as rlax)."""
    jax = pytest.importorskip("jax")
    rlax = pytest.importorskip("rlax")
    import puffadv
    e = _episodes(13)
    gamma, rho_clip = 0.95, 1.3
    ratio = e["importance"]
    w = np.random.default_rng(1).standard_normal(e["rewards"].shape)
    with jax.enable_x64(True):
        import jax.numpy as jnp

        def theirs(r, v, boot, rho):
            nv = jnp.where(e["truncated"], boot, jnp.concatenate([v[:, 1:], boot[:, -1:]], 1))
            discount = gamma * (1 - jnp.asarray(e["terminated"], jnp.float64))
            lam_t = 1 - jnp.asarray(e["truncated"], jnp.float64)
            out = jax.vmap(lambda *a: rlax.vtrace_td_error_and_advantage(
                *a, clip_rho_threshold=rho_clip, stop_target_gradients=False).errors)(v, nv, r, discount, rho, lam_t)
            return (out * w).sum()

        expected = jax.grad(theirs, argnums=(0, 1, 2, 3))(e["rewards"], e["values"], e["bootstrap_values"], ratio)
    leaves = [torch.tensor(x, requires_grad=True) for x in (e["rewards"], e["values"], e["bootstrap_values"], ratio)]
    r, v, boot, rho = leaves
    out = puffadv.vtrace(r, v, torch.tensor(e["terminated"]), torch.tensor(e["truncated"]), bootstrap_values=boot,
                         importance=rho, gamma=gamma, rho_clip=rho_clip, c_clip=1.0, time_axis=-1)
    got = torch.autograd.grad(((out.vs - v) * torch.tensor(w)).sum(), leaves)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a.numpy(), np.asarray(b), rtol=1e-10, atol=1e-12)


def test_torchrl_gae_gradients():
    """TorchRL's generalized_advantage_estimate, differentiated by torch: d/d values,
    next values (puffadv's bootstrap_values, the same leaf through values[t+1]), rewards."""
    functional = pytest.importorskip("torchrl.objectives.value.functional")
    import puffadv
    e = _episodes(14)
    gamma, lam = 0.75, 0.875  # exact in float32, which TorchRL makes of them
    leaves = [torch.tensor(x, requires_grad=True) for x in (e["rewards"], e["values"], e["bootstrap_values"],
                                                            e["last_value"])]
    w = torch.randn(e["rewards"].shape, dtype=torch.float64)

    def next_values(v, boot, last):
        nv = torch.cat([v[:, 1:], last[:, None]], 1)
        return torch.where(torch.tensor(e["truncated"]), boot, nv)

    def theirs(r, v, boot, last):
        t = lambda x: x[..., None]  # noqa: E731  [B, T, 1], time_dim=-2
        done = torch.tensor(e["terminated"] | e["truncated"])
        adv, _ = functional.generalized_advantage_estimate(gamma, lam, t(v), t(next_values(v, boot, last)), t(r),
                                                           t(done), t(torch.tensor(e["terminated"])))
        return (adv[..., 0] * w).sum()

    def ours(r, v, boot, last):
        nv = next_values(v, boot, last)
        out = puffadv.gae(r, v, torch.tensor(e["terminated"]), torch.tensor(e["truncated"]), bootstrap_values=nv,
                          gamma=gamma, gae_lambda=lam, time_axis=-1)
        return (out.advantages * w).sum()

    for a, b in zip(torch.autograd.grad(ours(*leaves), leaves), torch.autograd.grad(theirs(*leaves), leaves)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("estimator", ["lambda_returns", "n_step_bootstrapped_returns"])
def test_rlax_per_step_discounts_gradients(estimator):
    """rlax with per-step discount_t (random in [0, 1], zero at a few steps: terminations
    folded in) and per-step lambda_t, stop_target_gradients=False: d/d r_t, discount_t,
    v_t, lambda_t against puffadv's per-step gamma and lambda arrays with next_values
    (terminated all False, as conventions.md maps rlax)."""
    jax = pytest.importorskip("jax")
    rlax = pytest.importorskip("rlax")
    import puffadv
    rng = np.random.default_rng(15)
    rows, horizon, n = 4, 11, 3
    r, v_t = rng.standard_normal((rows, horizon)), rng.standard_normal((rows, horizon))
    discount = np.where(rng.random((rows, horizon)) < 0.15, 0.0, rng.uniform(0.0, 1.0, (rows, horizon)))
    discount[0, 0] = discount[1, -1] = 0.0
    lam = rng.uniform(0.0, 1.0, (rows, horizon))
    w = rng.standard_normal((rows, horizon))
    with jax.enable_x64(True):
        def theirs(r, d, v, l):
            if estimator == "lambda_returns":
                f = lambda *a: rlax.lambda_returns(*a, stop_target_gradients=False)  # noqa: E731
            else:
                f = lambda r, d, v, l: rlax.n_step_bootstrapped_returns(  # noqa: E731
                    r, d, v, n, l, stop_target_gradients=False)
            return (jax.vmap(f)(r, d, v, l) * w).sum()

        expected = jax.grad(theirs, argnums=(0, 1, 2, 3))(r, discount, v_t, lam)
    leaves = [torch.tensor(x, requires_grad=True) for x in (r, discount, v_t, lam)]
    tr, td, tv, tl = leaves
    never = torch.zeros(rows, horizon, dtype=torch.bool)
    values = torch.zeros(rows, horizon, dtype=torch.float64)  # not read by the returns
    if estimator == "lambda_returns":
        out = puffadv.td_lambda_returns(tr, values, never, next_values=tv, gamma=td, lambda_=tl, time_axis=-1)
    else:
        out = puffadv.n_step_returns(tr, values, never, n=n, next_values=tv, gamma=td, lambda_=tl, time_axis=-1)
    got = torch.autograd.grad((out.returns * torch.tensor(w)).sum(), leaves)
    for name, a, b in zip(("rewards", "discount_t", "v_t", "lambda_t"), got, expected):
        np.testing.assert_allclose(a.numpy(), np.asarray(b), rtol=1e-10, atol=1e-12, err_msg=name)


def test_torchrl_gae_per_step_gamma_and_lambda_gradients():
    """TorchRL's generalized_advantage_estimate with per-step gamma and lmbda tensors
    ([B, T, 1]), differentiated by torch: d/d rewards, values, bootstrap, gamma_t, lambda_t
    against puffadv's per-step arrays."""
    functional = pytest.importorskip("torchrl.objectives.value.functional")
    import puffadv
    e = _episodes(16)
    rng = np.random.default_rng(16)
    gamma, lam = rng.uniform(0.5, 1.0, e["rewards"].shape), rng.uniform(0.3, 1.0, e["rewards"].shape)
    leaves = [torch.tensor(x, requires_grad=True) for x in (e["rewards"], e["values"], e["bootstrap_values"],
                                                            gamma, lam)]
    w = torch.randn(e["rewards"].shape, dtype=torch.float64)
    truncated, terminated = torch.tensor(e["truncated"]), torch.tensor(e["terminated"])

    def theirs(r, v, boot, g, l):
        t = lambda x: x[..., None]  # noqa: E731  [B, T, 1], time_dim=-2
        nv = torch.where(truncated, boot, torch.cat([v[:, 1:], boot[:, -1:]], 1))
        adv, _ = functional.generalized_advantage_estimate(t(g), t(l), t(v), t(nv), t(r), t(terminated | truncated),
                                                           t(terminated))
        return (adv[..., 0] * w).sum()

    def ours(r, v, boot, g, l):
        out = puffadv.gae(r, v, terminated, truncated, bootstrap_values=boot, gamma=g, gae_lambda=l, time_axis=-1)
        return (out.advantages * w).sum()

    for name, a, b in zip(("rewards", "values", "bootstrap_values", "gamma", "lambda"),
                          torch.autograd.grad(ours(*leaves), leaves), torch.autograd.grad(theirs(*leaves), leaves)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)
