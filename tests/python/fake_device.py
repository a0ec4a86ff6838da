"""A host array that claims, through DLPack, to live on a GPU: what a CUDA (or
ROCm) array looks like to a build of puffadv that cannot compute on it. Lets the
CPU fallback be tested on machines without a GPU.

Its memory is host memory, so nothing may ever read it as device memory: that
holds because the core raises BackendUnavailableError (no backend compiled, or
no device) before any launch.
"""
from __future__ import annotations

import ctypes

import numpy as np

DLPACK_CUDA, DLPACK_ROCM = 2, 10

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class FakeGpuArray:
    """`host` seen as a [rows, cols] array on (device_type, index)."""

    def __init__(self, host: np.ndarray, device_type: int = DLPACK_CUDA, index: int = 0):
        self.host = host
        self.device = (device_type, index)
        self.shape, self.dtype = host.shape, host.dtype

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if dl_device is not None and tuple(dl_device)[0] == 1:  # a host copy was asked for
            return np.array(self.host, copy=True).__dlpack__()
        capsule = self.host.__dlpack__()  # unversioned: DLManagedTensor starts with DLTensor
        tensor = _get_pointer(capsule, b"dltensor")
        # DLTensor: void* data, then DLDevice {int32 device_type, int32 device_id}.
        device = (ctypes.c_int32 * 2).from_address(tensor + ctypes.sizeof(ctypes.c_void_p))
        device[0], device[1] = self.device
        return capsule
