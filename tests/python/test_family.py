"""The estimator family of issue 20 (discounted returns, n-step returns,
Retrace, Q(lambda), episodic sums and eligibility traces) against the float64
references in reference.py: dtypes, layouts, given and allocated outputs,
frameworks, bad input named, NaN rows kept apart."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
import reference as ref

GAMMA, LAM, C_CLIP = 0.97, 0.9, 1.3


def _sums(a):
    """The fused [B] row sums of the scanned quantity A."""
    return dict(sums=a.sum(1), abs_sums=np.abs(a).sum(1), square_sums=(a * a).sum(1))


def _discounted(e, bootstrap):
    term, trunc, kw = np.maximum(e["terminated"], e["truncated"]), None, {}
    if bootstrap == "bootstrap_values":
        term, trunc, kw = e["terminated"], e["truncated"], dict(bootstrap_values=e["bootstrap_values"])
    elif bootstrap == "last_value":
        kw = dict(last_value=e["last_value"])
    want = ref.discounted_returns(e["rewards"], term, trunc, kw.get("last_value"), kw.get("bootstrap_values"),
                                  GAMMA)
    return puffadv.discounted_returns, [e["rewards"], term, trunc], kw, dict(gamma=GAMMA), \
        dict(returns=want, **_sums(want))


def _n_step(e, n, lam=LAM):
    n = e["rewards"].shape[1] + 5 if n == "T+5" else n
    kw = dict(bootstrap_values=e["bootstrap_values"])
    want = ref.n_step_returns(e["rewards"], e["values"], e["terminated"], e["truncated"], None,
                              e["bootstrap_values"], n, GAMMA, lam)
    adv = want - e["values"]
    return puffadv.n_step_returns, [e["rewards"], e["values"], e["terminated"], e["truncated"]], kw, \
        dict(n=n, gamma=GAMMA, lambda_=lam), dict(returns=want, advantages=adv, **_sums(adv))


def _retrace(e, logs):
    pi, mu = e["target_probs"], e["behaviour_probs"]
    if logs:
        pi, mu = e["target_log_probs"], e["behaviour_log_probs"]
        kw = dict(target_log_probs=pi, behaviour_log_probs=mu)
    else:
        kw = dict(target_probs=pi, behaviour_probs=mu)
    delta, target = ref.retrace(e["rewards"], e["q_values"], e["next_values"], e["terminated"], e["truncated"],
                                pi, mu, logs, GAMMA, LAM, C_CLIP)
    return puffadv.retrace, [e["rewards"], e["q_values"], e["next_values"], e["terminated"], e["truncated"]], kw, \
        dict(gamma=GAMMA, lambda_=LAM, c_clip=C_CLIP), dict(returns=target, advantages=delta, **_sums(delta))


def _q_lambda(e, watkins):
    kw = dict(greedy=e["greedy"]) if watkins else {}
    adv, target = ref.q_lambda(e["rewards"], e["q_values"], e["next_values"], e["terminated"], e["truncated"],
                               kw.get("greedy"), GAMMA, LAM)
    return puffadv.q_lambda, [e["rewards"], e["q_values"], e["next_values"], e["terminated"], e["truncated"]], kw, \
        dict(gamma=GAMMA, lambda_=LAM), dict(returns=target, advantages=adv, **_sums(adv))


def _episodic(e, boundary, seed):
    dones = np.maximum(e["terminated"], e["truncated"])
    kw = dict(seed=e["last_value"]) if seed else {}
    want = ref.episodic_sum(e["rewards"], dones, kw.get("seed"), 1.0, boundary == "starts_at")
    return puffadv.episodic_cumsum, [e["rewards"], dones], kw, dict(boundary=boundary), dict(out=want)


def _traces(e, seed):
    dones = np.maximum(e["terminated"], e["truncated"])
    kw = dict(seed=e["last_value"]) if seed else {}
    want = ref.episodic_sum(e["rewards"], dones, kw.get("seed"), GAMMA * LAM)
    return puffadv.eligibility_traces, [e["rewards"], dones], kw, dict(gamma=GAMMA, lambda_=LAM), dict(out=want)


VARIANTS = {
    "discounted/bootstrap_values": lambda e: _discounted(e, "bootstrap_values"),
    "discounted/last_value": lambda e: _discounted(e, "last_value"),
    "discounted/no-bootstrap": lambda e: _discounted(e, None),
    "n_step/1": lambda e: _n_step(e, 1),
    "n_step/3": lambda e: _n_step(e, 3),
    "n_step/3/lambda=1": lambda e: _n_step(e, 3, 1.0),
    "n_step/T+5": lambda e: _n_step(e, "T+5"),
    "retrace/probs": lambda e: _retrace(e, False),
    "retrace/log_probs": lambda e: _retrace(e, True),
    "q_lambda/peng": lambda e: _q_lambda(e, False),
    "q_lambda/watkins": lambda e: _q_lambda(e, True),
    "episodic_cumsum/ends_at": lambda e: _episodic(e, "ends_at", False),
    "episodic_cumsum/starts_at+seed": lambda e: _episodic(e, "starts_at", True),
    "eligibility_traces": lambda e: _traces(e, False),
    "eligibility_traces+seed": lambda e: _traces(e, True),
}


def call(variant, e, put=lambda x: x, time_axis=-1, give=False, out_dtype=None, view=None):
    """Runs `variant` on the episodes `e` ([B, T] NumPy arrays) moved by `put`:
    time-major [T, B] arrays for time_axis 0, `view` applied to every 2-D array.
    Outputs are allocated, or (give) NaN-filled arrays of out_dtype. Returns
    ({output: NumPy [B, T] or [B] result}, want, {output: the given array})."""
    fn, args, kw, params, want = VARIANTS[variant](e)
    layout = (lambda x: x) if time_axis == -1 else (lambda x: np.ascontiguousarray(x.T))
    view = view or (lambda x: x)
    move = lambda x: None if x is None else put(view(layout(x))) if np.ndim(x) == 2 else put(x)
    rows, horizon = e["rewards"].shape
    out_dtype = out_dtype or e["rewards"].dtype
    given = {}
    for name in want:
        if give:
            shape = (rows,) if name.endswith("sums") else (rows, horizon) if time_axis == -1 else (horizon, rows)
            sums_dtype = np.float64 if out_dtype == np.float64 else np.float32
            given[name] = put(np.full(shape, np.nan, sums_dtype if name.endswith("sums") else out_dtype))
    requests = {name: given.get(name, True) for name in want if name != "out"}
    if "out" in given:
        requests["out"] = given["out"]
    result = fn(*map(move, args), **{k: move(v) for k, v in kw.items()}, **params, **requests,
                time_axis=time_axis)
    got = {}
    for name in want:
        x = result if name == "out" else getattr(result, name)
        if name in given:
            assert x is given[name], f"{name} was given but another array came back"
        if hasattr(x, "cpu"):  # torch
            x = x.double().cpu()
        elif type(x).__module__.startswith("cupy"):  # np.asarray refuses device arrays
            x = x.get()
        x = np.asarray(x, np.float64)
        got[name] = x if x.ndim == 1 or time_axis == -1 else x.T
    return got, want, given


_SUMMED = {"sums": lambda a: a, "abs_sums": np.abs, "square_sums": np.square}  # each sum's terms from A


def assert_matches(got, want, tol):
    summed = want.get("advantages", want.get("returns"))  # the scanned quantity A of _sums
    for name, expected in want.items():
        assert got[name].shape == expected.shape, name
        if name in _SUMMED:  # relative_error of a sum is ill-conditioned where its terms cancel: a float32
            # n-step row summing to 0.0044 missed 1e-4 with every term right (CI, 2026-12-06)
            assert ref.sums_error(got[name], _SUMMED[name](summed)) <= 10 * tol, name
        else:
            assert ref.relative_error(got[name], expected) <= tol, name


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("time_axis", [-1, 0])
@pytest.mark.parametrize("give", [False, True])
def test_matches_reference(target, rng, variant, dtype, time_axis, give):
    e = ref.random_off_policy(rng, int(rng.integers(1, 9)), int(rng.integers(2, 90)), dtype)
    got, want, _ = call(variant, e, target.put, time_axis, give)
    assert_matches(got, want, ref.TOLERANCE[np.dtype(dtype)])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_horizons_of_one_and_many_rows(rng, variant, dtype):
    """T = 1 (every step first and last), enough rows for several blocks and threads, and
    long [B, T] rows (tiles of 8 rows, chunks of 256 steps, a remainder of both)."""
    for rows, horizon in [(5, 1), (603, 37), (21, 700)]:
        e = ref.random_off_policy(rng, rows, horizon, dtype)
        for time_axis in (-1, 0):
            got, want, _ = call(variant, e, time_axis=time_axis)
            assert_matches(got, want, ref.TOLERANCE[np.dtype(dtype)])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("flag_dtype", [np.uint8, np.float32])
def test_strided_views_and_flag_dtypes(rng, variant, flag_dtype):
    """Sliced views of wider arrays (every stride path) and non-bool flags."""
    e = ref.random_off_policy(rng, 7, 41, np.float32)
    _, want, _ = call(variant, e)
    flags = ("terminated", "truncated", "greedy")
    e = {k: v.astype(flag_dtype) if k in flags else v for k, v in e.items()}
    wide = lambda x: np.repeat(np.repeat(x, 2, axis=0), 3, axis=1)[::2, ::3]
    got, _, _ = call(variant, e, view=wide)
    assert_matches(got, want, 1e-5)
    got, _, _ = call(variant, e, time_axis=0, view=lambda x: np.asfortranarray(x))
    assert_matches(got, want, 1e-5)


# Shapes that select each group of the CPU engine's lanes (src/cpu/engine.hpp): in [B, T] whole
# vectors of steps when the horizon is a multiple of the vector width (8 float32, 4 float64; else
# edge groups, each lane checked), in [T, B] the rows of a block in whole vectors (the rest, and
# fewer rows than a vector, an edge group). n_step_returns in [B, T] reads converted lines
# (engine_sources.hpp); n >= T and 64 < n take their own passes (n_step_returns.cpp).
KERNEL_SHAPES = {"simd": (19, 64), "simd+general": (19, 62), "general": (3, 61)}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("flag_dtype", [bool, np.uint8, "float"])
@pytest.mark.parametrize("time_axis", [-1, 0])
@pytest.mark.parametrize("kernel", KERNEL_SHAPES)
def test_simd_and_general_kernels(rng, variant, dtype, flag_dtype, time_axis, kernel):
    """Every kernel against the float64 reference, outputs given NaN-filled: [B, T] 19 x 64
    is SIMD, 19 x 62 and 3 x 61 general (62 is a multiple of neither 8 nor 4); [T, B] 19 rows
    are 16 SIMD rows and 3 general ones, 3 rows general only."""
    e = ref.random_off_policy(rng, *KERNEL_SHAPES[kernel], dtype, end_rate=0.1)
    flag = dtype if flag_dtype == "float" else flag_dtype
    e = {k: v.astype(flag) if k in ("terminated", "truncated", "greedy") else v for k, v in e.items()}
    got, want, _ = call(variant, e, time_axis=time_axis, give=True)
    assert_matches(got, want, ref.TOLERANCE[np.dtype(dtype)])


@pytest.mark.parametrize("variant", ["discounted/bootstrap_values", "retrace/probs", "q_lambda/watkins"])
@pytest.mark.parametrize("time_axis", [-1, 0])
@pytest.mark.parametrize("flag_dtype", [bool, np.float32])
def test_both_flags_are_terminated_in_every_kernel(rng, variant, time_axis, flag_dtype):
    """A step with terminated and truncated both set is terminated (Gymnasium's meaning,
    issue 33), whichever kernel meets it: 19 x 64 float32 runs SIMD in both layouts
    except for [T, B] rows 16-18. Equal to the call with truncated cleared there."""
    for row, step in [(17, 40), (5, 63), (5, 0), (12, 9)]:
        e = ref.random_off_policy(rng, 19, 64, np.float32, end_rate=0.1)
        e["terminated"][row, step] = e["truncated"][row, step] = True
        e["terminated"][18, 50] = e["truncated"][18, 50] = True
        clean = dict(e, truncated=e["truncated"] & ~e["terminated"])
        cast = lambda e: {k: v.astype(flag_dtype) if k in ("terminated", "truncated") else v for k, v in e.items()}
        got, _, _ = call(variant, cast(e), time_axis=time_axis)
        same, want, _ = call(variant, cast(clean), time_axis=time_axis)
        for name in want:
            np.testing.assert_array_equal(got[name], same[name])
        assert_matches(got, want, 1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_empty_shapes(variant):
    for rows, horizon in [(0, 5), (3, 0), (0, 0)]:
        e = ref.random_off_policy(np.random.default_rng(0), max(rows, 1), max(horizon, 1), np.float32)
        e = {k: v[:rows, :horizon] if v.ndim == 2 else v[:rows] for k, v in e.items()}
        got, want, _ = call(variant, e)
        for name in want:
            assert got[name].shape == ((rows,) if name.endswith("sums") else (rows, horizon))
            assert not np.isnan(got[name]).any()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("time_axis", [-1, 0])
@pytest.mark.parametrize("horizon", [300, 304])
def test_nan_stays_in_its_row(rng, variant, time_axis, horizon):
    """A NaN input poisons its own row (from its step on, in scan order) and nothing else,
    also inside a SIMD tile of rows and a chunk of steps (float32, 19 x 300: [B, T] general;
    19 x 304: [B, T] SIMD; [T, B] SIMD for row 9 either way)."""
    e = ref.random_off_policy(rng, 19, horizon, np.float32)
    e["rewards"][9, 260] = np.nan
    got, want, _ = call(variant, e, time_axis=time_axis)
    for name, expected in want.items():
        others = lambda x: np.delete(x, 9, axis=0)
        assert np.isnan(got[name][9] if name.endswith("sums") else got[name][9, 260]), name
        assert ref.relative_error(others(got[name]), others(expected)) <= 1e-4, name


@pytest.mark.parametrize("variant", ["retrace/probs", "q_lambda/peng", "discounted/bootstrap_values"])
def test_what_is_never_read_can_be_nan(rng, variant):
    """next_values after a termination, bootstrap_values inside an episode, the first
    step's target probability: never read, so NaN there changes nothing."""
    e = ref.random_off_policy(rng, 6, 50, np.float64)
    _, want, _ = call(variant, e)
    e["next_values"] = np.where(e["terminated"], np.nan, e["next_values"])
    last = np.zeros_like(e["truncated"])
    last[:, -1] = True
    e["bootstrap_values"] = np.where(e["truncated"] | last, e["bootstrap_values"], np.nan)
    e["target_probs"][:, 0] = np.nan
    got, _, _ = call(variant, e)
    assert_matches(got, want, 1e-12)


