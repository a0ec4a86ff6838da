"""The standard advantage conventions (GAE, TD(lambda) returns, V-trace) as
TorchRL, Stable-Baselines3, CleanRL and rlax define them, with termination and
truncation kept apart, and the fused outputs they share with the puff advantage.
docs/conventions.md maps each library's arguments to these."""
from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import numpy as np

from . import _core, _dispatch, _frameworks


class Estimate(NamedTuple):
    """What gae(), td_lambda_returns() and compute_puff_advantage(..., fused) return.
    Outputs that were not requested are None."""
    advantages: Any
    returns: Any
    abs_sums: Any = None     #: [B]: sum over time of |advantages| (prioritised replay)
    sums: Any = None         #: [B]: sum over time of advantages
    square_sums: Any = None  #: [B]: sum over time of advantages**2


class VTraceEstimate(NamedTuple):
    """What vtrace() returns: the value targets vs and IMPALA's policy-gradient
    advantages; the sums are over the pg advantages. Unrequested outputs are None."""
    vs: Any
    pg_advantages: Any
    abs_sums: Any = None
    sums: Any = None
    square_sums: Any = None


_REDUCED = {"bfloat16", "float16"}


def _dtype_name(x) -> str:
    return str(getattr(x, "dtype", "")).rsplit(".", 1)[-1]


def _output_dtype(framework: str, like):
    """float32 for bfloat16/float16 inputs (the arithmetic is float32, and a
    bf16 advantage keeps under 3 significant digits), else the input's dtype."""
    if _dtype_name(like) not in _REDUCED:
        return like.dtype
    if framework == "torch":
        import torch
        return torch.float32
    if framework == "jax":
        return np.float32
    return np.float32


def _empty(framework: str, like, shape, dtype):
    """A fresh contiguous array beside `like` (same framework and device)."""
    shape = tuple(int(s) for s in shape)
    if framework == "torch":
        import torch
        return torch.empty(shape, dtype=dtype, device=like.device)
    if framework == "cupy":
        import cupy
        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=dtype)
    if framework == "jax" and _frameworks.is_gpu(like):
        import jax.numpy as jnp
        return jnp.zeros(shape, dtype=dtype, device=like.device) + 0
    if framework in ("numpy", "jax") or not _frameworks.is_gpu(like):
        return np.empty(shape, dtype=np.dtype(dtype) if framework != "dlpack" else np.float32)
    raise TypeError(f"cannot allocate an output beside a {_frameworks.describe(like)} on a GPU; "
                    f"pass the output arrays explicitly")


def output_like(framework: str, like):
    """The default advantages output for `like` (see _output_dtype)."""
    if _dtype_name(like) not in _REDUCED:
        return _frameworks.empty_like(framework, like)
    return _empty(framework, like, like.shape, _output_dtype(framework, like))


def _check_time_axis(time_axis) -> int:
    if isinstance(time_axis, bool) or not isinstance(time_axis, numbers.Integral):
        raise TypeError(f"time_axis must be an int (0: time-major [T, B], 1: batch-major [B, T]), "
                        f"got {_frameworks.describe(time_axis)}")
    return int(time_axis)


def _batch_size(x, time_axis: int) -> int:
    shape = tuple(getattr(x, "shape", ()))
    if len(shape) != 2:
        return shape[0] if shape else 0  # the core names the wrong ndim
    return shape[1] if time_axis in (0, -2) else shape[0]


def _want(spec, name: str):
    """An output argument: True (allocate), False/None (skip) or an array (write into it)."""
    if spec is None or spec is False:
        return None
    return spec


def _call(kernel, framework, inputs, outputs, scalars, stream):
    """call_core with optional (None) arrays: only present ones go through the
    dispatcher (and any host fallback), the kernel gets them back in place."""
    present_in = [i for i, x in enumerate(inputs) if x is not None]
    present_out = [i for i, x in enumerate(outputs) if x is not None]

    def bound(*args):
        full_in, full_out = [None] * len(inputs), [None] * len(outputs)
        for i, x in zip(present_in, args[:len(present_in)]):
            full_in[i] = x
        rest = args[len(present_in):]
        for i, x in zip(present_out, rest[:len(present_out)]):
            full_out[i] = x
        kernel(*full_in, *full_out, *rest[len(present_out):])

    _dispatch.call_core(bound, framework, [inputs[i] for i in present_in],
                        [outputs[i] for i in present_out], scalars, stream)


