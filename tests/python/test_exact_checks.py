"""Checks that must be exact, not approximate (issue 31): a parameter out of range is
printed so that it reads back as itself, and two outputs are refused as overlapping only
when they share an element."""
from __future__ import annotations

import re

import numpy as np
import pytest

import puffadv


@pytest.mark.parametrize("name, value, rule", [
    ("gamma", 1 + 2.3e-16, "finite and in [0, 1]"), ("gae_lambda", -1e-300, "finite and in [0, 1]"),
    ("rho_clip", -5e-324, "finite and >= 0"), ("c_clip", -0.30000000000000004, "finite and >= 0")])
def test_a_parameter_just_outside_its_range_is_printed_exactly(name, value, rule):
    # Found 2026-12-03 (issue 31): printed with 6 digits, gamma = 1 + 2.3e-16 read "got 1".
    x = np.ones((2, 8), np.float32)
    with pytest.raises(ValueError, match=f"^{name} must be {re.escape(rule)}, got {re.escape(repr(value))}$"):
        puffadv.compute_puff_advantage(x, x, x * 0, x, None, **{name: value})
    with pytest.raises(ValueError, match=f"^{name} must be {re.escape(rule)}, got {re.escape(repr(value))}$"):
        puffadv.gae(x, x, x * 0, last_value=x[:, 0], time_axis=1, **{name: value})


def test_outputs_interleaved_in_one_buffer_share_no_element_and_are_accepted():
    # Found 2026-12-03 (issue 31): buf[..., 0] and buf[..., 1] were refused as overlapping
    # (their byte ranges meet) although they share no element.
    rng = np.random.default_rng(3)
    r, v = rng.standard_normal((2, 4, 16)).astype(np.float32)
    d = np.zeros((4, 16), np.float32)
    last = np.zeros(4, np.float32)
    buf = np.full((4, 16, 2), np.nan, np.float32)
    got = puffadv.gae(r, v, d, last_value=last, advantages=buf[..., 0], returns=buf[..., 1], time_axis=1)
    want = puffadv.gae(r, v, d, last_value=last, time_axis=1)
    np.testing.assert_array_equal(buf[..., 0], want.advantages)
    np.testing.assert_array_equal(buf[..., 1], want.returns)
    assert got.advantages is not None
    rows = np.full((8, 16), np.nan, np.float32)  # rows interleaved: even rows, odd rows
    puffadv.gae(r, v, d, last_value=last, advantages=rows[0::2], returns=rows[1::2], time_axis=1)
    np.testing.assert_array_equal(rows[0::2], want.advantages)
    np.testing.assert_array_equal(rows[1::2], want.returns)


@pytest.mark.parametrize("seed", range(40))
def test_the_overlap_test_agrees_with_numpy_on_strided_views(seed):
    # Two views of one buffer with the same shape and strides: refused exactly when NumPy's
    # exact solver says they share memory.
    rng = np.random.default_rng(seed)
    base = np.zeros(4096, np.float32)
    rows, cols = int(rng.integers(1, 6)), int(rng.integers(1, 9))
    row_step, col_step = int(rng.integers(1, 40)), int(rng.integers(1, 6))
    starts = rng.integers(0, 200, size=2)
    out_a, out_b = (np.lib.stride_tricks.as_strided(base[int(s):], (rows, cols), (4 * row_step, 4 * col_step))
                    for s in starts)
    x = np.ones((rows, cols), np.float32)
    call = lambda: puffadv.gae(x, x, x * 0, last_value=x[:, 0].copy(), advantages=out_a, returns=out_b,
                               time_axis=1)
    if np.shares_memory(out_a, out_b):
        with pytest.raises(ValueError, match="overlap"):  # "overlaps returns", or its own elements
            call()
    else:
        try:
            call()
        except ValueError as e:
            # The one refusal left: a view whose own strides the core's (sufficient) test cannot clear.
            assert "has overlapping elements" in str(e), e


# Messages that name the right thing (issue 31): the caller's shapes and strides, each
# kind's own argument names.

