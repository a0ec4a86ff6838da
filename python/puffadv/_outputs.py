"""The outputs a call allocates: their dtype (float32 for bfloat16/float16 inputs),
shape ([rows, horizon] like the rewards, or [B] row sums) and place (beside the
inputs, in their framework), and handing them back in the caller's framework."""
from __future__ import annotations

import numpy as np

from . import _frameworks
from ._estimators import SUM_ROLES

_REDUCED = {"bfloat16", "float16"}

_dtype_names: dict = {}  # dtype object -> its short name: str(np.dtype) alone costs ~1 us


def dtype_name(x) -> str:
    """'float32', 'bfloat16', ... (NumPy, torch, CuPy and JAX spellings agree)."""
    dtype = getattr(x, "dtype", "")
    try:
        return _dtype_names[dtype]
    except KeyError:
        name = _dtype_names[dtype] = str(dtype).rsplit(".", 1)[-1]
        return name
    except TypeError:  # an unhashable dtype attribute
        return str(dtype).rsplit(".", 1)[-1]


def is_reduced(like) -> bool:
    return dtype_name(like) in _REDUCED


def output_dtype(framework: str, like):
    """float32 for bfloat16/float16 inputs (the arithmetic is float32, and a
    bf16 advantage keeps under 3 significant digits), else the input's dtype."""
    if not is_reduced(like):
        return like.dtype
    if framework == "torch":
        import torch
        return torch.float32
    return np.float32


def empty(framework: str, like, shape, dtype):
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
    """The default advantages output for `like` (see output_dtype)."""
    if framework == "torch":
        return _frameworks.torch_empty_like(like, output_dtype(framework, like))
    if not is_reduced(like):
        return _frameworks.empty_like(framework, like)
    return empty(framework, like, like.shape, output_dtype(framework, like))


_numpy_output_dtypes: dict = {}  # a NumPy dtype -> its outputs' (output_dtype), decided once


def numpy_output_dtype(like: np.ndarray) -> np.dtype:
    """output_dtype("numpy", like), looked up once per input dtype."""
    dtype = _numpy_output_dtypes.get(like.dtype)
    if dtype is None:
        dtype = _numpy_output_dtypes[like.dtype] = np.dtype(output_dtype("numpy", like))
    return dtype


def numpy_output_like(like: np.ndarray) -> np.ndarray:
    """output_like("numpy", like): the default advantages output for a NumPy array."""
    return np.empty(like.shape, numpy_output_dtype(like))


def sums_dtype(framework: str, values):
    """The row sums' dtype: float64 beside float64 values, else float32."""
    wide = dtype_name(values) == "float64"
    if framework == "torch":
        import torch
        return torch.float64 if wide else torch.float32
    return np.float64 if wide else np.float32


def batch_size(x, time_axis: int) -> int:
    shape = tuple(getattr(x, "shape", ()))
    if len(shape) != 2:
        return shape[0] if shape else 0  # the core names the wrong ndim
    return shape[1] if time_axis in (0, -2) else shape[0]


def given(specs: dict) -> dict:
    """The output arrays the caller gave, by role: each spec that is not True (allocate),
    False or None (skip); None for the others."""
    return {role: None if spec is True or spec is False else spec for role, spec in specs.items()}


def refuse_immutable(framework: str, given: dict, names: dict) -> None:
    """JAX arrays are immutable: one given as an output would be written in place under
    every reader of it (an earlier, still pending JAX computation included). Refused,
    naming the argument (the core writes every output in place)."""
    if framework != "jax":
        return
    for role, out in given.items():
        if out is not None:
            name = names.get(role) or role
            raise TypeError(f"{name} is a jax.Array, which is immutable and cannot be written in place; omit "
                            f"{name}= (a new array is returned), or use puffadv.jax inside JAX programs")


def allocate(framework, rewards, values, time_axis, specs: dict, outputs: dict) -> dict:
    """The output arrays by role: `outputs` (the given ones, from given()) with each True
    spec's array allocated in place ([rows, horizon] like rewards, or [B] sums).
    `values` decides the device and dtype (rewards where there are no values)."""
    if values is None:
        values = rewards
    if framework == "dlpack" and any(spec is True for spec in specs.values()):
        # A plain producer may have no .shape or .dtype: allocate like what the core read of it.
        framework = "numpy"
        rewards, values = _frameworks.host_like(rewards, "rewards"), _frameworks.host_like(values, "values")
    series = None  # allocates one [rows, horizon] output; made on first use
    for role, spec in specs.items():
        if spec is True:
            if role in SUM_ROLES:
                outputs[role] = empty(framework, values, (batch_size(rewards, time_axis),),
                                      sums_dtype(framework, values))
            else:
                if series is None:
                    series = _series_allocator(framework, rewards, values)
                outputs[role] = series()
    return outputs


def _series_allocator(framework, rewards, values):
    """A function allocating a [rows, horizon] output: rewards' shape, values'
    device and output dtype, everything decided once per call."""
    shape, dtype = getattr(rewards, "shape", ()), output_dtype(framework, values)
    if framework == "torch" and shape == values.shape:
        return lambda: _frameworks.torch_empty_like(values, dtype)
    return lambda: empty(framework, values, shape, dtype)


def finish(framework, values, specs: dict, outputs: dict) -> dict:
    """Allocated outputs handed back in the caller's framework (JAX from host arrays)."""
    if framework != "jax":
        return outputs
    return {role: _frameworks.finish(framework, values, out) if specs[role] is True else out
            for role, out in outputs.items()}