try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="bfloat16/float16 arrays come from torch here")


@needs_torch
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("give", [False, True])
def test_reduced_precision(rng, variant, dtype, give):
    """16-bit inputs, float32 arithmetic and (by default) float32 outputs."""
    tdtype = getattr(torch, dtype)
    e = ref.random_off_policy(rng, 5, 77, np.float32)
    rounded = lambda x: torch.from_numpy(x).to(tdtype).double().numpy() if x.dtype == np.float32 else x
    e = {k: rounded(v) for k, v in e.items()}
    put = lambda x: (lambda t: t.to(tdtype) if t.dtype == torch.float64 else t)(torch.from_numpy(np.ascontiguousarray(x)))
    got, want, given = call(variant, e, put, -1, give, out_dtype=np.float32)
    assert_matches(got, want, 1e-5)
    fn, args, kw, params, _ = VARIANTS[variant](e)
    result = fn(*(None if a is None else put(a) for a in args), **{k: put(v) for k, v in kw.items()}, **params,
                time_axis=-1)
    main = result if torch.is_tensor(result) else result.returns
    assert main.dtype == torch.float32


# ---- identities between the estimators ----

def test_identities(rng):
    e = ref.random_off_policy(rng, 5, 60, np.float64)
    r, v, term, trunc, boot = e["rewards"], e["values"], e["terminated"], e["truncated"], e["bootstrap_values"]
    td = lambda lam, values=v: puffadv.td_lambda_returns(r, values, term, trunc, bootstrap_values=boot,
                                                         gamma=GAMMA, lambda_=lam, time_axis=-1).returns
    close = lambda a, b: ref.relative_error(a, b) <= 1e-12
    # Discounted returns are TD(1) returns over zero values.
    assert close(puffadv.discounted_returns(r, term, trunc, bootstrap_values=boot, gamma=GAMMA, time_axis=-1).returns,
                 td(1.0, np.zeros_like(v)))
    # n >= T: TD(lambda) returns; n = 1: one-step targets (TD(0)).
    n_step = lambda n, lam: puffadv.n_step_returns(r, v, term, trunc, n=n, bootstrap_values=boot, gamma=GAMMA,
                                                   lambda_=lam, time_axis=-1).returns
    assert close(n_step(60, LAM), td(LAM)) and close(n_step(10**30, LAM), td(LAM))
    assert close(n_step(np.int64(1), LAM), td(0.0))
    # Watkins with every action greedy is Peng; lambda 0 is the one-step target either way.
    q = lambda **kw: puffadv.q_lambda(r, e["q_values"], e["next_values"], term, trunc, gamma=GAMMA, **{"time_axis": -1, **kw}).returns
    assert close(q(greedy=np.ones_like(term), lambda_=LAM), q(lambda_=LAM))
    assert close(q(greedy=e["greedy"], lambda_=0.0), q(lambda_=0.0))
    # Retrace with ratios all above c_clip = lambda-weighted Q(lambda) over E_pi targets: c = lambda.
    ones = np.ones_like(r)
    ret = puffadv.retrace(r, e["q_values"], e["next_values"], term, trunc, target_probs=ones, behaviour_probs=ones,
                          gamma=GAMMA, lambda_=LAM, c_clip=1.0, time_axis=-1)
    want, _ = ref.retrace(r, e["q_values"], e["next_values"], term, trunc, ones, ones, False, GAMMA, LAM, 1.0)
    assert close(ret.advantages, want)
    # Eligibility traces with gamma = lambda = 1 are the episodic cumulative sums.
    dones = term | trunc
    assert close(puffadv.eligibility_traces(r, dones, gamma=1.0, lambda_=1.0, time_axis=-1), puffadv.episodic_cumsum(r, dones, time_axis=-1))