def _allocate(framework, rewards, values, time_axis, specs):
    """Resolves output specs into arrays: [rows, horizon]-shaped like rewards, or [B] sums."""
    if framework == "dlpack" and any(_want(spec, name) is True for name, spec in specs.items()):
        # A plain producer may have no .shape or .dtype: allocate like its NumPy host view.
        framework = "numpy"
        rewards, values = _frameworks.host_like(rewards, "rewards"), _frameworks.host_like(values, "values")
    out = {}
    for name, spec in specs.items():
        spec = _want(spec, name)
        if spec is True:
            if name in ("abs_sums", "sums", "square_sums"):
                dtype = np.float64 if _dtype_name(values) == "float64" else np.float32
                if framework == "torch":
                    import torch
                    dtype = torch.float64 if dtype is np.float64 else torch.float32
                spec = _empty(framework, values, (_batch_size(rewards, time_axis),), dtype)
            else:
                spec = _empty(framework, values, getattr(rewards, "shape", ()),
                              _output_dtype(framework, values))
            out[name] = (spec, True)
        elif spec is not None:
            out[name] = (spec, False)
    return out


def _estimate(kind, rewards, values, terminated, truncated, last_value, bootstrap_values, importance,
              gamma, lam, lambda_name, rho_clip, c_clip, rho_pg_clip, time_axis, specs, stream):
    named = {"rewards": rewards, "values": values, "terminated": terminated}
    for name, x in (("truncated", truncated), ("last_value", last_value),
                    ("bootstrap_values", bootstrap_values), ("importance", importance)):
        if x is not None:
            named[name] = x
    for name, spec in specs.items():
        if spec is not None and spec is not True and spec is not False:
            named[name] = spec
    framework = _frameworks.require_arrays(named)
    time_axis = _check_time_axis(time_axis)
    scalars = [_frameworks.real_parameter(p, n) for p, n in
               ((gamma, "gamma"), (lam, lambda_name), (rho_clip, "rho_clip"), (c_clip, "c_clip"),
                (rho_pg_clip, "rho_pg_clip"))]
    outs = _allocate(framework, rewards, values, time_axis, specs)
    order = ("advantages", "returns", "abs_sums", "sums", "square_sums")
    arrays = [outs[n][0] if n in outs else None for n in order]
    _call(_core.standard_estimate, framework,
          [rewards, values, terminated, truncated, last_value, bootstrap_values, importance], arrays,
          [kind, scalars[0], scalars[1], scalars[2], scalars[3], scalars[4], time_axis, lambda_name],
          stream)
    return [None if n not in outs else (_frameworks.finish(framework, values, outs[n][0])
                                        if outs[n][1] else outs[n][0]) for n in order]


def gae(rewards, values, terminated, truncated=None, *, last_value=None, bootstrap_values=None,
        importance=None, gamma=0.99, gae_lambda=0.95, rho_clip=1.0, c_clip=1.0, time_axis=-1,
        advantages=True, returns=True, abs_sums=False, sums=False, square_sums=False,
        stream=None) -> Estimate:
    """Generalised advantage estimation as TorchRL, SB3, CleanRL and rlax define it.

    ``rewards[t]``, ``terminated[t]`` and ``truncated[t]`` belong to the step that
    produced them (action at ``t``). For every row, backwards over time::

        V'_t    = values[t+1] inside the buffer; last_value (or bootstrap_values[t])
                  after the last step; bootstrap_values[t] where truncated[t]
        delta_t = rho_t * (rewards[t] + gamma * (1 - terminated[t]) * V'_t - values[t])
        A_t     = delta_t + gamma * gae_lambda * c_t * (1 - done_t) * A_{t+1}

    with ``done = terminated | truncated``, ``rho_t = min(importance[t], rho_clip)``,
    ``c_t = min(importance[t], c_clip)`` (both 1 without importance).

    Arrays are 2-D: ``[B, T]`` with ``time_axis=-1`` (default) or ``[T, B]`` with
    ``time_axis=0``, read through their strides, never copied. Floats are
    float32, float64, bfloat16 or float16 (one dtype, float32 arithmetic for the
    16-bit ones); flags bool, uint8 or that float dtype. ``last_value`` is ``[B]``;
    ``bootstrap_values`` has the rewards' shape and is read only at truncated
    steps and the last step. Pass exactly one of them; ``truncated`` needs
    ``bootstrap_values``. A step both terminated and truncated is a ValueError.

    Outputs (each True to allocate, False to skip, or an array to write into):
    ``advantages``, ``returns`` (advantages + values), and ``[B]`` row sums of the
    advantages ``abs_sums``, ``sums``, ``square_sums``. Allocated outputs have the
    rewards' shape, and the inputs' dtype, except float32 for bfloat16/float16
    inputs. Returns an :class:`Estimate`.
    """
    result = _estimate("gae", rewards, values, terminated, truncated, last_value, bootstrap_values,
                       importance, gamma, gae_lambda, "gae_lambda", rho_clip, c_clip, 1.0, time_axis,
                       {"advantages": advantages, "returns": returns, "abs_sums": abs_sums,
                        "sums": sums, "square_sums": square_sums}, stream)
    return Estimate(*result)


