"""The puff advantage's float `dones` other than 0 and 1 (issue 31): every surface uses
them as numbers in the formula (1 - dones[t+1]), as PufferLib's kernel and SPEC section 1
do; docs/conventions.md says so. Bool and uint8 dones are 0 or 1."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import puffadv
import reference


def _inputs(dtype, time_pad=0):
    rng = np.random.default_rng(17)
    values, rewards = rng.standard_normal((2, 5, 40)).astype(dtype)
    dones = rng.choice(np.array([0, 0, 0, 1, 0.5, 2, -1], dtype), size=(5, 40))
    importance = rng.uniform(0.5, 1.5, (5, 40)).astype(dtype)
    return values, rewards, dones, importance


SCALARS = (0.97, 0.9, 1.1, 0.95)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_uses_float_dones_as_numbers(dtype):
    v, r, d, imp = _inputs(dtype)
    got = puffadv.compute_puff_advantage(v, r, d, imp, None, *SCALARS)
    want = reference.puff_advantage(v, r, d, imp, *SCALARS)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_torch_and_jax_agree_with_numpy(dtype):
    v, r, d, imp = _inputs(dtype)
    host = puffadv.compute_puff_advantage(v, r, d, imp, None, *SCALARS)
    torch = pytest.importorskip("torch")
    importlib.import_module("puffadv.torch")  # registers torch.ops.puffadv
    t = [torch.from_numpy(x) for x in (v, r, d, imp)]
    np.testing.assert_allclose(puffadv.compute_puff_advantage(*t, None, *SCALARS).numpy(), host, rtol=1e-6)
    out = torch.empty_like(t[0])
    torch.ops.puffadv.compute_puff_advantage(*t, out, *SCALARS)
    np.testing.assert_allclose(out.numpy(), host, rtol=1e-6)
    jnp = pytest.importorskip("jax.numpy")
    pj = importlib.import_module("puffadv.jax")
    if dtype == np.float64 and jnp.zeros(1, jnp.float64).dtype != np.float64:
        return  # JAX without x64 computes in float32
    got = pj.compute_puff_advantage(*(jnp.asarray(x) for x in (v, r, d, imp)), *SCALARS)
    np.testing.assert_allclose(np.asarray(got), host, rtol=1e-5, atol=1e-5)


def test_bool_and_uint8_dones_are_zero_or_one():
    v, r, d, imp = _inputs(np.float32)
    flags = d != 0
    want = puffadv.compute_puff_advantage(v, r, flags.astype(np.float32), imp, None, *SCALARS)
    for as_flags in (flags, flags.astype(np.uint8) * 7):
        np.testing.assert_array_equal(puffadv.compute_puff_advantage(v, r, as_flags, imp, None, *SCALARS), want)


# The gradients (issue 30) follow the forward: a backward that read the dones as flags
# (non-zero: done) gave a wrong gradient wherever a done was neither 0 nor 1.
def _small_inputs(seed=5):
    rng = np.random.default_rng(seed)
    values, rewards = rng.standard_normal((2, 3, 9))
    dones = rng.choice(np.array([0, 0, 1, 0.5, 2, -1, 0.25]), size=(3, 9))
    dones[:, 0], dones[:, -1], dones[0, 4] = 1, 0.5, 1  # ends at the first and last steps
    return values, rewards, dones, rng.uniform(0.5, 1.5, (3, 9))


@pytest.mark.parametrize("differentiated", ["values_rewards", "with_importance", "with_gamma"])
def test_torch_gradients_use_float_dones_as_numbers(differentiated, monkeypatch):
    """gradcheck of the Python API and of torch.ops.puffadv.puff_advantage in float64; the
    ratios constant take the fused kernel, ratios or gamma that require grad the formulas."""
    torch = pytest.importorskip("torch")
    importlib.import_module("puffadv.torch")
    from puffadv import _vjp_fused
    fused = []
    real = _vjp_fused.vjp
    monkeypatch.setattr(_vjp_fused, "vjp", lambda *a, **k: fused.append(a[0]) or real(*a, **k))
    v, r, d, imp = (torch.tensor(x) for x in _small_inputs())
    leaves = [v.requires_grad_(), r.requires_grad_()]
    if differentiated == "with_importance":
        leaves.append(imp.requires_grad_())
    gamma = torch.tensor(0.95, dtype=torch.float64, requires_grad=differentiated == "with_gamma")
    if differentiated == "with_gamma":
        leaves.append(gamma)

    def api(v, r, *rest):
        return puffadv.compute_puff_advantage(v, r, d, imp, gamma=gamma, gae_lambda=0.9, rho_clip=1.1, c_clip=0.95)

    def operator(v, r, *rest):
        return torch.ops.puffadv.puff_advantage(v, r, d, imp, float(gamma), 0.9, 1.1, 0.95)

    assert torch.autograd.gradcheck(api, tuple(leaves), eps=1e-6, atol=1e-8)
    if differentiated != "with_gamma":  # the operator's gamma is a number
        assert torch.autograd.gradcheck(operator, tuple(leaves), eps=1e-6, atol=1e-8)
    assert (len(fused) > 0) == (differentiated == "values_rewards")


def test_jax_gradients_use_float_dones_as_numbers():
    jax = pytest.importorskip("jax")
    pj = importlib.import_module("puffadv.jax")
    from jax.test_util import check_grads
    from jax_cases import _x64
    with _x64():  # float64: finite differences fine enough
        v, r, d, imp = (jax.numpy.asarray(x) for x in _small_inputs())
        assert v.dtype == np.float64
        check_grads(lambda v, r, imp: pj.compute_puff_advantage(v, r, d, imp, 0.95, 0.9, 1.1, 0.95), (v, r, imp),
                    order=1, modes=["rev"], eps=1e-6)


def test_float_dones_get_their_gradient():
    """Float dones are numbers in the forward (gamma (1 - dones_{t+1})), so they have a
    derivative: -gamma times gamma_t's, dones_0 never read. The Python API, the functional
    operator and puffadv.jax gave none (None, None and zeros) until 2026-12-06. gradcheck of
    both torch surfaces (exact 0s and 1s among the dones, fractions and values outside
    [0, 1]), and the three surfaces' gradients equal."""
    torch = pytest.importorskip("torch")
    importlib.import_module("puffadv.torch")
    v, r, d, imp = (torch.tensor(x).requires_grad_() for x in _small_inputs(7))

    def api(v, r, d, imp):
        return puffadv.compute_puff_advantage(v, r, d, imp, gamma=0.95, gae_lambda=0.9, rho_clip=1.1, c_clip=0.95)

    def operator(v, r, d, imp):
        return torch.ops.puffadv.puff_advantage(v, r, d, imp, 0.95, 0.9, 1.1, 0.95)

    for function in (api, operator):
        assert torch.autograd.gradcheck(function, (v, r, d, imp), eps=1e-6, atol=1e-8)
    weights = torch.tensor(np.random.default_rng(3).standard_normal(tuple(v.shape)))
    by_surface = [torch.autograd.grad((f(v, r, d, imp) * weights).sum(), d)[0] for f in (api, operator)]
    assert by_surface[0].abs().sum() > 0 and torch.all(by_surface[0][:, 0] == 0)
    torch.testing.assert_close(by_surface[0], by_surface[1], rtol=0, atol=0)
    # dones alone requiring grad: the one gradient asked for
    alone = d.detach().requires_grad_()
    torch.testing.assert_close(torch.autograd.grad((api(v.detach(), r.detach(), alone, imp.detach()) * weights).sum(),
                                                   alone)[0], by_surface[0], rtol=1e-12, atol=1e-12)
    jax = pytest.importorskip("jax")
    pj = importlib.import_module("puffadv.jax")
    from jax.test_util import check_grads
    from jax_cases import _x64
    with _x64():
        jv, jr, jd, ji = (jax.numpy.asarray(x.detach().numpy()) for x in (v, r, d, imp))
        check_grads(lambda d: pj.compute_puff_advantage(jv, jr, d, ji, 0.95, 0.9, 1.1, 0.95), (jd,), order=1,
                    modes=["rev"], eps=1e-6)
        jw = jax.numpy.asarray(weights.numpy())
        got = jax.jit(jax.grad(lambda d: (pj.compute_puff_advantage(jv, jr, d, ji, 0.95, 0.9, 1.1, 0.95) * jw).sum()))(jd)
    np.testing.assert_allclose(np.asarray(got), by_surface[0].numpy(), rtol=1e-12, atol=1e-12)


