"""The standard advantage conventions (GAE, TD(lambda) returns, V-trace) as
TorchRL, Stable-Baselines3, CleanRL and rlax define them, with termination and
truncation kept apart, and the fused outputs they share with the puff advantage.
docs/conventions.md maps each library's arguments to these."""
from __future__ import annotations

import numbers
from typing import Any, NamedTuple, Optional, Union

import numpy as np

from . import _core, _dispatch, _frameworks
from ._types import Array, Real, Stream

_Output = Union[Array, bool, None]  # an output argument: True allocates, False skips, an array is written


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


_dtype_names: dict = {}  # dtype object -> its short name: str(np.dtype) alone costs ~1 us


def _dtype_name(x) -> str:
    """'float32', 'bfloat16', ... (NumPy, torch, CuPy and JAX spellings agree)."""
    dtype = getattr(x, "dtype", "")
    try:
        return _dtype_names[dtype]
    except KeyError:
        name = _dtype_names[dtype] = str(dtype).rsplit(".", 1)[-1]
        return name
    except TypeError:  # an unhashable dtype attribute
        return str(dtype).rsplit(".", 1)[-1]


def _is_reduced(like) -> bool:
    return _dtype_name(like) in _REDUCED


def _output_dtype(framework: str, like):
    """float32 for bfloat16/float16 inputs (the arithmetic is float32, and a
    bf16 advantage keeps under 3 significant digits), else the input's dtype."""
    if not _is_reduced(like):
        return like.dtype
    if framework == "torch":
        import torch
        return torch.float32
    if framework == "jax":
        return np.float32
    return np.float32


def _empty(framework: str, like, shape, dtype):
    """A fresh contiguous array beside `like` (same framework and device)."""
    if framework == "numpy":
        return np.empty(shape, dtype=dtype)
    if framework == "torch":
        return _frameworks.torch_empty(like, shape, dtype)
    shape = tuple(int(s) for s in shape)
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
    if framework == "torch":
        return _frameworks.torch_empty_like(like, _output_dtype(framework, like))
    if not _is_reduced(like):
        return _frameworks.empty_like(framework, like)
    return _empty(framework, like, like.shape, _output_dtype(framework, like))


def _check_time_axis(time_axis) -> int:
    if type(time_axis) is int:
        return time_axis
    if isinstance(time_axis, bool) or not isinstance(time_axis, numbers.Integral):
        raise TypeError(f"time_axis must be an int (0: time-major [T, B], 1: batch-major [B, T]), "
                        f"got {_frameworks.describe(time_axis)}")
    return int(time_axis)


def _batch_size(x, time_axis: int) -> int:
    shape = tuple(getattr(x, "shape", ()))
    if len(shape) != 2:
        return shape[0] if shape else 0  # the core names the wrong ndim
    return shape[1] if time_axis in (0, -2) else shape[0]


_STANDARD_NAMES = ("rewards", "values", "terminated", "truncated", "last_value", "bootstrap_values",
                   "importance", "advantages", "returns", "abs_sums", "sums", "square_sums")
_VTRACE_OUTPUT_NAMES = ("pg_advantages", "vs", "abs_sums", "sums", "square_sums")
_SUMS = (False, False, True, True, True)  # which of the five outputs are [B] sums


class _Kind(NamedTuple):
    """How one public function calls the core's standard_estimate: the core's
    kind, and the caller's names for everything the Python layer checks."""
    label: str            # this entry's key in _KINDS (what the torch.compile operator carries)
    core: str             # the core's estimator name
    lambda_name: str      # the caller's name of lambda (the core names it in its errors)
    family: bool          # eleven inputs (_FAMILY_INPUTS) and the options n, log_probs, reset_at_start
    required: int         # how many inputs, first in `order`, must be arrays
    order: Optional[tuple]  # core indices of the inputs in the caller's order (None: the core's own)
    check_names: tuple    # the caller's names of the inputs in `order`, then of the five outputs
    scalar_names: tuple   # gamma, lambda, rho_clip, c_clip, rho_pg_clip
    output_names: tuple   # the caller's names of the five outputs


# The core's inputs: the first seven are standard_estimate's positional arrays, the
# others its keyword arrays (the estimator family of issue 20).
_FAMILY_INPUTS = (*_STANDARD_NAMES[:7], "next_values", "target_probs", "behaviour_probs", "greedy")
_KINDS: dict = {}


