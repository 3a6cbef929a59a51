"""ctypes mirrors of ``pipelink.h`` and the host-services table handed to native modules as ``context``.

Everything here is built once per stage (in ``bind``); the hot path only stores data pointers into the
prebuilt arrays. Layouts must match the header exactly (the tests compile a module that checks them).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..descriptor import KernelContext
from ..dtypes import get_dtype
from ..errors import InvalidArgumentError

__all__ = [
    "ABI_VERSION",
    "DEVICE_CPU",
    "DEVICE_CUDA",
    "PipeLinkDevice",
    "PipeLinkDataType",
    "PipeLinkTensor",
    "PipeLinkAttr",
    "PipeLinkServices",
    "COMPUTE_FN",
    "CONTEXT_CREATE_FN",
    "CONTEXT_DESTROY_FN",
    "WORKSPACE_SIZE_FN",
    "TensorArray",
    "AttrArray",
    "HostServices",
]

ABI_VERSION = 1
DEVICE_CPU, DEVICE_CUDA = 1, 2
ATTR_FLOAT, ATTR_INT, ATTR_BOOL, ATTR_STR, ATTR_FLOATS, ATTR_INTS = range(6)
log = logging.getLogger("pipelink.native")
_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR}


class PipeLinkDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class PipeLinkDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class PipeLinkTensor(ctypes.Structure):
    """DLPack's ``DLTensor``, field for field."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", PipeLinkDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", PipeLinkDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _AttrValue(ctypes.Union):
    _fields_ = [
        ("f", ctypes.c_double),
        ("i", ctypes.c_int64),
        ("s", ctypes.c_char_p),
        ("floats", ctypes.POINTER(ctypes.c_double)),
        ("ints", ctypes.POINTER(ctypes.c_int64)),
    ]


class PipeLinkAttr(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("type", ctypes.c_int32),
        ("count", ctypes.c_int32),
        ("value", _AttrValue),
    ]


LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_char_p)
WORKSPACE_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint64)
CUBLAS_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)


class PipeLinkServices(ctypes.Structure):
    _fields_ = [
        ("abi_version", ctypes.c_int32),
        ("device_type", ctypes.c_int32),
        ("log", LOG_FN),
        ("workspace", WORKSPACE_FN),
        ("cublas_handle", CUBLAS_FN),
        ("user", ctypes.c_void_p),
    ]


_TENSOR_P = ctypes.POINTER(PipeLinkTensor)
_ATTR_P = ctypes.POINTER(PipeLinkAttr)
COMPUTE_FN = (
    ctypes.c_int,
    [
        _TENSOR_P,
        ctypes.c_int32,
        _TENSOR_P,
        ctypes.c_int32,
        _ATTR_P,
        ctypes.c_int32,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ],
)
CONTEXT_CREATE_FN = (
    ctypes.c_int,
    [_ATTR_P, ctypes.c_int32, ctypes.POINTER(PipeLinkServices), ctypes.POINTER(ctypes.c_void_p)],
)
CONTEXT_DESTROY_FN = (None, [ctypes.c_void_p])
WORKSPACE_SIZE_FN = (
    ctypes.c_int64,
    [_TENSOR_P, ctypes.c_int32, _TENSOR_P, ctypes.c_int32, _ATTR_P, ctypes.c_int32],
)


def _log_from_module(level: int, msg: bytes | None) -> None:
    log.log(_LEVELS.get(level, logging.INFO), "%s", (msg or b"").decode("utf-8", errors="replace"))


_LOG_CALLBACK = LOG_FN(_log_from_module)  # one instance for the process; must outlive every module
_NO_CUBLAS = CUBLAS_FN(lambda stream: None)


class TensorArray:
    """A prebuilt ``PipeLinkTensor[n]`` for one stage: shapes, strides and dtypes filled in once.

    Parameters
    ----------
    shapes, dtypes : sequence
        Per port; a shape of None marks an absent optional input (data NULL, ndim 0).
    device_type, device_id : int
        ``PIPELINK_DEVICE_*`` and the device ordinal.
    """

    def __init__(self, shapes: Sequence[Any], dtypes: Sequence[Any], *, device_type: int, device_id: int = 0):
        self.count = len(shapes)
        self.array = (PipeLinkTensor * max(self.count, 1))()
        self._keep: list[Any] = []
        for slot, shape, dtype in zip(self.array, shapes, dtypes, strict=False):
            slot.device = PipeLinkDevice(device_type, device_id)
            if shape is None:
                continue
            shape = tuple(int(d) for d in shape)
            dt = get_dtype(dtype)
            slot.dtype = PipeLinkDataType(dt.dl_code, dt.bits, 1)
            slot.ndim = len(shape)
            strides, acc = [], 1
            for d in reversed(shape):
                strides.append(acc)
                acc *= d
            dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
            steps = (ctypes.c_int64 * max(len(shape), 1))(*reversed(strides))
            self._keep += [dims, steps]
            slot.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
            slot.strides = ctypes.cast(steps, ctypes.POINTER(ctypes.c_int64))


