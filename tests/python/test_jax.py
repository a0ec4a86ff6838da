"""puffadv.jax: the XLA FFI handlers under jit and vmap, on every JAX device this
machine has (CPU here; CPU and CUDA on the GPU machine). Compared with the float64
reference, with a lax.scan implementation of SPEC section 1 written here, and with
rlax's truncated GAE where the conventions meet (importance = 1)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import reference

jax = pytest.importorskip("jax", reason="jax is not installed: the JAX handlers are untested")
import jax.numpy as jnp  # noqa: E402

import puffadv  # noqa: E402
import puffadv.jax as pjax  # noqa: E402  (an ImportError here means a build without handlers)

try:
    import rlax
    RLAX_MISSING = None
except Exception as error:  # rlax pulls in distrax/tfp; any import failure is a skip reason
    rlax = None
    RLAX_MISSING = f"rlax is not importable ({type(error).__name__}: {error})"

PARAMS = [dict(gamma=0.99, gae_lambda=0.95, rho_clip=1.0, c_clip=1.0),
          dict(gamma=0.97, gae_lambda=0.9, rho_clip=5.0, c_clip=0.0),  # shipped configs
          dict(gamma=0.9, gae_lambda=0.8, rho_clip=1.5, c_clip=0.7)]
SHAPES = [(1, 1), (3, 1), (5, 2), (7, 33), (64, 128), (2, 1000)]


def _x64():
    """Context manager enabling float64 (its home moved between jax releases)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64
    return enable_x64()


def _platforms():
    platforms = ["cpu"]
    try:
        if jax.devices("gpu"):
            platforms.append("gpu")  # CUDA or ROCm
    except RuntimeError:  # no GPU backend in this jaxlib
        pass
    return platforms


@pytest.fixture(params=_platforms())
def device(request):
    return jax.devices(request.param)[0]


def put(device, arrays):
    return [jax.device_put(a, device) for a in arrays]


def scan_puff_advantage(values, rewards, dones, importance, gamma, gae_lambda, rho_clip, c_clip):
    """SPEC section 1 with jax.lax.scan over time: the way JAX RL code writes it."""
    nnt = 1.0 - dones[:, 1:]
    rho = jnp.minimum(importance[:, :-1], rho_clip)
    c = jnp.minimum(importance[:, :-1], c_clip)
    delta = rho * (rewards[:, 1:] + gamma * values[:, 1:] * nnt - values[:, :-1])
    decay = gamma * gae_lambda * c * nnt

    def step(a, xs):
        d, k = xs
        a = d + k * a
        return a, a

    _, out = jax.lax.scan(step, jnp.zeros(values.shape[0], values.dtype), (delta.T, decay.T),
                          reverse=True)
    return jnp.concatenate([out.T, jnp.zeros((values.shape[0], 1), values.dtype)], axis=1)


def test_handlers_registered_for_this_build():
    names = {(name, platform) for name, platform, _ in puffadv._core.jax_ffi_targets()}
    assert ("puffadv_puff_advantage_f32", "cpu") in names
    assert ("puffadv_puff_advantage_f64", "cpu") in names
    if puffadv._core.build_info()["cuda"]:
        assert ("puffadv_puff_advantage_f32", "CUDA") in names  # XLA's spelling, case-sensitive
    build = puffadv._core.jax_ffi_build()
    assert tuple(build["api_version"]) <= puffadv._jax_common._running_ffi_api()


def test_backend_report_names_the_handlers():
    report = puffadv.backend()
    assert report["jax_handlers"]["api_version"] == puffadv._core.jax_ffi_build()["api_version"]
    assert "cpu" in report["jax_handlers"]["platforms"]
    assert "JAX handlers      : cpu" in str(report)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("params", PARAMS)
def test_jit_matches_reference_and_lax_scan(device, rng, shape, params):
    inputs = reference.random_puff_inputs(rng, *shape)
    args = put(device, inputs)
    out = jax.jit(lambda *a: pjax.compute_puff_advantage(*a, **params))(*args)
    assert out.dtype == jnp.float32 and out.shape == shape and out.devices() == {device}
    ref = reference.puff_advantage(*inputs, **params)
    assert reference.relative_error(out, ref) <= 1e-5
    assert np.all(np.asarray(out)[:, -1] == 0)
    scanned = jax.jit(lambda *a: scan_puff_advantage(*a, **params))(*args)
    assert reference.relative_error(out, scanned) <= 1e-5


