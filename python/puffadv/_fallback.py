"""The automatic CPU fallback: GPU arrays that this build cannot compute on
(no backend compiled for their device, or no usable device) are copied to the
host, computed there, and the results copied back into the caller's arrays.

The policy, its wording and its count live in the core (include/puffadv/fallback.hpp)
and are shared with the torch ops; the setting is the environment variable
PUFFADV_FALLBACK, read on every fallback, so that set_fallback() here and the
torch ops always agree.
"""
from __future__ import annotations

import os
import sys
import warnings

import numpy as np

from . import _core, _frameworks

ENV = "PUFFADV_FALLBACK"
MODES = ("warn", "error")

BackendUnavailableError = _core.BackendUnavailableError


class FallbackWarning(UserWarning):
    """puffadv computed GPU arrays on the CPU (shown once per process).

    A UserWarning, not a RuntimeWarning: training loops turn RuntimeWarning into
    an error (PufferLib's trainer runs ``warnings.filterwarnings("error",
    category=RuntimeWarning)`` at import), which would make a correct, slow result
    a crash. Silence it with ``warnings.filterwarnings("ignore",
    category=puffadv.FallbackWarning)``, or refuse fallbacks with
    ``PUFFADV_FALLBACK=error``. The torch operators' warning is torch's
    UserWarning with the same text.
    """


def set_fallback(mode: str) -> str:
    """What puffadv does with GPU arrays it cannot compute on; returns the previous mode.

    ``"warn"`` (the default): compute on the CPU, copying inputs to the host and
    results back, with a one-time ``puffadv.FallbackWarning`` (a ``UserWarning``).
    ``"error"``: raise
    ``puffadv.BackendUnavailableError`` (a ``RuntimeError``) instead. Sets the
    environment variable ``PUFFADV_FALLBACK``, which the torch ops read too.
    """
    # A bad PUFFADV_FALLBACK is replaced, and returned as it was (it names no mode).
    if not isinstance(mode, str) or mode.strip().lower() not in MODES:
        raise ValueError(f"mode must be 'warn' or 'error', got {mode!r}")
    try:
        previous = fallback_mode()
    except ValueError:  # a bad PUFFADV_FALLBACK: exactly what this call is there to replace
        previous = os.environ[ENV]
    os.environ[ENV] = mode.strip().lower()
    return previous


def fallback_mode() -> str:
    """'warn' or 'error', from PUFFADV_FALLBACK (ValueError for another value)."""
    return _core.fallback_mode()


def report() -> dict:
    """The fallback facts backend() shows: setting, and fallbacks so far (all bindings)."""
    try:
        setting = fallback_mode()
    except ValueError as e:
        setting = f"invalid ({e})"
    stats = _core.fallback_stats()
    return {"setting": setting, "happened": stats["calls"] > 0, **stats}


def run_on_host(call, framework: str, inputs: dict, outputs: dict, names: dict, reason: str, stream=None):
    """Computes `call(arrays, stream)` (an _engine.kernel()) on host copies of `inputs`
    and writes the results into `outputs` (GPU arrays of `framework`), both role ->
    array, every one present. `names` (role -> the caller's name) word the errors;
    `reason` is the core's message."""
    if fallback_mode() == "error":
        raise BackendUnavailableError(_core.fallback_error_message(reason)) from None
    # Resolved before any copy: an output we cannot write back is an error, not a lost result.
    writers = {role: _writer(framework, out, names.get(role, role)) for role, out in outputs.items()}
    first = next(iter(inputs.values()))
    if stream is not None:  # the caller's stream, not the current one, produced the inputs
        _synchronize(framework, first)
    host_inputs = {role: _to_host(framework, x, names.get(role, role)) for role, x in inputs.items()}
    host_outputs = {role: _host_empty(framework, view) for role, (_, view) in writers.items()}
    call({**host_inputs, **host_outputs}, 0)
    for role, (write, view) in writers.items():
        write(view, host_outputs[role])
    if stream is not None:
        _synchronize(framework, first)
    moved = sum(_nbytes(a) for a in (*host_inputs.values(), *host_outputs.values()))
    if _core.record_fallback(moved, reason):
        warnings.warn(_core.fallback_warning_message(reason, moved), FallbackWarning,
                      stacklevel=_caller_stacklevel())


def _to_host(framework: str, x, name: str):
    if framework == "torch":
        return x.cpu()  # ordered after the work queued on torch's current stream
    if framework == "cupy":
        import cupy
        return cupy.asnumpy(x)
    if framework == "jax":
        return np.asarray(x)
    try:  # any other producer: the DLPack request for a host copy (array API 2023.12)
        return np.from_dlpack(_HostCapsule(x.__dlpack__(dl_device=(_HOST, 0), copy=True)))
    except Exception:  # noqa: BLE001 - producers raise anything for an unsupported request
        view = _device_view(x)
        if view is None:
            raise TypeError(
                f"{name} is a {_frameworks.describe(x)} on a GPU that this build of puffadv cannot "
                f"compute on, and puffadv cannot copy it to the host: pass a PyTorch or CuPy "
                f"array, or install CuPy") from None
        return _to_host(_frameworks.framework_of(view), view, name)


_HOST = 1  # DLPack kDLCPU


class _HostCapsule:
    """Hands NumPy a capsule already obtained (NumPy < 2.1 cannot ask for a host copy itself);
    NumPy still checks the capsule's own device, so a producer that ignored the request fails."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (_HOST, 0)


def _writer(framework: str, out, name: str):
    """(write(view, host), view) for an output on the GPU."""
    view = out if framework in ("torch", "cupy") else _device_view(out)
    if view is None:
        raise TypeError(
            f"{name} is a {_frameworks.describe(out)} on a GPU that this build of puffadv cannot "
            f"compute on, and puffadv cannot copy the CPU result back into it: pass a PyTorch or "
            f"CuPy array as {name}, or install CuPy")
    if _frameworks.framework_of(view) == "torch":
        import torch
        return (lambda dst, host: dst.copy_(host if isinstance(host, torch.Tensor)
                                            else torch.from_numpy(host))), view
    import cupy

    def write_cupy(dst, host):
        dst[...] = cupy.asarray(host)  # an element-wise copy: any strides of dst

    return write_cupy, view


def _device_view(x):
    """A CuPy or torch view of another producer's GPU memory (JAX, a bare DLPack object)."""
    try:
        import cupy
        return cupy.from_dlpack(x)
    except Exception:  # noqa: BLE001 - not installed, or no GPU it can see
        pass
    try:
        import torch
        return torch.from_dlpack(x)
    except Exception:  # noqa: BLE001
        return None


def _host_empty(framework: str, view):
    """A host array to receive the result; every puffadv kernel writes every output element."""
    if _frameworks.framework_of(view) == "torch":
        import torch
        return torch.empty(tuple(view.shape), dtype=view.dtype)
    return np.empty(tuple(view.shape), dtype=view.dtype)


def _synchronize(framework: str, x):
    if framework == "torch":
        import torch
        torch.cuda.synchronize(x.device)
    elif framework == "cupy":
        import cupy
        with cupy.cuda.Device(x.device.id):
            cupy.cuda.runtime.deviceSynchronize()


def _nbytes(a) -> int:
    if hasattr(a, "nbytes"):
        return int(a.nbytes)
    return int(a.numel() * a.element_size())


def _caller_stacklevel() -> int:
    """The stacklevel of the first frame outside the puffadv package: the user's call."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == package:
        frame, level = frame.f_back, level + 1
    return level