def test_pufferlibs_in_place_op_names_dones_that_require_grad():
    """PufferLib's schema op reads every input as a constant and says which: float dones too."""
    torch = pytest.importorskip("torch")
    from puffadv._torch_kernels import ConstantInputWarning
    v, r, d, imp = (torch.tensor(x) for x in _small_inputs(8))
    out = torch.full_like(v, float("nan"))
    with pytest.warns(ConstantInputWarning, match="^dones requires grad, but torch.ops.puffadv.compute_puff_advantage"):
        torch.ops.puffadv.compute_puff_advantage(v, r, d.requires_grad_(), imp, out, 0.95, 0.9, 1.1, 0.95)
    torch.testing.assert_close(out, torch.ops.puffadv.puff_advantage(v, r, d.detach(), imp, 0.95, 0.9, 1.1, 0.95))


# Second derivatives (found 2026-12-06): a done of exactly 1 is also a flag, selected away in the
# backwards (a NaN beyond it stays out), and the selection had no derivative in the dones, so every
# mixed second derivative with a done of exactly 1 was wrong in torch and JAX (by up to the whole
# entry); fractional dones were right. Checked against autodiff of the forward as written.
SECOND = (0.95, 0.9, 1.1, 0.95)  # gamma, lambda, rho_clip, c_clip