@pytest.mark.parametrize("params", PARAMS)
def test_float64_under_x64(device, rng, params):
    inputs = reference.random_puff_inputs(rng, 33, 70, dtype=np.float64)
    with _x64():
        out = jax.jit(lambda *a: pjax.compute_puff_advantage(*a, **params))(*put(device, inputs))
        assert out.dtype == jnp.float64
        # float64 attributes: 1e-12 fails if gamma had been rounded to float32.
        assert reference.relative_error(out, reference.puff_advantage(*inputs, **params)) <= 1e-12


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_reduced_precision_computes_in_float32(device, rng, dtype):
    inputs = [x.astype(jnp.dtype(dtype)) for x in reference.random_puff_inputs(rng, 19, 40)]
    out = jax.jit(pjax.compute_puff_advantage)(*put(device, inputs))
    assert out.dtype == jnp.float32
    ref = reference.puff_advantage(*[x.astype(np.float64) for x in inputs])
    assert reference.relative_error(out, ref) <= 1e-5


@pytest.mark.parametrize("flag_dtype", [np.bool_, np.uint8])
def test_flag_dones(device, rng, flag_dtype):
    v, r, d, i = reference.random_puff_inputs(rng, 23, 31)
    flags = (d * rng.integers(1, 4, d.shape)).astype(flag_dtype)  # uint8 2 and 3 mean done too
    out = jax.jit(pjax.compute_puff_advantage)(*put(device, [v, r, flags, i]))
    assert out.dtype == jnp.float32
    ref = reference.puff_advantage(v, r, (flags != 0).astype(np.float64), i)
    assert reference.relative_error(out, ref) <= 1e-5


def test_eager_call_and_numpy_inputs(rng):
    inputs = reference.random_puff_inputs(rng, 9, 17)
    out = pjax.compute_puff_advantage(*inputs, gamma=0.95, gae_lambda=0.9)
    assert isinstance(out, jax.Array)
    ref = reference.puff_advantage(*inputs, gamma=0.95, gae_lambda=0.9)
    assert reference.relative_error(out, ref) <= 1e-5


def test_result_feeds_other_ops_inside_jit(device, rng):
    inputs = reference.random_puff_inputs(rng, 16, 40)

    @jax.jit
    def returns_and_normalised(v, r, d, i):
        a = pjax.compute_puff_advantage(v, r, d, i)
        return a + v, (a - a.mean()) / (a.std() + 1e-8)

    returns, normalised = returns_and_normalised(*put(device, inputs))
    ref = reference.puff_advantage(*inputs)
    assert reference.relative_error(returns, ref + inputs[0]) <= 1e-5
    assert reference.relative_error(normalised, (ref - ref.mean()) / (ref.std() + 1e-8)) <= 1e-4


def test_fresh_inputs_each_call(device, rng):
    """One compiled function, new buffers every call: nothing stale is replayed."""
    f = jax.jit(pjax.compute_puff_advantage)
    for _ in range(3):
        inputs = reference.random_puff_inputs(rng, 32, 64)
        out = f(*put(device, inputs))
        assert reference.relative_error(out, reference.puff_advantage(*inputs)) <= 1e-5


def test_empty_arrays(device):
    for shape in [(0, 5), (4, 0)]:
        zeros = np.zeros(shape, np.float32)
        out = jax.jit(pjax.compute_puff_advantage)(*put(device, [zeros] * 4))
        assert out.shape == shape


# ----------------------------------------------------------------- vmap


def test_vmap_over_batch_axis(device, rng):
    batch = [reference.random_puff_inputs(rng, 6, 21) for _ in range(4)]
    stacked = [np.stack(parts) for parts in zip(*batch)]  # [4, 6, 21] each
    out = jax.jit(jax.vmap(lambda *a: pjax.compute_puff_advantage(*a, gamma=0.9)))(
        *put(device, stacked))
    assert out.shape == (4, 6, 21)
    for b, inputs in enumerate(batch):
        ref = reference.puff_advantage(*inputs, gamma=0.9)
        assert reference.relative_error(out[b], ref) <= 1e-5


