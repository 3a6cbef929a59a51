"""The CPU backend: NumPy memory, synchronous execution, no streams. The reference for every GPU result."""

from __future__ import annotations

import contextlib
import ctypes
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from ..dtypes import DType, get_dtype
from ..errors import DTypeMismatchError, InvalidArgumentError, OutOfMemoryError
from ..hardware import cpu_info
from ..limits import format_bytes, shape_nbytes
from ..tensor import Tensor, asarray
from .base import Allocation, Backend, Capabilities, MemoryStats

__all__ = ["CPUBackend", "scalar_dtype", "host_array"]


def host_array(value: Any, dtype: DType | None = None) -> np.ndarray:
    """A NumPy array of a host input (array, Python scalar or nested list), with a supported dtype.

    Raises
    ------
    InvalidArgumentError
        For a value of another kind.
    DTypeMismatchError
        For an array of a dtype PipeLink does not support.
    """
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
    elif isinstance(value, bool | int | float):
        array = np.asarray(value, dtype=(dtype or scalar_dtype(value)).numpy)
    elif isinstance(value, list | tuple):
        array = np.asarray(value, dtype=dtype.numpy if dtype is not None else None)
    else:
        raise InvalidArgumentError(
            f"cannot use {type(value).__name__} as an input: pass a NumPy array, a scalar or a "
            "DLPack tensor (PyTorch, CuPy, JAX)"
        )
    try:
        get_dtype(array.dtype)
    except InvalidArgumentError as e:
        raise DTypeMismatchError(f"unsupported input dtype {array.dtype}: {e}") from None
    return array


def scalar_dtype(value: bool | int | float) -> DType:
    """The dtype of an undeclared Python scalar input: bool, int64 or float32."""
    if isinstance(value, bool):
        return get_dtype("bool")
    return get_dtype("int64" if isinstance(value, int) else "float32")