def test_by_hand():
    r = np.array([[1.0, 2.0, 3.0, 4.0]])
    d = np.array([[False, True, False, False]])
    assert np.array_equal(puffadv.episodic_cumsum(r, d, time_axis=-1), [[1, 3, 3, 7]])
    assert np.array_equal(puffadv.episodic_cumsum(r, d, boundary="starts_at", time_axis=-1), [[1, 2, 5, 9]])
    assert np.array_equal(puffadv.episodic_cumsum(r, d, seed=np.array([10.0]), time_axis=-1), [[11, 13, 3, 7]])
    assert np.allclose(puffadv.eligibility_traces(r, d, gamma=0.5, lambda_=0.5, time_axis=-1), [[1, 2.25, 3, 4.75]])
    g = puffadv.discounted_returns(r, d, gamma=0.5, time_axis=-1).returns
    assert np.allclose(g, [[2.0, 2.0, 5.0, 4.0]])
    g = puffadv.discounted_returns(r, d, last_value=np.array([8.0]), gamma=0.5, time_axis=-1).returns
    assert np.allclose(g, [[2.0, 2.0, 3 + 0.5 * 8, 8.0]])
    v = np.array([[0.0, 10.0, 20.0, 30.0]])
    g = puffadv.n_step_returns(r, v, np.zeros_like(d), n=2, last_value=np.array([40.0]), gamma=0.5, time_axis=-1).returns
    assert np.allclose(g, [[1 + 0.5 * 2 + 0.25 * 20, 2 + 0.5 * 3 + 0.25 * 30, 3 + 0.5 * 4 + 0.25 * 40, 4 + 20]])


