"""What puffadv needs to know about each array framework: which one an array
belongs to, how to allocate an output beside it, and which stream it uses.

Everything else (dtype, shape, strides, device checks) happens in the C++ core
through DLPack, so it is written once for every framework.
"""
from __future__ import annotations

import numbers

import numpy as np

# DLPack device types (dlpack.h, DLDeviceType).
_DLPACK_CPU, _DLPACK_CUDA, _DLPACK_CUDA_HOST, _DLPACK_ROCM = 1, 2, 3, 10


def framework_of(x) -> str | None:
    """'numpy', 'torch', 'cupy', 'jax', 'dlpack' (any other producer) or None."""
    if isinstance(x, np.ndarray):
        return "numpy"
    module = type(x).__module__.split(".", 1)[0]
    if module in ("torch", "cupy"):
        return module
    if module in ("jax", "jaxlib"):
        return "jax"
    if hasattr(x, "__dlpack__"):
        return "dlpack"
    return None


def describe(x) -> str:
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def require_arrays(named: dict) -> str:
    """Checks that every argument is an array of one framework; returns it."""
    first_name, first = next(iter(named.items()))
    framework = framework_of(first)
    for name, x in named.items():
        fw = framework_of(x)
        if fw is None:
            raise TypeError(
                f"{name} must be an array (NumPy, PyTorch, CuPy, JAX or any DLPack producer), "
                f"got {describe(x)}")
        if fw != framework:
            raise TypeError(
                f"{name} is a {fw} array but {first_name} is a {framework} array; "
                f"pass arrays of one framework")
        # DLPack carries no negative bit (torch's lazy negation, e.g. the .imag of a
        # conjugate view): the memory holds -x, and reading it raw is silently wrong.
        if fw == "torch" and x.is_neg():
            raise ValueError(f"{name} is a negative view (torch's neg bit: its memory holds -x); "
                             f"call .resolve_neg() first")
    return framework


def dlpack_device(x) -> tuple[int, int]:
    """(DLPack device type, index) of an array, without copying it."""
    if isinstance(x, np.ndarray):
        return (_DLPACK_CPU, 0)
    if hasattr(x, "__dlpack_device__"):
        kind, index = x.__dlpack_device__()
        return (int(kind), int(index))
    return (_DLPACK_CPU, 0)


def is_gpu(x) -> bool:
    return dlpack_device(x)[0] in (_DLPACK_CUDA, _DLPACK_ROCM)


def wait_for_gpu(x) -> None:
    """Waits for the GPU that holds `x`. JAX arrays come without a stream: XLA
    reads an output on its own streams, which nothing orders after puffadv's
    write (or after a fallback's copy back), so the write must have landed
    before the call returns. puffadv.jax orders through XLA instead, with no wait."""
    from . import _core
    kind, index = dlpack_device(x)
    name = "cuda" if kind == _DLPACK_CUDA else "rocm"
    if _core.gpu_status("cuda" if kind == _DLPACK_CUDA else "hip")["device_count"] > 0:
        _core.synchronize_device(name, index)
        return
    try:  # no usable backend: the fallback copied back through CuPy or torch
        import cupy
        with cupy.cuda.Device(index):
            cupy.cuda.runtime.deviceSynchronize()
    except ImportError:
        import torch
        torch.cuda.synchronize(index)


def for_import(framework: str, x):
    """The object to hand to the core: torch tensors lose autograd history,
    which DLPack refuses to export (advantages are targets, never differentiated)."""
    if framework == "torch" and x.requires_grad:
        return x.detach()
    return x


def for_kernel(framework: str, arrays):
    """The arrays as the core imports them. torch >= 2.13's Tensor.__dlpack__
    refuses a CUDA tensor that is not on the current device (BufferError), so
    such tensors go as the capsule of torch.utils.dlpack.to_dlpack, the export
    that __dlpack__ itself ends with: inputs on cuda:1 work whatever the current
    device is. Everything else goes as it is."""
    if framework != "torch" or not any(x is not None and x.is_cuda for x in arrays):
        return arrays
    import torch
    from torch.utils.dlpack import to_dlpack
    current = torch.cuda.current_device()
    return [to_dlpack(x) if x is not None and x.is_cuda and x.device.index != current else x for x in arrays]


def empty_like(framework: str, x, name: str = "values"):
    """A fresh row-major output with x's shape, dtype and device, in x's framework."""
    shape = tuple(getattr(x, "shape", ()))  # a bare DLPack producer may have no .shape
    if framework == "numpy":
        return np.empty(shape, dtype=x.dtype)
    if framework == "torch":
        import torch
        return torch.empty(shape, dtype=x.dtype, device=x.device)
    if framework == "cupy":
        import cupy
        with cupy.cuda.Device(x.device.id):
            return cupy.empty(shape, dtype=x.dtype)
    if framework == "jax":
        if not is_gpu(x):
            return np.empty(shape, dtype=x.dtype)  # wrapped back into JAX by finish()
        import jax.numpy as jnp
        # A fresh buffer nobody else references, written once through DLPack; ready
        # before puffadv's kernel (on another stream) can write it.
        return (jnp.zeros(shape, dtype=x.dtype, device=x.device) + 0).block_until_ready()
    if dlpack_device(x)[0] in (_DLPACK_CPU, _DLPACK_CUDA_HOST):
        host = np.from_dlpack(x)
        return np.empty(host.shape, dtype=host.dtype)
    raise TypeError(
        f"{name} is a {describe(x)} on a GPU; puffadv cannot allocate an output for it: "
        f"pass advantages= explicitly")


def finish(framework: str, like, out):
    """Hands the output back in the caller's framework."""
    if framework == "jax" and isinstance(out, np.ndarray):
        import jax.numpy as jnp
        return jnp.asarray(out)
    return out


def current_stream(framework: str, x, stream) -> int:
    """The stream a GPU kernel runs on: the caller's explicit `stream` (an int
    handle or an object with .cuda_stream / .ptr), else the framework's current one."""
    if stream is not None:
        for attribute in ("cuda_stream", "ptr", "handle"):
            if hasattr(stream, attribute):
                return int(getattr(stream, attribute))
        if isinstance(stream, numbers.Integral):
            return int(stream)
        raise TypeError(f"stream must be an int handle, a torch.cuda.Stream or a cupy Stream, "
                        f"got {describe(stream)}")
    if not is_gpu(x):
        return 0
    if framework == "torch":
        import torch
        return int(torch.cuda.current_stream(x.device).cuda_stream)
    if framework == "cupy":
        import cupy
        return int(cupy.cuda.get_current_stream().ptr)
    return 0  # JAX and others: the legacy default stream, ordered after all blocking streams


def real_parameter(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        # 0-d numeric arrays and tensors; a 0-d string or bool array is no more a number than a str.
        numeric = getattr(getattr(value, "dtype", None), "kind", "f") in "iuf"
        try:
            if numeric and (getattr(value, "ndim", None) == 0 or getattr(value, "shape", None) == ()):
                return _to_float(value, name)
        except (TypeError, ValueError):
            pass
        raise TypeError(f"{name} must be a real number, got {describe(value)}")
    return _to_float(value, name)


def _to_float(value, name: str) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond float range: out of range, like inf
        raise ValueError(f"{name} must be finite, got an integer too large for a float") from None
