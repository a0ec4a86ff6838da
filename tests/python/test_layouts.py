"""Issue 33: no layout is guessed, and any number of leading batch axes.

time_axis is required on every surface (the NumPy-style functions on every
framework, puffadv.jax, torch.ops.puffadv), with one TypeError naming both
layouts; [*B, T], [*B, T, 1], [T, *B] and [T, *B, 1] arrays give the flattened
call's numbers in the caller's shape, read and written through views."""
from __future__ import annotations

import math

import numpy as np
import pytest

import puffadv
from puffadv import _core, _engine
from puffadv._estimators import ESTIMATORS

import reference as ref
from estimator_calls import call_arguments, every_output_requested, named_outputs

try:
    import torch
except ImportError:
    torch = None


MESSAGE_START = "needs time_axis, which has no default: time_axis=0 for time-major arrays"


def _expected_message(function):
    return _core.time_axis_required_message(function)


@pytest.mark.parametrize("function", sorted(ESTIMATORS))
def test_missing_time_axis_is_a_type_error_naming_both_layouts(rng, function):
    e = ref.random_off_policy(rng, 3, 5)
    args, kw, scalars = call_arguments(function, e)
    want = _expected_message(function)
    assert want.startswith(f"{function}() {MESSAGE_START}") and "[B, T]" in want and "[T, B]" in want
    with pytest.raises(TypeError) as numpy_error:
        getattr(puffadv, function)(*args, **kw, **scalars)
    assert str(numpy_error.value) == want
    if torch is not None:
        t = lambda x: torch.from_numpy(np.ascontiguousarray(x))
        with pytest.raises(TypeError) as torch_error:
            getattr(puffadv, function)(*map(t, args), **{k: t(v) for k, v in kw.items()}, **scalars)
        assert str(torch_error.value) == want
    # Square arrays: the case the old default read silently either way.
    square = ref.random_off_policy(rng, 6, 6)
    args, kw, scalars = call_arguments(function, square)
    with pytest.raises(TypeError, match=r"needs time_axis"):
        getattr(puffadv, function)(*args, **kw, **scalars)


@pytest.mark.parametrize("function", sorted(ESTIMATORS))
def test_missing_time_axis_in_jax(rng, function):
    pjax = pytest.importorskip("puffadv.jax")
    e = ref.random_off_policy(rng, 3, 5)
    args, kw, scalars = call_arguments(function, e)
    with pytest.raises(TypeError) as error:
        getattr(pjax, function)(*args, **kw, **scalars)
    assert str(error.value) == _expected_message(function)


@pytest.mark.skipif(torch is None, reason="torch")
@pytest.mark.parametrize("function", sorted(ESTIMATORS))
def test_missing_time_axis_in_the_torch_operators(rng, function):
    import puffadv.torch  # noqa: F401  (loads torch.ops.puffadv)
    op = getattr(torch.ops.puffadv, function)
    e = ref.random_off_policy(rng, 3, 5)
    t = lambda x: torch.from_numpy(np.ascontiguousarray(x))
    arrays = {"rewards": t(e["rewards"]), "inputs": t(e["rewards"]), "values": t(e["values"]),
              "q_values": t(e["q_values"]), "next_values": t(e["next_values"]), "terminated": t(e["terminated"]),
              "dones": t(e["terminated"]), "last_value": t(e["last_value"]), "gamma": 0.9, "lambda_": 0.9,
              "target_probs": t(e["target_probs"]), "behaviour_probs": t(e["behaviour_probs"])}
    names = [a.name for a in op.default._schema.arguments]
    # next_values is an optional argument of the value family's operators (issue 29), required of retrace's
    required = {n: arrays[n] for n in names if n in arrays and n not in ("last_value",)
                and (n != "next_values" or function in ("retrace", "q_lambda"))}
    if "last_value" in names and function in ("gae", "td_lambda_returns", "vtrace", "n_step_returns"):
        required["last_value"] = arrays["last_value"]
    with pytest.raises(TypeError) as error:
        op(**required)
    assert str(error.value) == _expected_message(function)
    op(**required, time_axis=-1)  # and with it, the call runs


