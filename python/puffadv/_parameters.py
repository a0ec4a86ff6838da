"""Scalar parameters (gamma, lambda, clips, decay) as the core takes them: Python
floats, from a Python number or a 0-d array or tensor of a real dtype in any
framework; bool, complex and anything else refused alike (TypeError), and
non-finite integers beyond float range as ValueError."""
from __future__ import annotations

import numbers

from ._frameworks import is_jax_tracer, describe, jax_tracer_error


def real_parameters(values: tuple, names: tuple) -> tuple:
    """real_parameter() over one call's scalars: plain floats, the common case, as they are."""
    for value in values:
        if type(value) is not float:
            return tuple(real_parameter(v, n) for v, n in zip(values, names))
    return values


def real_parameter(value, name: str, jax_function: str | None = None) -> float:
    """`jax_function`: the puffadv.jax function reading it (its messages name it)."""
    if type(value) is float:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return _zero_d_parameter(value, name, jax_function)
    return _to_float(value, name)


def _zero_d_parameter(value, name: str, jax_function: str | None = None) -> float:
    """A parameter that is not a Python number: a 0-d array or tensor of an integer
    or real floating dtype, with data, is one; bool, complex and anything else
    are not, in every framework alike (True is not 1.0, 0.5+0.3j is not 0.5)."""
    if is_jax_tracer(value):  # traced under jax.jit/grad/vmap: no number to read here
        raise jax_tracer_error(name, value, "numbers")
    shape = getattr(value, "shape", None)
    if shape is None or tuple(shape) != ():
        raise TypeError(f"{name} must be a real number, got {describe(value)}")
    dtype = getattr(value, "dtype", None)
    kind = getattr(dtype, "kind", None)  # NumPy, CuPy, JAX
    if kind is None and dtype is not None:  # torch
        kind = "c" if dtype.is_complex else "f" if dtype.is_floating_point else \
            "b" if str(dtype) == "torch.bool" else "i" if str(dtype).startswith(("torch.int", "torch.uint")) else "?"
    if kind not in ("i", "u", "f"):
        raise TypeError(f"{name} must be a real number, got a 0-d {describe(value)} of dtype {dtype}")
    if getattr(value, "is_meta", False):
        raise TypeError(f"{name} is a 0-d tensor on the meta device, which holds no value; "
                        f"pass a number")
    if kind == "f" and dtype is not None and not hasattr(dtype, "kind"):
        _refuse_a_derivative(value, name, jax_function)
    try:
        return _to_float(value, name)
    except (TypeError, ValueError, RuntimeError) as error:
        if isinstance(error, ValueError) and "finite" in str(error):
            raise
        raise TypeError(f"{name} must be a real number; float() of the 0-d {describe(value)} "
                        f"raised {type(error).__name__}: {error}") from error


def _refuse_a_derivative(tensor, name: str, jax_function: str | None = None) -> None:
    """A torch tensor read as a number here loses any derivative it carries: the calls that
    differentiate a 0-d gamma or lambda (torch arrays, the autograd Function) never bring one
    here with grad mode on, so one that arrives (NumPy, CuPy or JAX arrays with a torch gamma,
    or a puffadv.jax function's scalar) is refused rather than dropped."""
    from . import _torch_forward_ad  # torch is loaded: the value is its tensor
    carried = _torch_forward_ad.derivative_carried(tensor)
    if carried is None:
        return
    if jax_function is not None:
        reads = f"puffadv.jax.{jax_function} takes JAX or NumPy values: it reads {name}"
        way = f". For its gradient call puffadv.{jax_function} with torch tensors"
    else:
        reads = "this call reads it"
        way = f": its arrays are not torch tensors. Pass the arrays as torch tensors (puffadv then " \
            f"differentiates {name})"
    raise TypeError(f"{name} is a 0-d torch tensor that {carried}, but {reads} as a number and cannot "
                    f"differentiate it{way}, or pass {name} as a number (detach it)")


def _to_float(value, name: str) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond float range: out of range, like inf
        raise ValueError(f"{name} must be finite, got an integer too large for a float") from None
