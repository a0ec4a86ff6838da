"""Time-major calls of few rows (SB3's and CleanRL's few environments, issue 33) are
walked interleaved on the CPU (src/cpu/engine_traversals.hpp): fewer rows than a
vector's lanes with W / N steps of every row in each vector, the scan stepping N lanes at
a time (along_time<N> where N divides W; along_time<0> where it does not, 3, 5, 6 and 7
rows of float32's 8 lanes, 3 of float64's 4, whose lanes' rows change from block to
block); more rows than a vector's lanes, up to kMostFlatRows, as one flat row whose
lanes' steps beside them lie a vector or more away (flat_rows). Every estimator there gives the batch-major
call's numbers and the float64 reference's: outputs poisoned first, episode ends at
the first and last steps, horizons whose last block is partial, whole or a single
step, flags of one byte and of the floats' type, per-step gamma and lambda,
next_values, the forward scans (linear_recurrence, the fused backward) and decays
whose products overflow (the step-by-step pass)."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
from puffadv._estimators import ESTIMATORS

import reference as ref
from estimator_calls import call_arguments, every_output_requested, named_outputs

try:
    import torch
except ImportError:
    torch = None

ROWS = [2, 3, 4, 5, 6, 7, 8, 12, 16, 31]
HORIZONS = [1, 2, 3, 5, 301]
TOLERANCE = {np.float32: 1e-5, np.float64: 1e-12}


def _time_major(x):
    return x if x.ndim == 1 else np.ascontiguousarray(x.T)


def _episodes(rng, rows, horizon, dtype, flags_as_floats=False):
    e = ref.random_off_policy(rng, rows, horizon, dtype)
    for name in ("terminated", "truncated"):
        e[name][:, 0] = e[name][:, -1] = name == "terminated"  # episode ends at the first and last steps
        if flags_as_floats:
            e[name] = e[name].astype(dtype)
    return e


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("horizon", HORIZONS)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("function", sorted(ESTIMATORS))
def test_every_estimator_gives_the_batch_major_numbers(rng, function, rows, horizon, dtype):
    e = _episodes(rng, rows, horizon, dtype, flags_as_floats=horizon == 5)
    args, kw, scalars = call_arguments(function, e)
    fn = getattr(puffadv, function)
    want = named_outputs(fn(*args, **kw, **scalars, **every_output_requested(function), time_axis=-1))
    poisoned = {name: np.full((horizon, rows), np.nan, dtype=x.dtype) for name, x in want.items() if name != "out"}
    got = named_outputs(fn(*map(_time_major, args), **{k: _time_major(v) for k, v in kw.items()}, **scalars,
                      **(poisoned or every_output_requested(function)), time_axis=0))
    assert set(got) == set(want)
    for name, x in got.items():
        assert x.shape == (horizon, rows), name
        assert np.isfinite(np.asarray(x)).all(), name
        assert ref.relative_error(np.asarray(x).T, want[name]) <= TOLERANCE[dtype], name


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("kind", ["gae", "td_lambda", "vtrace"])
def test_advantages_match_the_float64_reference(rng, kind, rows, dtype):
    e = _episodes(rng, rows, 203, dtype)
    want_a, want_r = ref.standard_estimate(kind, *(e[k] for k in ("rewards", "values", "terminated", "truncated")),
                                           bootstrap_values=e["bootstrap_values"], importance=e["importance"],
                                           lam=1.0 if kind == "vtrace" else 0.95)  # each function's default
    fn = {"gae": puffadv.gae, "td_lambda": puffadv.td_lambda_returns, "vtrace": puffadv.vtrace}[kind]
    outputs = {"gae": ("advantages", "returns"), "td_lambda": ("advantages", "returns"),
               "vtrace": ("pg_advantages", "vs")}[kind]
    extra = dict(advantages=True) if kind == "td_lambda" else {}
    got = fn(*(_time_major(e[k]) for k in ("rewards", "values", "terminated", "truncated")),
             bootstrap_values=_time_major(e["bootstrap_values"]), importance=_time_major(e["importance"]),
             time_axis=0, **extra)
    tolerance = 1e-4 if dtype == np.float32 else 1e-12
    assert ref.relative_error(np.asarray(getattr(got, outputs[0])).T, want_a) <= tolerance
    assert ref.relative_error(np.asarray(getattr(got, outputs[1])).T, want_r) <= tolerance


@pytest.mark.parametrize("rows", ROWS)
def test_per_step_gamma_lambda_and_next_values(rng, rows):
    e = _episodes(rng, rows, 77, np.float64)
    gamma, lam = rng.uniform(0.5, 1.0, (rows, 77)), rng.uniform(0.0, 1.0, (rows, 77))
    r, v, term, trunc = (e[k] for k in ("rewards", "values", "terminated", "truncated"))
    for kw in (dict(bootstrap_values=e["bootstrap_values"], gamma=gamma, gae_lambda=lam),
               dict(next_values=e["next_values"], gamma=gamma),
               dict(next_values=e["next_values"])):
        want = puffadv.gae(r, v, term, trunc, **kw, time_axis=-1)
        got = puffadv.gae(*map(_time_major, (r, v, term, trunc)), **{k: _time_major(x) if isinstance(x, np.ndarray)
                                                                    else x for k, x in kw.items()}, time_axis=0)
        assert ref.relative_error(np.asarray(got.advantages).T, np.asarray(want.advantages)) <= 1e-12, sorted(kw)
        assert ref.relative_error(np.asarray(got.returns).T, np.asarray(want.returns)) <= 1e-12, sorted(kw)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("rows", ROWS)
def test_linear_recurrence_both_directions(rng, rows, reverse):
    x, a = rng.standard_normal((rows, 45)), rng.uniform(-1.0, 1.0, (rows, 45))
    seed = rng.standard_normal(rows)
    want = np.empty_like(x)
    carry = seed.copy()
    for t in (range(44, -1, -1) if reverse else range(45)):
        carry = x[:, t] + a[:, t] * carry
        want[:, t] = carry
    got = puffadv.linear_recurrence(_time_major(x), _time_major(a), reverse=reverse, seed=seed, time_axis=0,
                                    out=np.full((45, rows), np.nan))
    assert ref.relative_error(np.asarray(got).T, want) <= 1e-12


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", ROWS)
def test_episodes_cut_between_overflowing_decays(rows, dtype):
    # Decays of 1e10 (1e100): W decays multiplied across the episode ends overflow;
    # the step-by-step pass gives the recurrence's values (test_overflowing_decays.py).
    rng = np.random.default_rng(31)
    horizon = 97
    rewards, values = (rng.standard_normal((rows, horizon)).astype(dtype) for _ in range(2))
    terminated = np.zeros((rows, horizon), bool)
    terminated[:, ::3] = terminated[:, 1::7] = True
    ratio = np.full((rows, horizon), 1e10 if dtype == np.float32 else 1e100, dtype)
    last = rng.standard_normal(rows).astype(dtype)
    scalars = dict(gamma=1.0, rho_clip=1.0, c_clip=float(ratio[0, 0]))
    want_adv, _ = ref.standard_estimate("gae", rewards, values, terminated, last_value=last, importance=ratio,
                                        lam=1.0, **scalars)
    got = puffadv.gae(*map(_time_major, (rewards, values, terminated)), last_value=last,
                      importance=_time_major(ratio), gae_lambda=1.0, time_axis=0, **scalars)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(np.asarray(got.advantages).T, want_adv, rtol=tol, atol=tol * 10)


@pytest.mark.skipif(torch is None, reason="torch")
@pytest.mark.parametrize("rows", ROWS)
def test_the_fused_backward_time_major(rng, rows):
    # value_vjp: a forward scan, walked interleaved too; gradcheck in float64.
    e = _episodes(rng, rows, 19, np.float64)
    r, v = (torch.from_numpy(_time_major(e[k])).requires_grad_() for k in ("rewards", "values"))
    term = torch.from_numpy(_time_major(e["terminated"]))
    last = torch.from_numpy(e["last_value"]).requires_grad_()
    torch.autograd.gradcheck(lambda r, v, last: puffadv.gae(r, v, term, last_value=last, time_axis=0).advantages,
                             (r, v, last))