# ---- leading batch axes ----

BATCH = (3, 2)  # *B
HORIZON = 7


def _forms():
    """(name, time_axis, to_form, from_form): a [B, T] array (B = prod(BATCH)) in each layout."""
    b = BATCH
    return {
        "[*B, T]": (-1, lambda x: x.reshape(*b, HORIZON)),
        "[*B, T, 1]": (-2, lambda x: x.reshape(*b, HORIZON, 1)),
        "[T, *B]": (0, lambda x: np.ascontiguousarray(x.T).reshape(HORIZON, *b)),
        "[T, *B, 1]": (0, lambda x: np.ascontiguousarray(x.T).reshape(HORIZON, *b, 1)),
    }


def _per_row(x):
    return x.reshape(BATCH)


@pytest.mark.parametrize("form", list(_forms()))
@pytest.mark.parametrize("function", sorted(ESTIMATORS))
def test_leading_batch_axes_equal_the_flattened_call(rng, form, function, target):
    time_axis, shaped = _forms()[form]
    e = ref.random_off_policy(rng, math.prod(BATCH), HORIZON)
    args, kw, scalars = call_arguments(function, e)
    fn = getattr(puffadv, function)
    requests = every_output_requested(function)
    if requests:
        requests.update(sums=True, abs_sums=True)
    # The flattened call in the same orientation (the time-major traversal rounds its own way),
    # on the same target: a GPU kernel and the CPU's may round differently, the same kernel may not.
    flat_form = (lambda x: x) if time_axis != 0 else (lambda x: x if x.ndim == 1 else np.ascontiguousarray(x.T))
    flat = lambda x: target.put(flat_form(x))
    want = named_outputs(fn(*map(flat, args), **{k: flat(v) for k, v in kw.items()}, **scalars, **requests,
                       time_axis=-1 if time_axis != 0 else 0))
    want = {k: target.get(x) if k.endswith("sums") else flat_form(target.get(x)) for k, x in want.items()}
    move = lambda x: target.put(_per_row(x) if x.ndim == 1 else shaped(x))
    got = named_outputs(fn(*map(move, args), **{k: move(v) for k, v in kw.items()}, **scalars, **requests,
                      time_axis=time_axis))
    assert set(got) == set(want)
    shape = shaped(e["rewards"]).shape
    for name, x in got.items():
        x = target.get(x)
        if name.endswith("sums"):  # the rewards' shape without the time axis
            assert x.shape == tuple(n for k, n in enumerate(shape) if k != time_axis % len(shape)), name
            np.testing.assert_array_equal(x.reshape(-1), want[name])
        else:
            assert x.shape == shape, name
            flat = x.reshape(HORIZON, -1).T if time_axis == 0 else x.reshape(-1, HORIZON)
            np.testing.assert_array_equal(flat, want[name])


@pytest.mark.parametrize("last_shape", ["[B]", "[B, 1]", "[1, B]"])
@pytest.mark.parametrize("time_axis", [-1, 0])
def test_last_value_of_b_b1_or_1b(rng, last_shape, time_axis, target):
    e = ref.random_episodes(rng, 5, 9)
    lay = (lambda x: x) if time_axis == -1 else (lambda x: np.ascontiguousarray(x.T))
    want = puffadv.gae(*(target.put(lay(e[k])) for k in ("rewards", "values", "terminated")),
                       last_value=target.put(e["last_value"]), time_axis=time_axis)  # same target: same rounding
    last = {"[B]": e["last_value"], "[B, 1]": e["last_value"][:, None], "[1, B]": e["last_value"][None, :]}
    got = puffadv.gae(*(target.put(lay(e[k])) for k in ("rewards", "values", "terminated")),
                      last_value=target.put(last[last_shape]), time_axis=time_axis)
    np.testing.assert_array_equal(target.get(got.advantages), target.get(want.advantages))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("rows", [1, 4, 15, 16, 17])