def test_vmap_with_unbatched_argument_and_other_axis(device, rng):
    v, r, d, i = reference.random_puff_inputs(rng, 3 * 5, 12)
    v3 = v.reshape(3, 5, 12)
    # batch axis 1 of a [5, 3, 12] array; dones shared by every batch element
    v_axis1 = np.ascontiguousarray(v3.transpose(1, 0, 2))
    d_shared = d[:5]
    r3, i3 = r.reshape(3, 5, 12), i.reshape(3, 5, 12)
    f = jax.vmap(pjax.compute_puff_advantage, in_axes=(1, 0, None, 0))
    out = jax.jit(f)(*put(device, [v_axis1, r3, d_shared, i3]))
    for b in range(3):
        ref = reference.puff_advantage(v3[b], r3[b], d_shared, i3[b])
        assert reference.relative_error(out[b], ref) <= 1e-5


def test_nested_vmap(device, rng):
    inputs = reference.random_puff_inputs(rng, 2 * 3 * 4, 9)
    shaped = [x.reshape(2, 3, 4, 9) for x in inputs]
    out = jax.jit(jax.vmap(jax.vmap(pjax.compute_puff_advantage)))(*put(device, shaped))
    ref = reference.puff_advantage(*inputs).reshape(2, 3, 4, 9)
    assert reference.relative_error(out, ref) <= 1e-5


# ----------------------------------------------------------------- rlax


@pytest.mark.skipif(rlax is None, reason=RLAX_MISSING or "")
@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 1.0), (1.0, 0.0)])
def test_matches_rlax_truncated_gae(device, rng, gamma, lam):
    """importance = 1, clips >= 1: puff advantage is GAE. rlax indexes the step
    after t: r_t = rewards[t+1], discount_t = gamma * (1 - dones[t+1])."""
    v, r, d, _ = reference.random_puff_inputs(rng, 12, 50)
    ones = np.ones_like(v)
    out = pjax.compute_puff_advantage(*put(device, [v, r, d, ones]), gamma=gamma, gae_lambda=lam,
                                      rho_clip=1.0, c_clip=1.0)
    gae = jax.vmap(rlax.truncated_generalized_advantage_estimation, in_axes=(0, 0, None, 0))
    expected = gae(r[:, 1:], gamma * (1.0 - d[:, 1:]), lam, v)
    assert reference.relative_error(np.asarray(out)[:, :-1], expected) <= 1e-5
    assert np.all(np.asarray(out)[:, -1] == 0)


# ----------------------------------------------------------------- autodiff


def test_grad():
    """Issue 30: differentiable (test_gradients_jax.py checks the gradients)."""
    inputs = [jnp.asarray(x) for x in reference.random_puff_inputs(np.random.default_rng(), 4, 8)]

    def loss(v):
        return pjax.compute_puff_advantage(v, *inputs[1:]).sum()

    grad = jax.grad(loss)(inputs[0])
    assert grad.shape == inputs[0].shape and float(jnp.abs(grad).sum()) > 0


def test_grad_through_stopped_inputs_is_zero():
    v, r, d, i = [jnp.asarray(x) for x in reference.random_puff_inputs(np.random.default_rng(), 4, 8)]

    def loss(v):
        a = pjax.compute_puff_advantage(jax.lax.stop_gradient(v), r, d, i)
        return (a * v).sum()  # the usual use: advantages weigh a differentiated term

    grad = jax.grad(loss)(v)
    assert np.allclose(grad, pjax.compute_puff_advantage(v, r, d, i))


# ----------------------------------------------------------------- bad input


def _numpy_error(args, kwargs):
    with pytest.raises((TypeError, ValueError)) as info:
        puffadv.compute_puff_advantage(*args, **kwargs)
    return info


