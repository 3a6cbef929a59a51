"""Memory and data movement of the CUDA backend: the arena and pooled allocators, pinned staging, input
import, copies to and from the host, strided copies and the non-finite count.

A mixin of :class:`~pipelink.backends.cuda.CUDABackend` (imported only by it). Every transfer is
stream-ordered on an explicit backend stream; nothing here touches the legacy default stream.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from ..dtypes import DType, get_dtype
from ..errors import InvalidArgumentError, OutOfMemoryError
from ..tensor import Tensor, asarray, contiguous_strides
from .base import Allocation, MemoryStats
from .cpu import host_array
from .cuda_device import check_driver, is_cuda_exception
from .cuda_pool import MAX_BIN, BinnedPool, bin_size

__all__ = ["CUDADataMixin"]

_UINT = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_NONFINITE = {"float32": "pl_nonfinite_f32", "float16": "pl_nonfinite_f16", "bfloat16": "pl_nonfinite_bf16",
              "float64": "pl_nonfinite_f64"}
_STAGING_PER_BIN = 4


_TORCH_DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64", "int8", "int32", "int64", "uint8", "bool")


class _TorchDTypes(dict):
    """torch.dtype -> PipeLink dtype name, filled on first use (never imports torch by itself)."""

    def get(self, key, default=None):
        if not self:
            import torch

            for n in _TORCH_DTYPE_NAMES:
                self[getattr(torch, n)] = n
        return super().get(key, default)


_TORCH_DTYPES = _TorchDTypes()


class _NotTorch:
    """Stands for ``torch.Tensor`` until PyTorch was seen (no value has this type)."""


class _HostMemory:
    """``__array_interface__`` over pinned host memory; holds the cuda.core Buffer that owns it."""

    def __init__(self, buffer: Any, nbytes: int):
        self._buffer = buffer
        self.__array_interface__ = {"data": (int(buffer.handle), False), "shape": (nbytes,),
                                    "typestr": "|u1", "version": 3}


class CUDADataMixin:
    """Memory hooks and transfers; expects the attributes set by ``CUDABackend.__init__``."""

    # -- set-up ------------------------------------------------------------------------------------
    def _init_memory(self) -> None:
        from cuda.core import DeviceMemoryResource, DeviceMemoryResourceOptions, LegacyPinnedMemoryResource

        self._allocator = "async"
        self._mr = DeviceMemoryResource(self._dev, DeviceMemoryResourceOptions())
        self._keep_pool_memory()
        self._pinned_mr = LegacyPinnedMemoryResource()
        self._pool = BinnedPool(self._raw_alloc, self._raw_free, on_change=self._pool_changed)
        self._peak_total = 0
        self._staging: dict[int, list[list]] = {}
        self._staging_lock = threading.Lock()
        self._counter_lock = threading.Lock()
        self._counter: Tensor | None = None
        self._counter_host: np.ndarray | None = None
        self._torch_tensor: type = _NotTorch  # torch.Tensor once a PyTorch input was imported
        self._torch_stream: Any = None  # PyTorch's accessor of its current raw stream, then
        self._cu_streams: dict[int, Any] = {}

    def _keep_pool_memory(self) -> None:
        # Without a release threshold the pool returns its memory to the OS at every synchronisation.
        d = self._driver
        try:
            check_driver(d.cuMemPoolSetAttribute(
                self._mr.handle, d.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                d.cuuint64_t(2**64 - 1)), "cuMemPoolSetAttribute")
        except Exception as e:  # noqa: BLE001 - only a performance hint
            self._log.debug("pipelink: could not set the pool's release threshold: %s", e)

    def set_allocator(self, kind: str) -> None:
        """``"async"``: stream-ordered pool (cuMemAllocAsync); ``"legacy"``: synchronous cuMemAlloc."""
        if kind not in ("async", "legacy"):
            raise InvalidArgumentError(f"allocator must be 'async' or 'legacy' (got {kind!r})")
        self._allocator = kind

    # -- raw allocations ---------------------------------------------------------------------------
    def _raw_alloc(self, size: int) -> tuple[int, Any]:
        """``(pointer, handle)``: a cuda.core Buffer from the stream-ordered pool, or an int (legacy)."""
        self._check_usable()
        self._bind_thread()
        d = self._driver
        if self._allocator == "legacy":
            err, ptr = d.cuMemAlloc(max(size, 1))
            if int(err) == int(d.CUresult.CUDA_ERROR_OUT_OF_MEMORY):
                raise self._oom(size)
            check_driver((err,), "cuMemAlloc", device_uuid=self.info.uuid)
            return int(ptr), int(ptr)
        # During a capture an allocation on the captured stream would become a graph node: use the side
        # stream and wait for it.
        stream = self._side if self._capturing else self._main
        try:
            buf = self._mr.allocate(max(size, 1), stream=stream)
        except Exception as e:
            if is_cuda_exception(e) and "OUT_OF_MEMORY" in str(e):
                raise self._oom(size) from e
            raise self.raise_cuda(e, "cuMemAllocAsync") from e
        if self._capturing:
            stream.sync()
        return int(buf.handle), buf

    def _raw_free(self, raw: Any) -> None:
        if isinstance(raw, int):
            self._bind_thread()
            check_driver(self._driver.cuMemFree(raw), "cuMemFree")
        else:
            raw.close(self._main)

    def _oom(self, size: int) -> OutOfMemoryError:
        st = self._pool.stats()
        try:
            free, total = check_driver(self._driver.cuMemGetInfo(), "cuMemGetInfo")
        except Exception:  # noqa: BLE001 - the report must not fail
            free = total = -1
        return OutOfMemoryError(
            f"out of memory on {self.device} allocating {size} bytes: {st['in_use_bytes']} bytes in use by "
            f"tensors, {self._stats.allocated_bytes} in arenas, {st['cached_bytes']} cached in the pool "
            f"(bins {st['bins']}), {free} of {total} bytes free on the device; drop tensors you no longer "
            "need or call pl.memory.clear_pool()", size=size, device=self.device, device_uuid=self.info.uuid,
            in_use=st["in_use_bytes"], cached=st["cached_bytes"], arena=self._stats.allocated_bytes,
            device_free=free, device_total=total)

    def _pool_changed(self, delta: int) -> None:
        # No lock here (see BinnedPool): the peak is of arenas + pooled blocks together.
        total = self._stats.allocated_bytes + self._pool.in_use_bytes
        if total > self._peak_total:
            self._peak_total = total

    # -- Backend hooks -----------------------------------------------------------------------------
    def _allocate(self, nbytes: int, alignment: int, stream: Any) -> Allocation:
        extra = max(0, alignment - 256)  # pool allocations are 256-byte aligned at least
        try:
            ptr, raw = self._raw_alloc(nbytes + extra)
        except OutOfMemoryError:
            if not self._pool.clear():
                raise
            ptr, raw = self._raw_alloc(nbytes + extra)
        aligned = (ptr + alignment - 1) & ~(alignment - 1)
        self._pool_changed(0)
        return Allocation(aligned, nbytes, raw, self)

    def _free(self, alloc: Allocation) -> None:
        raw, alloc.handle = alloc.handle, None
        if raw is not None:
            self._raw_free(raw)

    def _fill_stats(self, stats: MemoryStats) -> None:
        pool = self._pool.stats()
        stats.allocated_bytes += pool["in_use_bytes"]
        stats.peak_bytes = max(stats.peak_bytes, self._peak_total, stats.allocated_bytes)
        stats.bins = dict(pool["bins"])
        try:
            reserved = int(self._mr.attributes.reserved_mem_current)
        except Exception:  # noqa: BLE001 - attributes need a current context; fall back to our own count
            reserved = pool["raw_bytes"] + self._stats.allocated_bytes
        stats.reserved_bytes = max(reserved, pool["raw_bytes"])

    def clear_pool(self) -> None:
        """Free every cached block, then trim the stream-ordered pool to what is in use."""
        self._bind_thread()
        self._main.sync()
        self._pool.clear()
        with self._staging_lock:
            self._staging.clear()
        try:
            check_driver(self._driver.cuMemPoolTrimTo(self._mr.handle, 0), "cuMemPoolTrimTo")
        except Exception as e:  # noqa: BLE001 - trimming is best effort
            self._log.debug("pipelink: cuMemPoolTrimTo failed: %s", e)

    # -- tensors -----------------------------------------------------------------------------------
    def empty(self, shape: tuple[int, ...], dtype: DType) -> Tensor:
        """A contiguous device tensor from the pool; its block returns to the pool when it is dropped."""
        dtype, shape = get_dtype(dtype), tuple(int(d) for d in shape)
        block = self._pool.acquire(math.prod(shape) * dtype.itemsize)
        return Tensor._trusted(block.ptr, shape, dtype, self.device, contiguous_strides(shape), block, True)

    def view(self, alloc: Allocation, offset: int, shape: tuple[int, ...], dtype: DType,
             strides: tuple[int, ...] | None = None) -> Tensor:
        return Tensor(alloc.ptr + offset, shape, dtype, self.device, strides, owner=alloc)

    def wrap(self, arg: Tensor) -> Tensor:
        return arg

    def signature_of(self, arg: Tensor) -> tuple[tuple[int, ...], str, bool]:
        return arg.shape, arg.dtype.name, arg.is_contiguous

    def pinned_empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A NumPy array in page-locked host memory (fast, asynchronous host <-> device copies)."""
        dtype = get_dtype(dtype)
        count = math.prod(shape)
        nbytes = max(count * dtype.itemsize, 1)
        raw = np.asarray(_HostMemory(self._pinned_mr.allocate(nbytes), nbytes))
        return raw[: count * dtype.itemsize].view(dtype.numpy).reshape(shape)

    # -- import and export -------------------------------------------------------------------------
    def import_input(self, value: Any, *, stream: Any = None, dtype: DType | None = None,
                     pinned_key: str | None = None, producers: list | None = None) -> Tensor:
        """A user's input as a device Tensor: CUDA DLPack producers zero-copy, host data uploaded.

        ``producers``: where PyTorch inputs note ``(their stream, ours)`` for one :meth:`order_after` per
        run; without it each PyTorch input is ordered on its own."""
        self._check_usable()
        stream = stream if stream is not None else self._main
        if isinstance(value, Tensor) and value.is_cuda:
            self._check_device(value)
            return value
        if type(value).__module__ == "torch" and getattr(value, "is_cuda", False):
            fast = self._import_torch(value, stream, producers)
            if fast is not None:
                return fast
        if not isinstance(value, np.ndarray | np.generic | Tensor) and hasattr(value, "__dlpack__"):
            dev = value.__dlpack_device__() if hasattr(value, "__dlpack_device__") else (1, 0)
            if dev[0] == 2:  # kDLCUDA
                tensor = Tensor.from_dlpack(value, stream=int(stream.handle))
                self._check_device(tensor)
                return tensor
            value = asarray(value)
        array = value.numpy() if isinstance(value, Tensor) else host_array(value, dtype)
        # Not np.ascontiguousarray: it turns a 0-d array into a 1-d one.
        return self._upload(array if array.flags.c_contiguous else array.copy(order="C"), stream,
                            pinned_key=pinned_key)

    def _import_torch(self, value: Any, stream: Any, producers: list | None = None) -> Tensor | None:
        """PyTorch CUDA tensors without the DLPack round trip (which costs tens of microseconds in
        PyTorch): the same zero-copy view, ordered after PyTorch's current stream by one event. None when
        the tensor needs the general path (another device, an unsupported dtype)."""
        import torch

        name = _TORCH_DTYPES.get(value.dtype)
        if name is None or value.get_device() != self.info.index:
            return None
        self._torch_tensor = torch.Tensor  # from now on, match_inputs recognises PyTorch tensors
        self._torch_stream = torch._C._cuda_getCurrentRawStream  # noqa: SLF001 - the fast accessor
        raw = torch._C._cuda_getCurrentRawStream(self.info.index)  # noqa: SLF001 - the fast accessor
        if producers is None:
            self.order_after([(raw, stream)])
        else:
            producers.append((raw, stream))
        return Tensor._trusted(value.data_ptr(), tuple(value.shape), get_dtype(name), self.device,
                               value.stride(), value)

    def order_after(self, producers: list) -> None:
        """Make each of our streams wait for the work queued so far on a producer's stream.

        ``producers``: ``(raw producer stream handle, our stream)`` pairs; each distinct pair costs one
        event record and one wait, none when the producer's stream is ours."""
        done = None
        drv = self._driver
        for raw, ours in producers:
            handle = self.handle_of(ours)
            key = (raw, int(handle))
            if raw == key[1]:
                continue
            if done is None:
                done = {key}
            elif key in done:
                continue
            else:
                done.add(key)
            theirs = self._cu_streams.get(raw)
            if theirs is None:
                if len(self._cu_streams) > 256:
                    self._cu_streams.clear()
                theirs = self._cu_streams[raw] = drv.CUstream(raw)
            (err,) = drv.cuEventRecord(self._order_handle, theirs)
            if err == 0:
                (err,) = drv.cuStreamWaitEvent(handle, self._order_handle, 0)
            if err != 0:
                raise self._error(int(err), "ordering after the producer's stream")

    def match_inputs(self, signature: tuple, given: dict, stream: Any) -> dict | None:
        """``given`` as kernel arguments when every input already lives on this device with the shape,
        dtype and layout of ``signature`` (a plan's), ordered after PyTorch's current stream; None when
        any input needs the general import (host data, another device or signature, a DLPack producer
        other than PyTorch)."""
        return self._match(signature, given, stream, True)

    def match_places(self, signature: tuple, given: dict, stream: Any) -> tuple | None:
        """As :meth:`match_inputs`, but only where each input lives: ``(pointer, strides)`` per input in
        signature order (the key of a captured graph; see ``runtime.graphs.places``), without building
        kernel arguments."""
        return self._match(signature, given, stream, False)

    def _match(self, signature: tuple, given: dict, stream: Any, tensors: bool) -> Any:
        if len(given) != len(signature):
            return None
        torch_tensor, device, index = self._torch_tensor, self.device, self.info.index
        out: Any = {} if tensors else []
        torch_inputs = False
        for name, shape, dtype, contiguous in signature:
            value = given.get(name)
            if type(value) is torch_tensor:
                if dict.get(_TORCH_DTYPES, value.dtype) != dtype or value.shape != shape:
                    return None
                torch_inputs = True
                if tensors:
                    if value.get_device() != index or value.is_contiguous() != contiguous:
                        return None
                    out[name] = Tensor._trusted(value.data_ptr(), shape, get_dtype(dtype), device,
                                                value.stride(), value, contiguous)
                else:
                    # Places are keys of graphs captured here: a pointer of another device (one
                    # address space) or other strides match no key, so neither is checked here.
                    out.append((value.data_ptr(), value.stride()))
            elif type(value) is Tensor and value.device == device:
                if value.dtype.name != dtype or value.shape != shape or value.is_contiguous != contiguous:
                    return None
                if tensors:
                    out[name] = value
                else:
                    out.append((value.ptr, value.strides))
            else:
                return None
        if torch_inputs:
            self.order_after([(self._torch_stream(index), stream)])
        return out if tensors else tuple(out)

    def _check_device(self, tensor: Tensor) -> None:
        if tensor.device != self.device:
            raise InvalidArgumentError(
                f"input tensor lives on {tensor.device}, but the pipeline runs on {self.device}; "
                "move it first",
                device=tensor.device)

    def _upload(self, array: np.ndarray, stream: Any, *, pinned_key: str | None = None) -> Tensor:
        tensor = self.empty(array.shape, get_dtype(array.dtype))
        nbytes = array.nbytes
        if nbytes == 0:
            return tensor
        flat = array.reshape(-1).view(np.uint8)
        if pinned_key is not None:
            # An input declared pin_memory: its own page-locked buffer, kept across runs, so uploads of any
            # size are asynchronous DMA copies (the buffer is reused once the previous copy has finished).
            pinned = self.__dict__.setdefault("_pinned_inputs", {})
            entry = pinned.get(pinned_key)
            if entry is None or entry[1].nbytes < nbytes:
                entry = pinned[pinned_key] = [None, self.pinned_empty((nbytes,), "uint8"), None]
            if entry[2] is not None and not entry[2].is_done:
                entry[2].sync()
            entry[1][:nbytes] = flat
            self._memcpy(tensor.ptr, entry[1].ctypes.data, nbytes, stream)
            entry[2] = stream.record(options=self._event_opts[False])
            return tensor
        size = bin_size(nbytes) if nbytes <= MAX_BIN else None
        if size is None:  # large: the driver stages pageable memory itself (the copy returns when done)
            self._memcpy(tensor.ptr, flat.ctypes.data, nbytes, stream)
            return tensor
        entry = self._staging_acquire(size)
        entry[1][:nbytes] = flat
        self._memcpy(tensor.ptr, entry[1].ctypes.data, nbytes, stream)
        entry[2] = stream.record(options=self._event_opts[False])  # the staging buffer is busy until then
        with self._staging_lock:
            free = self._staging.setdefault(size, [])
            if len(free) < _STAGING_PER_BIN:
                free.append(entry)
        return tensor

    def _staging_acquire(self, size: int) -> list:
        with self._staging_lock:
            free = self._staging.get(size)
            entry = free.pop(0) if free else None
        if entry is None:
            return [None, self.pinned_empty((size,), "uint8"), None]
        if entry[2] is not None and not entry[2].is_done:
            entry[2].sync()
        return entry

    def to_host(self, tensor: Tensor) -> Tensor:
        """A NumPy-backed copy of a device tensor (synchronises the backend's main stream)."""
        self._check_usable()
        if not tensor.is_cuda:
            return tensor
        self._check_device(tensor)
        src = tensor
        if not tensor.is_contiguous:
            src = self.empty(tensor.shape, tensor.dtype)
            self.copy(src, tensor, stream=self._main)
        out = np.empty(tensor.shape, dtype=tensor.dtype.numpy)
        if out.nbytes:
            self._memcpy(out.ctypes.data, src.ptr, out.nbytes, self._main)
        self.synchronize(self._main)
        return Tensor.from_numpy(out)

    def order_for_consumer(self, tensor: Tensor, stream: Any) -> None:
        """Make a DLPack consumer's stream (an int handle) wait for the work queued on our main stream."""
        if self._capturing or self._corrupted:
            return
        event = self._main.record(options=self._event_opts[False])
        check_driver(self._driver.cuStreamWaitEvent(self._driver.CUstream(int(stream)), event.handle, 0),
                     "cuStreamWaitEvent")

    # -- device copies -----------------------------------------------------------------------------
    def _memcpy(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        check_driver(self._driver.cuMemcpyAsync(dst, src, nbytes, stream.handle), "cuMemcpyAsync",
                     device_uuid=self.info.uuid)

    def copy(self, dst: Tensor, src: Tensor, *, stream: Any = None) -> None:
        """``dst[...] = src``: one cuMemcpyAsync when both are contiguous, else a strided-copy kernel."""
        self._check_usable()
        stream = stream if stream is not None else self._main
        if tuple(dst.shape) != tuple(src.shape) or dst.dtype != src.dtype:
            raise InvalidArgumentError(
                f"copy needs equal shapes and dtypes (got {src.shape} {src.dtype} -> "
                f"{dst.shape} {dst.dtype})")
        nbytes = src.nbytes
        if nbytes == 0:
            return
        if src.is_contiguous and dst.is_contiguous:
            self._memcpy(dst.ptr, src.ptr, nbytes, stream)
            return
        dims, s_str, d_str = _collapse(list(src.shape), list(src.strides), list(dst.strides))
        if len(dims) > 8:
            raise InvalidArgumentError(
                f"a strided copy supports up to 8 dimensions after merging (got {dims})")
        pad = 8 - len(dims)
        kernel = self.compile_kernel(_helper_source(), "pl_strided_copy",
                                     {"define_macro": [("PL_ELEM", _UINT[src.dtype.itemsize])]},
                                     _helper_include_dirs())
        n = src.size
        args = [np.uint64(src.ptr), np.uint64(dst.ptr), np.int64(n)]
        args += [np.int64(v) for v in [1] * pad + dims]
        args += [np.int64(v) for v in [0] * pad + s_str]
        args += [np.int64(v) for v in [0] * pad + d_str]
        self.launch(stream, self._flat_config(n), kernel, *args)

    def count_nonfinite(self, arg: Tensor, *, stream: Any = None) -> int:
        """NaN/Inf elements of a floating tensor, counted on the device (synchronises ``stream``)."""
        name = _NONFINITE.get(arg.dtype.name)
        if name is None or arg.size == 0:
            return 0
        if self._capturing:
            raise InvalidArgumentError("check_finite cannot run while a CUDA graph is being captured")
        stream = stream if stream is not None else self._main
        if not arg.is_contiguous:
            tmp = self.empty(arg.shape, arg.dtype)
            self.copy(tmp, arg, stream=stream)
            arg = tmp
        kernel = self.compile_kernel(_helper_source(), name, {"define_macro": [("PL_ELEM", "unsigned int")]},
                                     _helper_include_dirs())
        with self._counter_lock:
            if self._counter is None:
                self._counter = self.empty((1,), "int64")
                self._counter_host = self.pinned_empty((1,), "int64")
            counter, host = self._counter, self._counter_host
            check_driver(self._driver.cuMemsetD8Async(counter.ptr, 0, 8, stream.handle), "cuMemsetD8Async")
            self.launch(stream, self._flat_config(arg.size), kernel, np.uint64(arg.ptr), np.int64(arg.size),
                        np.uint64(counter.ptr))
            self._memcpy(host.ctypes.data, counter.ptr, 8, stream)
            self.synchronize(stream)
            return int(host[0])

    def _flat_config(self, n: int) -> Any:
        from cuda.core import LaunchConfig

        blocks = max(1, min(-(-n // 256), int(self.info.features["sm_count"]) * 8))
        return LaunchConfig(grid=blocks, block=256)


def _helper_source() -> str:
    from .cuda_kernels import HELPER_SOURCE

    return HELPER_SOURCE


def _helper_include_dirs() -> tuple[str, ...]:
    from .cuda_kernels import HELPER_INCLUDE_DIRS

    return HELPER_INCLUDE_DIRS


def _collapse(dims: list[int], src: list[int], dst: list[int]) -> tuple[list[int], list[int], list[int]]:
    """Drop size-1 dims and merge neighbours both operands walk contiguously."""
    keep = [i for i, d in enumerate(dims) if d != 1] or [0]
    d = [dims[i] for i in keep]
    s = [src[i] if dims[i] != 1 else 0 for i in keep]
    t = [dst[i] if dims[i] != 1 else 0 for i in keep]
    i = len(d) - 2
    while i >= 0:
        if s[i] == s[i + 1] * d[i + 1] and t[i] == t[i + 1] * d[i + 1]:
            d[i] *= d[i + 1]
            s[i], t[i] = s[i + 1], t[i + 1]
            del d[i + 1], s[i + 1], t[i + 1]
        i -= 1
    return d, s, t
