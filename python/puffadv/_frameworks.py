"""What puffadv needs to know about each array framework: which one an array
belongs to, how to allocate an output beside it, and which stream it uses.

Everything else (dtype, shape, strides, device checks) happens in the C++ core
through DLPack, so it is written once for every framework.
"""
from __future__ import annotations

import numbers
import sys

import numpy as np

# DLPack device types (dlpack.h, DLDeviceType).
_DLPACK_CPU, _DLPACK_CUDA, _DLPACK_CUDA_HOST, _DLPACK_ROCM = 1, 2, 3, 10

# The framework of each array type seen so far (a type's module never changes).
# Bare DLPack producers are not cached: that answer depends on the object.
_FRAMEWORK_OF_TYPE: dict = {np.ndarray: "numpy"}


def framework_of(x) -> str | None:
    """'numpy', 'torch', 'cupy', 'jax', 'dlpack' (any other producer) or None."""
    framework = _FRAMEWORK_OF_TYPE.get(type(x))
    if framework is not None:
        return framework
    if isinstance(x, np.ndarray):
        # An ndarray subclass: not cached, so that require_arrays sees every one
        # (masked arrays are refused there).
        return "numpy"
    module = type(x).__module__.split(".", 1)[0]
    if module in ("torch", "cupy"):
        framework = module
    elif module in ("jax", "jaxlib"):
        if is_jax_tracer(x):
            return "jax tracer"  # not cached: require_arrays refuses every one by name
        framework = "jax"
    if framework is not None:
        if not torch_compiling():  # dynamo refuses a write to module state inside a traced backward
            _FRAMEWORK_OF_TYPE[type(x)] = framework
        return framework
    if hasattr(x, "__dlpack__"):
        return "dlpack"
    return None


def framework_of_call(required: tuple, optional: tuple, names: tuple) -> str:
    """require_arrays() for one call, decided once. `required` are arrays,
    `optional` arrays or None (absent), `names` name them in that order. Arrays
    of one type seen before cost one look-up (plus torch's neg-bit test);
    anything else gets require_arrays' full check and its messages."""
    kind = type(required[0])
    framework = _FRAMEWORK_OF_TYPE.get(kind)
    if framework is not None:
        torch = framework == "torch"
        for x in required:
            if type(x) is not kind or (torch and x.is_neg()):
                break
        else:
            for x in optional:
                if x is not None and (type(x) is not kind or (torch and x.is_neg())):
                    break
            else:
                return framework
    arrays = (*required, *optional)
    return require_arrays({name: x for position, (name, x) in enumerate(zip(names, arrays))
                           if x is not None or position < len(required)})


_is_compiling = None  # torch.compiler.is_compiling, once torch is imported


def torch_compiling() -> bool:
    """True while torch.compile (dynamo) traces the caller. Never imports torch:
    without torch in the process nothing can be compiling."""
    global _is_compiling
    if _is_compiling is None:
        torch = sys.modules.get("torch")
        if torch is None or not hasattr(torch, "compiler"):
            return False
        if torch.compiler.is_compiling():
            return True  # set on a later call: dynamo refuses a global write where it traces
        _is_compiling = torch.compiler.is_compiling
    return _is_compiling()


def torch_dual_level_open() -> bool:
    """True while a forward-mode AD level is open (torch.autograd.forward_ad.dual_level,
    torch.func.jvp): a tensor may then carry a tangent, which only the autograd path reads
    (a call that checks requires_grad alone would drop it). Never imports torch, and keeps
    no module of its own: dynamo refuses a global written where it traces (a first call
    under torch.compile)."""
    forward_ad = sys.modules.get("torch.autograd.forward_ad")
    return forward_ad is not None and forward_ad._current_level >= 0


_transforms_active = None  # torch._C._are_functorch_transforms_active, once torch is imported


def torch_func_active() -> bool:
    """True while a torch.func transform runs: grad wraps every tensor argument, the ones it does
    not differentiate too, which only the autograd Function unwraps (DLPack cannot read them).
    Never imports torch; one C call once torch is there."""
    global _transforms_active
    if _transforms_active is None:
        torch = sys.modules.get("torch")
        if torch is None:
            return False
        if torch_compiling():
            return torch._C._are_functorch_transforms_active()  # no global write where dynamo traces
        _transforms_active = torch._C._are_functorch_transforms_active
    return _transforms_active()


def describe(x) -> str:
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def is_jax_tracer(x) -> bool:
    jax = sys.modules.get("jax")
    tracer = getattr(getattr(jax, "core", None), "Tracer", None)
    return tracer is not None and isinstance(x, tracer)