def _bad_cases():
    ok = np.ones((4, 8), np.float32)
    return {
        "3-D values": ([ok[None], ok, ok, ok], {}),
        "1-D importance": ([ok, ok, ok, ok[0]], {}),
        "shape mismatch": ([ok, ok[:, :7], ok, ok], {}),
        "int dones": ([ok, ok, ok.astype(np.int32), ok], {}),
        "int16 values": ([ok.astype(np.int16)] * 4, {}),  # float16 is read since issue 6
        "mixed dtype": ([ok, ok.astype(np.float16), ok, ok], {}),
        "uint8 values": ([ok.astype(np.uint8), ok, ok, ok], {}),
        "float64 dones": ([ok, ok, ok.astype(np.float64), ok], {}),
        "gamma > 1": ([ok] * 4, {"gamma": 1.5}),
        "nan lambda": ([ok] * 4, {"gae_lambda": float("nan")}),
        "negative rho_clip": ([ok] * 4, {"rho_clip": -0.5}),
        "inf c_clip": ([ok] * 4, {"c_clip": float("inf")}),
        "string gamma": ([ok] * 4, {"gamma": "0.9"}),
    }


@pytest.mark.parametrize("case", list(_bad_cases()))
def test_bad_input_matches_core_message(case):
    """Raised before lowering, with the type and message the NumPy path raises."""
    args, kwargs = _bad_cases()[case]
    expected = _numpy_error(args, kwargs)
    with _x64(), pytest.raises(expected.type) as got:  # x64: float64 stays float64
        jax.jit(lambda *a: pjax.compute_puff_advantage(*a, **kwargs))(*[jnp.asarray(a) for a in args])
    assert str(got.value) == str(expected.value)


def test_traced_parameter_is_a_type_error():
    ok = jnp.ones((4, 8), jnp.float32)
    with pytest.raises(TypeError, match="gamma must be a concrete number.*static_argnames"):
        jax.jit(lambda g: pjax.compute_puff_advantage(ok, ok, ok, ok, gamma=g))(0.9)


def test_non_array_is_a_type_error():
    ok = jnp.ones((4, 8), jnp.float32)
    with pytest.raises(TypeError, match="rewards must be an array"):
        pjax.compute_puff_advantage(ok, [[1.0] * 8] * 4, ok, ok)


def test_refuses_an_older_jaxlib(monkeypatch):
    built = puffadv._core.jax_ffi_build()["api_version"]
    from puffadv import _jax_common  # where registration lives (puffadv.jax and its family share it)
    monkeypatch.setattr(_jax_common, "_registered", False)
    monkeypatch.setattr(_jax_common, "_running_ffi_api", lambda: (built[0], built[1] - 1))
    with pytest.raises(RuntimeError, match=r"compiled against XLA FFI API \d+\.\d+ .*cannot load"):
        pjax.compute_puff_advantage(*[jnp.ones((2, 3))] * 4)


# ----------------------------------------------------------------- standard conventions

