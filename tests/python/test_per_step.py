"""Per-step gamma and lambda (issue 29): every estimator takes gamma and its lambda
as a scalar or as an array of the rewards' shape, gamma_t and lambda_t read at
step t (docs/semantics.md). Against the float64 references (reference.py) on
fresh random inputs with episode ends at the first and last steps: dtypes, both
time layouts, strided views, every CPU path (the engine on the caller's arrays,
dense copies for 16-bit floats, odd strides and log-probabilities, n-step
windows), NaN isolation, named errors, the torch operators and puffadv.jax."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
import reference as ref

C_CLIP = 1.3


def _steps(rng, shape, low=0.0):
    return rng.uniform(low, 1.0, shape)


def _case(name, e, g, lam):
    """(function, positional arrays, keyword arrays, scalars, wanted outputs by name) of
    one estimator with per-step gamma `g` and lambda `lam` (float64 arrays or floats)."""
    r, v, term, trunc, boot = e["rewards"], e["values"], e["terminated"], e["truncated"], e["bootstrap_values"]
    if name in ("gae", "td_lambda_returns", "vtrace"):
        kind = {"gae": "gae", "td_lambda_returns": "td_lambda", "vtrace": "vtrace"}[name]
        a, ret = ref.standard_estimate(kind, r, v, term, trunc, None, boot, e["importance"], g, lam, 1.1, C_CLIP,
                                       0.9)
        lam_name = "gae_lambda" if name == "gae" else "lambda_"
        scalars = dict(gamma=g, rho_clip=1.1, c_clip=C_CLIP, **{lam_name: lam})
        if name == "vtrace":
            scalars["rho_pg_clip"] = 0.9
            want = dict(vs=ret, pg_advantages=a)
        else:
            want = dict(advantages=a, returns=ret)
        outputs = dict(advantages=True) if name == "td_lambda_returns" else {}
        return getattr(puffadv, name), [r, v, term, trunc], \
            dict(bootstrap_values=boot, importance=e["importance"], **outputs), scalars, want
    if name == "discounted_returns":
        want = ref.discounted_returns(r, term, trunc, None, boot, g)
        return puffadv.discounted_returns, [r, term, trunc], dict(bootstrap_values=boot), dict(gamma=g), \
            dict(returns=want)
    if name.startswith("n_step_returns"):
        n = int(name.split("/")[1]) if "/" in name else 3
        n = r.shape[1] + 2 if n == 0 else n
        want = ref.n_step_returns(r, v, term, trunc, None, boot, n, g, lam)
        return puffadv.n_step_returns, [r, v, term, trunc], dict(bootstrap_values=boot, advantages=True), \
            dict(n=n, gamma=g, lambda_=lam), dict(returns=want, advantages=want - v)
    q, nv = e["q_values"], e["next_values"]
    if name.startswith("retrace"):
        logs = name.endswith("logs")
        pi, mu = (e["target_log_probs"], e["behaviour_log_probs"]) if logs else (e["target_probs"],
                                                                                  e["behaviour_probs"])
        delta, target = ref.retrace(r, q, nv, term, trunc, pi, mu, logs, g, lam, C_CLIP)
        kw = dict(target_log_probs=pi, behaviour_log_probs=mu) if logs else dict(target_probs=pi, behaviour_probs=mu)
        return puffadv.retrace, [r, q, nv, term, trunc], kw, dict(gamma=g, lambda_=lam, c_clip=C_CLIP), \
            dict(returns=target, advantages=delta)
    if name.startswith("q_lambda"):
        kw = dict(greedy=e["greedy"]) if name.endswith("watkins") else {}
        adv, target = ref.q_lambda(r, q, nv, term, trunc, kw.get("greedy"), g, lam)
        return puffadv.q_lambda, [r, q, nv, term, trunc], kw, dict(gamma=g, lambda_=lam), \
            dict(returns=target, advantages=adv)
    assert name == "eligibility_traces"
    dones = np.maximum(term, trunc)
    want = ref.episodic_sum(r, dones, e["last_value"], np.asarray(g) * np.asarray(lam))
    return puffadv.eligibility_traces, [r, dones], dict(seed=e["last_value"]), dict(gamma=g, lambda_=lam), \
        dict(out=want)


NAMES = ["gae", "td_lambda_returns", "vtrace", "discounted_returns", "n_step_returns", "n_step_returns/1",
         "n_step_returns/0", "retrace", "retrace/logs", "q_lambda", "q_lambda/watkins", "eligibility_traces"]
TOLERANCE = {np.float32: 2e-5, np.float64: 1e-11}


def _layout(x, time_major, strided):
    """x ([B, T] or [B]) in the layout asked for: [T, B] when time_major (a transposed
    copy), and a strided view (every other element of a larger array) when strided."""
    if x is None or not isinstance(x, np.ndarray) or x.ndim != 2:
        return x
    y = np.ascontiguousarray(x.T) if time_major else x
    if strided:
        big = np.zeros((y.shape[0], 2 * y.shape[1]), y.dtype)
        big[:, ::2] = y
        y = big[:, ::2]
    return y


def _result(out, name):
    return out if not isinstance(out, tuple) else getattr(out, name)


def _check(name, dtype, time_major, strided, which, rng, flags=np.bool_, extra=None):
    rows, horizon = 5, 11
    e = ref.random_off_policy(rng, rows, horizon, dtype)
    e["terminated"], e["truncated"] = e["terminated"].astype(flags), e["truncated"].astype(flags)
    g = _steps(rng, (rows, horizon)).astype(dtype) if which != "lambda" else 0.95
    lam = _steps(rng, (rows, horizon)).astype(dtype) if which != "gamma" else 0.8
    if name == "discounted_returns" and which == "lambda":
        pytest.skip("discounted_returns takes no lambda")
    function, args, kw, scalars, want = _case(name, e, g, lam)
    f = lambda x: _layout(x, time_major, strided)
    got = function(*[f(a) for a in args], **{k: f(x) for k, x in kw.items()},
                   **{k: f(x) for k, x in scalars.items()}, time_axis=0 if time_major else -1, **(extra or {}))
    tolerance = TOLERANCE.get(dtype, 2e-5)
    for output, expected in want.items():
        out = _result(got, output)
        out = out.T if time_major else out
        assert ref.relative_error(out, expected) <= tolerance, (name, output)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("which", ["both", "gamma", "lambda"])
def test_per_step_matches_reference(name, dtype, time_major, which):
    _check(name, dtype, time_major, False, which, np.random.default_rng(hash((name, which)) % 2**32))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("flags", [np.bool_, np.float32])
def test_per_step_strided_views_and_flag_types(name, time_major, flags):
    # Strided: the dense copies (per_step_dense.cpp); float flags: the engine reads the floats' type.
    _check(name, np.float32, time_major, True, "both", np.random.default_rng(7), flags)


@pytest.mark.parametrize("name", ["gae", "vtrace", "retrace", "q_lambda/watkins", "n_step_returns",
                                  "eligibility_traces"])
def test_per_step_16_bit_floats(name):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    rows, horizon = 4, 9
    e = ref.random_off_policy(rng, rows, horizon, np.float64)
    g, lam = _steps(rng, (rows, horizon)), _steps(rng, (rows, horizon))
    function, args, kw, scalars, want = _case(name, e, g, lam)
    to = lambda x: x if not isinstance(x, np.ndarray) else \
        torch.from_numpy(x).to(torch.bfloat16) if x.dtype == np.float64 else torch.from_numpy(x)
    # The reference reads what bfloat16 holds.
    rounded = lambda x: x if not isinstance(x, np.ndarray) or x.dtype != np.float64 else \
        torch.from_numpy(x).to(torch.bfloat16).double().numpy()
    e16 = {k: rounded(x) for k, x in e.items()}
    _, _, _, _, want = _case(name, e16, rounded(g), rounded(lam))
    got = function(*[to(a) for a in args], **{k: to(x) for k, x in kw.items()},
                   **{k: to(x) for k, x in scalars.items()}, time_axis=-1)
    for output, expected in want.items():
        out = _result(got, output)
        assert out.dtype == torch.float32
        assert ref.relative_error(out.numpy(), expected) <= 1e-5, (name, output)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("time_major", [False, True])
def test_constant_per_step_arrays_equal_the_scalars_bit_for_bit(name, dtype, time_major):
    rng = np.random.default_rng(11)
    rows, horizon = 6, 40
    e = ref.random_off_policy(rng, rows, horizon, dtype)
    g, lam = dtype(0.93), dtype(0.7)
    function, args, kw, scalars, want = _case(name, e, float(g), float(lam))
    f = lambda x: _layout(x, time_major, False)
    axis = 0 if time_major else -1
    plain = function(*[f(a) for a in args], **{k: f(x) for k, x in kw.items()}, **scalars, time_axis=axis)
    arrays = {k: (np.full(e["rewards"].shape, x, dtype) if k in ("gamma", "gae_lambda", "lambda_") else x)
              for k, x in scalars.items()}
    stepped = function(*[f(a) for a in args], **{k: f(x) for k, x in kw.items()},
                       **{k: f(x) for k, x in arrays.items()}, time_axis=axis)
    for output in want:
        a, b = _result(plain, output), _result(stepped, output)
        if (name.startswith("n_step_returns") and name != "n_step_returns/0") or name == "retrace/logs":
            # Their scalar forms take the general kernels, the per-step ones their own loop or dense
            # copies (per_step_dense.cpp): rounding may differ.
            assert ref.relative_error(b, a) <= (1e-5 if dtype == np.float32 else 1e-12)
        else:
            np.testing.assert_array_equal(b, a)


@pytest.mark.parametrize("name", ["gae", "vtrace", "discounted_returns", "retrace", "q_lambda", "n_step_returns",
                                  "eligibility_traces"])
def test_nan_gamma_stays_in_its_episode(name):
    # A NaN gamma_t at a terminated step is dropped (the flags select, not multiply); a NaN
    # elsewhere reaches only the steps of its own row that read it, never another row.
    rng = np.random.default_rng(5)
    rows, horizon = 4, 12
    e = ref.random_off_policy(rng, rows, horizon, np.float64)
    g, lam = _steps(rng, (rows, horizon)), _steps(rng, (rows, horizon))
    g[e["terminated"]] = np.nan
    g[2, 5] = np.nan
    clean = g.copy()
    clean[np.isnan(clean)] = 0.5
    function, args, kw, scalars, _ = _case(name, e, g, lam)
    got = function(*args, **kw, **scalars, time_axis=-1)
    function, args, kw, scalars, want = _case(name, e, clean, lam)
    for output, expected in want.items():
        out = _result(got, output)
        for row in (0, 1, 3):
            if name == "eligibility_traces":  # forward: a terminated step's gamma is its decay, read
                continue
            np.testing.assert_allclose(out[row], expected[row], rtol=1e-12, atol=1e-12)
        if name != "eligibility_traces":
            assert np.isnan(out[2, 5]) and np.isfinite(out[2, 6:]).all()
        else:
            assert np.isnan(out[2, 5]) and np.isfinite(out[2, :5]).all()


def test_zero_d_arrays_are_scalars():
    rng = np.random.default_rng(2)
    e = ref.random_episodes(rng, 3, 7, np.float32)
    args = (e["rewards"], e["values"], e["terminated"])
    a = puffadv.gae(*args, last_value=e["last_value"], gamma=np.array(0.9), gae_lambda=np.float32(0.8),
                    time_axis=-1)
    b = puffadv.gae(*args, last_value=e["last_value"], gamma=0.9, gae_lambda=float(np.float32(0.8)), time_axis=-1)
    np.testing.assert_array_equal(a.advantages, b.advantages)


@pytest.mark.parametrize("function,lam_name", [(puffadv.gae, "gae_lambda"), (puffadv.td_lambda_returns, "lambda_"),
                                               (puffadv.vtrace, "lambda_")])
def test_per_step_errors_name_the_argument(function, lam_name):
    rng = np.random.default_rng(1)
    e = ref.random_episodes(rng, 3, 7, np.float32)
    args = (e["rewards"], e["values"], e["terminated"])
    kw = dict(last_value=e["last_value"], time_axis=-1)
    with pytest.raises(ValueError, match=r"^gamma has shape \[3, 6\] but rewards has shape \[3, 7\]; all arrays"):
        function(*args, **kw, gamma=np.full((3, 6), 0.9, np.float32))
    with pytest.raises(TypeError, match=rf"^{lam_name} has dtype float64 but rewards has float32"):
        function(*args, **kw, **{lam_name: np.full((3, 7), 0.9)})
    with pytest.raises(ValueError, match=rf"^{lam_name} must be a 2-D \[rows, horizon\] array, got a 1-D array"):
        function(*args, **kw, **{lam_name: np.full(3, 0.9, np.float32)})
    with pytest.raises(TypeError, match=r"^gamma must be a real number, got list"):
        function(*args, **kw, gamma=[0.9] * 7)


def test_per_step_values_are_used_as_given():
    # Not checked to lie in [0, 1] (a pass over the array; rlax and TorchRL do not check either).
    rng = np.random.default_rng(4)
    e = ref.random_episodes(rng, 2, 6, np.float64)
    g = np.full((2, 6), 1.5)
    got = puffadv.discounted_returns(e["rewards"], e["terminated"], e["truncated"],
                                     bootstrap_values=e["bootstrap_values"], gamma=g, time_axis=-1)
    want = ref.discounted_returns(e["rewards"], e["terminated"], e["truncated"], None, e["bootstrap_values"], g)
    assert ref.relative_error(got.returns, want) <= 1e-12


@pytest.mark.parametrize("time_major", [False, True])
def test_per_step_into_nan_poisoned_outputs(time_major):
    # Outputs given NaN-filled are written everywhere, as the allocated ones.
    rng = np.random.default_rng(8)
    e = ref.random_off_policy(rng, 4, 13, np.float32)
    g, lam = _steps(rng, (4, 13)).astype(np.float32), _steps(rng, (4, 13)).astype(np.float32)
    function, args, kw, scalars, want = _case("vtrace", e, g, lam)
    f = lambda x: _layout(x, time_major, False)
    axis = 0 if time_major else -1
    shape = f(e["rewards"]).shape
    vs, pg = np.full(shape, np.nan, np.float32), np.full(shape, np.nan, np.float32)
    got = function(*[f(a) for a in args], **{k: f(x) for k, x in kw.items()}, **{k: f(x) for k, x in scalars.items()},
                   vs=vs, pg_advantages=pg, time_axis=axis)
    assert got.vs is vs and got.pg_advantages is pg
    for out, expected in ((vs, want["vs"]), (pg, want["pg_advantages"])):
        assert ref.relative_error(out.T if time_major else out, expected) <= 2e-5
