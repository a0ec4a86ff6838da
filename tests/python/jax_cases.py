"""What the JAX tests share (test_jax.py: jit; test_jax_vmap.py; test_jax_errors.py):
the devices to run on, the puff advantage's parameters, and the standard
conventions' calls and references. Skips the importing module where jax is missing."""
from __future__ import annotations

import numpy as np
import pytest

import reference

jax = pytest.importorskip("jax", reason="jax is not installed: the JAX handlers are untested")
import jax.numpy as jnp  # noqa: E402

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
