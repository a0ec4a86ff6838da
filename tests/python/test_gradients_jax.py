"""Gradients of every puffadv.jax function (issue 30): jax.test_util.check_grads in
float64 (finite differences of the real handlers), the same gradients as puffadv's
torch autograd, under jit and vmap, and batch sharding kept for the backward."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
pjax = pytest.importorskip("puffadv.jax")
import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

from gradient_cases import CASES, SCALARS, episode_arrays, function_of, make_call  # noqa: E402


@pytest.fixture(autouse=True)
def x64():
    if hasattr(jax, "enable_x64"):
        with jax.enable_x64(True):
            yield
    else:
        from jax.experimental import enable_x64
        with enable_x64():
            yield


def jax_call(case: str, seed: int = 0, time_major: bool = False):
    """(function(*differentiated) -> outputs without None, the differentiated arrays)."""
    arrays, flags, fixed, scalars, _ = CASES[case]
    data = episode_arrays(seed)
    if case == "compute_puff_advantage":
        data["dones"] = data["terminated"].astype(np.float64)
    fixed = {k: v for k, v in fixed.items() if k not in ("rho_clip",)} if case == "compute_puff_advantage" else fixed
    move = (lambda x: x.T if x.ndim == 2 else x) if time_major else (lambda x: x)
    const = {name: jnp.asarray(move(data[name])) for name in flags}
    params = {name: SCALARS[name] for name in scalars}
    function = getattr(pjax, function_of(case))

    def call(*values):
        kwargs = {**const, **fixed, **params, **dict(zip(arrays, values))}
        if case == "compute_puff_advantage":
            kwargs["rho_clip"] = 1.4
        else:
            kwargs["time_axis"] = 0 if time_major else -1
        result = function(**kwargs)
        return tuple(x for x in (result if isinstance(result, tuple) else (result,)) if x is not None)

    return call, [jnp.asarray(move(data[name])) for name in arrays]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("time_major", [False, True])
def test_check_grads(case, time_major):
    call, arrays = jax_call(case, seed=1, time_major=time_major)
    check_grads(call, tuple(arrays), order=1, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)


def _weighted(outputs):
    return sum((o * jnp.linspace(0.5, 1.5, o.size).reshape(o.shape)).sum() for o in outputs)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_same_gradients_as_torch(case):
    """JAX's gradients equal puffadv's torch autograd (the [B, T] series only: the JAX
    functions return no row sums)."""
    call, arrays = jax_call(case, seed=2)
    grads = jax.grad(lambda *a: _weighted(call(*a)), argnums=tuple(range(len(arrays))))(*arrays)
    tcall, leaves, _ = make_call(case, seed=2)
    n_arrays = len(arrays)
    outputs = [o for o in tcall(*leaves) if o.ndim == 2]
    loss = sum((o * torch.linspace(0.5, 1.5, o.numel(), dtype=o.dtype).reshape(o.shape)).sum()
               for o in outputs[:len(call(*arrays))])
    expected = torch.autograd.grad(loss, leaves[:n_arrays])
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-10, atol=1e-12)


def test_grad_under_jit_and_vmap():
    call, arrays = jax_call("gae_last_value", seed=3)
    grad = jax.grad(lambda *a: _weighted(call(*a)), argnums=(0, 1, 2))
    eager = grad(*arrays)
    for got, want in zip(jax.jit(grad)(*arrays), eager):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    stacked = [jnp.stack([a, 2 * a]) for a in arrays]
    batched = jax.vmap(grad)(*stacked)
    for got, want in zip(batched, eager):
        np.testing.assert_allclose(got[0], want, rtol=1e-12)


def test_the_clips_subgradient():
    """Importance above rho_clip and c_clip gets no gradient; below, the full one."""
    call, (values, rewards, importance) = jax_call("compute_puff_advantage", seed=4)
    importance = importance.at[:, :].set(2.0)  # above rho_clip 1.4 and c_clip 1.0
    g = jax.grad(lambda i: _weighted(call(values, rewards, i)), argnums=0)(importance)
    assert float(jnp.abs(g).sum()) == 0.0


@pytest.mark.parametrize("call", [
    "pjax.gae(r, v, d, last_value=lv, time_axis=-1).advantages",
    "pjax.n_step_returns(r, v, d, last_value=lv, n=3, time_axis=-1).returns",
], ids=["gae", "n_step_returns"])
def test_backward_keeps_batch_sharding(call):
    """Under jit over rows sharded on two (host) devices, the backward has no
    all-gather of the rows: its gradients come out sharded like the inputs."""
    code = textwrap.dedent("""
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        import puffadv.jax as pjax
        mesh = Mesh(np.array(jax.devices()[:2]), ("rows",))
        rows = NamedSharding(mesh, P("rows", None))
        rng = np.random.default_rng(0)
        r, v = (jax.device_put(rng.standard_normal((8, 16)).astype(np.float32), rows) for _ in range(2))
        d = jax.device_put(np.zeros((8, 16), bool), rows)
        lv = jax.device_put(rng.standard_normal(8).astype(np.float32), NamedSharding(mesh, P("rows")))
        loss = lambda r, v: (CALL ** 2).sum()  # a gradient that depends on r
        grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
        text = grad.lower(r, v).compile().as_text()
        gr, gv = grad(r, v)
        assert gr.sharding.is_equivalent_to(rows, 2) and gv.sharding.is_equivalent_to(rows, 2), gr.sharding
        assert "all-gather" not in text, "the backward gathers the rows"
        print("ok")
    """).replace("CALL", call)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]