def jax_tracer_error(name: str, x, what: str = "arrays") -> TypeError:
    """The refusal of a JAX tracer where this path reads concrete `what` (arrays, a number)."""
    return TypeError(f"{name} is a JAX tracer ({describe(x)}): this function reads concrete {what} and "
                     f"cannot run inside jax.jit, grad or vmap; call the function of the same name in "
                     f"puffadv.jax there, which JAX traces, differentiates and vectorises")


def mixed_frameworks_error(name: str, framework: str, first_name: str, first_framework: str) -> TypeError:
    return TypeError(f"{name} is a {framework} array but {first_name} is a {first_framework} array; "
                     f"pass arrays of one framework")


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
        if fw == "jax tracer":
            raise jax_tracer_error(name, x)
        if fw != framework:
            raise mixed_frameworks_error(name, fw, first_name, framework)
        # DLPack carries no negative bit (torch's lazy negation, e.g. the .imag of a
        # conjugate view): the memory holds -x, and reading it raw is silently wrong.
        if fw == "torch" and x.is_neg():
            raise ValueError(f"{name} is a negative view (torch's neg bit: its memory holds -x); "
                             f"call .resolve_neg() first")
        if fw == "numpy" and type(x) is not np.ndarray:
            check_ndarray_subclass(x, name)
        elif fw == "dlpack":
            check_producer(x, name)
    return framework


def check_ndarray_subclass(x, name: str) -> None:
    """A masked array exports its data through DLPack without its mask: reading
    it would silently use the masked values, so it is refused by name."""
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(f"{name} is a numpy.ma.MaskedArray; puffadv would read its masked values as "
                        f"data and drop the mask: pass {name}.filled(fill_value) (or the plain "
                        f"{name}.data after deciding what masked steps mean)")


def check_producer(x, name: str) -> None:
    """A DLPack producer that is none of the known frameworks must say where its
    data lives: __dlpack_device__() returns a (device_type, device_id) pair of ints."""
    method = getattr(x, "__dlpack_device__", None)
    if method is None:
        return  # DLPack before 2021 had no __dlpack_device__: the capsule says where
    try:
        device = method()
    except Exception as error:
        raise TypeError(f"{name} ({describe(x)}): its __dlpack_device__() raised "
                        f"{type(error).__name__}: {error}") from error
    if not (isinstance(device, tuple) and len(device) == 2
            and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in device)):
        raise TypeError(f"{name} ({describe(x)}): its __dlpack_device__() returned {device!r}; "
                        f"expected a (device_type, device_id) pair of ints")


def host_like(x, name: str) -> np.ndarray:
    """An empty NumPy array shaped like a plain DLPack producer's data, to allocate
    outputs beside it. The core reads the producer (checking its capsule first)."""
    from . import _core
    shape, dtype, device = _core.describe_array(x, name)
    if device != "cpu":
        raise TypeError(f"{name} is a {describe(x)} in {device} memory; puffadv cannot allocate an "
                        f"output beside it: pass the outputs explicitly")
    if dtype == "bfloat16":
        raise TypeError(f"{name} is a bfloat16 {describe(x)}, which NumPy cannot hold; puffadv cannot "
                        f"allocate an output beside it: pass the outputs explicitly")
    return np.empty(shape if shape is not None else (0, 0), dtype=dtype)


def dlpack_device(x) -> tuple[int, int]:
    """(DLPack device type, index) of an array, without copying it."""
    if isinstance(x, np.ndarray):
        return (_DLPACK_CPU, 0)
    if hasattr(x, "__dlpack_device__"):
        try:
            kind, index = x.__dlpack_device__()
            return (int(kind), int(index))
        except Exception:  # a meta tensor, a deleted JAX array: the core names the argument
            return (0, 0)  # no device: neither CPU nor GPU
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


def for_import(framework: str, inputs):
    """The inputs to hand to the core through Tensor.__dlpack__, which refuses
    autograd history: torch tensors are detached (a call that records a graph does so
    around this, in _torch_autograd). None (an absent optional input) stays None."""
    if framework == "torch":
        return [x.detach() if x is not None and x.requires_grad else x for x in inputs]
    return inputs