@pytest.fixture
def on_cpu():
    """Runs a test on the CPU even where JAX's default device is a GPU: for CPU-only
    behaviour and for tests one platform covers. The GPU has test_conventions_on_gpu and
    the `device` parametrisation of test_conventions_match_reference."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


KINDS = {"gae": ("gae_lambda", pjax.gae), "td_lambda": ("lambda_", pjax.td_lambda_returns),
         "vtrace": ("lambda_", pjax.vtrace)}
# Which optional inputs a call passes: the shapes of real use.
OPTIONS = {"last_value": ("last_value",),
           "truncated": ("truncated", "bootstrap_values"),
           "importance": ("truncated", "bootstrap_values", "importance"),
           "last_value+importance": ("last_value", "importance")}


def _convention_call(kind, episodes, option, time_axis=-1, lam=0.9, **extra):
    name, function = KINDS[kind]
    data = {k: episodes[k] for k in ("rewards", "values", "terminated") + OPTIONS[option]}
    if time_axis == 0:
        data = {k: (v.T if v.ndim == 2 else v) for k, v in data.items()}
    kwargs = {k: data.pop(k) for k in ("last_value", "bootstrap_values", "importance") if k in data}
    out = function(*data.values(), gamma=0.97, time_axis=time_axis, **{name: lam}, **kwargs, **extra)
    first, second = out[:2]
    if kind == "vtrace":  # VTraceEstimate(vs, pg_advantages): compare as (pg, vs)
        first, second = second, first
    if time_axis == 0:
        first, second = first.T, second.T
    return first, second


def _convention_reference(kind, episodes, option, lam=0.9, **extra):
    present = {k: episodes[k] for k in OPTIONS[option]}
    return reference.standard_estimate(kind, episodes["rewards"], episodes["values"],
                                       episodes["terminated"], gamma=0.97, lam=lam, **present, **extra)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("time_axis", [-1, 0])
def test_conventions_match_reference(device, rng, kind, option, time_axis):
    episodes = reference.random_episodes(rng, 11, 37)
    extra = {"rho_clip": 1.3, "c_clip": 0.8} | ({"rho_pg_clip": 1.1} if kind == "vtrace" else {})
    with jax.default_device(device):
        first, second = jax.jit(lambda: _convention_call(kind, episodes, option, time_axis, **extra))()
    assert first.devices() == second.devices() == {device}
    ref_first, ref_second = _convention_reference(kind, episodes, option, **extra)
    assert first.dtype == jnp.float32 and first.shape == episodes["rewards"].shape
    assert reference.relative_error(first, ref_first) <= 1e-5
    assert reference.relative_error(second, ref_second) <= 1e-5


def test_td_lambda_returns_match_their_own_recursion(on_cpu, rng):
    e = reference.random_episodes(rng, 9, 40)
    out = pjax.td_lambda_returns(e["rewards"], e["values"], e["terminated"], e["truncated"],
                                 bootstrap_values=e["bootstrap_values"], gamma=0.95, lambda_=0.8, time_axis=-1)
    ref = reference.td_lambda_return(e["rewards"], e["values"], e["terminated"], e["truncated"],
                                     bootstrap_values=e["bootstrap_values"], gamma=0.95, lam=0.8)
    assert reference.relative_error(out.returns, ref) <= 1e-5


def test_conventions_float64_and_reduced_inputs(on_cpu, rng):
    e = reference.random_episodes(rng, 7, 30, dtype=np.float64)
    with _x64():
        out = pjax.gae(e["rewards"], e["values"], e["terminated"], last_value=e["last_value"], time_axis=-1)
        assert out.advantages.dtype == jnp.float64
        ref = reference.standard_estimate("gae", e["rewards"], e["values"], e["terminated"],
                                          last_value=e["last_value"], gamma=0.99, lam=0.95)
        assert reference.relative_error(out.advantages, ref[0]) <= 1e-12
    e16 = {k: (v.astype(jnp.bfloat16) if v.dtype == np.float64 else v) for k, v in e.items()}
    out = pjax.gae(e16["rewards"], e16["values"], e16["terminated"], last_value=e16["last_value"], time_axis=-1)
    assert out.advantages.dtype == jnp.float32
    ref = reference.standard_estimate("gae", *(e16[k].astype(np.float64) for k in ("rewards", "values")),
                                      e16["terminated"], last_value=e16["last_value"].astype(np.float64),
                                      gamma=0.99, lam=0.95)
    assert reference.relative_error(out.advantages, ref[0]) <= 1e-5


def test_conventions_vmap(on_cpu, rng):
    parts = [reference.random_episodes(rng, 4, 16) for _ in range(3)]
    stacked = {k: np.stack([p[k] for p in parts]) for k in parts[0]}
    f = jax.vmap(lambda r, v, t, tr, b, i: pjax.vtrace(r, v, t, tr, bootstrap_values=b, importance=i, time_axis=-1))
    vs, pg = jax.jit(f)(*(stacked[k] for k in ("rewards", "values", "terminated", "truncated",
                                                "bootstrap_values", "importance")))[:2]
    g = jax.vmap(lambda r, v, t, lv: pjax.gae(r.T, v.T, t.T, last_value=lv, time_axis=0))
    adv = jax.jit(g)(*(stacked[k] for k in ("rewards", "values", "terminated", "last_value")))[0]
    for b, p in enumerate(parts):
        ref_pg, ref_vs = reference.standard_estimate(
            "vtrace", p["rewards"], p["values"], p["terminated"], p["truncated"],
            bootstrap_values=p["bootstrap_values"], importance=p["importance"], gamma=0.99, lam=1.0)
        assert reference.relative_error(vs[b], ref_vs) <= 1e-5
        assert reference.relative_error(pg[b], ref_pg) <= 1e-5
        ref_adv = reference.standard_estimate("gae", p["rewards"], p["values"], p["terminated"],
                                              last_value=p["last_value"], gamma=0.99, lam=0.95)[0]
        assert reference.relative_error(adv[b].T, ref_adv) <= 1e-5


@pytest.mark.skipif(rlax is None, reason=RLAX_MISSING or "")
def test_gae_matches_rlax(on_cpu, rng):
    """rlax indexes like puffadv.gae: r_t = rewards[t], discount_t = gamma (1 - terminated[t]),
    values [T+1] with the bootstrap last (terminations only: rlax has no truncation)."""
    e = reference.random_episodes(rng, 6, 45)
    out = pjax.gae(e["rewards"], e["values"], e["terminated"], last_value=e["last_value"],
                   gamma=0.97, gae_lambda=0.9, time_axis=-1)
    values = np.concatenate([e["values"], e["last_value"][:, None]], axis=1)
    rl = jax.vmap(rlax.truncated_generalized_advantage_estimation, in_axes=(0, 0, None, 0))(
        e["rewards"], 0.97 * (1.0 - e["terminated"].astype(np.float32)), 0.9, values)
    assert reference.relative_error(out.advantages, rl) <= 1e-5


def test_conventions_grad(on_cpu, rng):
    """Issue 30: differentiable (test_gradients_jax.py checks every function)."""
    e = reference.random_episodes(rng, 3, 8)
    grad = jax.grad(lambda v: pjax.gae(e["rewards"], v, e["terminated"],
                                       last_value=e["last_value"], time_axis=-1).advantages.sum())(jnp.asarray(e["values"]))
    assert grad.shape == e["values"].shape and bool(jnp.isfinite(grad).all()) and float(jnp.abs(grad).sum()) > 0


def test_terminated_and_truncated_on_one_step_is_terminated(on_cpu, rng):
    """Gymnasium's meaning (issue 33): the step's bootstrap is never read."""
    e = reference.random_episodes(rng, 3, 8)
    both = e["terminated"]
    poisoned = np.where(both, np.nan, e["bootstrap_values"]).astype(np.float32)
    got = pjax.gae(e["rewards"], e["values"], both, both | e["truncated"], bootstrap_values=poisoned, time_axis=-1)
    want = pjax.gae(e["rewards"], e["values"], both, e["truncated"] & ~both, bootstrap_values=poisoned,
                    time_axis=-1)
    np.testing.assert_array_equal(np.asarray(got.advantages), np.asarray(want.advantages))
    assert np.isfinite(np.asarray(got.advantages)).all()


def _bad_convention_cases():
    e = reference.random_episodes(np.random.default_rng(1), 4, 6)
    base = (e["rewards"], e["values"], e["terminated"])
    return {
        "no bootstrap": ("gae", base, {}),
        "both bootstraps": ("gae", base, {"last_value": e["last_value"],
                                          "bootstrap_values": e["bootstrap_values"]}),
        "truncated without bootstrap_values": ("gae", base + (e["truncated"],),
                                               {"last_value": e["last_value"]}),
        "last_value shape": ("vtrace", base, {"last_value": e["last_value"][:3]}),
        "values shape": ("gae", (e["rewards"], e["values"][:, :5], e["terminated"]),
                         {"last_value": e["last_value"]}),
        "int rewards": ("gae", (e["rewards"].astype(np.int32),) + base[1:], {"last_value": e["last_value"]}),
        "float64 terminated": ("gae", base[:2] + (e["terminated"].astype(np.float64),),
                               {"last_value": e["last_value"]}),
        "time_axis 2": ("gae", base, {"last_value": e["last_value"], "time_axis": 2}),
        "time_axis str": ("gae", base, {"last_value": e["last_value"], "time_axis": "0"}),
        "gamma > 1": ("gae", base, {"last_value": e["last_value"], "gamma": 1.2}),
        "negative lambda_": ("td_lambda", base, {"last_value": e["last_value"], "lambda_": -0.1}),
        "nan rho_pg_clip": ("vtrace", base, {"last_value": e["last_value"], "rho_pg_clip": float("nan")}),
    }


@pytest.mark.parametrize("case", list(_bad_convention_cases()))
def test_conventions_bad_input_matches_numpy(case):
    kind, args, kwargs = _bad_convention_cases()[case]
    numpy_function = {"gae": puffadv.gae, "td_lambda": puffadv.td_lambda_returns,
                      "vtrace": puffadv.vtrace}[kind]
    with pytest.raises((TypeError, ValueError)) as expected:
        numpy_function(*args, **kwargs)
    with _x64(), pytest.raises(expected.type) as got:
        KINDS[kind][1](*args, **kwargs)
    assert str(got.value) == str(expected.value)


# ----------------------------------------------------------------- GPU only


@pytest.mark.skipif("gpu" not in _platforms(), reason="needs a GPU device")
@pytest.mark.parametrize("kind", list(KINDS))
def test_conventions_on_gpu(rng, kind):
    """The conventions run on the GPU under jit (GPU handlers registered, GPU kernels):
    GPU arrays in, GPU arrays out, equal to the CPU handler and the float64 reference
    (H200, 2026-12-01: gae matched the CPU to 2.9e-6)."""
    names = {k for k, _, _ in puffadv._core.jax_ffi_targets()}
    assert "puffadv_standard_estimate_f32" in names
    gpu = jax.devices("gpu")[0]
    e = reference.random_episodes(rng, 300, 70)  # rows over several GPU blocks
    extra = {"rho_clip": 1.3, "c_clip": 0.8} | ({"rho_pg_clip": 1.1} if kind == "vtrace" else {})
    option = "importance"  # truncated + bootstrap_values + importance: every input
    with jax.default_device(gpu):
        first, second = jax.jit(lambda: _convention_call(kind, e, option, 0, **extra))()
    assert first.devices() == {gpu} and second.devices() == {gpu}
    with jax.default_device(jax.devices("cpu")[0]):
        cpu_first, cpu_second = jax.jit(lambda: _convention_call(kind, e, option, 0, **extra))()
    ref_first, ref_second = _convention_reference(kind, e, option, **extra)
    assert reference.relative_error(first, ref_first) <= 1e-5
    assert reference.relative_error(second, ref_second) <= 1e-5
    assert reference.relative_error(first, cpu_first) <= 1e-5
    assert reference.relative_error(second, cpu_second) <= 1e-5


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a CUDA device for XLA command buffers")
def test_cuda_command_buffer_replay(tmp_path):
    """XLA records the handler into a CUDA graph (kCmdBufferCompatible) and replays it;
    fresh inputs each call must give fresh, correct results."""
    script = textwrap.dedent("""
        import numpy as np, jax, jax.numpy as jnp, sys
        sys.path.insert(0, %r)
        import reference, puffadv.jax as pjax
        @jax.jit
        def f(v, r, d, i):
            a = pjax.compute_puff_advantage(jnp.sin(v), r, d, i)
            return a * 2.0 + 1.0
        rng = np.random.default_rng()
        for _ in range(5):
            v, r, d, i = reference.random_puff_inputs(rng, 256, 64)
            out = f(*[jnp.asarray(x) for x in (v, r, d, i)])
            expected = reference.puff_advantage(np.sin(v.astype(np.float64)), r, d, i)
            err = reference.relative_error((np.asarray(out) - 1.0) / 2.0, expected)
            assert err <= 1e-5, err
        print("ok")
    """) % os.path.dirname(reference.__file__)
    # No preallocation: this process already holds most of the GPU's memory.
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", XLA_FLAGS=(
        os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={tmp_path} --xla_dump_hlo_as_text"
        " --xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1"))
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]
    optimised = [p.read_text() for p in tmp_path.glob("*after_optimizations*.txt")]
    if not any("command_buffer" in text and "puffadv_puff_advantage" in text for text in optimised):
        pytest.skip("results right, but XLA formed no command buffer around the handler here: "
                    "the kCmdBufferCompatible trait went untested")
