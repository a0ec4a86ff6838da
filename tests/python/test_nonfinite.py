"""NaN and Inf in the inputs (issue 7): what comes out, tested.

The kernels do IEEE arithmetic on the formulas as written, which multiply by
(1 - done) rather than branch on it. So, for every backend and layout:

- a NaN reaches exactly the outputs the formula's terms reach: in its own row,
  the step it enters and every earlier step, across episode boundaries too
  (0 * NaN = NaN). Later steps and other rows are bitwise unchanged. It is never
  masked into a number;
- never-read inputs never matter: puff's rewards[:, 0], dones[:, 0] and
  importance[:, H-1]; a bootstrap value at a step that is neither truncated nor
  the last;
- a NaN or +inf importance ratio is clipped (fmin, as C's fminf): a finite result;
- +-inf in values or rewards gives the formula's +-inf/NaN exactly; +-inf in
  dones or a -inf ratio (an infinite decay factor) gives non-finite values at
  exactly the formula's places, but the vectorised scans may say NaN where the
  step-by-step formula says inf (they reassociate inf * 0).

puff is compared with the float64 reference (the same IEEE formula). The
reference for the standard conventions branches on done, so there the tests
check the properties above instead (docs/reliability.md).
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the reference meets NaN/inf too

import puffadv
import reference
from conftest import TARGETS, Target
from reference import random_puff_inputs

PUFF_PARAMS = dict(gamma=0.99, gae_lambda=0.95, rho_clip=2.0, c_clip=1.0)
NAMES = ("values", "rewards", "dones", "importance")
H = 37  # more than one SIMD block and a scalar remainder
ROW = 5


# Every framework/device in row-major layout; on NumPy also the other kernel paths.
WHERE = [("numpy", layout) for layout in ("row-major", "time-major", "strided")] + \
        [(name, "row-major") for name in TARGETS if name != "numpy"]


def lay_out(a, layout):
    """The same values in another memory layout (each one a separate kernel path)."""
    if layout == "time-major":
        return a.T.copy().T
    if layout == "strided":
        big = np.zeros((a.shape[0], 2 * a.shape[1]), a.dtype)
        big[:, ::2] = a
        return big[:, ::2]
    return a


def run_puff(target, inputs, layout="row-major"):
    arrays = [target.put(lay_out(a, layout)) if target.name == "numpy" else target.put(a) for a in inputs]
    out = target.full(inputs[0].shape, 12345.0, inputs[0].dtype)  # poison: any unwritten value shows
    puffadv.compute_puff_advantage(*arrays, out, **PUFF_PARAMS)
    target.synchronize()
    return target.get(out).astype(np.float64)


def puff_reach(name, t0):
    """Steps of row ROW whose output the formula lets a bad input at step t0 touch."""
    last = H - 2
    if name == "values":
        return min(t0, last)           # delta_t0 (- V_t0) and delta_{t0-1} (gamma V_t0)
    if name in ("rewards", "dones"):
        return t0 - 1                  # read at t+1 only; t0 = 0 is never read
    return t0 if t0 <= last else -1    # importance[H-1] is never read


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("where", WHERE, ids=["-".join(w) for w in WHERE])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("t0", [0, 1, 8, 17, H - 2, H - 1])
def test_puff_nan_reaches_exactly_what_the_formula_reaches(where, dtype, name, t0):
    target, layout = Target(where[0]), where[1]
    rng = np.random.default_rng(t0)
    clean = list(random_puff_inputs(rng, 11, H, dtype))
    clean[2][ROW, max(t0 - 3, 0)] = 1.0  # an episode end before the NaN: it does not stop it
    clean_out = run_puff(target, clean, layout)
    poisoned = [a.copy() for a in clean]
    poisoned[NAMES.index(name)][ROW, t0] = np.nan
    out = run_puff(target, poisoned, layout)

    others = np.arange(11) != ROW
    np.testing.assert_array_equal(out[others], clean_out[others])  # other rows: bitwise unchanged
    reach = puff_reach(name, t0)
    if name == "importance":
        # fmin(NaN, clip) = clip: a finite answer, the reference's.
        assert np.isfinite(out).all()
        assert reference.relative_error(out, reference.puff_advantage(*poisoned, **PUFF_PARAMS)) <= 1e-5
        return
    np.testing.assert_array_equal(out[ROW, reach + 1:], clean_out[ROW, reach + 1:])  # later steps too
    assert np.isnan(out[ROW, :reach + 1]).all(), "a NaN was masked"
    np.testing.assert_array_equal(np.isnan(out), np.isnan(reference.puff_advantage(*poisoned, **PUFF_PARAMS)))


@pytest.mark.parametrize("value", [np.inf, -np.inf])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("t0", [1, 8, H - 2, H - 1])
@pytest.mark.parametrize("where", WHERE, ids=["-".join(w) for w in WHERE])
def test_puff_inf(where, value, name, t0):
    target, layout = Target(where[0]), where[1]
    rng = np.random.default_rng(t0 + 100)
    inputs = list(random_puff_inputs(rng, 11, H, np.float32))
    inputs[2][ROW, t0 - 1] = 1.0
    inputs[NAMES.index(name)][ROW, t0] = value
    out = run_puff(target, inputs, layout)
    ref = reference.puff_advantage(*inputs, **PUFF_PARAMS)
    finite = np.isfinite(ref)
    np.testing.assert_array_equal(np.isfinite(out), finite)  # non-finite exactly where the formula is
    np.testing.assert_allclose(out[finite], ref[finite], rtol=1e-4, atol=1e-4)
    if name in ("values", "rewards"):  # and which non-finite, exactly
        np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
        np.testing.assert_array_equal(np.isposinf(out), np.isposinf(ref))


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_puff_inputs_that_are_never_read(target, value):
    rng = np.random.default_rng(7)
    clean = list(random_puff_inputs(rng, 9, H, np.float32))
    expected = run_puff(target, clean)
    poisoned = [a.copy() for a in clean]
    poisoned[1][:, 0] = value  # rewards[:, 0]
    poisoned[2][:, 0] = value  # dones[:, 0]
    poisoned[3][:, -1] = value  # importance[:, H-1]
    np.testing.assert_array_equal(run_puff(target, poisoned), expected)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_puff_nan_or_inf_ratio_takes_the_clip(target, value):
    rng = np.random.default_rng(8)
    inputs = list(random_puff_inputs(rng, 9, H, np.float32))
    inputs[3][rng.random(inputs[3].shape) < 0.3] = value
    out = run_puff(target, inputs)
    assert np.isfinite(out).all()
    assert reference.relative_error(out, reference.puff_advantage(*inputs, **PUFF_PARAMS)) <= 1e-5


def test_puff_all_nan_row_stays_in_its_row(target):
    rng = np.random.default_rng(9)
    clean = list(random_puff_inputs(rng, 9, H, np.float32))
    expected = run_puff(target, clean)
    poisoned = [a.copy() for a in clean]
    for a in poisoned[:3]:
        a[ROW] = np.nan
    out = run_puff(target, poisoned)
    assert np.isnan(out[ROW, :-1]).all() and out[ROW, -1] == 0  # column H-1 is always 0
    others = np.arange(9) != ROW
    np.testing.assert_array_equal(out[others], expected[others])


# --- standard conventions ----------------------------------------------------------

CONVENTIONS = {
    "gae": lambda ep, **kw: puffadv.gae(ep["rewards"], ep["values"], ep["terminated"], gae_lambda=0.9,
                                        **{"time_axis": -1, **kw}),
    "td_lambda": lambda ep, **kw: puffadv.td_lambda_returns(ep["rewards"], ep["values"], ep["terminated"],
                                                            lambda_=0.9, advantages=True, **{"time_axis": -1, **kw}),
    "vtrace": lambda ep, **kw: puffadv.vtrace(ep["rewards"], ep["values"], ep["terminated"], lambda_=0.9,
                                              rho_pg_clip=1.5, **{"time_axis": -1, **kw}),
}
CONVENTION_PARAMS = dict(gamma=0.97, rho_clip=2.0, c_clip=1.0)


def run_convention(target, kind, ep):
    put = {k: target.put(v) for k, v in ep.items()}
    kwargs = dict(importance=put["importance"], **CONVENTION_PARAMS)
    if "truncated" in put:
        kwargs.update(truncated=put["truncated"], bootstrap_values=put["bootstrap_values"])
    else:
        kwargs.update(last_value=put["last_value"])
    result = CONVENTIONS[kind](put, **kwargs)
    target.synchronize()
    return [target.get(x).astype(np.float64) for x in result[:2]]


def episodes(seed, with_truncation=True):
    ep = reference.random_episodes(np.random.default_rng(seed), 7, H)
    if not with_truncation:
        del ep["truncated"], ep["bootstrap_values"]
    return ep


def where_read(ep, row):
    """Steps whose bootstrap value is read: truncated ones and the last."""
    read = ep["truncated"][row].copy()
    read[-1] = True
    return read


@pytest.mark.parametrize("kind", list(CONVENTIONS))
@pytest.mark.parametrize("name", ["rewards", "values", "importance", "bootstrap_values"])
@pytest.mark.parametrize("t0", [0, 9, 20, H - 1])
def test_convention_nan_reaches_its_step_and_every_earlier_one(target, kind, name, t0):
    ep = episodes(t0)
    clean = run_convention(target, kind, ep)
    poisoned = {k: v.copy() for k, v in ep.items()}
    poisoned[name][ROW, t0] = np.nan
    outs = run_convention(target, kind, poisoned)
    others = np.arange(7) != ROW
    read = name != "bootstrap_values" or where_read(ep, ROW)[t0]
    for out, before in zip(outs, clean):
        np.testing.assert_array_equal(out[others], before[others])
        if name == "importance" or not read:  # clipped like fminf / never read: no NaN anywhere
            assert np.isfinite(out).all()
            if not read:
                np.testing.assert_array_equal(out, before)
            continue
        np.testing.assert_array_equal(out[ROW, t0 + 1:], before[ROW, t0 + 1:])
        assert np.isnan(out[ROW, :t0 + 1]).all(), "a NaN was masked"
    if name == "importance":
        ref = reference.standard_estimate(kind, **{k: poisoned[k] for k in poisoned}, lam=0.9,
                                          rho_pg_clip=1.5 if kind == "vtrace" else 1.0,
                                          **CONVENTION_PARAMS)
        if kind == "vtrace":
            ref = ref[::-1]  # (pg, vs) there, (vs, pg_advantages) here
        for out, r in zip(outs, ref):
            assert reference.relative_error(out, r) <= 1e-5


@pytest.mark.parametrize("kind", list(CONVENTIONS))
def test_convention_nan_last_value_reaches_the_whole_row(target, kind):
    ep = episodes(3, with_truncation=False)
    clean = run_convention(target, kind, ep)
    ep["last_value"][ROW] = np.nan
    outs = run_convention(target, kind, ep)
    others = np.arange(7) != ROW
    for out, before in zip(outs, clean):
        np.testing.assert_array_equal(out[others], before[others])
        assert np.isnan(out[ROW]).all()
