"""Device memory of one CUDA device: the stream-ordered (or legacy) raw allocator, the binned pool of
per-run tensors, page-locked host buffers, the staging buffers of uploads, and the host-mapped buffers
``pin_memory`` inputs are read from in place.

A :class:`CUDAMemory` is owned by a :class:`~pipelink.backends.cuda.CUDABackend`, which hands it the
device, the driver, its streams and three callables (guard, capture state, error wrapper) when it is
made: it reads nothing else of the backend. Every transfer is stream-ordered on an explicit stream (the
backend's, or the run's when the caller gave one); nothing here picks the legacy default stream itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ...dtypes import DType, get_dtype
from ...errors import CUDAError, InvalidArgumentError, OutOfMemoryError
from ...tensor import Tensor, contiguous_strides
from ..base import MemoryStats
from .device import check_driver, is_cuda_exception
from .pool import MAX_BIN, BinnedPool, bin_size

__all__ = ["CUDAMemory"]

log = logging.getLogger("pipelink")

_STAGING_PER_BIN = 4


class _HostMemory:
    """``__array_interface__`` over pinned host memory; holds the object that owns it (a cuda.core Buffer,
    whose handle is the address, or a host-mapped buffer at ``address``)."""

    def __init__(self, buffer: Any, nbytes: int, address: int | None = None):
        self._buffer = buffer
        self.__array_interface__ = {
            "data": (int(buffer.handle) if address is None else address, False),
            "shape": (nbytes,),
            "typestr": "|u1",
            "version": 3,
        }


class _MappedBuffer:
    """Page-locked host memory mapped into the device's address space (``cuMemHostAlloc`` with
    ``DEVICEMAP``): kernels read it in place over the bus, no device copy. Freed with the object."""

    def __init__(self, driver: Any, nbytes: int, uuid: str):
        flags = driver.CU_MEMHOSTALLOC_DEVICEMAP | driver.CU_MEMHOSTALLOC_PORTABLE
        host = check_driver(driver.cuMemHostAlloc(nbytes, flags), "cuMemHostAlloc", device_uuid=uuid)
        self.host = int(host)
        self._driver = driver
        self.nbytes = nbytes
        try:
            pointer = check_driver(driver.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer")
        except CUDAError:
            self.close()
            raise
        self.device = int(pointer)

    def close(self) -> None:
        host, self.host = self.host, 0
        if host:
            self._driver.cuMemFreeHost(host)

    def __del__(self):
        with contextlib.suppress(Exception):  # at interpreter exit the driver may be gone
            self.close()


class _Lease:
    """Owner of the tensor of one run's mapped input: the buffer returns to its input's free list when
    the lease is gone (after the run's fence released the run's inputs, and the caller dropped them)."""

    __slots__ = ("buffer", "__weakref__")

    def __init__(self, buffer: _MappedBuffer):
        self.buffer = buffer


class CUDAMemory:
    """The allocators of one device.

    - Arenas (``Backend.allocate``) and large blocks come from the raw allocator: cuda.core's
      stream-ordered pool (``"async"``, cuMemAllocAsync on the main stream, or the side stream while a
      graph is being captured) or synchronous cuMemAlloc (``"legacy"``).
    - Per-run tensors (outputs, ``pl.empty``) come from a :class:`~.pool.BinnedPool` over that allocator.

    Parameters
    ----------
    device : cuda.core.Device
    driver : module
        ``cuda.bindings.driver``.
    name, uuid : str
        ``"cuda:N"`` and the device UUID (messages and error context).
    streams : tuple
        ``(main, side)``: the backend's main stream and the stream of allocations during a capture.
    guard : callable
        Raises when the context is unusable and makes it current on this thread.
    capturing : callable
        True while a graph capture is in progress.
    wrap_error : callable
        ``(exception, what) -> CUDAError``: the backend's conversion of cuda.core exceptions.
    """

    def __init__(
        self,
        device: Any,
        driver: Any,
        *,
        name: str,
        uuid: str,
        streams: tuple[Any, Any],
        guard: Callable[[], None],
        capturing: Callable[[], bool],
        wrap_error: Callable[[BaseException, str], CUDAError],
    ):
        from cuda.core import DeviceMemoryResource, DeviceMemoryResourceOptions, LegacyPinnedMemoryResource

        self._driver = driver
        self._name, self._uuid = name, uuid
        self._main, self._side = streams
        self._guard, self._capturing, self._wrap_error = guard, capturing, wrap_error
        self.allocator = "async"
        self._mr = DeviceMemoryResource(device, DeviceMemoryResourceOptions())
        self._keep_pool_memory()
        self._pinned_mr = LegacyPinnedMemoryResource()
        self.pool = BinnedPool(self._raw_alloc, self._raw_free)
        self.arena_bytes = 0  # bytes held by Backend.allocate (arenas, workspaces), kept by the backend
        self.native_bytes = 0  # what the native core's plans held on this device when last told (note_native)
        self._staging: dict[int, list[list]] = {}
        self._staging_lock = threading.Lock()
        self._pinned_inputs: dict[str, list[_MappedBuffer]] = {}  # free mapped buffers per pin_memory input
        self._event_options = None

    def _keep_pool_memory(self) -> None:
        # Without a release threshold the pool returns its memory to the OS at every synchronisation.
        d = self._driver
        try:
            check_driver(
                d.cuMemPoolSetAttribute(
                    self._mr.handle,
                    d.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                    d.cuuint64_t(2**64 - 1),
                ),
                "cuMemPoolSetAttribute",
            )
        except Exception as e:  # noqa: BLE001 - only a performance hint
            log.debug("pipelink: could not set the pool's release threshold: %s", e)

    def set_allocator(self, kind: str) -> None:
        """``"async"``: stream-ordered pool (cuMemAllocAsync); ``"legacy"``: synchronous cuMemAlloc."""
        if kind not in ("async", "legacy"):
            raise InvalidArgumentError(f"allocator must be 'async' or 'legacy' (got {kind!r})")
        self.allocator = kind

    # -- raw allocations ---------------------------------------------------------------------------
    def _raw_alloc(self, size: int) -> tuple[int, Any]:
        """``(pointer, handle)``: a cuda.core Buffer from the stream-ordered pool, or an int (legacy)."""
        self._guard()
        d = self._driver
        if self.allocator == "legacy":
            err, ptr = d.cuMemAlloc(max(size, 1))
            if int(err) == int(d.CUresult.CUDA_ERROR_OUT_OF_MEMORY):
                raise self.out_of_memory(size)
            check_driver((err,), "cuMemAlloc", device_uuid=self._uuid)
            return int(ptr), int(ptr)
        # During a capture an allocation on the captured stream would become a graph node: use the side
        # stream and wait for it.
        capturing = self._capturing()
        stream = self._side if capturing else self._main
        try:
            buf = self._mr.allocate(max(size, 1), stream=stream)
        except Exception as e:
            if is_cuda_exception(e) and "OUT_OF_MEMORY" in str(e):
                raise self.out_of_memory(size) from e
            raise self._wrap_error(e, "cuMemAllocAsync") from e
        if capturing:
            stream.sync()
        return int(buf.handle), buf

    def _raw_free(self, raw: Any) -> None:
        if isinstance(raw, int):
            self._guard()
            check_driver(self._driver.cuMemFree(raw), "cuMemFree")
        else:
            raw.close(self._main)

    def out_of_memory(self, size: int) -> OutOfMemoryError:
        """The error of a failed allocation of ``size`` bytes, with where the device's memory went."""
        st = self.pool.stats()
        try:
            free, total = check_driver(self._driver.cuMemGetInfo(), "cuMemGetInfo")
        except Exception:  # noqa: BLE001 - the report must not fail
            free = total = -1
        return OutOfMemoryError(
            f"out of memory on {self._name} allocating {size} bytes: {st['in_use_bytes']} bytes in use by "
            f"tensors, {self.arena_bytes} in arenas, {st['cached_bytes']} cached in the pool "
            f"(bins {st['bins']}), {free} of {total} bytes free on the device; drop tensors you no longer "
            "need or call pl.memory.clear_pool()",
            size=size,
            device=self._name,
            device_uuid=self._uuid,
            in_use=st["in_use_bytes"],
            cached=st["cached_bytes"],
            arena=self.arena_bytes,
            device_free=free,
            device_total=total,
        )

    # -- blocks for Backend.allocate -----------------------------------------------------------------
    def allocate(self, nbytes: int, alignment: int) -> tuple[int, Any]:
        """``(aligned pointer, raw handle)`` of a block of ``nbytes``; on running out, frees the pool's
        cached blocks and tries once more."""
        extra = max(0, alignment - 256)  # pool allocations are 256-byte aligned at least
        try:
            ptr, raw = self._raw_alloc(nbytes + extra)
        except OutOfMemoryError:
            if not self.pool.clear():
                raise
            ptr, raw = self._raw_alloc(nbytes + extra)
        return (ptr + alignment - 1) & ~(alignment - 1), raw

    def release(self, raw: Any) -> None:
        """Return a block from :meth:`allocate`."""
        if raw is not None:
            self._raw_free(raw)

    def accounted(self, arena_bytes: int) -> None:
        """Record the bytes the backend's allocations now hold (for the peak and OOM messages)."""
        self.arena_bytes = arena_bytes
        self.pool.base_bytes = arena_bytes + self.native_bytes  # the pool's peak: of everything together

    def note_native(self, held: int) -> None:
        """What the native core's plans hold on this device now (their arenas, workspaces, constants): the
        peak follows it with the arenas and pooled blocks, as they change over time (not added up)."""
        self.native_bytes = held
        self.pool.base_bytes = self.arena_bytes + held

    def fill_stats(self, stats: MemoryStats) -> None:
        pool = self.pool.stats()
        stats.allocated_bytes += pool["in_use_bytes"]
        stats.peak_bytes = max(stats.peak_bytes, self.pool.peak_bytes, stats.allocated_bytes)
        stats.bins = dict(pool["bins"])
        try:
            reserved = int(self._mr.attributes.reserved_mem_current)
        except Exception:  # noqa: BLE001 - attributes need a current context; fall back to our own count
            reserved = pool["raw_bytes"] + self.arena_bytes
        stats.reserved_bytes = max(reserved, pool["raw_bytes"])

    def clear(self) -> None:
        """Free every cached block, then trim the stream-ordered pool to what is in use."""
        self._guard()
        self._main.sync()
        self.pool.clear()
        with self._staging_lock:
            self._staging.clear()
            for free in self._pinned_inputs.values():
                free.clear()  # free buffers only: leased ones come back when their tensors go
        try:
            check_driver(self._driver.cuMemPoolTrimTo(self._mr.handle, 0), "cuMemPoolTrimTo")
        except Exception as e:  # noqa: BLE001 - trimming is best effort
            log.debug("pipelink: cuMemPoolTrimTo failed: %s", e)

    def hold_frees(self, hold: bool) -> None:
        """While a graph is being captured, frees are queued (a freed block could be reused by a node of
        the graph); releasing the hold performs them."""
        self.pool.hold_frees = hold
        if not hold:
            self.pool.flush()

    # -- tensors and host buffers ------------------------------------------------------------------
    def empty(self, shape: tuple[int, ...], dtype: DType, stream_tag: int = 0) -> Tensor:
        """A contiguous device tensor from the pool; its block returns to the pool when it is dropped, cached
        for the stream it was made for (``stream_tag``: :func:`pool.stream_tag`, 0 for the backend's own)."""
        dtype, shape = get_dtype(dtype), tuple(int(d) for d in shape)
        block = self.pool.acquire(math.prod(shape) * dtype.itemsize, stream_tag)
        return Tensor._trusted(block.ptr, shape, dtype, self._name, contiguous_strides(shape), block, True)

    def mapped_empty(self, shape: tuple[int, ...], dtype: DType) -> Tensor:
        """A tensor of this device over new host-mapped memory (``pl.empty(device="cuda_host")``): kernels
        read and write it in place over the bus; :meth:`Tensor.host` is its NumPy view on the host. The
        memory is freed when the tensor and every host view of it are gone."""
        dtype, shape = get_dtype(dtype), tuple(int(d) for d in shape)
        nbytes = math.prod(shape) * dtype.itemsize
        self._guard()
        buffer = _MappedBuffer(self._driver, max(nbytes, 1), self._uuid)
        view = np.asarray(_HostMemory(buffer, max(nbytes, 1), buffer.host))
        host = view[:nbytes].view(dtype.numpy).reshape(shape)
        tensor = Tensor._trusted(
            buffer.device, shape, dtype, self._name, contiguous_strides(shape), host, True
        )
        tensor._array = host
        return tensor

    def pinned_empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A NumPy array in page-locked host memory (fast, asynchronous host <-> device copies)."""
        dtype = get_dtype(dtype)
        count = math.prod(shape)
        nbytes = max(count * dtype.itemsize, 1)
        raw = np.asarray(_HostMemory(self._pinned_mr.allocate(nbytes), nbytes))
        return raw[: count * dtype.itemsize].view(dtype.numpy).reshape(shape)

    def memcpy(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        """cuMemcpyAsync on ``stream`` (host or device addresses: unified addressing)."""
        check_driver(
            self._driver.cuMemcpyAsync(dst, src, nbytes, stream.handle),
            "cuMemcpyAsync",
            device_uuid=self._uuid,
        )

    def upload(self, array: np.ndarray, stream: Any, *, pinned_key: str | None = None) -> Tensor:
        """A device-readable copy of a C-contiguous host array, queued on ``stream``.

        An input declared ``pin_memory`` (``pinned_key``) is copied on the host into a host-mapped buffer
        of its own that kernels read in place (no device allocation, no DMA copy; see
        :meth:`mapped_input`). Otherwise small arrays go through a reused page-locked staging buffer (an
        asynchronous DMA copy) and large pageable arrays are staged by the driver (the copy returns when
        done).
        """
        if pinned_key is not None:
            return self.mapped_input(pinned_key, array)
        tensor = self.empty(array.shape, get_dtype(array.dtype))
        nbytes = array.nbytes
        if nbytes == 0:
            return tensor
        flat = array.reshape(-1).view(np.uint8)
        size = bin_size(nbytes) if nbytes <= MAX_BIN else None
        if size is None:
            self.memcpy(tensor.ptr, flat.ctypes.data, nbytes, stream)
            return tensor
        entry = self._staging_acquire(size)
        self._stage(entry, flat, tensor, stream)
        with self._staging_lock:
            free = self._staging.setdefault(size, [])
            if len(free) < _STAGING_PER_BIN:
                free.append(entry)
        return tensor

    def mapped_input(self, key: str, array: np.ndarray) -> Tensor:
        """A device tensor over a host-mapped buffer holding a copy of ``array`` (C-contiguous).

        Each ``pin_memory`` input (``key``) keeps its free buffers; a buffer is leased to one run's tensor
        and comes back when that tensor is gone, which the backend's run fence delays until the run's
        kernels are done, so a later run never overwrites what an earlier one still reads.
        """
        dtype = get_dtype(array.dtype)
        nbytes = array.nbytes
        buffer = None
        with self._staging_lock:
            free = self._pinned_inputs.setdefault(key, [])
            while free and buffer is None:
                candidate = free.pop()
                buffer = candidate if candidate.nbytes >= nbytes else None  # smaller ones are dropped
        if buffer is None:
            self._guard()
            buffer = _MappedBuffer(self._driver, max(nbytes, 1), self._uuid)
        if nbytes:
            ctypes.memmove(buffer.host, array.ctypes.data, nbytes)
        lease = _Lease(buffer)
        weakref.finalize(lease, self._return_mapped, key, buffer).atexit = False
        shape = tuple(array.shape)
        strides = contiguous_strides(shape)
        return Tensor._trusted(buffer.device, shape, dtype, self._name, strides, lease, True)

    def _return_mapped(self, key: str, buffer: _MappedBuffer) -> None:
        # Kept, never freed here: a lease may die at any time, even while another thread captures a graph
        # in global mode, where cuMemFreeHost would invalidate that capture. The list is bounded by the
        # runs in flight; clear() frees it.
        with self._staging_lock:
            free = self._pinned_inputs.get(key)
            if free is not None:
                free.append(buffer)

    def _stage(self, entry: list, flat: np.ndarray, tensor: Tensor, stream: Any) -> None:
        # entry: [unused, pinned buffer, event of its last copy]; the buffer is busy until that event.
        if entry[2] is not None and not entry[2].is_done:
            entry[2].sync()
        entry[1][: flat.nbytes] = flat
        self.memcpy(tensor.ptr, entry[1].ctypes.data, flat.nbytes, stream)
        entry[2] = stream.record(options=self._untimed())

    def _untimed(self) -> Any:
        if self._event_options is None:
            from cuda.core import EventOptions

            self._event_options = EventOptions(timing_enabled=False)
        return self._event_options

    def _staging_acquire(self, size: int) -> list:
        with self._staging_lock:
            free = self._staging.get(size)
            entry = free.pop(0) if free else None
        if entry is None:
            return [None, self.pinned_empty((size,), "uint8"), None]
        return entry
