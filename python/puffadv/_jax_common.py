"""What puffadv.jax and its estimator family share: registering the XLA FFI handlers
(once per process, after checking the running jaxlib can load them) and the argument
helpers (arrays, scalars, compute dtypes). Imported by jax.py and _jax_family.py."""
from __future__ import annotations

import numbers
import re
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from . import _core, _frameworks, _parameters

HANDLER_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
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


def _refuse_torch(x, name: str, function: str) -> None:
    """puffadv.jax takes JAX and NumPy arrays. A torch tensor is refused by name (jnp.asarray
    would read it through NumPy, dropping its autograd history, or fail with torch's own
    "Can't call numpy() on Tensor that requires grad"): the torch API takes it."""
    if type(x) is not float and _frameworks.framework_of(x) == "torch":  # float: the common scalar
        raise TypeError(f"{name} is a torch tensor, but puffadv.jax.{function} takes JAX or NumPy arrays; "
                        f"for torch tensors call puffadv.{function} (the same numbers, differentiable "
                        f"with torch autograd)")


def _array(x, name: str, function: str):
    """`function`: the puffadv.jax function taking it (its messages name it)."""
    _refuse_torch(x, name, function)
    if isinstance(x, (jax.Array, np.ndarray)) or (hasattr(x, "shape") and hasattr(x, "dtype")):
        return jnp.asarray(x)  # NumPy in, JAX's canonical dtype out (float64 only under x64)
    raise TypeError(f"{name} must be an array (JAX or NumPy), got {type(x).__name__}")


def _spec(x):
    """What the core's checks see of an array: (shape, dtype name)."""
    return (tuple(x.shape), np.dtype(x.dtype).name)


def _scalar(value, name: str, function: str) -> float:
    """A concrete real number (its range is the core's check). `function`: the puffadv.jax
    function taking it (its messages name it)."""
    if getattr(value, "ndim", None) == 0 and _frameworks.framework_of(value) == "torch":
        # A 0-d torch tensor is read as its number, as the NumPy-style API reads it
        # (_parameters.real_parameter): gamma = torch.tensor(0.99) from a torch config means 0.99,
        # and reading it loses nothing. One that carries a derivative (requires grad) is refused
        # by name there: puffadv.jax cannot differentiate it, and dropping it would silently
        # give a zero meta-gradient. (Refusing every torch tensor would break calls that are
        # right for the sake of the few that are not.)
        return _parameters.real_parameter(value, name, jax_function=function)
    _refuse_torch(value, name, function)  # any other torch tensor: arrays are refused by name
    if isinstance(value, bool) or not (isinstance(value, numbers.Real) or getattr(value, "ndim", None) == 0):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    dtype = getattr(value, "dtype", None)
    if dtype is not None and np.dtype(dtype).kind not in "iuf":
        # np.True_, jnp.array(True), complex: refused as the NumPy-style API refuses them
        # (_parameters._zero_d_parameter), not read as 1.0.
        raise TypeError(f"{name} must be a real number, got a 0-d {_frameworks.describe(value)} of dtype {dtype}")
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
    return dtype if dtype in HANDLER_DTYPES else np.dtype(np.float32)


def _as_float(x, compute):
    return x if x.dtype == compute else x.astype(compute)


def _as_flag(x, compute):
    """bool/uint8 flags become 0/1 floats: non-zero means set."""
    if np.dtype(x.dtype) in _FLAGS:
        return (x != 0).astype(compute)
    return _as_float(x, compute)