@pytest.fixture(scope="module")
def large_episodes():
    return ref.random_off_policy(np.random.default_rng(20), 16400, 264, np.float32)


LARGE = {  # one output of each kind of kernel, given as `out`
    "n_step": lambda a, out, **kw: puffadv.n_step_returns(
        a["rewards"], a["values"], a["terminated"], a["truncated"], n=3, bootstrap_values=a["bootstrap_values"],
        returns=out, **{"time_axis": -1, **kw}).returns,
    "retrace": lambda a, out, **kw: puffadv.retrace(
        a["rewards"], a["q_values"], a["next_values"], a["terminated"], a["truncated"], target_probs=a["target_probs"],
        behaviour_probs=a["behaviour_probs"], advantages=out, returns=False, **{"time_axis": -1, **kw}).advantages,
    "episodic_cumsum": lambda a, out, **kw: puffadv.episodic_cumsum(
        a["rewards"], a["terminated"], seed=a["last_value"], boundary="starts_at", out=out, **{"time_axis": -1, **kw}),
}


@pytest.mark.parametrize("kind", LARGE)
@pytest.mark.parametrize("time_axis", [-1, 0])
@pytest.mark.parametrize("offset", [0, 1])
def test_large_outputs_streamed_past_the_caches(large_episodes, kind, time_axis, offset):
    """Outputs of 16 MiB and more are written with streaming stores (16-byte aligned
    rows only; offset 1 takes the cached stores): the same numbers, bit for bit, as
    the call in slices of 1024 rows, whose outputs fit the caches."""
    e = large_episodes
    rows, horizon = e["rewards"].shape
    shape = (rows, horizon) if time_axis == -1 else (horizon, rows)
    big = np.full(rows * horizon + 8, np.nan, np.float32)[offset:offset + rows * horizon].reshape(shape)

    def arrays(part):
        layout = (lambda x: x[part]) if time_axis == -1 else (lambda x: np.ascontiguousarray(x[part].T))
        return {k: layout(v) if v.ndim == 2 else v[part] for k, v in e.items()}

    LARGE[kind](arrays(slice(None)), big, time_axis=time_axis)
    for start in range(0, rows, 1024):
        part = slice(start, start + 1024)
        small = LARGE[kind](arrays(part), None if kind == "episodic_cumsum" else True, time_axis=time_axis)
        np.testing.assert_array_equal(small, big[part] if time_axis == -1 else big[:, part])


