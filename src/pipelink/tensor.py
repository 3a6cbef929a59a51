"""``pl.Tensor``: a typed view of memory (pointer, shape, strides in elements, dtype, device).

A Tensor owns nothing by itself: ``_owner`` keeps the memory alive (a NumPy array, a pool block, a
producer's DLPack capsule). Conversions in and out go through DLPack or NumPy; never through copies
unless the caller asks (``cpu()``, ``numpy()`` on a device tensor).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from . import dlpack
from .dtypes import DType, from_dlpack_code, get_dtype
from .errors import InvalidArgumentError

__all__ = ["Tensor", "asarray", "contiguous_strides", "parse_device", "set_backend_resolver"]

# device -> its backend, for the few Tensor methods that need one (cpu(), DLPack stream ordering). Set by
# pipelink.backends when it is imported: this module sits below the backends and never imports them.
_backend_of: Callable[[str], Any] | None = None


def set_backend_resolver(resolve: Callable[[str], Any]) -> None:
    """Tell tensors how to find the backend of a device (``pipelink.backends.get_backend``)."""
    global _backend_of
    _backend_of = resolve


def _backend(device: str) -> Any:
    if _backend_of is None:
        raise InvalidArgumentError(f"no backend is loaded for {device}: import pipelink first")
    return _backend_of(device)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides, in elements."""
    strides, acc = [], 1
    for dim in reversed(shape):
        strides.append(acc)
        acc *= max(dim, 1)
    return tuple(reversed(strides))


_DEVICES: dict[str, tuple[str, int]] = {"cpu": ("cpu", 0)}


def parse_device(device: str) -> tuple[str, int]:
    """``"cpu"`` -> ("cpu", 0); ``"cuda"`` / ``"cuda:1"`` -> ("cuda", N)."""
    known = _DEVICES.get(device) if isinstance(device, str) else None
    if known is not None:
        return known
    text = str(device).strip().lower()
    kind, _, index = text.partition(":")
    if kind not in ("cpu", "cuda") or (index and not (index.isascii() and index.isdigit())):
        raise InvalidArgumentError(
            f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N' (got {device!r})", device=str(device)
        )
    parsed = (kind, int(index or 0))
    if isinstance(device, str) and len(_DEVICES) < 64:
        _DEVICES[device] = parsed
    return parsed


