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