def test_q_lambda_float32_error_scales_with_returns_not_next_values():
    """Peng (lambda = 1): G_0 = r_0 + gamma G_1 whatever next_values[0] is; computed as
    r - q + gamma nv + gamma (delta_1 + q_1 - nv), a next value of 1e3 costs 6e-5."""
    r, q, nv = (np.array([x], np.float32) for x in ([-0.5357, 0.3616], [-0.2188, -1.2459], [1e3, 0.0]))
    g = puffadv.q_lambda(r, q, nv, np.array([[False, True]]), gamma=0.9, lambda_=1.0, time_axis=-1).returns
    assert ref.relative_error(g, [[-0.5357 + 0.9 * 0.3616, 0.3616]]) <= 1e-6


@pytest.mark.parametrize("watkins", [False, True], ids=["peng", "watkins"])
@pytest.mark.parametrize("time_axis", [-1, 0])
def test_q_lambda_float32_keeps_returns_near_zero_beside_large_next_values(rng, watkins, time_axis):
    """next_values of +-1e3 wherever lambda_t = 1 cancels them (the trace goes on), returns
    near 0 (standard normal rewards and q_values elsewhere): float32 stays within a few
    roundings of the float64 reference on both kernels' layouts (the delta form that added
    gamma nv and took gamma lambda_t nv away again was off by 3e-5 here; now 1e-7)."""
    e = ref.random_off_policy(rng, 37, 50, np.float32)
    greedy = e["greedy"] if watkins else None
    term, trunc = e["terminated"], e["truncated"]
    lambda_t = np.ones(term.shape, bool)
    lambda_t[:, :-1] = e["greedy"][:, 1:] if watkins else True
    trace_goes_on = lambda_t & ~term & ~trunc
    trace_goes_on[:, -1] = False
    signs = np.where(rng.random(term.shape) < 0.5, -1.0, 1.0)
    nv = np.where(trace_goes_on, 1e3 * signs, rng.standard_normal(term.shape)).astype(np.float32)
    adv_want, g_want = ref.q_lambda(e["rewards"], e["q_values"], nv, term, trunc, greedy, gamma=0.9, lam=1.0)
    assert np.abs(g_want).max() < 20  # the returns are small beside the next values
    layout = (lambda x: x) if time_axis == -1 else (lambda x: np.ascontiguousarray(x.T))
    got = puffadv.q_lambda(*map(layout, (e["rewards"], e["q_values"], nv, term, trunc)),
                           greedy=None if greedy is None else layout(greedy), gamma=0.9, lambda_=1.0,
                           time_axis=time_axis)
    unlayout = (lambda x: x) if time_axis == -1 else (lambda x: x.T)
    assert ref.relative_error(unlayout(got.returns), g_want) <= 1e-6
    assert ref.relative_error(unlayout(got.advantages), adv_want) <= 1e-6


