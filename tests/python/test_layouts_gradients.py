"""Issue 33 meets issue 30: the differentiable paths read leading batch axes as the
eager path does. A [*B, T], [*B, T, 1], [T, *B] or [T, *B, 1] call through torch
autograd (the public functions) or jax.grad gives the flattened [B, T] call's
outputs and gradients, in the caller's shapes; the torch.ops.puffadv operators,
which take 2-D tensors only, refuse more axes by name (never a wrong shape); and a
step flagged both terminated and truncated is terminated in the backward too (its
NaN bootstrap reaches no gradient)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import puffadv

import reference as ref

torch = pytest.importorskip("torch")

BATCH = (3, 2)  # *B
HORIZON = 6


def _forms():
    """name -> (time_axis, [B, T] tensor -> the form, the form -> [B, T])."""
    b, t = BATCH, HORIZON
    return {
        "[*B, T]": (-1, lambda x: x.reshape(*b, t), lambda y: y.reshape(-1, t)),
        "[*B, T, 1]": (-2, lambda x: x.reshape(*b, t, 1), lambda y: y.reshape(-1, t)),
        "[T, *B]": (0, lambda x: x.T.contiguous().reshape(t, *b), lambda y: y.reshape(t, -1).T),
        "[T, *B, 1]": (0, lambda x: x.T.contiguous().reshape(t, *b, 1), lambda y: y.reshape(t, -1).T),
    }


def _episodes(rng):
    e = ref.random_episodes(rng, math.prod(BATCH), HORIZON)  # float64: both traversals agree to rounding
    return {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64 if v.dtype.kind == "f" else None))
            for k, v in e.items()}


CALLS = {  # function -> (positional roles, keyword roles, scalars, differentiated roles, output)
    "gae": (("rewards", "values", "terminated", "truncated"), ("bootstrap_values",), {}, ("rewards", "values"),
            "advantages"),
    "td_lambda_returns": (("rewards", "values", "terminated", "truncated"), ("bootstrap_values",), {},
                          ("rewards", "values", "bootstrap_values"), "returns"),
    "vtrace": (("rewards", "values", "terminated", "truncated"), ("bootstrap_values",), {}, ("values",), "vs"),
    "discounted_returns": (("rewards", "terminated"), ("last_value",), {}, ("rewards", "last_value"), "returns"),
    "n_step_returns": (("rewards", "values", "terminated", "truncated"), ("bootstrap_values",), {"n": 3},
                       ("rewards", "values"), "returns"),
}


def _call(function, arrays, time_axis, **scalars):
    positional, keywords, fixed, _, output = CALLS[function]
    result = getattr(puffadv, function)(*(arrays[r] for r in positional), **{r: arrays[r] for r in keywords},
                                        **fixed, **scalars, time_axis=time_axis)
    return getattr(result, output)


@pytest.mark.parametrize("form", list(_forms()))
@pytest.mark.parametrize("function", sorted(CALLS))
def test_torch_autograd_with_leading_batch_axes(rng, form, function):
    time_axis, shaped, flat = _forms()[form]
    e = _episodes(rng)
    differentiated = CALLS[function][3]
    weights = torch.from_numpy(rng.standard_normal((math.prod(BATCH), HORIZON)))

    def leaves(to_form):
        out = {}
        for role, x in e.items():
            x = x if x.ndim == 1 or role == "last_value" else to_form(x)
            out[role] = x.clone().requires_grad_(role in differentiated)
        return out

    want_in = leaves(lambda x: x)
    want = _call(function, want_in, -1)
    (want * weights).sum().backward()

    got_in = leaves(shaped)
    got = _call(function, got_in, time_axis)
    assert got.shape == got_in["rewards"].shape and got.requires_grad
    (flat(got) * weights).sum().backward()
    torch.testing.assert_close(flat(got.detach()), want.detach(), rtol=1e-10, atol=1e-10)
    for role in differentiated:
        g = got_in[role].grad
        assert g is not None and g.shape == got_in[role].shape, role
        torch.testing.assert_close(g if role == "last_value" else flat(g), want_in[role].grad, rtol=1e-10,
                                   atol=1e-10, msg=role)


def test_torch_autograd_refuses_batch_axes_that_do_not_collapse(rng):
    e = _episodes(rng)
    values = e["values"].reshape(*BATCH, HORIZON).transpose(0, 1).requires_grad_()  # [2, 3, T], not collapsible
    rewards = torch.zeros_like(values)
    with pytest.raises(ValueError, match=r"cannot be read as \[6, 6\] without a copy"):
        puffadv.gae(rewards, values, torch.zeros_like(values, dtype=torch.bool),
                    last_value=torch.zeros(2, 3, dtype=torch.float64), time_axis=-1)


def test_torch_operators_refuse_more_than_two_axes(rng):
    pytest.importorskip("puffadv.torch")
    e = _episodes(rng)
    r = e["rewards"].reshape(*BATCH, HORIZON).requires_grad_()
    v = e["values"].reshape(*BATCH, HORIZON).requires_grad_()
    with pytest.raises((ValueError, RuntimeError), match="2-D|dimension|ndim"):
        torch.ops.puffadv.gae(r, v, e["terminated"].reshape(*BATCH, HORIZON), None, None,
                              e["bootstrap_values"].reshape(*BATCH, HORIZON), time_axis=-1)


@pytest.mark.parametrize("form", list(_forms()))
def test_jax_grad_with_leading_batch_axes(rng, form):
    pjax = pytest.importorskip("puffadv.jax")
    import jax
    import jax.numpy as jnp
    time_axis, shaped, flat = _forms()[form]
    e = {k: v.numpy() for k, v in _episodes(rng).items()}
    weights = rng.standard_normal((math.prod(BATCH), HORIZON)).astype(np.float32)
    to_form = lambda x: shaped(torch.from_numpy(x)).numpy()
    from_form = lambda y: jnp.reshape(y, (-1, HORIZON)) if time_axis != 0 else jnp.reshape(y, (HORIZON, -1)).T

    def loss(values, formed):
        arrays = {k: (to_form(e[k]) if formed else e[k]).astype(np.float32)
                  for k in ("rewards", "terminated", "truncated", "bootstrap_values")}
        out = pjax.gae(arrays["rewards"], values, arrays["terminated"] != 0, arrays["truncated"] != 0,
                       bootstrap_values=arrays["bootstrap_values"], time_axis=time_axis if formed else -1)
        adv = from_form(out.advantages) if formed else out.advantages
        return (adv * weights).sum()

    want = jax.grad(lambda v: loss(v, False))(jnp.asarray(e["values"], jnp.float32))
    got = jax.grad(lambda v: loss(v, True))(jnp.asarray(to_form(e["values"]), jnp.float32))
    assert got.shape == to_form(e["values"]).shape
    np.testing.assert_allclose(np.asarray(from_form(got)), np.asarray(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("function", ["gae", "td_lambda_returns", "vtrace", "n_step_returns"])
def test_both_flags_in_the_backward(rng, function):
    """A step both terminated and truncated: terminated forward and backward; its NaN
    bootstrap reaches no output and no gradient."""
    e = _episodes(rng)
    e["terminated"][:, 2] = True
    e["truncated"][:, 2] = True
    e["bootstrap_values"][:, 2] = float("nan")
    arrays = {k: v.clone().requires_grad_(k in ("rewards", "values", "bootstrap_values")) for k, v in e.items()}
    out = _call(function, arrays, -1)
    assert torch.isfinite(out).all()
    out.sum().backward()
    for role in ("rewards", "values", "bootstrap_values"):
        assert torch.isfinite(arrays[role].grad).all(), role
    assert (arrays["bootstrap_values"].grad[:, 2] == 0).all()