def _second_order_inputs(seed=11):
    rng = np.random.default_rng(seed)
    values, rewards = rng.standard_normal((2, 3, 8))
    dones = rng.choice(np.array([0, 1, 0.3, 0.7]), size=(3, 8))
    dones[:, 0] = dones[:, -1] = [1, 0, 0.5]  # exact 1 and 0 at the first and last steps
    dones[:, 3] = 1
    return values, rewards, dones, rng.uniform(0.5, 1.5, (3, 8))


def _torch_loop(values, rewards, dones, importance, gamma, lam, rho_clip, c_clip):
    """The forward as written, 1 - dones[t+1] a number, one step at a time in torch ops."""
    import torch
    a = torch.zeros(values.shape[0], dtype=values.dtype)
    out = [a] * values.shape[1]
    for t in range(values.shape[1] - 2, -1, -1):
        nnt = 1 - dones[:, t + 1]
        rho, c = importance[:, t].clamp(max=rho_clip), importance[:, t].clamp(max=c_clip)
        a = rho * (rewards[:, t + 1] + gamma * values[:, t + 1] * nnt - values[:, t]) + gamma * lam * c * a * nnt
        out[t] = a
    return torch.stack(out, 1)


def _jax_loop(values, rewards, dones, importance, gamma, lam, rho_clip, c_clip):
    """The same with jax.lax.scan."""
    import jax
    jnp = jax.numpy
    nnt = 1 - dones[:, 1:]
    delta = jnp.minimum(importance[:, :-1], rho_clip) * (rewards[:, 1:] + gamma * values[:, 1:] * nnt
                                                         - values[:, :-1])
    decay = gamma * lam * jnp.minimum(importance[:, :-1], c_clip) * nnt
    _, out = jax.lax.scan(lambda a, x: (x[0] + x[1] * a,) * 2, jnp.zeros(values.shape[0], values.dtype),
                          (delta.T, decay.T), reverse=True)
    return jnp.concatenate([out.T, jnp.zeros_like(values[:, :1])], axis=1)


def _torch_hvps(function, leaves, weights, directions):
    """(dL/d leaves, [d/d leaves of <dL/d leaf_i, directions_i> for every leaf i]), L = <function(*leaves),
    weights> (None directions_i: not made)."""
    import torch
    first = torch.autograd.grad((function(*leaves) * weights).sum(), leaves, create_graph=True)
    return [g.detach() for g in first], [None if w is None else [
        torch.zeros_like(x) if h is None else h for h, x in
        zip(torch.autograd.grad((g * w).sum(), leaves, retain_graph=True, allow_unused=True), leaves)]
        for g, w in zip(first, directions)]