def _kind(label, core, required, renamed=None, outputs=_STANDARD_NAMES[7:], lambda_name="lambda_", family=True):
    """Registers a _Kind: `required` are the core's names of the inputs that must be arrays (in
    the caller's order), `renamed` the caller's name of each core input that it calls otherwise."""
    inputs = _FAMILY_INPUTS if family else _STANDARD_NAMES[:7]
    order = (*(inputs.index(n) for n in required), *(i for i, n in enumerate(inputs) if n not in required))
    names = tuple((renamed or {}).get(n, n) for n in inputs)
    natural = order == tuple(range(len(inputs)))
    kind = _Kind(label, core, lambda_name, family, len(required), None if natural else order,
                 (*(names[i] for i in order), *outputs), ("gamma", lambda_name, "rho_clip", "c_clip", "rho_pg_clip"),
                 outputs)
    _KINDS[label] = kind
    return kind


_GAE = _kind("gae", "gae", ("rewards", "values", "terminated"), lambda_name="gae_lambda", family=False)
_TD_LAMBDA = _kind("td_lambda", "td_lambda", ("rewards", "values", "terminated"), family=False)
_VTRACE = _kind("vtrace", "vtrace", ("rewards", "values", "terminated"), outputs=_VTRACE_OUTPUT_NAMES, family=False)
_DISCOUNTED = _kind("discounted_returns", "discounted_returns", ("rewards", "terminated"))
_N_STEP = _kind("n_step_returns", "n_step_returns", ("rewards", "values", "terminated"))
_RETRACE = _kind("retrace", "retrace", ("rewards", "values", "next_values", "terminated"), {"values": "q_values"})
_RETRACE_LOG = _kind("retrace_log", "retrace", ("rewards", "values", "next_values", "terminated"),
                     {"values": "q_values", "target_probs": "target_log_probs",
                      "behaviour_probs": "behaviour_log_probs"})
_Q_LAMBDA = _kind("q_lambda", "q_lambda", ("rewards", "values", "next_values", "terminated"), {"values": "q_values"})
_EPISODIC = _kind("episodic_sum", "episodic_sum", ("rewards", "terminated"),
                  {"rewards": "inputs", "terminated": "dones", "last_value": "seed"},
                  ("out", "returns", "abs_sums", "sums", "square_sums"))


def _given(specs: tuple) -> list:
    """The output arrays the caller gave: each spec that is not True (allocate), False or None (skip)."""
    return [None if spec is True or spec is False else spec for spec in specs]


def _allocate(framework, rewards, values, time_axis, specs: tuple, outputs: list) -> list:
    """The output arrays: `outputs` (the given ones, from _given) with each True
    spec's array allocated in place ([rows, horizon] like rewards, or [B] sums).
    `values` decides the device and dtype (rewards where there are no values)."""
    if values is None:
        values = rewards
    if framework == "dlpack" and any(spec is True for spec in specs):
        # A plain producer may have no .shape or .dtype: allocate like what the core read of it.
        framework = "numpy"
        rewards, values = _frameworks.host_like(rewards, "rewards"), _frameworks.host_like(values, "values")
    series = None  # allocates one [rows, horizon] output; made on first use
    for k, spec in enumerate(specs):
        if spec is True:
            if _SUMS[k]:
                dtype = np.float64 if _dtype_name(values) == "float64" else np.float32
                if framework == "torch":
                    import torch
                    dtype = torch.float64 if dtype is np.float64 else torch.float32
                outputs[k] = _empty(framework, values, (_batch_size(rewards, time_axis),), dtype)
            else:
                if series is None:
                    series = _series_allocator(framework, rewards, values)
                outputs[k] = series()
    return outputs


def _series_allocator(framework, rewards, values):
    """A function allocating a [rows, horizon] output: rewards' shape, values'
    device and output dtype, everything decided once per call."""
    shape, dtype = getattr(rewards, "shape", ()), _output_dtype(framework, values)
    if framework == "torch" and shape == values.shape:
        return lambda: _frameworks.torch_empty_like(values, dtype)
    return lambda: _empty(framework, values, shape, dtype)


def _finish(framework, values, specs, outputs) -> list:
    """Allocated outputs handed back in the caller's framework (JAX from host arrays)."""
    if framework != "jax":
        return outputs
    return [_frameworks.finish(framework, values, out) if spec is True else out
            for spec, out in zip(specs, outputs)]