class AttrArray:
    """A prebuilt ``PipeLinkAttr[n]`` from attribute values (floats, ints, bools, strings and lists)."""

    def __init__(self, values: Mapping[str, Any], *, where: str = "native module"):
        self.count = len(values)
        self.array = (PipeLinkAttr * max(self.count, 1))()
        self._keep: list[Any] = []
        for slot, (name, value) in zip(self.array, values.items(), strict=False):
            key = name.encode()
            self._keep.append(key)
            slot.name = key
            slot.count = 1
            if isinstance(value, bool | np.bool_):
                slot.type, slot.value.i = ATTR_BOOL, int(value)
            elif isinstance(value, int | np.integer):
                slot.type, slot.value.i = ATTR_INT, int(value)
            elif isinstance(value, float | np.floating):
                slot.type, slot.value.f = ATTR_FLOAT, float(value)
            elif isinstance(value, str):
                text = value.encode()
                self._keep.append(text)
                slot.type, slot.count, slot.value.s = ATTR_STR, len(text), text
            elif isinstance(value, list | tuple) and all(isinstance(v, int | float) for v in value):
                is_int = all(isinstance(v, int) and not isinstance(v, bool) for v in value)
                ctype = ctypes.c_int64 if is_int else ctypes.c_double
                block = (ctype * max(len(value), 1))(*value)
                self._keep.append(block)
                slot.count = len(value)
                if is_int:
                    slot.type, slot.value.ints = ATTR_INTS, ctypes.cast(block, ctypes.POINTER(ctypes.c_int64))
                else:
                    slot.type, slot.value.floats = (
                        ATTR_FLOATS,
                        ctypes.cast(block, ctypes.POINTER(ctypes.c_double)),
                    )
            else:
                raise InvalidArgumentError(
                    f"{where}: attribute {name!r} = {value!r} cannot be passed to a native module (use a "
                    f"float, int, bool, str or a list of numbers)",
                    attr=name,
                )


class HostServices:
    """The ``PipeLinkServices`` table of one stage, with its workspace block.

    The workspace is a NumPy block on the CPU (grown on demand, reused across calls); a CUDA backend
    passes ``allocate(nbytes) -> (ptr, keepalive)`` to draw it from its own pool instead.
    """

    def __init__(self, *, device_type: int = DEVICE_CPU, allocate: Any = None, cublas: Any = None):
        self._allocate = allocate
        self._block: Any = None
        self._ptr = 0
        self._size = 0
        self._workspace_cb = WORKSPACE_FN(self._workspace)
        self.table = PipeLinkServices(
            ABI_VERSION,
            device_type,
            _LOG_CALLBACK,
            self._workspace_cb,
            CUBLAS_FN(cublas) if cublas is not None else _NO_CUBLAS,
            None,
        )
        self.pointer = ctypes.cast(ctypes.pointer(self.table), ctypes.c_void_p)

    @property
    def workspace_bytes(self) -> int:
        return self._size

    def reserve(self, nbytes: int) -> int:
        """Make the workspace at least ``nbytes`` long (256-byte aligned); returns its address."""
        if nbytes > self._size:
            if self._allocate is not None:
                self._ptr, self._block = self._allocate(int(nbytes))
            else:
                raw = np.empty(int(nbytes) + 256, dtype=np.uint8)
                start = (-raw.ctypes.data) % 256
                self._block = raw
                self._ptr = raw.ctypes.data + start
            self._size = int(nbytes)
        return self._ptr

    def _workspace(self, nbytes: int) -> int | None:
        try:
            return self.reserve(nbytes) or None
        except MemoryError:
            log.error("native module asked for a %d-byte workspace, which could not be allocated", nbytes)
            return None


def data_ptr(
    x: Any,
    _ndarray: type = np.ndarray,
    _from_buffer: Any = ctypes.c_char.from_buffer,
    _addressof: Any = ctypes.addressof,
) -> int | None:
    """The data address of a NumPy array, a ``pipelink.Tensor`` (``.ptr``) or None (absent input)."""
    if type(x) is _ndarray:
        try:  # 4x faster than __array_interface__; only for writable, contiguous, non-empty arrays
            return _addressof(_from_buffer(x))
        except (TypeError, ValueError, BufferError):
            return x.__array_interface__["data"][0]
    if x is None:
        return None
    ptr = getattr(x, "ptr", None)
    return int(ptr) if ptr is not None else np.asarray(x).__array_interface__["data"][0]


def stream_handle(stream: Any) -> int | None:
    """A raw stream handle from an int, an object with ``.handle``, or None."""
    if stream is None:
        return None
    handle = getattr(stream, "handle", stream)
    return int(handle) if handle is not None else None


def device_of(ctx: KernelContext, device: str) -> tuple[int, int]:
    info = getattr(ctx.backend, "info", None)
    return (DEVICE_CUDA if device == "cuda" else DEVICE_CPU), int(getattr(info, "index", 0) or 0)


def make_services(ctx: KernelContext, device_type: int) -> HostServices:
    """The stage's services table; a runtime may offer ``allocate``/``cublas_handle`` via ``ctx.services``."""
    svc = ctx.services
    return HostServices(
        device_type=device_type,
        allocate=getattr(svc, "allocate", None),
        cublas=getattr(svc, "cublas_handle", None),
    )
