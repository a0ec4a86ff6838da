"""puffadv.linear_recurrence (the engine's scan as a public function) against a float64
reference on fresh random inputs: both directions, both layouts, strided views,
float32/float64 and bfloat16/float16 (the engine, 16-bit through its converting sources),
decays of 0 and 1 and a seed at the first and last steps, a scalar decay, NaN
isolation, every framework this machine has (NumPy, torch), torch.ops.puffadv and
puffadv.jax; named errors. Gradients: test_linear_recurrence_grad.py."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv


def reference(x, a, seed, reverse):
    """y_t = x_t + a_t y_{t-/+1} in float64, [B, T]; y outside the row = seed (None: 0)."""
    x, a = np.asarray(x, np.float64), np.asarray(a, np.float64)
    rows, horizon = x.shape
    y = np.empty((rows, horizon))
    carry = np.zeros(rows) if seed is None else np.asarray(seed, np.float64).copy()
    for t in (range(horizon - 1, -1, -1) if reverse else range(horizon)):
        carry = x[:, t] + a[:, t] * carry
        y[:, t] = carry
    return y


def draw(rows, horizon, dtype=np.float64, seed=0, ends=True, rng=None):
    """Inputs, decays in [-1.1, 1.1] (0 and 1 at the first and last steps: a cut and a
    pass-through at each end) and a seed; `rng` (the conftest fixture): fresh each run."""
    rng = np.random.default_rng(seed) if rng is None else rng
    x = rng.normal(size=(rows, horizon))
    a = rng.uniform(-1.1, 1.1, size=(rows, horizon))
    if ends and horizon >= 2 and rows >= 2:
        a[0, 0], a[0, -1], a[1, 0], a[1, -1] = 0.0, 1.0, 1.0, 0.0
    s = rng.normal(size=rows)
    return x.astype(dtype), a.astype(dtype), s.astype(dtype)


def tolerance(dtype):
    return {np.float64: 1e-12, np.float32: 2e-5}.get(dtype, 2e-2)


SHAPES = [(1, 1), (3, 1), (2, 2), (5, 17), (64, 9), (37, 130), (9, 1000)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("seeded", [False, True])
def test_equals_the_reference_in_both_layouts(dtype, shape, reverse, seeded, rng):
    x, a, s = draw(*shape, dtype=dtype, rng=rng)
    seed = s if seeded else None
    want = reference(x, a, seed, reverse)
    got = puffadv.linear_recurrence(x, a, seed=seed, reverse=reverse, time_axis=1)
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_allclose(got, want, rtol=tolerance(dtype), atol=tolerance(dtype))
    time_major = puffadv.linear_recurrence(np.ascontiguousarray(x.T), np.ascontiguousarray(a.T), seed=seed,
                                           reverse=reverse, time_axis=0)
    np.testing.assert_allclose(time_major.T, want, rtol=tolerance(dtype), atol=tolerance(dtype))
    negative_axes = puffadv.linear_recurrence(x, a, seed=seed, reverse=reverse, time_axis=-1)
    np.testing.assert_array_equal(negative_axes, got)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("time_axis", [1, 0])
def test_strided_views_and_a_given_output(reverse, time_axis):
    x, a, s = draw(13, 40, dtype=np.float32, seed=7)
    want = reference(x, a, s, reverse)
    lay = (lambda m: m) if time_axis == 1 else (lambda m: m.T)
    wide_x = np.zeros((26, 80), np.float32)
    wide_x[::2, ::2] = x
    wide_a = np.zeros((13, 120), np.float32)
    wide_a[:, ::3] = a
    out = np.full((80, 26), np.nan, np.float32).T[::2, ::2]  # a strided view of a time-major buffer
    got = puffadv.linear_recurrence(lay(wide_x[::2, ::2]), lay(wide_a[:, ::3]), seed=np.repeat(s, 2)[::2],
                                    reverse=reverse, time_axis=time_axis, out=lay(out))
    assert got is lay(out) or np.shares_memory(got, out)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
@pytest.mark.parametrize("reverse", [False, True])
def test_16_bit_inputs_compute_in_float32(name, reverse):
    torch = pytest.importorskip("torch")
    pytest.importorskip("puffadv.torch")  # torch.ops.puffadv
    dtype = getattr(torch, name)
    x, a, s = draw(6, 50, seed=3)
    a *= 0.9
    tx, ta, ts = (torch.from_numpy(v).to(dtype) for v in (x, a, s))
    got = puffadv.linear_recurrence(tx, ta, seed=ts, reverse=reverse, time_axis=1)
    assert got.dtype == torch.float32
    want = reference(tx.double().numpy(), ta.double().numpy(), ts.double().numpy(), reverse)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
    op = torch.ops.puffadv.linear_recurrence(tx, ta, ts, reverse=reverse, time_axis=1)
    torch.testing.assert_close(op, got, rtol=0, atol=0)


def test_a_scalar_decay_is_every_steps_decay():
    x, a, s = draw(4, 30, seed=5)
    for decay in (0.5, 1, np.float64(0.25), np.array(-0.75)):
        full = np.full_like(x, float(decay))
        for reverse in (False, True):
            np.testing.assert_array_equal(
                puffadv.linear_recurrence(x, decay, seed=s, reverse=reverse, time_axis=1),
                puffadv.linear_recurrence(x, full, seed=s, reverse=reverse, time_axis=1))


def test_known_recurrences():
    """decay = gamma (1 - done) backwards is discounted_returns; gamma lambda forwards (reset
    after a done) is eligibility_traces; gamma lambda (1 - done) backwards over the TD errors is GAE."""
    rng = np.random.default_rng(11)
    r = rng.normal(size=(5, 60))
    done = rng.random((5, 60)) < 0.1
    returns = puffadv.discounted_returns(r, done, gamma=0.9, time_axis=1).returns
    np.testing.assert_allclose(puffadv.linear_recurrence(r, 0.9 * (1 - done), reverse=True, time_axis=1), returns,
                               rtol=1e-12, atol=1e-12)
    reset = np.concatenate([np.zeros((5, 1), bool), done[:, :-1]], axis=1)
    traces = puffadv.eligibility_traces(r, done, gamma=0.9, lambda_=0.8, time_axis=1)
    np.testing.assert_allclose(puffadv.linear_recurrence(r, 0.72 * (1 - reset), reverse=False, time_axis=1),
                               traces, rtol=1e-12, atol=1e-12)
    values, last = rng.normal(size=(5, 60)), rng.normal(size=5)
    following = np.concatenate([values[:, 1:], last[:, None]], axis=1)
    errors = r + 0.9 * (1 - done) * following - values
    gae = puffadv.gae(r, values, done, last_value=last, gamma=0.9, gae_lambda=0.8, time_axis=1).advantages
    np.testing.assert_allclose(puffadv.linear_recurrence(errors, 0.72 * (1 - done), reverse=True, time_axis=1), gae,
                               rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("time_axis", [1, 0])
def test_nan_stays_in_its_row(reverse, time_axis):
    x, a, s = draw(8, 300, dtype=np.float32, seed=9)
    x[2, 150], a[5, 10], s[6] = np.nan, np.inf, np.nan
    lay = (lambda m: m) if time_axis == 1 else (lambda m: np.ascontiguousarray(m.T))
    got = puffadv.linear_recurrence(lay(x), lay(a), seed=s, reverse=reverse, time_axis=time_axis)
    got = got if time_axis == 1 else got.T
    clean = [0, 1, 3, 4, 7]
    np.testing.assert_allclose(got[clean], reference(x, a, s, reverse)[clean], rtol=2e-5, atol=2e-5)
    assert np.isnan(got[2]).any() and np.isnan(got[6]).any()


@pytest.mark.parametrize("reverse", [False, True])
def test_every_framework(target, reverse):
    t = target
    x, a, s = draw(9, 70, dtype=np.float32, seed=12)
    got = puffadv.linear_recurrence(t.put(x), t.put(a), seed=t.put(s), reverse=reverse, time_axis=1)
    np.testing.assert_allclose(t.get(got), reference(x, a, s, reverse), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("reverse", [False, True])
def test_torch_op_and_jax_equal_the_python_api(reverse):
    x, a, s = draw(7, 45, seed=13)
    tx, ta = np.ascontiguousarray(x.T), np.ascontiguousarray(a.T)  # time-major [T, B]
    want = puffadv.linear_recurrence(tx, ta, seed=s, reverse=reverse, time_axis=0)
    np.testing.assert_allclose(want.T, reference(x, a, s, reverse), rtol=1e-12, atol=1e-12)
    torch = pytest.importorskip("torch")
    pytest.importorskip("puffadv.torch")
    op = torch.ops.puffadv.linear_recurrence(*(torch.from_numpy(v) for v in (tx, ta, s)), reverse=reverse,
                                             time_axis=0)
    np.testing.assert_array_equal(op.numpy(), want)
    jax = pytest.importorskip("jax")
    pjax = pytest.importorskip("puffadv.jax")
    with (jax.enable_x64(True) if hasattr(jax, "enable_x64") else jax.experimental.enable_x64()):
        got = pjax.linear_recurrence(tx, ta, seed=s, reverse=reverse, time_axis=0)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
        jitted = jax.jit(lambda x, a: pjax.linear_recurrence(x, a, reverse=reverse, time_axis=0))(tx, ta)
        np.testing.assert_allclose(np.asarray(jitted).T, reference(x, a, None, reverse), rtol=1e-12, atol=1e-12)
        batched = jax.vmap(lambda x: pjax.linear_recurrence(x, 0.5, reverse=reverse, time_axis=1))(np.stack([x, -x]))
        np.testing.assert_allclose(np.asarray(batched[1]), reference(-x, np.full_like(x, 0.5), None, reverse),
                                   rtol=1e-12, atol=1e-12)


def test_required_keywords_name_what_is_missing():
    x, a, _ = draw(2, 3)
    with pytest.raises(TypeError, match=r"time_axis=: 0 for time-major \[T, B\] arrays, 1 for batch-major"):
        puffadv.linear_recurrence(x, a, reverse=True)
    with pytest.raises(TypeError, match=r"reverse=: False for y_t = inputs_t \+ decay_t y_\{t-1\}"):
        puffadv.linear_recurrence(x, a, time_axis=1)
    with pytest.raises(TypeError, match="reverse must be a bool"):
        puffadv.linear_recurrence(x, a, reverse=1, time_axis=1)
    with pytest.raises(TypeError, match="time_axis=: 0 for time-major"):
        pytest.importorskip("puffadv.jax").linear_recurrence(x, a, reverse=False)


def test_errors_name_the_callers_arguments():
    x, a, s = draw(3, 4)
    with pytest.raises(ValueError, match=r"decay has shape \[3, 5\] but inputs has shape \[3, 4\]"):
        puffadv.linear_recurrence(x, np.zeros((3, 5)), reverse=False, time_axis=1)
    with pytest.raises(TypeError, match="decay has dtype float32 but inputs has float64"):
        puffadv.linear_recurrence(x, a.astype(np.float32), reverse=False, time_axis=1)
    with pytest.raises(ValueError, match="seed"):
        puffadv.linear_recurrence(x, a, seed=np.zeros(4), reverse=False, time_axis=1)
    with pytest.raises(TypeError, match="decay must be a real number or an array"):
        puffadv.linear_recurrence(x, True, reverse=False, time_axis=1)
    with pytest.raises(ValueError, match="time_axis must be 0 or -2"):
        puffadv.linear_recurrence(x, a, reverse=False, time_axis=2)
    with pytest.raises(ValueError, match="out"):
        puffadv.linear_recurrence(x, a, reverse=False, time_axis=1, out=x)