@pytest.mark.parametrize("watkins", [False, True], ids=["peng", "watkins"])
@pytest.mark.parametrize("time_axis", [-1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_q_lambda_nan_q_value_reaches_its_own_advantage_only(rng, watkins, time_axis, dtype):
    """The target G does not read q_values (rlax: lambda-returns over r, discount and
    max_a Q(s_{t+1}, a)), so a NaN in q_values[:, t] leaves every return finite and makes
    advantages[:, t] = G_t - q_t alone NaN: at the first and last steps and on both sides of
    a 256-step chunk of the [B, T] tiles (time_axis -1) and in the [T, B] blocks (0). With the
    advantages not asked for, q_values are not read at all."""
    e = ref.random_off_policy(rng, 11, 300, dtype)
    nan_steps = [0, 100, 255, 256, 299]
    q = e["q_values"].copy()
    q[:, nan_steps] = np.nan
    greedy = e["greedy"] if watkins else None
    adv_want, g_want = ref.q_lambda(e["rewards"], q, e["next_values"], e["terminated"], e["truncated"], greedy,
                                    GAMMA, LAM)
    layout = (lambda x: x) if time_axis == -1 else (lambda x: np.ascontiguousarray(x.T))
    unlayout = (lambda x: x) if time_axis == -1 else (lambda x: x.T)
    args = [layout(x) for x in (e["rewards"], q, e["next_values"], e["terminated"], e["truncated"])]
    kw = dict(greedy=None if greedy is None else layout(greedy), gamma=GAMMA, lambda_=LAM, time_axis=time_axis)
    got = puffadv.q_lambda(*args, **{"time_axis": -1, **kw})
    returns, adv = unlayout(got.returns), unlayout(got.advantages)
    assert np.isfinite(returns).all()
    assert ref.relative_error(returns, g_want) <= ref.TOLERANCE[np.dtype(dtype)]
    assert np.isnan(adv[:, nan_steps]).all()
    finite = np.delete(np.arange(300), nan_steps)
    assert np.isfinite(adv[:, finite]).all()
    assert ref.relative_error(adv[:, finite], adv_want[:, finite]) <= ref.TOLERANCE[np.dtype(dtype)]
    args[1] = np.full_like(args[1], np.nan)
    only_returns = puffadv.q_lambda(*args, **{"time_axis": -1, **kw}, advantages=False).returns
    np.testing.assert_array_equal(unlayout(only_returns), returns)


def test_n_step_returns_past_the_horizon_take_the_td_lambda_scan(rng):
    """n >= T is TD(lambda) (FAMILY.md 4) and runs as its O(T) scan: 1 x 200000 steps with
    n = 10**9 in well under a second (the n-step window costs O(T min(n, T)): minutes)."""
    import time
    e = ref.random_off_policy(rng, 1, 200_000, np.float32)
    r, v, term, trunc, boot = e["rewards"], e["values"], e["terminated"], e["truncated"], e["bootstrap_values"]
    started = time.perf_counter()
    got = puffadv.n_step_returns(r, v, term, trunc, n=10**9, bootstrap_values=boot, gamma=GAMMA, lambda_=LAM,
                                 advantages=True, time_axis=-1)
    elapsed = time.perf_counter() - started
    want = puffadv.td_lambda_returns(r, v, term, trunc, bootstrap_values=boot, gamma=GAMMA, lambda_=LAM,
                                     advantages=True, time_axis=-1)
    np.testing.assert_array_equal(got.returns, want.returns)
    np.testing.assert_array_equal(got.advantages, want.advantages)
    assert elapsed < 10, elapsed
    # n = T exactly is the same scan; the float64 reference agrees on a short row.
    e = ref.random_off_policy(rng, 3, 40, np.float64)
    args = [e[k] for k in ("rewards", "values", "terminated", "truncated")]
    want = ref.n_step_returns(*args, None, e["bootstrap_values"], 40, GAMMA, LAM)
    got = puffadv.n_step_returns(*args, n=40, bootstrap_values=e["bootstrap_values"], gamma=GAMMA, lambda_=LAM, time_axis=-1)
    assert ref.relative_error(got.returns, want) <= 1e-12


def _n_step_identity(r, v, term, trunc, boot, n, gamma, lam):
    """G^(n) in float64 from the TD(lambda) return Lambda (puffadv's, float64):
    G_t = Lambda_t - (gamma lam)^(n-1) (Lambda - W1)_{t+n-1} where no step in [t, t+n-2] is
    done and t + n - 1 < T; Lambda_t where the window is cut. W1 = r + gamma (1 - term) V'."""
    r, v, boot = (np.asarray(x, np.float64) for x in (r, v, boot))
    lam_ret = puffadv.td_lambda_returns(r, v, term, trunc, bootstrap_values=boot, gamma=gamma,
                                        lambda_=lam, time_axis=-1).returns
    rows, horizon = r.shape
    nv = np.concatenate([v[:, 1:], boot[:, -1:]], axis=1)
    nv = np.where(trunc, boot, nv)
    w1 = r + np.where(term, 0.0, gamma * nv)
    steps = np.arange(horizon)
    out = np.empty_like(r)
    for b in range(rows):
        done_at = np.where(term[b] | trunc[b], steps, horizon)
        next_done = np.minimum.accumulate(done_at[::-1])[::-1]
        far = steps + n - 1
        whole = (far < horizon) & (next_done >= far)
        d = (lam_ret[b] - w1[b])[np.minimum(far, horizon - 1)]
        out[b] = lam_ret[b] - np.where(whole, (gamma * lam) ** (n - 1) * d, 0.0)
    return out


@pytest.mark.parametrize("n", [65, 100, "T-1", "T-2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("time_axis", [-1, 0])
@pytest.mark.parametrize("end_rate", [0.002, 0.03])
def test_n_step_long_windows_match_the_reference(rng, n, dtype, time_axis, end_rate):
    """64 < n < T takes one O(T) pass per row (the TD(lambda) return less the part past the
    window); rare ends leave most windows whole, frequent ones cut them. Given outputs are
    NaN-filled first; the bootstrap as bootstrap_values with truncations, or last_value."""
    rows, horizon = int(rng.integers(1, 6)), int(rng.integers(130, 260))
    e = ref.random_off_policy(rng, rows, horizon, dtype, end_rate)
    n = {"T-1": horizon - 1, "T-2": horizon - 2}.get(n, n)
    layout = (lambda x: x) if time_axis == -1 else (lambda x: np.ascontiguousarray(x.T))
    unlayout = (lambda x: x) if time_axis == -1 else (lambda x: x.T)
    for bootstrap in ("bootstrap_values", "last_value"):
        trunc = e["truncated"] if bootstrap == "bootstrap_values" else None
        kw = {bootstrap: e[bootstrap] if bootstrap == "last_value" else layout(e[bootstrap])}
        want = ref.n_step_returns(e["rewards"], e["values"], e["terminated"], trunc,
                                  kw.get("last_value"), e["bootstrap_values"] if trunc is not None else None,
                                  n, GAMMA, LAM)
        adv_want = want - e["values"].astype(np.float64)
        shape = layout(e["rewards"]).shape
        out = {k: np.full(shape, np.nan, dtype) for k in ("returns", "advantages")}
        sums = np.full(rows, np.nan, np.float64 if dtype == np.float64 else np.float32)
        got = puffadv.n_step_returns(layout(e["rewards"]), layout(e["values"]), layout(e["terminated"]),
                                     None if trunc is None else layout(trunc), **kw, n=n, gamma=GAMMA,
                                     lambda_=LAM, time_axis=time_axis, sums=sums, **out)
        tol = ref.TOLERANCE[np.dtype(dtype)]
        assert ref.relative_error(unlayout(got.returns), want) <= tol
        assert ref.relative_error(unlayout(got.advantages), adv_want) <= tol
        assert ref.sums_error(got.sums, adv_want) <= 10 * tol


def test_n_step_long_window_on_a_long_row_is_linear_in_time(rng):
    """1 x 200000 steps, n = T - 1 and n = T / 2 (the window code: O(T n), minutes) in a few
    seconds; equal to the identity in float64 (test-side, above) with gamma lambda near 1, where
    (gamma lambda)^(n-1) ~ 0.37 and the part past the window matters. Ends only at a few steps."""
    import time
    horizon = 200_000
    e = ref.random_off_policy(rng, 1, horizon, np.float64, end_rate=0.0)
    term, trunc = np.zeros((1, horizon), bool), np.zeros((1, horizon), bool)
    term[0, 70_000], trunc[0, 150_000], term[0, 0] = True, True, True
    r, v, boot = e["rewards"], e["values"], e["bootstrap_values"]
    gamma, lam = 1.0, 1.0 - 1e-5
    for n in (horizon - 1, horizon // 2, 65_000):
        started = time.perf_counter()
        got = puffadv.n_step_returns(r, v, term, trunc, n=n, bootstrap_values=boot, gamma=gamma, lambda_=lam,
                                     advantages=True, time_axis=-1)
        elapsed = time.perf_counter() - started
        assert elapsed < 5, (n, elapsed)
        want = _n_step_identity(r, v, term, trunc, boot, n, gamma, lam)
        assert ref.relative_error(got.returns, want) <= 1e-12, n
        assert ref.relative_error(got.advantages, want - v) <= 1e-12, n
    # The identity itself against the O(T n) reference, on shorter rows.
    e = ref.random_off_policy(rng, 3, 300, np.float64, end_rate=0.004)
    args = [e[k] for k in ("rewards", "values", "terminated", "truncated")]
    for n in (65, 150, 298, 299):
        want = ref.n_step_returns(*args, None, e["bootstrap_values"], n, GAMMA, LAM)
        assert ref.relative_error(_n_step_identity(*args, e["bootstrap_values"], n, GAMMA, LAM), want) <= 1e-13


@pytest.mark.parametrize("time_axis", [-1, 0])
def test_n_step_long_windows_nan_stays_in_its_row_and_both_flags_are_terminated(rng, time_axis):
    layout = (lambda x: x) if time_axis == -1 else (lambda x: np.ascontiguousarray(x.T))
    unlayout = (lambda x: x) if time_axis == -1 else (lambda x: x.T)
    e = ref.random_off_policy(rng, 4, 300, np.float32, end_rate=0.01)
    args = [e[k].copy() for k in ("rewards", "values", "terminated", "truncated")]
    args[0][2, 123] = np.nan
    got = puffadv.n_step_returns(*map(layout, args), n=100, bootstrap_values=layout(e["bootstrap_values"]),
                                 gamma=GAMMA, lambda_=LAM, time_axis=time_axis).returns
    got = unlayout(got)
    want = ref.n_step_returns(*args, None, e["bootstrap_values"], 100, GAMMA, LAM)
    others = [0, 1, 3]
    assert np.isfinite(got[others]).all()
    assert ref.relative_error(got[others], want[others]) <= ref.TOLERANCE[np.dtype(np.float32)]
    assert np.isnan(got[2, 123])
    args[0][2, 123] = 0.0
    args[2][1, 200], args[3][1, 200] = True, True  # terminated (issue 33): its bootstrap is never read
    boot = e["bootstrap_values"].copy()
    boot[1, 200] = np.nan
    got = unlayout(puffadv.n_step_returns(*map(layout, args), n=100, bootstrap_values=layout(boot), gamma=GAMMA,
                                          lambda_=LAM, time_axis=time_axis).returns)
    args[3][1, 200] = False
    want = ref.n_step_returns(*args, None, e["bootstrap_values"], 100, GAMMA, LAM)
    assert np.isfinite(got).all()
    assert ref.relative_error(got, want) <= ref.TOLERANCE[np.dtype(np.float32)]