class Tensor:
    """A tensor handed between stages and returned by ``Pipeline.run``.

    Attributes
    ----------
    ptr : int
        Address of the first element (host or device).
    shape, strides : tuple of int
        Strides are in elements, as in DLPack.
    dtype : DType
    device : str
        ``"cpu"`` or ``"cuda:N"``.
    """

    __slots__ = ("ptr", "shape", "strides", "dtype", "device", "_owner", "_array", "_contig", "__weakref__")

    def __init__(
        self,
        ptr: int,
        shape,
        dtype,
        device: str = "cpu",
        strides=None,
        owner: Any = None,
        _array: np.ndarray | None = None,
    ):
        self.ptr = int(ptr)
        self.shape = tuple(int(s) for s in shape)
        self.dtype: DType = get_dtype(dtype)
        self.strides = (
            tuple(int(s) for s in strides) if strides is not None else contiguous_strides(self.shape)
        )
        kind, index = parse_device(device)
        self.device = "cpu" if kind == "cpu" else f"cuda:{index}"
        self._owner = owner
        self._array = _array
        self._contig: bool | None = None

    @classmethod
    def _trusted(
        cls,
        ptr: int,
        shape: tuple[int, ...],
        dtype: DType,
        device: str,
        strides: tuple[int, ...],
        owner: Any,
        contiguous: bool | None = None,
    ) -> Tensor:
        """A tensor from values already checked and in canonical form (tuples of ``int``, a ``DType``, a
        ``"cuda:N"`` device; ``contiguous`` when already known): the run-time import path, without the
        constructor's conversions."""
        t = cls.__new__(cls)
        t.ptr, t.shape, t.strides, t.dtype, t.device = ptr, shape, strides, dtype, device
        t._owner, t._array, t._contig = owner, None, contiguous
        return t

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    def from_numpy(cls, array: np.ndarray) -> Tensor:
        """Wrap a NumPy array without copying (its strides must be multiples of the item size)."""
        dtype = get_dtype(array.dtype)
        itemsize = array.dtype.itemsize
        if any(s % itemsize for s in array.strides):
            array = array.copy(order="C")
        strides = tuple(s // itemsize for s in array.strides)
        ptr = array.__array_interface__["data"][0]
        return cls(ptr, array.shape, dtype, "cpu", strides, owner=array, _array=array)

    @classmethod
    def from_dlpack(cls, obj: Any, *, stream: int | None = None) -> Tensor:
        """Import any DLPack producer (PyTorch, CuPy, JAX, NumPy) without copying.

        ``stream`` is the consumer's stream handle, passed to the producer so it orders its pending
        work before ours (CUDA only).
        """
        if isinstance(obj, Tensor):
            return obj
        if isinstance(obj, np.ndarray):
            return cls.from_numpy(obj)
        if not hasattr(obj, "__dlpack__"):
            raise InvalidArgumentError(
                f"cannot make a tensor from {type(obj).__name__}: expected a NumPy array, a scalar or an "
                "object with __dlpack__ (PyTorch, CuPy, JAX)"
            )
        device_type = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else dlpack.DEVICE_CPU
        try:
            capsule = obj.__dlpack__(stream=stream) if device_type == dlpack.DEVICE_CUDA else obj.__dlpack__()
        except TypeError:
            capsule = obj.__dlpack__()
        info = dlpack.from_capsule(capsule)
        dtype = from_dlpack_code(info["dl_code"], info["bits"], info["lanes"])
        if info["device_type"] in (dlpack.DEVICE_CPU, dlpack.DEVICE_CUDA_HOST):
            device = "cpu"
        elif info["device_type"] == dlpack.DEVICE_CUDA:
            device = f"cuda:{info['device_id']}"
        else:
            raise InvalidArgumentError(f"unsupported DLPack device type {info['device_type']}")
        return cls(info["data"], info["shape"], dtype, device, info["strides"], owner=info["keepalive"])

    # -- properties --------------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def is_contiguous(self) -> bool:
        contig = self._contig
        if contig is None:  # shape and strides never change after construction
            contig = self._contig = all(
                d == 1 or s == c
                for d, s, c in zip(self.shape, self.strides, contiguous_strides(self.shape), strict=True)
            )
        return contig

    @property
    def is_cuda(self) -> bool:
        return self.device != "cpu"

    def __repr__(self) -> str:
        return f"pl.Tensor(shape={self.shape}, dtype={self.dtype.name}, device={self.device!r})"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # -- host access -------------------------------------------------------------------------------
    def host(self) -> np.ndarray:
        """The host's NumPy view of a host-mapped device tensor (``pl.empty(..., device="cuda_host")``):
        writes are seen by the kernels of later work, which read the memory in place. Synchronise (or
        wait for the run's outputs) before reading what a kernel wrote.

        Raises
        ------
        InvalidArgumentError
            For any other tensor (a CPU tensor is its own host memory: use :meth:`numpy`).
        """
        if not self.is_cuda or self._array is None:
            raise InvalidArgumentError(
                f"tensor on {self.device} is not host-mapped memory: host() is for pl.empty(..., "
                "device='cuda_host'); use .numpy() for a copy (a view on the CPU)"
            )
        return self._array

    def numpy(self) -> np.ndarray:
        """The data as a NumPy array: a view on the CPU, a copy for a device tensor."""
        if self.is_cuda:
            return self.cpu().numpy()
        if self._array is None:
            self._array = _host_view(self)
        return self._array

    def __array__(self, dtype=None, copy=None):
        if self.is_cuda:
            raise InvalidArgumentError(
                f"tensor lives on {self.device}: call .cpu() or .numpy() to copy it to the host first"
            )
        arr = self.numpy()
        if dtype is not None:
            arr = arr.astype(dtype, copy=bool(copy))
        elif copy:
            arr = arr.copy()
        return arr

    def cpu(self) -> Tensor:
        """This tensor on the host (itself when already there)."""
        if not self.is_cuda:
            return self
        return _backend(self.device).to_host(self)

    # -- DLPack export -----------------------------------------------------------------------------
    def __dlpack_device__(self) -> tuple[int, int]:
        if self.is_cuda:
            return (dlpack.DEVICE_CUDA, int(self.device.split(":")[1]))
        return (dlpack.DEVICE_CPU, 0)

    def __dlpack__(
        self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: bool | None = None
    ) -> Any:
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"tensor is on {self.device}; cannot export it to DLPack device {dl_device}")
        if copy:
            raise BufferError("pl.Tensor exports zero-copy only (copy=True not supported)")
        if self.is_cuda and stream is not None and stream != -1:
            # Our work on this tensor is complete when run() returns (outputs are synchronised), so the
            # consumer's stream needs no extra ordering; the backend may still record an event here.
            _backend(self.device).order_for_consumer(self, stream)
        dev_type, dev_id = self.__dlpack_device__()
        return dlpack.to_capsule(
            self, self.ptr, self.shape, self.strides, self.dtype.dl_code, self.dtype.bits, dev_type, dev_id
        )


def _host_view(t: Tensor) -> np.ndarray:
    """A NumPy view of host memory described by a Tensor; the view's base keeps the tensor alive."""
    if t.size == 0:
        return np.empty(t.shape, dtype=t.dtype.numpy)
    raw = np.asarray(_HostMemory(t))
    return raw.view(t.dtype.numpy)


class _HostMemory:
    """Exposes a tensor's host memory through ``__array_interface__`` (as unsigned ints of its width).

    It holds the tensor's *owner*, not the tensor: a tensor caches its view, and NumPy arrays are not
    tracked by the cycle collector, so tensor -> view -> tensor would never be freed.
    """

    def __init__(self, t: Tensor):
        itemsize = t.dtype.itemsize
        self._owner = t._owner
        self.__array_interface__ = {
            "data": (t.ptr, False),
            "shape": t.shape,
            "strides": tuple(s * itemsize for s in t.strides),
            "typestr": f"|u{itemsize}",
            "version": 3,
        }


def asarray(obj: Any, *, dtype=None, device: str = "cpu") -> Tensor:
    """A Tensor from a NumPy array, a DLPack producer, a Python scalar or a nested list."""
    if isinstance(obj, Tensor):
        return obj
    if hasattr(obj, "__dlpack__") and not isinstance(obj, np.ndarray | np.generic):
        return Tensor.from_dlpack(obj)
    np_dtype = get_dtype(dtype).numpy if dtype is not None else None
    if isinstance(obj, bool | int | float) and np_dtype is None:
        np_dtype = np.dtype(np.float32) if isinstance(obj, float) else None
    array = np.asarray(obj, dtype=np_dtype)
    if not array.flags.c_contiguous:
        array = array.copy(order="C")
    return Tensor.from_numpy(array)
