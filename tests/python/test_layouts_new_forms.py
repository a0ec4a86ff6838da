"""Issue 33 meets issue 29: the forms merged beside the layouts (per-step gamma and
lambda arrays, next_values, V-trace's sample_mask and alpha, linear_recurrence's
decay) take the leading-batch shapes exactly like the rewards ([*B, T], [*B, T, 1],
[T, *B], [T, *B, 1]), through the one place that reads them (_shapes via
_eager.as_views), on NumPy, torch (eager, autograd) and puffadv.jax; episode_starts
works together with next_values (the ends they mark cut the recursion)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import puffadv

import reference as ref

BATCH = (2, 3)  # *B
HORIZON = 9
GAMMA, LAM = 0.97, 0.9


def _forms():
    """name -> (time_axis, [B, T] -> the form, the form -> [B, T])."""
    b, t = BATCH, HORIZON
    return {
        "[*B, T]": (-1, lambda x: x.reshape(*b, t), lambda y: y.reshape(-1, t)),
        "[*B, T, 1]": (-2, lambda x: x.reshape(*b, t, 1), lambda y: y.reshape(-1, t)),
        "[T, *B]": (0, lambda x: _copy(x.T).reshape(t, *b), lambda y: y.reshape(t, -1).T),
        "[T, *B, 1]": (0, lambda x: _copy(x.T).reshape(t, *b, 1), lambda y: y.reshape(t, -1).T),
    }


def _copy(x):
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x)
    return x.contiguous() if hasattr(x, "contiguous") else x  # torch; JAX arrays have no strides


def _episodes(rng, dtype=np.float64):
    """[B, T] episodes with every array of the new forms (flags at the first and last steps)."""
    e = ref.random_episodes(rng, math.prod(BATCH), HORIZON, dtype)
    # Each set flag clears the other one: a step ends by termination or by truncation, not both.
    e["terminated"][0, 0] = e["terminated"][1, -1] = True
    e["truncated"][0, 0] = e["truncated"][1, -1] = False
    e["truncated"][2, 0] = e["truncated"][3, -1] = True
    e["terminated"][2, 0] = e["terminated"][3, -1] = False
    e["next_values"] = rng.standard_normal(e["rewards"].shape).astype(dtype)
    e["gamma"] = rng.uniform(0.8, 1.0, e["rewards"].shape).astype(dtype)
    e["lam"] = rng.uniform(0.5, 1.0, e["rewards"].shape).astype(dtype)
    e["sample_mask"] = rng.random(e["rewards"].shape) > 0.3
    e["decay"] = rng.uniform(0.0, 1.0, e["rewards"].shape).astype(dtype)
    return e


def _calls(api):
    """name -> (call on arrays by role and time_axis, the output compared). `api`: puffadv or puffadv.jax."""
    flags = lambda a: (a["rewards"], a["values"], a["terminated"], a["truncated"])  # noqa: E731
    return {
        "gae per-step gamma, lambda": (lambda a, ax: api.gae(
            *flags(a), bootstrap_values=a["bootstrap_values"], gamma=a["gamma"], gae_lambda=a["lam"],
            time_axis=ax), "advantages"),
        "gae next_values": (lambda a, ax: api.gae(*flags(a), next_values=a["next_values"], gamma=GAMMA,
                                                  gae_lambda=LAM, time_axis=ax), "advantages"),
        "td_lambda next_values": (lambda a, ax: api.td_lambda_returns(
            *flags(a), next_values=a["next_values"], gamma=GAMMA, lambda_=LAM, time_axis=ax), "returns"),
        "vtrace next_values, sample_mask, alpha": (lambda a, ax: api.vtrace(
            *flags(a), importance=a["importance"], next_values=a["next_values"], sample_mask=a["sample_mask"],
            alpha=0.7, gamma=GAMMA, time_axis=ax), "pg_advantages"),
        "n_step next_values": (lambda a, ax: api.n_step_returns(
            *flags(a), n=3, next_values=a["next_values"], gamma=GAMMA, lambda_=LAM, time_axis=ax), "returns"),
    }


def _check_forms(rng, api, convert, back_to_numpy):
    e = _episodes(rng)
    for name, (call, output) in _calls(api).items():
        flat = back_to_numpy(getattr(call({k: convert(v) for k, v in e.items()}, -1), output))
        for form, (time_axis, to_form, from_form) in _forms().items():
            shaped = {k: v if v.ndim == 1 else to_form(convert(v)) for k, v in e.items()}
            got = getattr(call(shaped, time_axis), output)
            assert tuple(got.shape) == tuple(shaped["rewards"].shape), (name, form)
            np.testing.assert_allclose(back_to_numpy(from_form(got)), flat, rtol=1e-12, atol=1e-12,
                                       err_msg=f"{name} {form}")


def test_numpy_new_forms_with_leading_batch_axes(rng):
    _check_forms(rng, puffadv, lambda x: x, np.asarray)
    # The flattened call itself against the float64 reference (one form of each kind).
    e = _episodes(rng)
    want_adv, want_ret = ref.with_next_values("gae", e["rewards"], e["values"], e["terminated"], e["truncated"],
                                              e["next_values"], gamma=GAMMA, lam=LAM)
    time_axis, to_form, from_form = _forms()["[T, *B, 1]"]
    got = puffadv.gae(*(to_form(e[k]) for k in ("rewards", "values", "terminated", "truncated")),
                      next_values=to_form(e["next_values"]), gamma=GAMMA, gae_lambda=LAM, time_axis=time_axis)
    assert ref.relative_error(from_form(got.advantages), want_adv) <= 1e-12
    assert ref.relative_error(from_form(got.returns), want_ret) <= 1e-12


def test_torch_new_forms_with_leading_batch_axes(rng):
    torch = pytest.importorskip("torch")
    _check_forms(rng, puffadv, torch.from_numpy, lambda x: x.detach().numpy())


def test_jax_new_forms_with_leading_batch_axes(rng):
    pjax = pytest.importorskip("puffadv.jax")
    import jax.numpy as jnp
    from jax_cases import _x64
    with _x64():
        _check_forms(rng, pjax, jnp.asarray, np.asarray)


@pytest.mark.parametrize("form", list(_forms()))
def test_linear_recurrence_decay_with_leading_batch_axes(rng, form):
    time_axis, to_form, from_form = _forms()[form]
    e = _episodes(rng)
    for reverse in (False, True):
        flat = puffadv.linear_recurrence(e["rewards"], e["decay"], reverse=reverse, time_axis=-1)
        got = puffadv.linear_recurrence(to_form(e["rewards"]), to_form(e["decay"]), reverse=reverse,
                                        time_axis=time_axis)
        assert got.shape == to_form(e["rewards"]).shape
        np.testing.assert_allclose(from_form(got), flat, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("form", list(_forms()))
def test_linear_recurrence_differentiable_with_leading_batch_axes(rng, form):
    """torch autograd (the op, through 2-D views) and puffadv.jax: the flattened call's numbers in
    the caller's shape, and torch.autograd.gradcheck through inputs, decay and seed."""
    torch = pytest.importorskip("torch")
    time_axis, to_form, from_form = _forms()[form]
    e = _episodes(rng)
    seed = rng.standard_normal(math.prod(BATCH))
    flat = puffadv.linear_recurrence(e["rewards"], e["decay"], seed=seed, reverse=True, time_axis=-1)
    leaves = [to_form(torch.from_numpy(e[k])).requires_grad_() for k in ("rewards", "decay")]
    leaves.append(torch.from_numpy(seed.reshape(BATCH)).requires_grad_())

    def recurrence(inputs, decay, start):
        return puffadv.linear_recurrence(inputs, decay, seed=start, reverse=True, time_axis=time_axis)

    got = recurrence(*leaves)
    assert got.shape == leaves[0].shape and got.requires_grad
    np.testing.assert_allclose(from_form(got.detach()).numpy(), flat, rtol=1e-13, atol=1e-13)
    assert torch.autograd.gradcheck(recurrence, leaves)
    pjax = pytest.importorskip("puffadv.jax")
    import jax.numpy as jnp
    from jax_cases import _x64
    with _x64():
        y = pjax.linear_recurrence(to_form(jnp.asarray(e["rewards"])), to_form(jnp.asarray(e["decay"])),
                                   seed=jnp.asarray(seed.reshape(BATCH)), reverse=True, time_axis=time_axis)
        assert y.shape == leaves[0].shape
        np.testing.assert_allclose(np.asarray(from_form(y)), flat, rtol=1e-13, atol=1e-13)


