"""puffadv inside JAX: XLA FFI handlers usable under ``jax.jit``, ``jax.vmap`` and sharding.

``import puffadv.jax`` provides :func:`compute_puff_advantage` and the estimator
family: :func:`gae`, :func:`td_lambda_returns`, :func:`vtrace`,
:func:`discounted_returns`, :func:`n_step_returns`, :func:`retrace`,
:func:`q_lambda`, :func:`episodic_cumsum` and :func:`eligibility_traces` (in
``_jax_family.py``). The handlers (compiled into ``puffadv._core`` for CPU and,
in GPU builds, CUDA or ROCm) are registered with XLA on the first call,
for the platforms ``"cpu"``, ``"CUDA"`` and ``"ROCM"``. On a GPU the kernel runs
on XLA's own stream, with no host round trip, no synchronisation and no
allocation.

Sharding: rows are independent, so under ``jax.jit`` inputs sharded over rows
(and over any leading axes) stay sharded: each device computes its own rows, the
compiled program has no collective, and the outputs are sharded like the inputs
(``jax.experimental.custom_partitioning`` with a sharding rule; see
``_jax_sharding.py`` and docs/scaling.md). A sharded time axis is gathered by XLA
before the call under Auto mesh axes, and refused with ``ValueError`` under
Explicit ones. Inside ``shard_map`` and ``pmap`` a call computes the block it is
given.

Arguments are checked before lowering by the core's own checks (run on the
arrays' shapes and dtypes), so errors are the ``TypeError``/``ValueError`` of
the NumPy functions. Nothing here is differentiable: advantages and returns are
targets. ``jax.grad`` through an input raises ``ValueError``; inputs under
``jax.lax.stop_gradient`` are fine.

The handlers were compiled against the XLA FFI headers of one jaxlib; a jaxlib
with an older FFI API cannot load them, and registration refuses with a
message that names both versions (build against the oldest jaxlib you run).
"""
from __future__ import annotations

import functools
import numbers
import re
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from . import _core
from ._conventions import Estimate, VTraceEstimate
from ._jax_sharding import RowwiseCall, result_type

if not hasattr(_core, "jax_ffi_targets"):
    raise ImportError(
        "this build of puffadv has no JAX handlers (jax was not importable when it was built, "
        "or it was built with PUFF_JAX=OFF); install jax, then rebuild: "
        "pip install --no-build-isolation . -C cmake.define.PUFF_JAX=ON")

__all__ = ["compute_puff_advantage", "gae", "td_lambda_returns", "vtrace", "discounted_returns",
           "n_step_returns", "retrace", "q_lambda", "episodic_cumsum", "eligibility_traces", "Estimate",
           "VTraceEstimate"]

_HANDLER_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_FLAGS = (np.dtype(np.bool_), np.dtype(np.uint8))

_registered = False
_register_lock = threading.Lock()


# ----------------------------------------------------------------- registration


