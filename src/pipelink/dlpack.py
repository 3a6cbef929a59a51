"""DLPack capsules in and out, through ctypes (no compiled extension, any device, every dtype but the
sub-byte ones: DLPack packs those, PipeLink holds them one value per byte).

Export builds a ``DLManagedTensor`` whose deleter releases a reference to the owning Python object;
import reads a producer's capsule and keeps the producer alive until the tensor is dropped.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from .dtypes import DTYPES, sub_byte_refusal
from .errors import InvalidArgumentError

__all__ = [
    "DLDevice",
    "DLDataType",
    "DLTensor",
    "DLManagedTensor",
    "to_capsule",
    "from_capsule",
    "DEVICE_CPU",
    "DEVICE_CUDA",
    "DEVICE_CUDA_HOST",
]

DEVICE_CPU, DEVICE_CUDA, DEVICE_CUDA_HOST = 1, 2, 3


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]

# The destructor receives the capsule while it is being deallocated: take it as a raw pointer, never as
# a py_object (a new reference to a dying object would deallocate it twice).
_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CapsuleDestructor]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)

# Exported tensors still alive, keyed by the address of their DLManagedTensor. The deleter (called by
# the consumer, or by the capsule destructor when nobody consumed it) drops the entry.
_live: dict[int, tuple[Any, ...]] = {}
_live_lock = threading.Lock()

# PipeLink's own codes of the sub-byte dtypes (dtypes.DL_UNPACKED_*): no capsule carries them
_SUB_BYTE = {d.dl_code: d for d in DTYPES.values() if d.is_sub_byte}


@_Deleter
def _delete_managed(ptr):
    with _live_lock:
        _live.pop(ctypes.cast(ptr, ctypes.c_void_p).value, None)


@_CapsuleDestructor
def _destroy_capsule(capsule):
    # Only an unconsumed capsule still carries the name "dltensor"; a consumer renames it.
    if _raw_is_valid(capsule, b"dltensor"):
        address = _raw_get_pointer(capsule, b"dltensor")
        _delete_managed(ctypes.cast(address, ctypes.POINTER(DLManagedTensor)))


def to_capsule(
    owner: Any,
    data: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    dl_code: int,
    bits: int,
    device_type: int,
    device_id: int,
) -> Any:
    """A ``dltensor`` PyCapsule describing memory that ``owner`` keeps alive. Strides are in elements.

    Raises
    ------
    InvalidArgumentError
        For a sub-byte dtype's code (int4, uint4, int2, uint2, float4_e2m1fn): DLPack's are packed.
    """
    sub_byte = _SUB_BYTE.get(dl_code)
    if sub_byte is not None:
        raise InvalidArgumentError(sub_byte_refusal(sub_byte), dtype=sub_byte.name)
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides)
    managed = DLManagedTensor()
    managed.dl_tensor.data = data
    managed.dl_tensor.device = DLDevice(device_type, device_id)
    managed.dl_tensor.ndim = ndim
    managed.dl_tensor.dtype = DLDataType(dl_code, bits, 1)
    managed.dl_tensor.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    managed.dl_tensor.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    managed.dl_tensor.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _delete_managed
    address = ctypes.addressof(managed)
    with _live_lock:
        _live[address] = (managed, shape_arr, strides_arr, owner)
    return _api.PyCapsule_New(address, b"dltensor", _destroy_capsule)


class _ImportedCapsule:
    """Keeps a consumed producer capsule's memory alive; calls the producer's deleter once."""

    __slots__ = ("_managed", "_capsule")

    def __init__(self, managed: ctypes._Pointer, capsule: Any):
        self._managed = managed
        self._capsule = capsule

    def __del__(self):
        managed, self._managed = self._managed, None
        if managed and managed.contents.deleter:
            managed.contents.deleter(managed)


def from_capsule(capsule: Any) -> dict[str, Any]:
    """Read a producer's ``dltensor`` capsule (and consume it).

    Returns a dict with ``data`` (int address, byte offset applied), ``shape``, ``strides`` (elements;
    computed when the producer gave none), ``dl_code``, ``bits``, ``lanes``, ``device_type``,
    ``device_id`` and ``keepalive`` (hold it as long as the memory is used).
    """
    if not _api.PyCapsule_IsValid(capsule, b"dltensor"):
        raise ValueError("not a DLPack capsule (expected an unconsumed 'dltensor' capsule)")
    address = _api.PyCapsule_GetPointer(capsule, b"dltensor")
    managed = ctypes.cast(address, ctypes.POINTER(DLManagedTensor))
    t = managed.contents.dl_tensor
    ndim = t.ndim
    shape = tuple(t.shape[i] for i in range(ndim))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(ndim))
    else:
        strides, acc = [], 1
        for dim in reversed(shape):
            strides.append(acc)
            acc *= dim
        strides = tuple(reversed(strides))
    info = {
        "data": (t.data or 0) + t.byte_offset,
        "shape": shape,
        "strides": strides,
        "dl_code": t.dtype.code,
        "bits": t.dtype.bits,
        "lanes": t.dtype.lanes,
        "device_type": t.device.device_type,
        "device_id": t.device.device_id,
    }
    _api.PyCapsule_SetName(capsule, b"used_dltensor")
    info["keepalive"] = _ImportedCapsule(managed, capsule)
    return info