@pytest.mark.parametrize("function", sorted(ESTIMATORS))
def test_few_time_major_rows_give_the_batch_major_numbers(rng, function, rows, dtype):
    """Time-major calls of few rows (SB3's and CleanRL's few environments): float32 and
    float64 calls of 4, 15, 16 and 17 rows are walked interleaved (src/cpu/engine_run.hpp,
    interleaved_rows_of; test_interleaved_rows.py), float16 ones of fewer than 16 rows
    along time through lines gathered from the strided rows (too_few_rows_across), of 16
    and more across rows. Every path gives the batch-major call's numbers, episode ends at
    the first and last steps included, every output asked for."""
    e = ref.random_off_policy(rng, rows, 300, dtype)
    args, kw, scalars = call_arguments(function, e)
    fn = getattr(puffadv, function)
    requests = every_output_requested(function)
    want = named_outputs(fn(*args, **kw, **scalars, **requests, time_axis=-1))
    time_major = lambda x: x if x.ndim == 1 else np.ascontiguousarray(x.T)
    poisoned = {name: np.full((300, rows), np.nan, dtype=x.dtype) for name, x in want.items() if name != "out"}
    got = named_outputs(fn(*map(time_major, args), **{k: time_major(v) for k, v in kw.items()}, **scalars,
                      **(poisoned or requests), time_axis=0))
    assert set(got) == set(want)
    tolerance = {np.float32: 1e-5, np.float64: 1e-12, np.float16: 1e-5}[dtype]  # float16: float32 arithmetic
    for name, x in got.items():
        assert x.shape == (300, rows), name
        assert ref.relative_error(np.asarray(x).T, want[name]) <= tolerance, name
    if function == "gae":  # and the float64 reference
        a, _ = ref.standard_estimate("gae", *(e[k] for k in ("rewards", "values", "terminated", "truncated")),
                                     bootstrap_values=e["bootstrap_values"], importance=e["importance"])
        assert ref.relative_error(np.asarray(got["advantages"]).T, a) <= (1e-4 if dtype != np.float64 else 1e-12)


def _capture(monkeypatch) -> list:
    """The arrays each call hands the core (its one entry), recorded."""
    seen, real = [], _engine._ONE_ENTRY

    def entry(kind, arrays, **options):
        seen.append(dict(arrays))
        return real(kind, arrays, **options)
    monkeypatch.setattr(_engine, "_ONE_ENTRY", entry)
    return seen


@pytest.mark.skipif(torch is None, reason="torch")
@pytest.mark.parametrize("time_axis", [-1, -2, 0])
def test_views_not_copies(rng, monkeypatch, time_axis):
    """Inputs reach the core as views of the caller's memory; given outputs are
    written in place, in the caller's shape."""
    e = ref.random_episodes(rng, 6, 8)
    form = {-1: lambda x: x.reshape(3, 2, 8), -2: lambda x: x.reshape(3, 2, 8, 1),
            0: lambda x: np.ascontiguousarray(x.T).reshape(8, 3, 2)}[time_axis]
    r, v, d = (torch.from_numpy(form(e[k])) for k in ("rewards", "values", "terminated"))
    last = torch.from_numpy(e["last_value"].reshape(3, 2, 1))
    adv, ret = torch.full_like(r, float("nan")), torch.full_like(r, float("nan"))
    sums = torch.full((3, 2), float("nan"))
    seen = _capture(monkeypatch)
    out = puffadv.gae(r, v, d, last_value=last, advantages=adv, returns=ret, sums=sums, time_axis=time_axis)
    assert out.advantages is adv and out.returns is ret and out.sums is sums
    (arrays,) = seen
    for role, x in (("rewards", r), ("values", v), ("terminated", d), ("last_value", last), ("advantages", adv),
                    ("returns", ret), ("sums", sums)):
        assert arrays[role].data_ptr() == x.data_ptr(), role
        assert arrays[role].ndim == (1 if role in ("last_value", "sums") else 2), role
    want = puffadv.gae(e["rewards"], e["values"], e["terminated"], last_value=e["last_value"], sums=True,
                       time_axis=-1)
    back = (lambda x: x.numpy().reshape(8, 6).T) if time_axis == 0 else (lambda x: x.numpy().reshape(6, 8))
    np.testing.assert_allclose(back(adv), want.advantages, rtol=1e-5, atol=1e-5)  # time-major rounds its way
    np.testing.assert_allclose(sums.numpy().reshape(6), want.sums, rtol=1e-5, atol=1e-5)