def _running_ffi_api():
    """(major, minor) FFI API of the jaxlib in this process, read from the headers it
    ships (the same XLA commit as its runtime); None when they are missing."""
    try:
        text = (Path(jax.ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h").read_text()
    except OSError:
        return None
    found = [re.search(rf"^#define XLA_FFI_API_{part} (\d+)", text, re.M) for part in ("MAJOR", "MINOR")]
    return tuple(int(m.group(1)) for m in found) if all(found) else None


def _version_tuple(version: str):
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def _check_jaxlib(build: dict) -> None:
    """XLA itself rejects a newer handler only when the backend starts, and then that
    whole backend fails to start; this says why, before anything is registered."""
    import jaxlib.version
    running_jaxlib = jaxlib.version.__version__
    built_api, built_jaxlib = tuple(build["api_version"]), build["jaxlib_version"]
    running_api = _running_ffi_api()
    if running_api is not None:
        too_old = running_api < built_api
    else:  # no headers to read: fall back on the jaxlib release the headers came from
        too_old = _version_tuple(running_jaxlib) < _version_tuple(built_jaxlib)
    if too_old:
        api = "unknown" if running_api is None else "%d.%d" % running_api
        raise RuntimeError(
            f"puffadv's JAX handlers were compiled against XLA FFI API {built_api[0]}.{built_api[1]} "
            f"(headers of jaxlib {built_jaxlib}), but this process runs jaxlib {running_jaxlib} "
            f"(FFI API {api}), which cannot load them. Rebuild puffadv with the oldest jaxlib "
            f"you use installed: pip install --no-build-isolation --force-reinstall . "
            f"(README, section JAX)")


def _register() -> None:
    """Registers every handler of this build with XLA, once per process."""
    global _registered
    if _registered:
        return
    with _register_lock:
        if _registered:
            return
        _check_jaxlib(_core.jax_ffi_build())
        # Platform names are XLA's and case-sensitive: "cpu", "CUDA", "ROCM".
        for name, platform, capsule in _core.jax_ffi_targets():
            jax.ffi.register_ffi_target(name, capsule, platform=platform)
        _registered = True


# ----------------------------------------------------------------- arguments


def _array(x, name: str):
    if isinstance(x, (jax.Array, np.ndarray)) or (hasattr(x, "shape") and hasattr(x, "dtype")):
        return jnp.asarray(x)  # NumPy in, JAX's canonical dtype out (float64 only under x64)
    raise TypeError(f"{name} must be an array (JAX or NumPy), got {type(x).__name__}")


def _spec(x):
    """What the core's checks see of an array: (shape, dtype name)."""
    return (tuple(x.shape), np.dtype(x.dtype).name)


def _scalar(value, name: str) -> float:
    """A concrete real number (its range is the core's check)."""
    if isinstance(value, bool) or not (isinstance(value, numbers.Real) or getattr(value, "ndim", None) == 0):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    try:
        value = float(value)
    except jax.errors.ConcretizationTypeError:
        raise TypeError(
            f"{name} must be a concrete number, not a traced value: it is compiled into the call "
            f"as an XLA attribute. Under jax.jit, pass it through static_argnames.") from None
    return value


def _compute_dtype(dtype) -> np.dtype:
    """The handlers read float32 or float64: bfloat16/float16 go up to float32, the
    core's arithmetic for them anyway (converted by XLA on the arrays' device)."""
    dtype = np.dtype(dtype)
    return dtype if dtype in _HANDLER_DTYPES else np.dtype(np.float32)


def _as_float(x, compute):
    return x if x.dtype == compute else x.astype(compute)


def _as_flag(x, compute):
    """bool/uint8 flags become 0/1 floats: non-zero means set."""
    if np.dtype(x.dtype) in _FLAGS:
        return (x != 0).astype(compute)
    return _as_float(x, compute)


def _not_differentiable(name: str) -> str:
    return (f"puffadv.jax.{name} has no derivative: advantages and returns are targets, which "
            f"PPO, V-trace and TD losses hold constant. Wrap its inputs in jax.lax.stop_gradient, "
            f"or compute them outside the function being differentiated.")


# ----------------------------------------------------------------- puff advantage


def _puff_per_shard(params, values, rewards, dones, importance):
    """The custom call on whatever block of rows XLA hands it ([..., rows, horizon])."""
    dtype = np.dtype(values.dtype)
    # Attributes in the arrays' precision: float32 for float32 (np.float32, the
    # handler's attribute type), float64 under x64 so no digit of gamma is lost.
    gamma, gae_lambda, rho_clip, c_clip = (dtype.type(p) for p in params)
    call = jax.ffi.ffi_call(f"puffadv_puff_advantage_{'f64' if dtype == np.float64 else 'f32'}",
                            result_type(values, dtype), vmap_method="broadcast_all")
    return (call(values, rewards, dones, importance, gamma=gamma, gae_lambda=gae_lambda,
                 rho_clip=rho_clip, c_clip=c_clip),)


_PUFF_CALL = RowwiseCall(_puff_per_shard, "puffadv.jax.compute_puff_advantage")


@functools.partial(jax.custom_jvp, nondiff_argnums=(4, 5, 6, 7))
def _puff_advantage(values, rewards, dones, importance, gamma, gae_lambda, rho_clip, c_clip):
    (advantages,) = _PUFF_CALL((gamma, gae_lambda, rho_clip, c_clip), (values, rewards, dones, importance),
                               ("values", "rewards", "dones", "importance"), "its last axis, the horizon")
    return advantages


@_puff_advantage.defjvp
def _puff_advantage_jvp(gamma, gae_lambda, rho_clip, c_clip, primals, tangents):
    raise ValueError(_not_differentiable("compute_puff_advantage"))


# Eager calls go through jit's cache too (one compile per shape, dtype and scalars)
# instead of re-binding the custom_jvp each time: about 0.3 ms less per call on CPU.
_puff_advantage_jit = jax.jit(_puff_advantage, static_argnums=(4, 5, 6, 7))


def compute_puff_advantage(values, rewards, dones, importance, gamma=0.99, gae_lambda=0.95,
                           rho_clip=1.0, c_clip=1.0):
    """PufferLib's puff advantage (GAE with V-trace clipped importance weights), as an
    XLA custom call: works eagerly and under ``jax.jit`` and ``jax.vmap``.

    ``values``, ``rewards``, ``dones`` and ``importance`` are ``[rows, horizon]`` JAX
    (or NumPy) arrays of one float dtype: float32, float64 (needs ``jax_enable_x64``),
    or bfloat16/float16, which are computed in float32 and give a float32 result.
    ``dones`` may also be bool or uint8 (non-zero means done). For every row,
    backwards from ``t = horizon - 2``::

        nnt   = 1 - dones[t+1]
        delta = min(importance[t], rho_clip) * (rewards[t+1] + gamma * values[t+1] * nnt - values[t])
        A     = delta + gamma * gae_lambda * min(importance[t], c_clip) * A * nnt

    and ``advantages[:, -1] = 0``; ``rewards[:, 0]`` and ``dones[:, 0]`` are never read.
    Returns a new ``[rows, horizon]`` array on the inputs' device.

    The four scalars must be concrete numbers (they are compiled into the call as
    attributes; under ``jit`` make them static): ``0 <= gamma, gae_lambda <= 1``,
    clips ``>= 0``. Shapes, dtypes and scalars are checked before lowering, by the
    core's checks, with the messages of :func:`puffadv.compute_puff_advantage`.

    ``jax.vmap`` over any number of leading batch axes runs one call over all rows
    (an unbatched argument is broadcast first). Under ``jit``, arrays sharded over
    rows (or leading axes) stay sharded: each device computes its rows, with no
    collective, and the result is sharded like the inputs. Do not shard the
    horizon: XLA gathers it first (Auto mesh axes) or this raises ``ValueError``
    (Explicit mesh axes).

    Not differentiable, by design: advantages are targets. ``jax.grad`` through an
    input that carries a gradient raises ``ValueError``; inputs wrapped in
    ``jax.lax.stop_gradient`` (or not differentiated at all) are fine.
    """
    named = {name: _array(x, name) for name, x in
             (("values", values), ("rewards", rewards), ("dones", dones), ("importance", importance))}
    params = tuple(_scalar(p, n) for p, n in ((gamma, "gamma"), (gae_lambda, "gae_lambda"),
                                              (rho_clip, "rho_clip"), (c_clip, "c_clip")))
    _core.jax_check_puff(*(_spec(x) for x in named.values()), *params)
    _register()
    compute = _compute_dtype(named["values"].dtype)
    arrays = (_as_float(named["values"], compute), _as_float(named["rewards"], compute),
              _as_flag(named["dones"], compute), _as_float(named["importance"], compute))
    return _puff_advantage_jit(*arrays, *params)


# ----------------------------------------------------------------- the estimator family

# Last: _jax_family reads this module's helpers (and _register) at call time.
from ._jax_family import (discounted_returns, eligibility_traces, episodic_cumsum, gae,  # noqa: E402
                          n_step_returns, q_lambda, retrace, td_lambda_returns, vtrace)
