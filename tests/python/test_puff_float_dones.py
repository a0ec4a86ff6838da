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