@pytest.mark.parametrize("surface", ["api", "operator"])
def test_torch_second_derivatives_at_dones_of_one(surface):
    """gradgradcheck with float dones of exactly 0 and 1 (at the first and last steps too) and
    fractions, every input (and the Python API's gamma and lambda tensors) differentiated, and
    every mixed second derivative equal to autograd of _torch_loop."""
    torch = pytest.importorskip("torch")
    importlib.import_module("puffadv.torch")
    leaves = [torch.tensor(x).requires_grad_() for x in _second_order_inputs()]
    gamma, lam, rho_clip, c_clip = SECOND
    if surface == "api":
        leaves += [torch.tensor(gamma, dtype=torch.float64, requires_grad=True),
                   torch.tensor(lam, dtype=torch.float64, requires_grad=True)]

        def function(v, r, d, imp, gamma, lam):
            return puffadv.compute_puff_advantage(v, r, d, imp, gamma=gamma, gae_lambda=lam, rho_clip=rho_clip,
                                                  c_clip=c_clip)
    else:
        def function(v, r, d, imp):
            return torch.ops.puffadv.puff_advantage(v, r, d, imp, gamma, lam, rho_clip, c_clip)

    assert torch.autograd.gradgradcheck(function, tuple(leaves), eps=1e-6, atol=1e-7)
    rng = np.random.default_rng(2)
    weights, *directions = (torch.tensor(rng.standard_normal(tuple(x.shape))) for x in [leaves[0], *leaves])
    _, got = _torch_hvps(function, leaves, weights, directions)
    _, want = _torch_hvps(lambda *x: _torch_loop(*x, *SECOND[len(x) - 4:]), leaves, weights, directions)
    for of, (row, expected) in enumerate(zip(got, want)):
        for wrt, (a, b) in enumerate(zip(row, expected)):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=f"d/d input {wrt} of dL/d input {of}")


def test_jax_second_derivatives_at_dones_of_one():
    """check_grads of order 2, and d/d dones of each gradient equal to jax.lax.scan's."""
    jax = pytest.importorskip("jax")
    pj = importlib.import_module("puffadv.jax")
    from jax.test_util import check_grads
    from jax_cases import _x64
    with _x64():
        arrays = tuple(jax.numpy.asarray(x) for x in _second_order_inputs())
        check_grads(lambda *x: pj.compute_puff_advantage(*x, *SECOND), arrays, order=2, modes=["rev"], eps=1e-6)
        weights = jax.numpy.asarray(np.random.default_rng(4).standard_normal(arrays[0].shape))
        for of in range(4):
            got, want = (jax.jacrev(jax.grad(lambda *x: (f(*x, *SECOND) * weights).sum(), of), 2)(*arrays)
                         for f in (pj.compute_puff_advantage, _jax_loop))
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12,
                                       err_msg=f"d/d dones of dL/d input {of}")


def test_jax_hessians_through_vmap():
    """jacrev(jacrev(f)) and grad(vmap(grad(f))) (a vmap inside reverse mode, under puffadv's jit)
    equal jax.lax.scan's, with float and bool dones: before 2026-12-06 both raised JAX's
    "broadcast_in_dim broadcast_dimensions must have length equal to operand ndim" (the
    derivative-only zeros were unbatched beside a batched tangent), for the puff advantage only."""
    jax = pytest.importorskip("jax")
    pj = importlib.import_module("puffadv.jax")
    from jax_cases import _x64
    with _x64():
        v, r, d, imp = (jax.numpy.asarray(x) for x in _second_order_inputs(17))
        for dones in (d, d == 1):
            def loss(f, v, imp):
                return jax.numpy.sin(f(v, r, dones, imp, *SECOND)).sum()

            for argnum in (0, 1):
                got, want = (jax.jacrev(jax.jacrev(lambda *x: loss(f, *x), argnum), (0, 1))(v, imp)
                             for f in (pj.compute_puff_advantage, _jax_loop))
                for g, w in zip(got, want):
                    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-11, atol=1e-11)
            got, want = (jax.grad(lambda vs: (jax.vmap(jax.grad(lambda v: loss(f, v, imp)))(vs) ** 2).sum())(
                jax.numpy.stack([v, 2 * v])) for f in (pj.compute_puff_advantage, _jax_loop))
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-11, atol=1e-11)