def _family_core(rewards, values, terminated, truncated, last_value, bootstrap_values, importance,
                 next_values, target_probs, behaviour_probs, greedy, advantages, returns, abs_sums, sums,
                 square_sums, kind, gamma, lambda_, rho_clip, c_clip, rho_pg_clip, time_axis, lambda_name,
                 n, log_probs, reset_at_start, stream):
    """_core.standard_estimate taking the family's keyword arrays positionally, so that
    _dispatch.call_core (and its CPU fallback, which copies every input) sees all eleven."""
    _core.standard_estimate(rewards, values, terminated, truncated, last_value, bootstrap_values, importance,
                            advantages, returns, abs_sums, sums, square_sums, kind, gamma, lambda_, rho_clip,
                            c_clip, rho_pg_clip, time_axis, lambda_name, stream, next_values=next_values,
                            target_probs=target_probs, behaviour_probs=behaviour_probs, greedy=greedy, n=n,
                            log_probs=log_probs, reset_at_start=reset_at_start)


# The GPU backends produce these kinds' row sums only beside the advantages (the window and
# the lookahead kernels sum what they store: src/gpu/conventions_family.cuh refuses the rest).
_GPU_SUMS_NEED_ADVANTAGES = frozenset({"n_step_returns", "retrace", "q_lambda"})


def _wanted(spec) -> bool:
    return spec is not False and spec is not None


def _sums_without_advantages(kind: _Kind, specs: tuple) -> bool:
    """Row sums of a kind in _GPU_SUMS_NEED_ADVANTAGES requested without the advantages."""
    return kind.core in _GPU_SUMS_NEED_ADVANTAGES and not _wanted(specs[0]) and any(map(_wanted, specs[2:]))


def _advantages_for_sums(kind: _Kind, framework: str, rewards, specs: tuple) -> bool:
    """Whether to allocate an advantages array the caller did not ask for: sums without them
    (_sums_without_advantages) on a GPU, in a framework that allocates there (a plain DLPack
    producer cannot: its call goes on as asked). _compiled.estimate decides the same for torch."""
    return (_sums_without_advantages(kind, specs) and framework in ("torch", "cupy", "jax")
            and _frameworks.is_gpu(rewards))


def _estimate(kind: _Kind, inputs: tuple, specs: tuple, scalars: tuple, time_axis, stream, options=None):
    """The shared body of every estimator but the puff advantage. `inputs`: the
    seven (or, for the family's kinds, eleven) input arrays in the core's order
    (None: absent); `specs`: advantages, returns, abs_sums, sums, square_sums
    (True, False, None or an array); `scalars`: gamma, lambda, rho_clip, c_clip,
    rho_pg_clip; `options` (family kinds only): n, log_probs, reset_at_start.
    Returns the five outputs (None: not asked for)."""
    if type(inputs[0]) is not np.ndarray and _frameworks.torch_compiling():
        from . import _compiled
        return _compiled.estimate(kind, inputs, specs, scalars, time_axis, stream, options)
    given = _given(specs)
    required = kind.required
    if kind.order is None:
        framework = _frameworks.framework_of_call(inputs[:required], (*inputs[required:], *given),
                                                  kind.check_names)
    else:
        ordered = [inputs[i] for i in kind.order]
        framework = _frameworks.framework_of_call(tuple(ordered[:required]), (*ordered[required:], *given),
                                                  kind.check_names)
    time_axis = _check_time_axis(time_axis)
    scalars = _frameworks.real_parameters(scalars, kind.scalar_names)
    rewards, values = inputs[0], inputs[1]
    hidden = _advantages_for_sums(kind, framework, rewards, specs)  # the advantages only the kernel sees
    if hidden:
        specs = (True, *specs[1:])
    outputs = _allocate(framework, rewards, values, time_axis, specs, given)
    if kind.family:
        kernel, parameters = _family_core, (kind.core, *scalars, time_axis, kind.lambda_name, *options)
    else:
        kernel, parameters = _core.standard_estimate, (kind.core, *scalars, time_axis, kind.lambda_name)
    _dispatch.call_core(kernel, framework, inputs, outputs, parameters, stream, kind.output_names)
    outputs = _finish(framework, rewards if values is None else values, specs, outputs)
    if hidden:
        outputs = [None, *outputs[1:]]
    return outputs


def gae(rewards: Array, values: Array, terminated: Array, truncated: Optional[Array] = None, *,
        last_value: Optional[Array] = None, bootstrap_values: Optional[Array] = None,
        importance: Optional[Array] = None, gamma: Real = 0.99, gae_lambda: Real = 0.95,
        rho_clip: Real = 1.0, c_clip: Real = 1.0, time_axis: int = -1, advantages: _Output = True,
        returns: _Output = True, abs_sums: _Output = False, sums: _Output = False,
        square_sums: _Output = False, stream: Optional[Stream] = None) -> Estimate:
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
    return Estimate(*_estimate(
        _GAE, (rewards, values, terminated, truncated, last_value, bootstrap_values, importance),
        (advantages, returns, abs_sums, sums, square_sums), (gamma, gae_lambda, rho_clip, c_clip, 1.0),
        time_axis, stream))