def _sb3_buffer(rng, steps, envs):
    """SB3's time-major [T, n_envs] flags: episode_starts[t] set where observation t starts an episode."""
    starts = rng.random((steps, envs)) < 0.2
    starts[0, 0] = True
    last = rng.random(envs) < 0.3
    return starts, last


@pytest.mark.parametrize("api_name", ["numpy", "torch"])
def test_episode_starts_with_next_values(rng, api_name):
    """Supported: terminated[t] = episode_starts[t + 1] (last_episode_start at the last step), then
    next_values as always; equal to the call with those terminated flags, in [T, B] and [T, *B]."""
    envs = math.prod(BATCH)
    e = _episodes(rng)
    starts, last = _sb3_buffer(rng, HORIZON, envs)
    terminated = np.concatenate((starts[1:], last[None]), axis=0)
    convert = (lambda x: x) if api_name == "numpy" else pytest.importorskip("torch").from_numpy
    tm = {k: np.ascontiguousarray(e[k].T) for k in ("rewards", "values", "next_values", "truncated")}
    for kind, function, lam_name in (("gae", puffadv.gae, "gae_lambda"),
                                     ("td_lambda", puffadv.td_lambda_returns, "lambda_"),
                                     ("vtrace", puffadv.vtrace, "lambda_")):
        want = function(convert(tm["rewards"]), convert(tm["values"]), convert(terminated),
                        next_values=convert(tm["next_values"]), gamma=GAMMA, **{lam_name: LAM}, time_axis=0)
        got = function(convert(tm["rewards"]), convert(tm["values"]), episode_starts=convert(starts),
                       last_episode_start=convert(last), next_values=convert(tm["next_values"]), gamma=GAMMA,
                       **{lam_name: LAM}, time_axis=0)
        for a, b in zip(got, want):
            if a is not None:
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        # [T, *B]: the same numbers in the caller's shape.
        shaped = function(*(convert(tm[k].reshape(HORIZON, *BATCH)) for k in ("rewards", "values")),
                          episode_starts=convert(starts.reshape(HORIZON, *BATCH)),
                          last_episode_start=convert(last.reshape(BATCH)),
                          next_values=convert(tm["next_values"].reshape(HORIZON, *BATCH)), gamma=GAMMA,
                          **{lam_name: LAM}, time_axis=0)
        for a, b in zip(shaped, got):
            if a is not None:
                np.testing.assert_array_equal(np.asarray(a).reshape(HORIZON, envs), np.asarray(b))
    # The float64 reference of the same call.
    want_adv, _ = ref.with_next_values("gae", e["rewards"], e["values"], terminated.T, np.zeros_like(terminated.T),
                                       e["next_values"], gamma=GAMMA, lam=LAM)
    got = puffadv.gae(convert(tm["rewards"]), convert(tm["values"]), episode_starts=convert(starts),
                      last_episode_start=convert(last), next_values=convert(tm["next_values"]), gamma=GAMMA,
                      gae_lambda=LAM, time_axis=0)
    assert ref.relative_error(np.asarray(got.advantages).T, want_adv) <= 1e-12