def _time_major_case(rng, rows=4, horizon=6):
    r = rng.standard_normal((horizon, rows)).astype(np.float32)  # [T, B]
    return r, r + 1, np.zeros((horizon, rows), bool), rng.standard_normal(rows).astype(np.float32)


@pytest.mark.parametrize("horizon, rows", [(6, 4), (1, 9), (7, 3)])
def test_a_time_major_shape_mismatch_reports_the_callers_shapes(horizon, rows):
    # Found 2026-12-03: "values has shape [4, 5] but rewards has shape [4, 6]" for [5, 4] and [6, 4].
    r, v, t, lv = _time_major_case(np.random.default_rng(horizon), rows, horizon)
    with pytest.raises(ValueError, match=re.escape(f"values has shape [{horizon + 1}, {rows}] but rewards has "
                                                   f"shape [{horizon}, {rows}]; all arrays must share")):
        puffadv.gae(r, np.vstack([v, v[:1]]), t, last_value=lv, time_axis=0)
    with pytest.raises(ValueError, match=re.escape(f"advantages has shape [{rows}, {horizon}] but rewards has "
                                                   f"shape [{horizon}, {rows}]")):
        puffadv.gae(r, v, t, last_value=lv, time_axis=-2, advantages=np.zeros((rows, horizon), np.float32))
    with pytest.raises(ValueError, match=re.escape(f"values has shape [{horizon}, {rows + 1}] but rewards has "
                                                   f"shape [{horizon}, {rows}]")):  # batch-major: unchanged
        puffadv.gae(r, np.hstack([v, v[:, :1]]), t, last_value=lv, time_axis=1)


def test_a_time_major_output_with_overlapping_elements_reports_the_callers_strides():
    # Found 2026-12-03: an output of strides (1, 0) elements in [T, B] was reported as [0, 1].
    r, v, t, lv = _time_major_case(np.random.default_rng(0))
    out = np.lib.stride_tricks.as_strided(np.zeros(32, np.float32), r.shape, (4, 0), writeable=True)
    with pytest.raises(ValueError, match=re.escape("advantages has overlapping elements (strides [1, 0])")):
        puffadv.gae(r, v, t, last_value=lv, time_axis=0, advantages=out)
    with pytest.raises(ValueError, match=re.escape("advantages has overlapping elements (strides [1, 0])")):
        puffadv.gae(r.T, v.T, t.T, last_value=lv, time_axis=1,
                    advantages=np.lib.stride_tricks.as_strided(out, r.T.shape, (4, 0), writeable=True))


def test_a_one_d_output_reports_one_stride():
    # Found 2026-12-03: a [B] sums output with a zero stride was reported as "(strides [0, 1])".
    r, v, t, lv = _time_major_case(np.random.default_rng(1))
    sums = np.lib.stride_tricks.as_strided(np.zeros(4, np.float32), (4,), (0,), writeable=True)
    for axis, args in ((1, (r.T, v.T, t.T)), (0, (r, v, t))):
        with pytest.raises(ValueError, match=re.escape("sums has overlapping elements (strides [0]); ")):
            puffadv.gae(*args, last_value=lv, time_axis=axis, sums=sums)


@pytest.mark.parametrize("time_axis", [2, -3, 2**40, 2**70])
def test_a_bad_time_axis_names_the_kinds_own_argument(time_axis):
    # Found 2026-12-03: episodic_cumsum's message named `rewards`, where its argument is `inputs`.
    x = np.ones((3, 5), np.float32)
    message = (f"time_axis must be 0 or -2 (time-major [T, B]) or 1 or -1 (batch-major [B, T]) for the 2-D "
               f"{{}}, got {time_axis}")
    with pytest.raises(ValueError, match=f"^{re.escape(message.format('inputs'))}$"):
        puffadv.episodic_cumsum(x, x > 2, time_axis=time_axis)
    with pytest.raises(ValueError, match=f"^{re.escape(message.format('inputs'))}$"):
        puffadv.linear_recurrence(x, x, reverse=False, time_axis=time_axis)
    with pytest.raises(ValueError, match=f"^{re.escape(message.format('rewards'))}$"):
        puffadv.gae(x, x, x > 2, last_value=x[:, 0], time_axis=time_axis)
