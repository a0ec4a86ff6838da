"""puffadv.jax.linear_recurrence: the engine's scan as an XLA FFI call
(``puffadv_linear_recurrence_*``, src/jax/ffi_handlers.cpp), row-sharded like the
estimator family (_jax_sharding.RowwiseCall) and differentiable through
jax.custom_vjp (_autograd.jax_vjp) with the vjp of _recurrence_vjp.py, whose
backward is one more call of the same FFI op. Imported by puffadv.jax."""
from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np

from . import _core, _frameworks, _jax_common, _vjp
from ._autograd import JaxOps, jax_vjp
from ._eager import as_views
from ._jax_sharding import RowwiseCall, operands_alike, result_type
from ._recurrence import _REQUIRED, check_direction, is_scalar
from ._recurrence_vjp import linear_recurrence_vjp

_NAMES = ("inputs", "decay", "seed")
_LABEL = "its last axis, the horizon"  # the arrays reach the call batch-major


def _per_shard(static, inputs, decay, *seed):
    """The custom call on whatever block of rows XLA hands it: (y,)."""
    (reverse,) = static
    dtype = np.dtype(inputs.dtype)
    call = jax.ffi.ffi_call(f"puffadv_linear_recurrence_{'f64' if dtype == np.float64 else 'f32'}",
                            result_type(inputs, dtype), vmap_method="broadcast_all")
    return (call(inputs, decay, *seed, reverse=np.bool_(reverse)),)


_FUNCTION = "linear_recurrence"
_CALL = RowwiseCall(_per_shard, f"puffadv.jax.{_FUNCTION}")


def _primal(static, inputs, decay, seed):
    """y of batch-major [.., B, T] arrays; static = (reverse, time_axis), time_axis 1 here."""
    arrays = (inputs, decay) if seed is None else (inputs, decay, seed)
    return _CALL((bool(static[0]),), arrays, _NAMES[:len(arrays)], _LABEL)[0]


def _ops(static):
    """The backward's namespace: its scan is this differentiable call again (double grad works)."""
    return JaxOps(lambda x, a, s, reverse: _differentiable((bool(reverse), 1), x, a, s))


_custom_vjp = jax_vjp(_primal, linear_recurrence_vjp, _ops, ("reverse", "time_axis"), _NAMES)


def _differentiable(static, inputs, decay, seed):
    """The custom_vjp on operands typed alike over manual and Explicit mesh axes (operands_alike)."""
    return _custom_vjp(static, *operands_alike((inputs, decay, seed)))


_differentiable_jit = jax.jit(_differentiable, static_argnums=(0,))


def _decay_array(decay, like):
    if _frameworks.framework_of(decay) == "torch":  # its number, or refused by name (_scalar)
        decay = _jax_common._scalar(decay, "decay", _FUNCTION)
    if isinstance(decay, bool) or np.dtype(getattr(decay, "dtype", np.float32)) == np.bool_:
        raise TypeError(f"decay must be a real number or an array, got {type(decay).__name__}")
    return jnp.broadcast_to(jnp.asarray(decay, dtype=like.dtype), like.shape)


def linear_recurrence(inputs, decay, *, reverse=_REQUIRED, time_axis=_REQUIRED, seed=None):
    """The linear recurrence (same numbers as :func:`puffadv.linear_recurrence`), for every row::

        reverse=False:  y_t = inputs[t] + decay[t] y_{t-1},   y_{-1} = seed
        reverse=True:   y_t = inputs[t] + decay[t] y_{t+1},   y_T    = seed

    as an XLA custom call. ``inputs``: ``[B, T]`` with ``time_axis=1`` (or -1),
    ``[T, B]`` with ``time_axis=0`` (or -2), or with more batch axes as :func:`puffadv.gae`
    (``[*B, T]``, ``[T, *B]``, ``[*B, T, 1]``); ``reverse`` and ``time_axis`` are required.
    ``decay``: the inputs' shape, or a scalar (a number or 0-d array) for every step;
    ``seed``: ``[B]`` (absent: 0). float32, float64 (x64), bfloat16/float16 (float32
    arithmetic and result). Works under ``jax.jit`` and ``jax.vmap``; arrays sharded
    over rows stay sharded, the backward too. Differentiable in inputs, decay and seed
    (``jax.custom_vjp``: the backward is the same recurrence run the other way)."""
    check_direction(reverse, time_axis)
    if isinstance(time_axis, bool) or not isinstance(time_axis, numbers.Integral):
        raise TypeError(f"time_axis must be an int (0: time-major [T, B], 1: batch-major [B, T]), "
                        f"got {type(time_axis).__name__}")
    time_axis = int(time_axis)
    x = _jax_common._array(inputs, "inputs", _FUNCTION)
    a = _decay_array(decay, x) if is_scalar(decay) else _jax_common._array(decay, "decay", _FUNCTION)
    s = None if seed is None else _jax_common._array(seed, "seed", _FUNCTION)
    # [*B, T], [T, *B], [*B, T, 1]: the 2-D views every surface reads (_shapes), reshaped back below.
    views, _, plan, time_axis = as_views("jax", {"rewards": x, "decay": a, "last_value": s}, {}, time_axis,
                                         {"rewards": "inputs", "decay": "decay", "last_value": "seed"})
    x, a, s = views["rewards"], views["decay"], views["last_value"]
    named = {"rewards": (x, "inputs"), "decay": (a, "decay"), "last_value": (s, "seed")}
    specs = {role: (*_jax_common._spec(v), name) for role, (v, name) in named.items() if v is not None}
    _core.jax_check_standard("linear_recurrence", specs, 1.0, 1.0, 1.0, 1.0, 1.0, 1, False, False, time_axis,
                             "lambda_", False)
    _jax_common._register()
    compute = _jax_common._compute_dtype(x.dtype)
    time_major = time_axis in (0, -2)
    x, a = (jnp.swapaxes(v, 0, 1) if time_major else v for v in
            (_jax_common._as_float(x, compute), _jax_common._as_float(a, compute)))
    s = None if s is None else _jax_common._as_float(s, compute)
    y = _differentiable_jit((bool(reverse), 1), x, a, s)
    y = jnp.swapaxes(y, 0, 1) if time_major else y
    return y if plan is None else y.reshape(plan.shape)


def _scan_rows(inputs, decay, reverse: bool):
    """The estimators' backward scan on [rows, horizon] JAX arrays (_vjp.SCANS)."""
    return linear_recurrence(inputs, decay, reverse=reverse, time_axis=1)


_vjp.SCANS["jax"] = _scan_rows
