"""puffadv inside JAX: XLA FFI handlers usable under ``jax.jit`` and ``jax.vmap``.

``import puffadv.jax`` makes :func:`compute_puff_advantage` available; the
handlers (compiled into ``puffadv._core`` for CPU and, in GPU builds, CUDA or
ROCm) are registered with XLA on the first call, for the platforms ``"cpu"``,
``"CUDA"`` and ``"ROCM"``. On a GPU the kernel runs on XLA's own stream, with no
host round trip, no synchronisation and no allocation.

The handlers were compiled against the XLA FFI headers of one jaxlib; a jaxlib
with an older FFI API cannot load them, and registration refuses with a
message that names both versions (build against the oldest jaxlib you run).
"""
from __future__ import annotations

import functools
import math
import numbers
import re
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from . import _core

if not hasattr(_core, "jax_ffi_targets"):
    raise ImportError(
        "this build of puffadv has no JAX handlers (jax was not importable when it was built, "
        "or it was built with PUFF_JAX=OFF); install jax, then rebuild: "
        "pip install --no-build-isolation . -C cmake.define.PUFF_JAX=ON")

__all__ = ["compute_puff_advantage"]

_TARGETS = {np.dtype(np.float32): "puffadv_puff_advantage_f32",
            np.dtype(np.float64): "puffadv_puff_advantage_f64"}

_NOT_DIFFERENTIABLE = (
    "puffadv.jax.compute_puff_advantage has no derivative: advantages are targets, which "
    "PPO and V-trace losses hold constant. Wrap its inputs in jax.lax.stop_gradient, or "
    "compute the advantages outside the function being differentiated.")

_registered = False
_register_lock = threading.Lock()


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


def _array(x, name: str):
    if isinstance(x, (jax.Array, np.ndarray)) or (hasattr(x, "shape") and hasattr(x, "dtype")):
        return jnp.asarray(x)  # NumPy in, JAX's canonical dtype out (float64 only under x64)
    raise TypeError(f"{name} must be an array (JAX or NumPy), got {type(x).__name__}")


# dtypes the core knows (and checks with its own messages); anything else is
# refused on import, as the nanobind module does.
_CORE_DTYPES = {np.dtype(t) for t in (np.float32, np.float64, np.float16, np.uint8, np.bool_)} | {
    np.dtype(jnp.bfloat16)}
_FLOATS = {np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), np.dtype(jnp.bfloat16)}
_FLAGS = {np.dtype(np.bool_), np.dtype(np.uint8)}


def _check_arrays(named: dict) -> np.dtype:
    """The checks of puffadv.compute_puff_advantage, in its order and with its messages,
    on shapes and dtypes alone (tracers have both), so bad input fails before lowering.
    Returns the float inputs' dtype."""
    for name, x in named.items():
        if np.dtype(x.dtype) not in _CORE_DTYPES:
            raise TypeError(f"{name} has dtype {np.dtype(x.dtype).name}, which puffadv does not read; "
                            f"expected float32 or float64")
    values = named["values"]
    for name, x in named.items():
        if x.ndim != 2:
            raise ValueError(f"{name} must be a 2-D [rows, horizon] array, got a {x.ndim}-D array")
        if x.shape != values.shape:
            raise ValueError(
                f"{name} has shape [{x.shape[0]}, {x.shape[1]}] but values has shape "
                f"[{values.shape[0]}, {values.shape[1]}]; all arrays must share one [rows, horizon] shape")
    dtype = np.dtype(values.dtype)
    if dtype not in _FLOATS:
        raise TypeError(f"values must be float32, float64, bfloat16 or float16, got {dtype.name}")
    for name in ("rewards", "importance"):
        if np.dtype(named[name].dtype) != dtype:
            raise TypeError(f"{name} has dtype {np.dtype(named[name].dtype).name} but values has "
                            f"{dtype.name}; all arrays must share one dtype")
    flags = np.dtype(named["dones"].dtype)
    if flags != dtype and flags not in _FLAGS:
        raise TypeError(f"dones has dtype {flags.name}; expected bool, uint8 or the float inputs' "
                        f"dtype {dtype.name}")
    return dtype


def _as_handler_inputs(named: dict, dtype: np.dtype):
    """The handlers read float32 or float64 only: bfloat16/float16 inputs go up to float32
    (the core's arithmetic for them too) and bool/uint8 dones become 0/1 floats
    (non-zero means done), converted by XLA on the arrays' device."""
    compute = dtype if dtype in _TARGETS else np.dtype(np.float32)
    out = [x if x.dtype == compute else x.astype(compute)
           for x in (named["values"], named["rewards"])]
    dones = named["dones"]
    if dones.dtype != compute:
        dones = (dones != 0).astype(compute)
    importance = named["importance"]
    return out + [dones, importance if importance.dtype == compute else importance.astype(compute)]


def _parameter(value, name: str, upper) -> float:
    if isinstance(value, bool) or not (isinstance(value, numbers.Real) or getattr(value, "ndim", None) == 0):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    try:
        value = float(value)
    except jax.errors.ConcretizationTypeError:
        raise TypeError(
            f"{name} must be a concrete number, not a traced value: it is compiled into the call "
            f"as an XLA attribute. Under jax.jit, pass it through static_argnames.") from None
    if not math.isfinite(value) or value < 0.0 or (upper is not None and value > upper):
        expected = "in [0, 1]" if upper is not None else ">= 0"
        raise ValueError(f"{name} must be finite and {expected}, got {value:g}")
    return value


@functools.partial(jax.custom_jvp, nondiff_argnums=(4, 5, 6, 7))
def _puff_advantage(values, rewards, dones, importance, gamma, gae_lambda, rho_clip, c_clip):
    dtype = np.dtype(values.dtype)
    # Attributes in the arrays' precision: float32 for float32 (np.float32, the
    # handler's attribute type), float64 under x64 so no digit of gamma is lost.
    scalar = dtype.type
    call = jax.ffi.ffi_call(_TARGETS[dtype], jax.ShapeDtypeStruct(values.shape, dtype),
                            vmap_method="broadcast_all")
    return call(values, rewards, dones, importance, gamma=scalar(gamma),
                gae_lambda=scalar(gae_lambda), rho_clip=scalar(rho_clip), c_clip=scalar(c_clip))


@_puff_advantage.defjvp
def _puff_advantage_jvp(gamma, gae_lambda, rho_clip, c_clip, primals, tangents):
    raise ValueError(_NOT_DIFFERENTIABLE)


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
    clips ``>= 0``. Shapes, dtypes and scalars are checked before lowering, with the
    same ``TypeError``/``ValueError`` messages as :func:`puffadv.compute_puff_advantage`.

    ``jax.vmap`` over any number of leading batch axes runs one call over all rows
    (``vmap_method="broadcast_all"``: an unbatched argument is broadcast first).

    Not differentiable, by design: advantages are targets. ``jax.grad`` through an
    input that carries a gradient raises ``ValueError``; inputs wrapped in
    ``jax.lax.stop_gradient`` (or not differentiated at all) are fine.
    """
    named = {name: _array(x, name) for name, x in
             (("values", values), ("rewards", rewards), ("dones", dones), ("importance", importance))}
    dtype = _check_arrays(named)
    params = (_parameter(gamma, "gamma", 1.0), _parameter(gae_lambda, "gae_lambda", 1.0),
              _parameter(rho_clip, "rho_clip", None), _parameter(c_clip, "c_clip", None))
    _register()
    return _puff_advantage_jit(*_as_handler_inputs(named, dtype), *params)