class CPUBackend(Backend):
    """The host: NumPy arrays are the kernel arguments; work runs synchronously, on no stream."""

    kind = "cpu"
    capabilities = Capabilities(
        host_access=True, asynchronous=False, cuda_graphs=False, isolation="shared_memory"
    )

    def __init__(self):
        super().__init__("cpu", cpu_info())

    def _allocate(self, nbytes: int, alignment: int, stream: Any, *, shared: bool = False) -> Allocation:
        if shared:
            # For plans with isolated stages: worker processes map the same pages (page-aligned).
            shm = SharedMemory(create=True, size=nbytes)
            block = np.ndarray((nbytes,), dtype=np.uint8, buffer=shm.buf)
            alloc = Allocation(block.ctypes.data, nbytes, block, self)
            alloc.shared = shm
            return alloc
        raw = np.empty(nbytes + alignment, dtype=np.uint8)
        start = (-raw.ctypes.data) % alignment
        block = raw[start : start + nbytes]
        return Allocation(block.ctypes.data, nbytes, block, self)

    def _free(self, alloc: Allocation) -> None:
        alloc.handle = None  # NumPy frees the memory once no view references it
        shm = getattr(alloc, "shared", None)
        if shm is not None:
            alloc.shared = None
            # Views still exported keep the mapping until they go; the name is removed now either way.
            with contextlib.suppress(BufferError):
                shm.close()
            shm.unlink()

    def _memcpy(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        ctypes.memmove(dst, src, nbytes)

    def _fill_stats(self, stats: MemoryStats) -> None:
        stats.reserved_bytes = stats.allocated_bytes

    def run_context(self):
        return np.errstate(all="ignore")

    def view(
        self,
        alloc: Allocation,
        offset: int,
        shape: tuple[int, ...],
        dtype: DType,
        strides: tuple[int, ...] | None = None,
    ) -> np.ndarray:
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = count * dtype.itemsize
        region = alloc.handle[offset : offset + nbytes]
        return region.view(dtype.numpy).reshape(shape)

    def reshaped(self, arg: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        return np.reshape(arg, shape, copy=False)  # raises rather than copy

    def empty(self, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
        try:
            return np.empty(shape, dtype=dtype.numpy)
        except (MemoryError, ValueError) as e:  # NumPy's raw errors: more than the host has, or can address
            nbytes = shape_nbytes(shape, dtype.itemsize)
            self.check_fits(nbytes, tag="output")
            raise OutOfMemoryError(
                f"an array of {format_bytes(nbytes)} ({list(shape)} {dtype.name}) cannot be allocated on the "
                f"host ({e}); use smaller shapes",
                requested=nbytes,
                device="cpu",
            ) from e

    def wrap(self, arg: np.ndarray) -> Tensor:
        return Tensor.from_numpy(arg)

    def import_input(
        self,
        value: Any,
        *,
        stream: Any = None,
        dtype: DType | None = None,
        pinned_key: str | None = None,
        producers: list | None = None,
    ) -> np.ndarray:
        if isinstance(value, Tensor) or (
            hasattr(value, "__dlpack__") and not isinstance(value, np.ndarray | np.generic)
        ):
            tensor = asarray(value)
            return (tensor.cpu() if tensor.is_cuda else tensor).numpy()
        return host_array(value, dtype)

    def import_output(self, name: str, value: Any, *, stream: Any = None) -> np.ndarray:
        """A caller's host buffer for output ``name``: a NumPy array, a ``pl.Tensor`` or a CPU DLPack
        tensor (PyTorch), viewed in place (contiguous and writable)."""
        if isinstance(value, np.ndarray):
            array = value
        elif isinstance(value, Tensor) or hasattr(value, "__dlpack__"):
            tensor = asarray(value)
            if tensor.is_cuda:
                raise InvalidArgumentError(
                    f"out[{name!r}] lives on {tensor.device}, but the pipeline runs on the cpu: pass host "
                    "memory, or load the pipeline on that device",
                    output=name,
                    device=tensor.device,
                )
            array = tensor.numpy()
        else:
            raise InvalidArgumentError(
                f"out[{name!r}] must be a NumPy array, a pl.Tensor or a DLPack tensor (got "
                f"{type(value).__name__})",
                output=name,
            )
        if not array.flags.c_contiguous:
            raise InvalidArgumentError(
                f"out[{name!r}] is not C-contiguous: pass a contiguous buffer (np.empty, torch.empty)",
                output=name,
            )
        if not array.flags.writeable:
            raise InvalidArgumentError(f"out[{name!r}] is read-only: pass a writable buffer", output=name)
        return array

    def match_inputs(self, signature: tuple, given: dict, stream: Any) -> dict | None:
        """``given`` as kernel arguments when every input is a NumPy array with the shape, dtype and
        layout of ``signature``; else None (the general import)."""
        if len(given) != len(signature):
            return None
        for name, shape, dtype, contiguous in signature:
            value = given.get(name)
            if (
                type(value) is not np.ndarray
                or value.shape != shape
                or value.dtype != get_dtype(dtype).numpy
                or value.flags.c_contiguous != contiguous
            ):
                return None
        return given

    def signature_of(self, arg: np.ndarray) -> tuple[tuple[int, ...], str, bool]:
        return arg.shape, get_dtype(arg.dtype).name, bool(arg.flags.c_contiguous)

    def copy(self, dst: np.ndarray, src: np.ndarray, *, stream: Any = None) -> None:
        np.copyto(dst, src, casting="no")

    def to_host(self, tensor: Tensor) -> Tensor:
        return tensor

    def count_nonfinite(self, arg: np.ndarray, *, stream: Any = None) -> int:
        if arg.dtype.kind not in "fV" and arg.dtype.name != "bfloat16":
            return 0
        values = arg.astype(np.float32) if arg.dtype.itemsize < 4 else arg
        return int(arg.size - np.count_nonzero(np.isfinite(values)))