def for_kernel(framework: str, inputs: dict, outputs: dict) -> dict:
    """The arguments by role as the core imports them: `inputs` and `outputs` (role ->
    array or None) in one dict.

    torch's Tensor.__dlpack__ first spends ~2 us per tensor in Python, and torch
    >= 2.13's refuses a CUDA tensor off the current device (BufferError), while
    inputs on cuda:1 must work whatever the current device is. So the core
    imports plain torch.Tensor objects itself, through DLPack's C exchange API
    (src/python/bindings_exchange.hpp), where torch has one (>= 2.10); with an older
    torch they go as capsules of torch.utils.dlpack.to_dlpack, the export that
    __dlpack__ ends with (and nanobind's fallback when __dlpack__ refuses).
    Neither refuses autograd history, and neither passes through a
    torch-function mode as a __dlpack__ call would (modes that pass it through
    unchanged, such as `with torch.device(...)`, give the same result).
    Subclasses go the old way, since they may override __dlpack__, which
    refuses autograd history: their inputs are detached first. Other
    frameworks' arrays go as they are."""
    if framework != "torch":
        return {**inputs, **outputs}
    torch = _torch()
    tensor = torch.Tensor
    if torch.exchange_api:
        for x in inputs.values():
            if type(x) is not tensor and x is not None:
                return {**dict(zip(inputs, for_import(framework, list(inputs.values())))), **outputs}
        return {**inputs, **outputs}
    to_dlpack = torch.to_dlpack
    arguments = {}
    for role, x in inputs.items():
        if type(x) is tensor:
            try:
                x = to_dlpack(x)
            except Exception:  # noqa: BLE001 - torch cannot describe it; the core says why
                pass
        elif x is not None and x.requires_grad:
            x = x.detach()
        arguments[role] = x
    for role, x in outputs.items():
        if type(x) is tensor:
            try:
                x = to_dlpack(x)
            except Exception:  # noqa: BLE001
                pass
        arguments[role] = x
    return arguments


class _TorchFunctions:
    """What the per-call path uses from torch, looked up once (torch is imported
    by then: a torch tensor was passed)."""

    def __init__(self):
        import torch
        from torch.utils.dlpack import to_dlpack
        self.Tensor = torch.Tensor
        self.to_dlpack = to_dlpack
        self.empty, self.empty_like = torch.empty, torch.empty_like
        self.contiguous_format = torch.contiguous_format
        # The core reads plain tensors through DLPack's C exchange API (bindings_exchange.hpp).
        self.exchange_api = "__dlpack_c_exchange_api__" in torch.Tensor.__dict__
        # The current stream's handle from C (what torch.compile's generated code
        # uses); torch.cuda.current_stream() builds a Stream object per call.
        self.raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self.current_stream = torch.cuda.current_stream


_torch_functions = None


def _torch() -> _TorchFunctions:
    global _torch_functions
    if _torch_functions is None:
        _torch_functions = _TorchFunctions()
    return _torch_functions


def empty_like(framework: str, x, name: str = "values"):
    """A fresh row-major output with x's shape, dtype and device, in x's framework."""
    if framework == "numpy":
        return np.empty(x.shape, dtype=x.dtype)
    if framework == "torch":
        return torch_empty_like(x, x.dtype)
    shape = tuple(getattr(x, "shape", ()))  # a bare DLPack producer may have no .shape
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
    return host_like(x, name)


def torch_empty(like, shape, dtype):
    """torch.empty(shape, dtype=dtype, device=like.device): row-major, plain."""
    if shape == like.shape:
        return torch_empty_like(like, dtype)
    return _torch().empty(tuple(int(s) for s in shape), dtype=dtype, device=like.device)


def torch_empty_like(like, dtype):
    """torch_empty(like, like.shape, dtype), through torch.empty_like where that
    gives the same tensor: it skips parsing a device and costs half as much."""
    torch = _torch()
    if type(like) is torch.Tensor:  # a subclass might come back as itself
        try:
            return torch.empty_like(like, dtype=dtype, memory_format=torch.contiguous_format)
        except RuntimeError:  # no strided layout (sparse): the core refuses `like` anyway
            pass
    try:
        return torch.empty(tuple(like.shape), dtype=dtype, device=like.device)
    except RuntimeError:  # no concrete shape (a jagged nested tensor): the core refuses `like` by name
        return torch.empty(0, dtype=dtype, device=like.device)


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
                return getattr(stream, attribute)  # the core checks it is a handle
        if isinstance(stream, numbers.Integral):
            return stream
        raise TypeError(f"stream must be an int handle, a torch.cuda.Stream or a cupy Stream, "
                        f"got {describe(stream)}")
    if framework == "torch":  # before is_gpu: a tensor's __dlpack_device__ is slow Python
        if not x.is_cuda:  # True under ROCm torch too (HIP tensors are torch "cuda")
            return 0
        torch = _torch()
        if torch.raw_stream is not None:
            return int(torch.raw_stream(x.get_device()))
        return int(torch.current_stream(x.device).cuda_stream)
    if not is_gpu(x):
        return 0
    if framework == "cupy":
        import cupy
        return int(cupy.cuda.get_current_stream().ptr)
    return 0  # JAX and others: the legacy default stream, ordered after all blocking streams
