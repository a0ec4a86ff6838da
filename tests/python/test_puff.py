"""puffadv.compute_puff_advantage against the float64 reference (SPEC section 1),
over every framework/device the machine has (the `target` fixture)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import puffadv
import reference
from reference import TOLERANCE, random_puff_inputs, relative_error

DTYPES = [np.float32, np.float64]
PARAMS = dict(gamma=0.99, gae_lambda=0.95, rho_clip=5.0, c_clip=1.0)


def run(target, inputs, dtype, **params):
    """Runs on `target` with a NaN-poisoned output, returns the result as NumPy."""
    arrays = [target.put(a) for a in inputs]
    out = target.full(inputs[0].shape, np.nan, dtype)
    returned = puffadv.compute_puff_advantage(*arrays, out, **params)
    assert returned is out
    target.synchronize()
    return target.get(out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 2), (3, 5), (8, 64), (13, 91), (257, 67), (5, 1031), (1000, 8)])
def test_matches_reference(target, rng, dtype, shape):
    inputs = random_puff_inputs(rng, *shape, dtype)
    out = run(target, inputs, dtype, **PARAMS)
    assert np.isfinite(out).all()
    want = reference.puff_advantage(*inputs, **PARAMS)
    # Against the norm of the values too: a (1, 2) call's one advantage is one TD error,
    # r_1 + gamma V_1 - V_0, whose terms can cancel to ~1e-3 of themselves, and float32
    # rounding of those terms then exceeded 1e-5 of the result (a CI seed, 2026-12-05).
    scale = max(np.linalg.norm(want), np.linalg.norm(inputs[0].astype(np.float64)))
    assert np.linalg.norm(out.astype(np.float64) - want) / scale <= TOLERANCE[np.dtype(dtype)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_returns_new_array_in_callers_framework(target, rng, dtype):
    inputs = random_puff_inputs(rng, 6, 10, dtype)
    arrays = [target.put(a) for a in inputs]
    out = puffadv.compute_puff_advantage(*arrays, **PARAMS)
    assert type(out) is type(arrays[0])
    assert tuple(out.shape) == (6, 10)
    assert str(out.dtype).endswith(np.dtype(dtype).name)
    if hasattr(arrays[0], "device"):
        assert str(out.device) == str(arrays[0].device)
    target.synchronize()
    np.testing.assert_allclose(target.get(out), reference.puff_advantage(*inputs, **PARAMS),
                               rtol=1e-4, atol=1e-5)


def test_default_parameters_are_pufferlibs(rng):
    inputs = random_puff_inputs(rng, 4, 9)
    out = puffadv.compute_puff_advantage(*inputs)
    ref = reference.puff_advantage(*inputs, gamma=0.99, gae_lambda=0.95, rho_clip=1.0, c_clip=1.0)
    assert relative_error(out, ref) <= 1e-5


def test_positional_parameters_follow_pufferlib_order(rng):
    inputs = random_puff_inputs(rng, 4, 9)
    out = np.full((4, 9), np.nan, np.float32)
    puffadv.compute_puff_advantage(*inputs, out, 0.9, 0.8, 2.0, 0.5)
    ref = reference.puff_advantage(*inputs, gamma=0.9, gae_lambda=0.8, rho_clip=2.0, c_clip=0.5)
    assert relative_error(out, ref) <= 1e-5


# --- SPEC section 1 facts ------------------------------------------------------

def test_first_reward_and_done_are_never_read(target, rng):
    values, rewards, dones, importance = random_puff_inputs(rng, 7, 12)
    expected = run(target, (values, rewards, dones, importance), np.float32, **PARAMS)
    rewards[:, 0] = np.nan
    dones[:, 0] = np.nan
    out = run(target, (values, rewards, dones, importance), np.float32, **PARAMS)
    np.testing.assert_array_equal(out, expected)


def test_last_column_is_zero_even_with_nonfinite_last_step(target, rng):
    values, rewards, dones, importance = random_puff_inputs(rng, 5, 8)
    importance[:, -1] = np.nan  # importance[H-1] is never read either
    out = run(target, (values, rewards, dones, importance), np.float32, **PARAMS)
    assert (out[:, -1] == 0).all()
    assert np.isfinite(out).all()


def test_horizon_one_is_all_zeros(target, rng):
    inputs = random_puff_inputs(rng, 9, 1)
    out = run(target, inputs, np.float32, **PARAMS)
    np.testing.assert_array_equal(out, np.zeros((9, 1), np.float32))


@pytest.mark.parametrize("shape", [(0, 16), (16, 0), (0, 0)])
def test_empty_inputs(target, shape):
    arrays = [target.put(np.ones(shape, np.float32)) for _ in range(4)]
    out = puffadv.compute_puff_advantage(*arrays)
    assert tuple(out.shape) == shape


def test_unit_importance_is_plain_gae(target, rng):
    values, rewards, dones, _ = random_puff_inputs(rng, 11, 40, np.float64)
    importance = np.ones_like(values)
    out = run(target, (values, rewards, dones, importance), np.float64,
              gamma=0.97, gae_lambda=0.9, rho_clip=1.0, c_clip=3.0)
    # Textbook GAE, written independently of the puff reference.
    gae = np.zeros_like(values)
    for t in range(values.shape[1] - 2, -1, -1):
        nnt = 1 - dones[:, t + 1]
        delta = rewards[:, t + 1] + 0.97 * values[:, t + 1] * nnt - values[:, t]
        gae[:, t] = delta + 0.97 * 0.9 * nnt * gae[:, t + 1]
    np.testing.assert_allclose(out, gae, rtol=1e-12, atol=1e-12)


def test_c_clip_zero_is_one_step_td_error_scaled_by_rho(target, rng):
    values, rewards, dones, importance = random_puff_inputs(rng, 6, 20, np.float64)
    out = run(target, (values, rewards, dones, importance), np.float64,
              gamma=0.99, gae_lambda=0.95, rho_clip=5.0, c_clip=0.0)
    td = np.minimum(importance[:, :-1], 5.0) * (
        rewards[:, 1:] + 0.99 * values[:, 1:] * (1 - dones[:, 1:]) - values[:, :-1])
    np.testing.assert_allclose(out[:, :-1], td, rtol=1e-12, atol=1e-12)
    assert (out[:, -1] == 0).all()


def test_rho_clip_zero_gives_zeros(target, rng):
    inputs = random_puff_inputs(rng, 6, 20)
    out = run(target, inputs, np.float32, gamma=0.99, gae_lambda=0.95, rho_clip=0.0, c_clip=1.0)
    np.testing.assert_array_equal(out, np.zeros_like(out))


def test_nan_importance_takes_the_clip_like_fminf(target, rng):
    values, rewards, dones, importance = random_puff_inputs(rng, 8, 16, np.float64)
    importance[rng.random(importance.shape) < 0.3] = np.nan
    out = run(target, (values, rewards, dones, importance), np.float64, **PARAMS)
    assert np.isfinite(out).all()
    clipped = np.where(np.isnan(importance), np.inf, importance)  # fmin(NaN, c) == c == fmin(inf, c)
    ref = reference.puff_advantage(values, rewards, dones, clipped, **PARAMS)
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


def test_done_stops_bootstrapping(rng):
    values, rewards, dones, importance = random_puff_inputs(rng, 1, 6, np.float64)
    dones[:] = 0
    dones[0, 3] = 1
    out = puffadv.compute_puff_advantage(values, rewards, dones, importance, **PARAMS)
    # A[2] sees reward[3] but neither values[3] nor anything after step 3.
    rho = min(importance[0, 2], 5.0)
    assert out[0, 2] == pytest.approx(rho * (rewards[0, 3] - values[0, 2]), rel=1e-12)


# --- layouts -----------------------------------------------------------------

def strided_views(base):
    """Non-contiguous [rows, H] views of a larger array, each with its copy."""
    views = {
        "row-slice": base[::2, :],
        "col-slice": base[:, 1::2],
        "reversed-rows": base[::-1, :],
        "reversed-time": base[:, ::-1],
        "both-reversed": base[::-2, ::-3],
        "transpose": base.T.copy().T,  # time-major memory viewed as [rows, H]
        "transpose-slice": base.T.copy().T[1:, 2:-1],
    }
    return {name: v for name, v in views.items() if v.size}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["row-slice", "col-slice", "reversed-rows", "reversed-time",
                                    "both-reversed", "transpose", "transpose-slice"])
def test_strided_inputs_match_contiguous_copies(rng, dtype, layout):
    bases = random_puff_inputs(rng, 34, 47, dtype)
    views = [strided_views(b)[layout] for b in bases]
    out = np.full(views[0].shape, np.nan, dtype)
    puffadv.compute_puff_advantage(*views, out, **PARAMS)
    contiguous = [np.ascontiguousarray(v) for v in views]
    expected = puffadv.compute_puff_advantage(*contiguous, **PARAMS)
    # Different layouts take different kernels, so they agree to rounding, not bitwise.
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol)
    assert relative_error(out, reference.puff_advantage(*contiguous, **PARAMS)) <= TOLERANCE[np.dtype(dtype)]


@pytest.mark.parametrize("layout", ["row-slice", "col-slice", "reversed-rows", "transpose"])
def test_strided_output(rng, layout):
    inputs = random_puff_inputs(rng, 17, 30)
    big = np.full((34, 60), np.nan, np.float32)
    out = {"row-slice": big[::2, :30], "col-slice": big[:17, ::2], "reversed-rows": big[16::-1, :30],
           "transpose": np.full((30, 17), np.nan, np.float32).T}[layout]
    puffadv.compute_puff_advantage(*inputs, out, **PARAMS)
    assert relative_error(out, reference.puff_advantage(*inputs, **PARAMS)) <= 1e-5
    if layout == "row-slice":
        assert np.isnan(big[1::2]).all()  # untouched rows between the view's rows


def test_strided_torch_views(rng):
    torch = pytest.importorskip("torch")
    bases = [torch.from_numpy(a) for a in random_puff_inputs(rng, 20, 33)]
    views = [b.t().contiguous().t()[::2, 1:] for b in bases]
    out = torch.full(views[0].shape, float("nan")).t().contiguous().t()
    puffadv.compute_puff_advantage(*views, out, **PARAMS)
    ref = reference.puff_advantage(*[v.numpy() for v in views], **PARAMS)
    assert relative_error(out.numpy(), ref) <= 1e-5


def test_mixed_layouts_in_one_call(rng):
    values, rewards, dones, importance = random_puff_inputs(rng, 12, 25)
    views = (values, np.asfortranarray(rewards), dones[::-1][::-1], importance.T.copy().T)
    out = puffadv.compute_puff_advantage(*views, **PARAMS)
    assert relative_error(out, reference.puff_advantage(values, rewards, dones, importance, **PARAMS)) <= 1e-5


def test_torch_tensors_that_require_grad(rng):
    torch = pytest.importorskip("torch")
    arrays = [torch.from_numpy(a).requires_grad_() for a in random_puff_inputs(rng, 4, 9)]
    out = puffadv.compute_puff_advantage(*arrays, **PARAMS)
    assert out.requires_grad  # issue 30: never detached
    ref = reference.puff_advantage(*[a.detach().numpy() for a in arrays], **PARAMS)
    assert relative_error(out.detach().numpy(), ref) <= 1e-5


# --- property tests ----------------------------------------------------------

@st.composite
def puff_cases(draw):
    rows = draw(st.sampled_from([0, 1, 2, 3, 7, 8, 9, 31, 64]))
    horizon = draw(st.sampled_from([1, 2, 3, 4, 5, 7, 13, 31, 64, 127]))
    dtype = draw(st.sampled_from(DTYPES))
    params = dict(
        gamma=draw(st.sampled_from([0.0, 0.5, 0.99, 1.0])),
        gae_lambda=draw(st.sampled_from([0.0, 0.95, 1.0])),
        rho_clip=draw(st.sampled_from([0.0, 0.5, 1.0, 5.0])),
        c_clip=draw(st.sampled_from([0.0, 1.0, 5.0])),
    )
    layout = draw(st.sampled_from(["contiguous", "transposed", "sliced", "reversed"]))
    seed = draw(st.integers(0, 2**32 - 1))
    return rows, horizon, dtype, params, layout, seed


def lay_out(a, layout):
    if layout == "transposed":
        return a.T.copy().T
    if layout == "sliced":
        big = np.full((a.shape[0] * 2, a.shape[1] * 3), np.nan, a.dtype)
        big[::2, ::3] = a
        return big[::2, ::3]
    if layout == "reversed":
        return np.ascontiguousarray(a[::-1, ::-1])[::-1, ::-1]
    return a


@settings(max_examples=150, deadline=None)
@given(puff_cases())
def test_property_matches_reference(case):
    rows, horizon, dtype, params, layout, seed = case
    inputs = random_puff_inputs(np.random.default_rng(seed), rows, horizon, dtype, done_rate=0.2)
    views = [lay_out(a, layout) for a in inputs]
    out = lay_out(np.full((rows, horizon), np.nan, dtype), layout)
    puffadv.compute_puff_advantage(*views, out, **params)
    ref = reference.puff_advantage(*inputs, **params)
    assert not np.isnan(out).any()
    assert relative_error(out, ref) <= TOLERANCE[np.dtype(dtype)] * 10
    assert (out[:, -1] == 0).all()  # horizon >= 1 in every case drawn


def test_threads_do_not_change_results(rng, monkeypatch):
    inputs = random_puff_inputs(rng, 301, 257)
    monkeypatch.setenv("PUFFADV_NUM_THREADS", "1")
    one = puffadv.compute_puff_advantage(*inputs, **PARAMS)
    monkeypatch.setenv("PUFFADV_NUM_THREADS", "4")
    four = puffadv.compute_puff_advantage(*inputs, **PARAMS)
    np.testing.assert_array_equal(one, four)
    assert relative_error(one, reference.puff_advantage(*inputs, **PARAMS)) <= 1e-5
