"""puffadv.linear_recurrence: the engine's scan itself as a public function.

    y_t = inputs_t + decay_t * y_{t-1}    (reverse=False: forwards over time, y_{-1} = seed)
    y_t = inputs_t + decay_t * y_{t+1}    (reverse=True: backwards over time, y_T = seed)

decay_t multiplies the neighbour the recurrence comes from: with reverse=False
decay[t] links step t to the EARLIER step t - 1 (decay[0] multiplies the seed);
with reverse=True it links step t to the LATER step t + 1 (decay[T-1] multiplies
the seed). It is one kind of the core's one call (src/core/kinds.cpp); the
arguments are its entry LINEAR_RECURRENCE in _estimators.py. Torch tensors that
require grad go through torch.ops.puffadv.linear_recurrence, whose backward is
this same recurrence (_recurrence_vjp.py): no gradient is ever dropped.
"""
from __future__ import annotations

import numbers
from typing import Any, Optional

import numpy as np

from . import _eager, _frameworks, _parameters, _vjp
from ._arguments import call_of
from ._estimators import LINEAR_RECURRENCE
from ._types import Array, Stream

class _Required:
    """The default of a keyword the caller must pass: the layout and the direction are never guessed."""

    def __repr__(self) -> str:
        return "<required>"


_REQUIRED = _Required()

TIME_AXIS_MISSING = ("linear_recurrence needs time_axis=: 0 for time-major [T, B] arrays, 1 for batch-major "
                     "[B, T] ones (-2 and -1 say the same); it is never guessed")
REVERSE_MISSING = ("linear_recurrence needs reverse=: False for y_t = inputs_t + decay_t y_{t-1} (forwards over "
                   "time), True for y_t = inputs_t + decay_t y_{t+1} (backwards, as returns are computed); it is "
                   "never guessed")


def check_direction(reverse, time_axis) -> None:
    """The two keywords every surface requires (shared by puffadv.jax)."""
    if time_axis is _REQUIRED:
        raise TypeError(TIME_AXIS_MISSING)
    if reverse is _REQUIRED:
        raise TypeError(REVERSE_MISSING)
    if not isinstance(reverse, (bool, np.bool_)):
        raise TypeError(f"reverse must be a bool (True: backwards over time), got {_frameworks.describe(reverse)}")


def is_scalar(decay) -> bool:
    """A Python real or a 0-d array: one decay for every step (a bool is refused by broadcast_decay)."""
    if isinstance(decay, numbers.Real):
        return True
    return tuple(getattr(decay, "shape", (None,))) == ()


def _torch_differentiable(inputs, decay, seed) -> bool:
    """Whether a torch call must go through the differentiable op: grad mode on and some tensor
    requires grad, a torch.func transform (grad, vmap, ...) is running, a tensor is a
    subclass without data to read (FunctionalTensor, FakeTensor: a backward that
    torch.compile traces, which torch 2.11 does without is_compiling()), or a tensor carries
    a forward-mode tangent (the Function's jvp reads it)."""
    import torch
    if torch._C._are_functorch_transforms_active():
        return True
    if any(isinstance(x, torch.Tensor) and type(x) is not torch.Tensor for x in (inputs, decay, seed)):
        return True
    if _frameworks.torch_dual_level_open():
        from . import _torch_forward_ad
        if _torch_forward_ad.carries_tangent(inputs, decay, seed):
            return True
    return torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad
                                           for x in (inputs, decay, seed))


def broadcast_decay(framework: str, inputs, decay):
    """A scalar decay as an array of the inputs' shape, dtype and device (a 0-d tensor keeps its
    autograd history: expanded, then made contiguous for the engine's vector loads)."""
    if isinstance(decay, bool) or isinstance(getattr(decay, "dtype", None), np.dtype) and decay.dtype == np.bool_:
        raise TypeError(f"decay must be a real number or an array, got {_frameworks.describe(decay)}")
    if framework == "torch":
        import torch
        if isinstance(decay, torch.Tensor):
            return decay.to(device=inputs.device, dtype=inputs.dtype).expand(inputs.shape).contiguous()
        return torch.full(inputs.shape, _parameters.real_parameter(decay, "decay"), dtype=inputs.dtype,
                          device=inputs.device)
    if framework == "jax":
        import jax.numpy as jnp
        if _frameworks.framework_of(decay) == "torch" and getattr(decay, "ndim", None) == 0:
            decay = _parameters.real_parameter(decay, "decay")  # a derivative it carries is refused there
        return jnp.broadcast_to(jnp.asarray(decay, dtype=inputs.dtype), inputs.shape)
    if framework == "cupy":
        import cupy
        return cupy.full(inputs.shape, _parameters.real_parameter(decay, "decay"), dtype=inputs.dtype)
    value = _parameters.real_parameter(decay, "decay")
    if framework == "numpy":
        return np.full(inputs.shape, value, dtype=inputs.dtype)
    host = _frameworks.host_like(inputs, "inputs")
    return np.full(host.shape, value, dtype=host.dtype)