def td_lambda_returns(rewards, values, terminated, truncated=None, *, last_value=None,
                      bootstrap_values=None, importance=None, gamma=0.99, lambda_=0.95, rho_clip=1.0,
                      c_clip=1.0, time_axis=-1, returns=True, advantages=False, abs_sums=False,
                      sums=False, square_sums=False, stream=None) -> Estimate:
    """TD(lambda) returns ``G_t = r_t + gamma (1 - terminated_t) [(1 - lambda) V'_t + lambda G_{t+1}]``,
    with ``G_{t+1}`` replaced by ``V'_t`` where an episode ends (TorchRL's
    ``td_lambda_return_estimate``, rlax's ``lambda_returns``). Equal to
    ``gae(...).returns``; with importance ratios, the lambda-V-trace targets.
    Arguments as :func:`gae`; ``advantages`` here are ``G - values``."""
    result = _estimate("td_lambda", rewards, values, terminated, truncated, last_value,
                       bootstrap_values, importance, gamma, lambda_, "lambda_", rho_clip, c_clip, 1.0,
                       time_axis, {"advantages": advantages, "returns": returns, "abs_sums": abs_sums,
                                   "sums": sums, "square_sums": square_sums}, stream)
    return Estimate(*result)


def vtrace(rewards, values, terminated, truncated=None, *, last_value=None, bootstrap_values=None,
           importance=None, gamma=0.99, lambda_=1.0, rho_clip=1.0, c_clip=1.0, rho_pg_clip=1.0,
           time_axis=-1, vs=True, pg_advantages=True, abs_sums=False, sums=False, square_sums=False,
           stream=None) -> VTraceEstimate:
    """V-trace (IMPALA): targets ``vs_t = V_t + A_t`` from the recurrence of
    :func:`gae` with ``c_t = min(importance[t], c_clip)`` and ``lambda_`` (1 in
    IMPALA), and the policy-gradient advantages::

        pg_t = min(importance[t], rho_pg_clip) * (rewards[t] + gamma (1 - terminated[t]) vs'_t - values[t])

    where ``vs'_t`` is ``vs_{t+1}`` inside an episode and the bootstrap ``V'_t``
    where it ends (truncation, last step). ``importance`` is the ratio pi/mu
    (``exp(log_pi - log_mu)``), 1 when omitted. The sums are over ``pg_t``.
    Returns a :class:`VTraceEstimate`; arguments otherwise as :func:`gae`."""
    result = _estimate("vtrace", rewards, values, terminated, truncated, last_value, bootstrap_values,
                       importance, gamma, lambda_, "lambda_", rho_clip, c_clip, rho_pg_clip, time_axis,
                       {"advantages": pg_advantages, "returns": vs, "abs_sums": abs_sums,
                        "sums": sums, "square_sums": square_sums}, stream)
    return VTraceEstimate(result[1], result[0], *result[2:])


def puff_fused(framework, values, rewards, dones, importance, advantages, specs, params, stream):
    """compute_puff_advantage with fused outputs (called from _api.py). Returns an Estimate."""
    named = {name: spec for name, spec in specs.items()
             if spec is not None and spec is not True and spec is not False}
    if named:
        _frameworks.require_arrays({"values": values, **named})
    outs = _allocate(framework, values, values, -1, specs)
    order = ("returns", "abs_sums", "sums", "square_sums")
    arrays = [outs[n][0] if n in outs else None for n in order]
    _call(_core.puff_advantage_fused, framework, [values, rewards, dones, importance],
          [advantages, *arrays], params, stream)
    fused = [None if n not in outs else (_frameworks.finish(framework, values, outs[n][0])
                                         if outs[n][1] else outs[n][0]) for n in order]
    return fused