def _torch_second_derivatives(arrays, scalars, weights, directions):
    """{of: dL/d input of} and {(of, wrt): d/d input wrt of <dL/d input of, directions[of]>} for the
    inputs of values, rewards and importance (0, 1, 3), L = <advantages, weights>; dL/d dones (2) too."""
    torch = pytest.importorskip("torch")
    first, second = _torch_hvps(lambda *x: puffadv.compute_puff_advantage(*x, None, *scalars),
                                [torch.tensor(x).requires_grad_() for x in arrays], torch.tensor(weights),
                                [None if w is None else torch.tensor(w) for w in directions])
    return ({of: g.numpy() for of, g in enumerate(first)},
            {(of, wrt): h.detach().numpy() for of in (0, 1, 3) for wrt, h in enumerate(second[of])})


def _jax_second_derivatives(arrays, scalars, weights, directions):
    jax = pytest.importorskip("jax")
    pj = importlib.import_module("puffadv.jax")
    from jax_cases import _x64
    with _x64():
        arrays = tuple(jax.numpy.asarray(x) for x in arrays)
        first, second = {}, {}
        for of in range(4):
            gradient = jax.grad(lambda *x: (pj.compute_puff_advantage(*x, *scalars) * weights).sum(), of)
            first[of] = np.asarray(gradient(*arrays))
            if directions[of] is None:
                continue
            hvp = jax.grad(lambda *x: (gradient(*x) * directions[of]).sum(), (0, 1, 2, 3))(*arrays)
            second.update({(of, wrt): np.asarray(h) for wrt, h in enumerate(hvp)})
    return first, second


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("poisoned", [(0, 3), (0, 5), (1, 4), (1, 6)], ids=["values3", "values5", "rewards4",
                                                                          "rewards6"])
def test_nan_beyond_a_done_of_one_reaches_only_what_reads_it(framework, poisoned):
    """A NaN in values or rewards beyond a done of exactly 1 (dones[0, 3]: step 2 reads none of
    it) reaches no first derivative of values, rewards and importance that does not read it, and
    no second derivative (Hessian-vector products, dones among the inputs) but those that read it
    and those in an input whose own first derivative it reaches (dL/d dones before the done: the
    forward's advantages there are NaN, 0 * NaN, test_nonfinite.py; the scans carry it to earlier
    steps alike): each other entry is finite and equal to the one with that NaN replaced by a
    number (where two numbers give the same). The terms that a done of 1 selects away carry only
    their derivative in the dones, a zero in value (x - x.detach() would be NaN in value). c_clip
    is below every ratio: importance's gradient would read those NaN advantages through c."""
    name, step = poisoned
    v, r, d, imp = _second_order_inputs(13)
    d[0] = [0, 0.5, 0, 1, 0, 0.3, 0, 0]
    imp[0, 2] = 0.8  # below rho_clip: importance[2]'s gradient would read values[3] but for the done
    rng = np.random.default_rng(6)
    weights, *directions = rng.standard_normal((5, *v.shape))
    directions[2] = None
    run = _torch_second_derivatives if framework == "torch" else _jax_second_derivatives

    def with_value(value):
        arrays = [v.copy(), r.copy(), d, imp]
        arrays[name][0, step] = value
        return run(arrays, (0.95, 0.9, 1.1, 0.4), weights, directions)

    (first_a, second_a), (first_b, second_b), (first, second) = (with_value(x) for x in (0.25, -3.0, np.nan))
    for clean_a, clean_b, got in ((first_a, first_b, first), (second_a, second_b, second)):
        for key in clean_a:
            unread = np.isclose(clean_a[key], clean_b[key], rtol=1e-13, atol=1e-13)
            assert unread[1:].all(), key  # the other rows
            if key == 2:
                continue  # dL/d dones: NaN before the done too, the forward's advantages are
            if isinstance(key, tuple):
                unread &= ~np.isnan(first[key[1]])
            np.testing.assert_allclose(got[key][unread], clean_a[key][unread], rtol=1e-12, atol=1e-12,
                                       err_msg=str(key))
    assert np.isfinite(first[3][0, :3]).all() and np.isnan(first[3][0, 3:]).any()  # importance: after the done
