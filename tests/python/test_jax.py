"""puffadv.jax: the XLA FFI handlers under jit, on every JAX device this machine has
(CPU here; CPU and CUDA on the GPU machine). Compared with the float64 reference,
with a lax.scan implementation of SPEC section 1 written here, and with rlax's
truncated GAE where the conventions meet (importance = 1). vmap: test_jax_vmap.py;
errors: test_jax_errors.py; shared pieces: jax_cases.py."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import reference
from jax_cases import (KINDS, OPTIONS, PARAMS, RLAX_MISSING, SHAPES, _convention_call,  # noqa: F401
                       _convention_reference, _platforms, _x64, device, jax, jnp, on_cpu, pjax, put, rlax)

import puffadv  # noqa: E402


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


# ----------------------------------------------------------------- standard conventions

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


@pytest.mark.parametrize("call", ["episodic_cumsum", "gae", "puff", "puff_fused"])
def test_jax_arrays_are_refused_as_outputs(call):
    # Found 2026-12-03 (issue 31): a jax.Array given as out=/advantages= was written in
    # place, changing an earlier JAX result still being computed. JAX arrays are immutable.
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.ones((4, 8), jnp.float32)
    pending = x * 3 + 1
    ones, no = jnp.ones((4, 8), jnp.float32), jnp.zeros((4, 8), bool)
    name = {"episodic_cumsum": "out", "gae": "advantages", "puff": "advantages", "puff_fused": "returns"}[call]
    with pytest.raises(TypeError, match=f"^{name} is a jax.Array, which is immutable and cannot be written in "
                                        f"place; omit {name}= \\(a new array is returned\\), or use puffadv.jax"):
        if call == "episodic_cumsum":
            puffadv.episodic_cumsum(ones, no, out=x, time_axis=1)
        elif call == "gae":
            puffadv.gae(ones, ones, no, last_value=jnp.zeros(4, jnp.float32), advantages=x, time_axis=1)
        elif call == "puff":
            puffadv.compute_puff_advantage(ones, ones, ones * 0, ones, x)
        else:
            puffadv.compute_puff_advantage(ones, ones, ones * 0, ones, returns=x)
    assert float(x.sum()) == 32.0 and float(pending.sum()) == 128.0


@pytest.mark.parametrize("flag", ["np.True_", "jnp.array(True)", "np.bool_(False)", "complex"])
@pytest.mark.parametrize("function", ["compute_puff_advantage", "gae"])
def test_jax_refuses_bool_and_complex_parameters_like_the_numpy_api(flag, function):
    # Found 2026-12-03 (issue 31): puffadv.jax read gamma=np.True_ / jnp.array(True) as 1.0
    # where the NumPy-style API refuses bool parameters.
    import puffadv.jax as pj
    value = {"np.True_": np.True_, "jnp.array(True)": jnp.array(True), "np.bool_(False)": np.bool_(False),
             "complex": np.complex64(0.5)}[flag]
    ones, zeros = jnp.ones((2, 8), jnp.float32), jnp.zeros((2, 8), jnp.float32)
    host = np.ones((2, 8), np.float32)
    messages = []
    for module, x, z in ((pj, ones, zeros), (puffadv, host, host * 0)):
        with pytest.raises(TypeError) as caught:
            if function == "gae":
                module.gae(x, x, z, last_value=x[:, 0], gamma=value, time_axis=1)
            else:
                module.compute_puff_advantage(x, x, z, x, gamma=value)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert messages[0].startswith("gamma must be a real number, got a 0-d ")
