"""DLPack producers that lie: capsules built field by field with ctypes, so a
test can hand puffadv a NULL shape, 2 lanes, a byte_offset, another capsule
name or a future DLPack major version, over a NumPy array's real memory.

The capsules have no destructor and their tensors no deleter: the LyingProducer
(or the `keep` list) holds the memory, the structs and the names alive.
"""
from __future__ import annotations

import ctypes

import numpy as np

DLPACK_CPU = 1
FLOAT, UINT, BOOL = 2, 1, 6  # DLDataTypeCode


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


READ_ONLY, IS_COPIED = 1, 2  # DLPACK_FLAG_BITMASK_*

_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

_DTYPES = {np.dtype(np.float32): (FLOAT, 32), np.dtype(np.float64): (FLOAT, 64),
           np.dtype(np.float16): (FLOAT, 16), np.dtype(np.uint8): (UINT, 8), np.dtype(np.bool_): (BOOL, 8)}


def make_capsule(array: np.ndarray, keep: list, *, name=b"dltensor", versioned=None, major=1, flags=0,
                 **fields):
    """A capsule describing `array` (strides in elements, as DLPack counts them).
    `fields` override DLTensor fields: data, ndim, code, bits, lanes, byte_offset,
    device_type, device_id, and shape / strides as a list (or None for NULL).
    `versioned` defaults to name == b"dltensor_versioned"."""
    versioned = name == b"dltensor_versioned" if versioned is None else versioned
    code, bits = _DTYPES[array.dtype]
    shape = fields.pop("shape", list(array.shape))
    strides = fields.pop("strides", [s // array.itemsize for s in array.strides])
    c_shape = None if shape is None else (ctypes.c_int64 * max(len(shape), 1))(*shape)
    c_strides = None if strides is None else (ctypes.c_int64 * max(len(strides), 1))(*strides)
    tensor = DLTensor(data=array.ctypes.data, device_type=DLPACK_CPU, device_id=0, ndim=array.ndim,
                      code=code, bits=bits, lanes=1,
                      shape=ctypes.cast(c_shape, ctypes.POINTER(ctypes.c_int64)) if c_shape else None,
                      strides=ctypes.cast(c_strides, ctypes.POINTER(ctypes.c_int64)) if c_strides else None,
                      byte_offset=0)
    for field, value in fields.items():
        setattr(tensor, field, value)
    if versioned:
        managed = DLManagedTensorVersioned(major=major, minor=1, flags=flags, dl_tensor=tensor)
    else:
        managed = DLManagedTensor(dl_tensor=tensor)
    keep += [array, c_shape, c_strides, managed, name]
    return _new_capsule(ctypes.addressof(managed), name, None)


class LyingProducer:
    """An array whose __dlpack__ returns make_capsule(array, **lies) (a fresh one
    per call), or `returns` itself when given; __dlpack_device__ says `device`."""

    def __init__(self, array, *, returns=None, device=(DLPACK_CPU, 0), **lies):
        self.array, self.returns, self.device, self.lies = array, returns, device, lies
        self.keep: list = []

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if self.returns is not None:
            return self.returns
        return make_capsule(self.array, self.keep, **self.lies)

    def __dlpack_device__(self):
        return self.device