def test_numpy_views_not_copies(rng, monkeypatch):
    e = ref.random_episodes(rng, 6, 8)
    r, v, d = (np.ascontiguousarray(e[k].T).reshape(8, 3, 2) for k in ("rewards", "values", "terminated"))
    seen = _capture(monkeypatch)
    puffadv.gae(r, v, d, last_value=e["last_value"].reshape(3, 2), time_axis=0)
    (arrays,) = seen
    for role, x in (("rewards", r), ("values", v), ("terminated", d)):
        assert np.shares_memory(arrays[role], x) and arrays[role].shape == (8, 6), role


def test_batch_axes_that_do_not_collapse_are_a_clear_error(rng):
    e = ref.random_episodes(rng, 8, 12)
    wide = lambda x: x.reshape(4, 2, 12)[:, :1, :]  # [4, 1, 12]: collapses (an axis of 1)
    puffadv.gae(*(wide(e[k]) for k in ("rewards", "values", "terminated")), last_value=np.zeros((4, 1), np.float32),
                time_axis=-1)
    every_other = lambda x: x.reshape(2, 4, 12)[:, ::2, :]  # [2, 2, 12]: rows one stride apart, a view
    puffadv.gae(*(every_other(e[k]) for k in ("rewards", "values", "terminated")),
                last_value=np.zeros(4, np.float32), time_axis=-1)
    gapped = lambda x: x.reshape(2, 4, 12)[:, :3, :]  # [2, 3, 12]: a gap after every third row
    with pytest.raises(ValueError, match=r"^rewards \(\[2, 3, 12\]\) cannot be read as \[6, 12\] without a copy"):
        puffadv.gae(*(gapped(e[k]) for k in ("rewards", "values", "terminated")),
                    last_value=np.zeros(6, np.float32), time_axis=-1)


def test_bad_time_axis_for_more_axes(rng):
    x = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match=r"^time_axis must name an axis of the 3-D rewards \[2, 3, 4\]"):
        puffadv.gae(x, x, x > 0, last_value=np.zeros(6, np.float32), time_axis=3)
    with pytest.raises(ValueError, match=r"^time_axis=1 of the 3-D rewards \[2, 3, 4\]: the time axis must be"):
        puffadv.gae(x, x, x > 0, last_value=np.zeros(6, np.float32), time_axis=1)
    with pytest.raises(ValueError, match=r"^values has shape \[2, 3, 1\], but rewards has \[2, 3, 4\]"):
        puffadv.gae(x, x[..., :1], x > 0, last_value=np.zeros(6, np.float32), time_axis=-1)


@pytest.mark.parametrize("form", list(_forms()))
def test_jax_leading_batch_axes(rng, form):
    pjax = pytest.importorskip("puffadv.jax")
    time_axis, shaped = _forms()[form]
    e = ref.random_episodes(rng, math.prod(BATCH), HORIZON)
    want = puffadv.gae(e["rewards"], e["values"], e["terminated"], last_value=e["last_value"], time_axis=-1)
    got = pjax.gae(*(shaped(e[k]) for k in ("rewards", "values", "terminated")),
                   last_value=e["last_value"].reshape(*BATCH, 1), time_axis=time_axis)
    adv = np.asarray(got.advantages)
    assert adv.shape == shaped(e["rewards"]).shape
    flat = adv.reshape(HORIZON, -1).T if time_axis == 0 else adv.reshape(-1, HORIZON)
    np.testing.assert_allclose(flat, want.advantages, rtol=1e-6, atol=1e-6)