def _load_torch_ops(differentiable: bool) -> None:
    """torch.ops.puffadv (the op and its autograd), or an error that says the gradient would be lost."""
    try:
        from . import torch as _puffadv_torch  # noqa: F401  (loads the op library and registers its autograd)
    except ImportError as error:
        if not differentiable:
            raise
        raise RuntimeError(f"linear_recurrence got torch tensors that require grad, but torch.ops.puffadv "
                           f"cannot be loaded, so the gradient would be lost ({error}); wrap the call in "
                           f"torch.no_grad() to compute without it") from error


def linear_recurrence(inputs: Array, decay: Any, *, reverse: bool = _REQUIRED, time_axis: int = _REQUIRED,
                      seed: Optional[Array] = None, out: Optional[Array] = None,
                      stream: Optional[Stream] = None) -> Any:
    """The linear recurrence at the heart of every estimator (rl-triton's generic scan,
    ``jax.lax.associative_scan`` of affine maps), for every row::

        reverse=False:  y_t = inputs[t] + decay[t] y_{t-1},   y_{-1} = seed
        reverse=True:   y_t = inputs[t] + decay[t] y_{t+1},   y_T    = seed

    ``decay[t]`` multiplies the neighbour the step is computed from: forwards,
    ``decay[0]`` multiplies the seed and ``decay[t]`` links step t to step t - 1;
    backwards, ``decay[T-1]`` multiplies the seed and ``decay[t]`` links step t to
    step t + 1. ``decay = gamma (1 - done)`` gives discounted returns
    (``reverse=True``), ``decay = gamma lambda (1 - done)`` over TD errors GAE.

    ``inputs``: ``[B, T]`` with ``time_axis=1`` (or -1) or ``[T, B]`` with
    ``time_axis=0`` (or -2), or with more batch axes as :func:`gae` (``[*B, T]``,
    ``[T, *B]``, ``[*B, T, 1]``: views, never copies, the result in the inputs'
    shape; ``decay`` and ``seed`` alike); ``time_axis`` and ``reverse`` are required keywords
    (TypeError when missing: neither the layout nor the direction is guessed).
    ``decay``: an array of the inputs' shape and dtype, or a scalar (a real number
    or 0-d array) for every step. ``seed``: ``[B]``, the y outside the row (absent:
    0). float32, float64, bfloat16/float16 (float32 arithmetic and result); any
    strides. ``out`` is written when given, else allocated. Returns y.

    Differentiable: torch tensors that require grad (inputs, decay, seed) go through
    ``torch.ops.puffadv.linear_recurrence``, whose backward runs the same recurrence
    the other way (``puffadv.jax.linear_recurrence`` likewise, under ``jax.grad``).
    """
    check_direction(reverse, time_axis)
    framework = _frameworks.framework_of(inputs)
    if framework == "torch":
        differentiable = _torch_differentiable(inputs, decay, seed)
        if differentiable or _frameworks.torch_compiling():
            _load_torch_ops(differentiable)
            from . import _torch_recurrence
            return _torch_recurrence.through_op(inputs, decay, seed, out, stream, reverse, time_axis,
                                                differentiable)
    if is_scalar(decay) and framework not in (None, "jax tracer"):  # a tracer: refused by name below
        decay = broadcast_decay(framework, inputs, decay)
    args = {"inputs": inputs, "decay": decay, "seed": seed, "out": out, "time_axis": time_axis,
            "stream": stream, "reverse": reverse}
    call = call_of(LINEAR_RECURRENCE, args)
    return LINEAR_RECURRENCE.make_result(_eager.estimate(LINEAR_RECURRENCE, call))


def _scan_rows(inputs, decay, reverse: bool):
    """The estimators' backward scan on [rows, horizon] torch tensors (_vjp.SCANS)."""
    return linear_recurrence(inputs, decay, reverse=reverse, time_axis=1)


_vjp.SCANS["torch"] = _scan_rows