def td_lambda_returns(rewards: Array, values: Array, terminated: Array, truncated: Optional[Array] = None,
                      *, last_value: Optional[Array] = None, bootstrap_values: Optional[Array] = None,
                      importance: Optional[Array] = None, gamma: Real = 0.99, lambda_: Real = 0.95,
                      rho_clip: Real = 1.0, c_clip: Real = 1.0, time_axis: int = -1,
                      returns: _Output = True, advantages: _Output = False, abs_sums: _Output = False,
                      sums: _Output = False, square_sums: _Output = False,
                      stream: Optional[Stream] = None) -> Estimate:
    """TD(lambda) returns ``G_t = r_t + gamma (1 - terminated_t) [(1 - lambda) V'_t + lambda G_{t+1}]``,
    with ``G_{t+1}`` replaced by ``V'_t`` where an episode ends (TorchRL's
    ``td_lambda_return_estimate``, rlax's ``lambda_returns``). Equal to
    ``gae(...).returns``; with importance ratios, the lambda-V-trace targets.
    Arguments as :func:`gae`; ``advantages`` here are ``G - values``."""
    return Estimate(*_estimate(
        _TD_LAMBDA, (rewards, values, terminated, truncated, last_value, bootstrap_values, importance),
        (advantages, returns, abs_sums, sums, square_sums), (gamma, lambda_, rho_clip, c_clip, 1.0),
        time_axis, stream))


def vtrace(rewards: Array, values: Array, terminated: Array, truncated: Optional[Array] = None, *,
           last_value: Optional[Array] = None, bootstrap_values: Optional[Array] = None,
           importance: Optional[Array] = None, gamma: Real = 0.99, lambda_: Real = 1.0,
           rho_clip: Real = 1.0, c_clip: Real = 1.0, rho_pg_clip: Real = 1.0, time_axis: int = -1,
           vs: _Output = True, pg_advantages: _Output = True, abs_sums: _Output = False,
           sums: _Output = False, square_sums: _Output = False,
           stream: Optional[Stream] = None) -> VTraceEstimate:
    """V-trace (IMPALA): targets ``vs_t = V_t + A_t`` from the recurrence of
    :func:`gae` with ``c_t = min(importance[t], c_clip)`` and ``lambda_`` (1 in
    IMPALA), and the policy-gradient advantages::

        pg_t = min(importance[t], rho_pg_clip) * (rewards[t] + gamma (1 - terminated[t]) vs'_t - values[t])

    where ``vs'_t`` is ``vs_{t+1}`` inside an episode and the bootstrap ``V'_t``
    where it ends (truncation, last step). ``importance`` is the ratio pi/mu
    (``exp(log_pi - log_mu)``), 1 when omitted. The sums are over ``pg_t``.
    Returns a :class:`VTraceEstimate`; arguments otherwise as :func:`gae`."""
    result = _estimate(
        _VTRACE, (rewards, values, terminated, truncated, last_value, bootstrap_values, importance),
        (pg_advantages, vs, abs_sums, sums, square_sums), (gamma, lambda_, rho_clip, c_clip, rho_pg_clip),
        time_axis, stream)
    return VTraceEstimate(result[1], result[0], *result[2:])


_PUFF_FUSED_NAMES = ("values", "returns", "abs_sums", "sums", "square_sums")


def puff_fused(framework, values, rewards, dones, importance, advantages, specs, params, stream):
    """compute_puff_advantage's fused outputs (called from _api.py, after the
    arrays, parameters and advantages): `specs` are returns, abs_sums, sums,
    square_sums. Returns those four outputs (None: not asked for)."""
    given = _given(specs)
    _frameworks.framework_of_call((values,), given, _PUFF_FUSED_NAMES)
    outputs = _allocate(framework, values, values, -1, (False, *specs), [None, *given])[1:]
    _dispatch.call_core(_core.puff_advantage_fused, framework, (values, rewards, dones, importance),
                        (advantages, *outputs), params, stream, ("advantages", *_PUFF_FUSED_NAMES[1:]))
    return _finish(framework, values, specs, outputs)