def test_torch_gradcheck_with_leading_batch_axes(rng):
    """torch.autograd.gradcheck on [2, 3, T] calls (float64): GAE's advantages and returns through
    rewards, values and the bootstrap values; V-trace's through next_values and importance."""
    torch = pytest.importorskip("torch")
    e = {k: torch.from_numpy(v) for k, v in _episodes(rng).items()}
    shape = (*BATCH, HORIZON)
    term, trunc = e["terminated"].reshape(shape), e["truncated"].reshape(shape)

    def gae(rewards, values, bootstrap):
        out = puffadv.gae(rewards, values, term, trunc, bootstrap_values=bootstrap, gamma=GAMMA, gae_lambda=LAM,
                          time_axis=-1)
        return out.advantages, out.returns

    leaves = [e[k].reshape(shape).clone().requires_grad_() for k in ("rewards", "values", "bootstrap_values")]
    assert torch.autograd.gradcheck(gae, leaves)

    def vtrace_next_values(rewards, values, next_values, importance):  # next_values has its VJP too
        out = puffadv.vtrace(rewards, values, term, trunc, next_values=next_values, importance=importance,
                             gamma=GAMMA, lambda_=LAM, rho_clip=1.3, time_axis=-1)
        return out.vs, out.pg_advantages

    leaves = [e[k].reshape(shape).clone().requires_grad_() for k in ("rewards", "values", "next_values", "importance")]
    assert torch.autograd.gradcheck(vtrace_next_values, leaves)


def test_jax_grad_with_leading_batch_axes(rng):
    pjax = pytest.importorskip("puffadv.jax")
    import jax
    import jax.numpy as jnp
    from jax_cases import _x64
    with _x64():
        e = {k: jnp.asarray(v) for k, v in _episodes(rng).items()}
        weights = jnp.asarray(rng.standard_normal(e["rewards"].shape))
        time_axis, to_form, from_form = _forms()["[T, *B, 1]"]

        def loss(values, to, back, axis):
            out = pjax.gae(to(e["rewards"]), to(values), to(e["terminated"]), to(e["truncated"]),
                           bootstrap_values=to(e["bootstrap_values"]), gamma=GAMMA, gae_lambda=LAM, time_axis=axis)
            return (back(out.advantages) * weights).sum()

        want = jax.grad(loss)(e["values"], lambda x: x, lambda y: y, -1)
        got = jax.grad(lambda v: loss(v, to_form, from_form, time_axis))(e["values"])
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)
