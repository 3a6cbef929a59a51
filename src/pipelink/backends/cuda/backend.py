"""The CUDA backend: one NVIDIA GPU through cuda.core (context, streams, events, launches, graphs).

With the modules of this package it is the only code of PipeLink that imports ``cuda.core`` /
``cuda.bindings`` (inside functions: ``import pipelink`` works without them). Memory is a composed
:class:`~.memory.CUDAMemory`, run inputs a :class:`~.inputs.CUDAInputs`, kernels compile through
:class:`~.compiler.KernelCompiler`. Work goes to the backend's own non-blocking streams, or to the
caller's stream (``run(stream=...)``, PyTorch's current stream; ``streams.CallerStreams``); the backend
never picks the legacy default stream by itself. After a sticky CUDA error (700, 714-719) it refuses all
further work: the process must restart. It knows no operator.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ...dtypes import DType
from ...errors import CUDAError, HardwareUnsupportedError, InvalidArgumentError
from ...hardware import HardwareInfo
from ...tensor import Tensor
from ..base import Allocation, Backend, Capabilities, MemoryStats
from . import device as cuda_device
from .compiler import KernelCompiler
from .device import ContextHealth, check_driver, derive_features, version_text
from .graphs import CUDAGraph, begin_capture, end_capture
from .helpers import CopyPlan, NonFiniteCounter, StridedCopy, max_threads, plan_copy
from .inputs import CUDAInputs
from .memory import CUDAMemory
from .pool import stream_tag
from .streams import CallerStreams, RunFences, stream_handle

__all__ = ["CUDABackend", "unavailable_reason"]

log = logging.getLogger("pipelink")


def unavailable_reason() -> str | None:
    """None when a CUDA device can be used, else why not (packages missing, no driver, no device)."""
    return cuda_device.unavailable_reason()


class CUDABackend(Backend):
    """The backend of one CUDA device (``"cuda:N"``).

    Parameters
    ----------
    index : int
        The device ordinal.

    Raises
    ------
    HardwareUnsupportedError
        When CUDA cannot be used (the message says why) or the device does not exist.
    """

    kind = "cuda"
    capabilities = Capabilities(host_access=False, asynchronous=True, cuda_graphs=True, isolation="ipc")

    def __init__(self, index: int = 0):
        reason = unavailable_reason()
        if reason is not None:
            raise HardwareUnsupportedError(f"cannot use cuda:{index}: {reason}", device=f"cuda:{index}")
        from cuda.bindings import driver
        from cuda.core import Device, EventOptions, StreamOptions

        count = check_driver(driver.cuDeviceGetCount(), "cuDeviceGetCount")
        if not 0 <= index < count:
            raise HardwareUnsupportedError(
                f"no device cuda:{index}: this machine has {count} CUDA device(s)", device=f"cuda:{index}"
            )
        self._driver = driver
        self._dev = Device(index)
        self._dev.set_current()
        self._tls = threading.local()
        self._tls.bound = True
        props = self._dev.properties
        cc = (int(props.compute_capability_major), int(props.compute_capability_minor))
        _, total = check_driver(driver.cuMemGetInfo(), "cuMemGetInfo")
        info = HardwareInfo(
            kind="cuda",
            name=self._dev.name,
            index=index,
            uuid=str(self._dev.uuid),
            compute_capability=cc,
            features=derive_features(cc, int(props.multiprocessor_count), int(total)),
            driver_version=version_text(check_driver(driver.cuDriverGetVersion(), "cuDriverGetVersion")),
            runtime_version=_runtime_version(),
        )
        super().__init__(f"cuda:{index}", info)
        self.index = index
        self.arch = f"sm_{cc[0]}{cc[1]}"
        self._health = ContextHealth(self.device, self.info.uuid)
        self._error = self._health.error  # (CUresult code, what, stage) -> CUDAError; marks sticky errors
        self._capturing = 0
        self._stream_options = StreamOptions(nonblocking=True)
        self._event_opts = {
            False: EventOptions(timing_enabled=False),
            True: EventOptions(timing_enabled=True),
        }
        self._main = self._dev.create_stream(options=self._stream_options)
        self._side = self._dev.create_stream(options=self._stream_options)  # allocations during a capture
        self._compiler = None
        self._compiler_lock = threading.Lock()
        self._main_handle = self._main.handle
        self._fences = RunFences(
            driver, lambda: self._main.record(options=self._event_opts[False]), error=self._error
        )
        self.memory = CUDAMemory(
            self._dev,
            driver,
            name=self.device,
            uuid=self.info.uuid,
            streams=(self._main, self._side),
            guard=self._guard,
            capturing=lambda: self._capturing > 0,
            wrap_error=self.raise_cuda,
        )
        # One event orders our streams after producers' streams (recorded and waited on in turn).
        self._inputs = CUDAInputs(
            self.memory,
            driver,
            name=self.device,
            index=index,
            handle_of=self.handle_of,
            order_event=self._main.record(options=self._event_opts[False]),
            error=self._error,
        )
        self._callers = CallerStreams(driver, self._dev.create_stream, self._error)
        self._strided_copy = StridedCopy(self)
        self._count_nonfinite = NonFiniteCounter(self)

    # -- context and errors ------------------------------------------------------------------------
    def _bind_thread(self) -> None:
        """Make the device's context current on this thread (once per thread)."""
        if not getattr(self._tls, "bound", False):
            self._dev.set_current()
            self._tls.bound = True

    def _guard(self) -> None:
        """Refuse work on a corrupted context; make the context current on this thread."""
        self._check_usable()
        self._bind_thread()

    def _check_usable(self) -> None:
        self._health.check()

    def launch_error(self, code: int, what: str, stage: str | None = None) -> CUDAError:
        """The :class:`CUDAError` of a failed driver call returning ``code`` (marks sticky errors)."""
        return self._error(code, what, stage)

    def raise_cuda(self, exc: BaseException, what: str, stage: str | None = None) -> CUDAError:
        """The PipeLink :class:`CUDAError` for an exception of cuda.core (marks sticky errors).

        Returns the error for the caller to raise (``raise backend.raise_cuda(e, "launch") from e``).
        """
        return self._health.wrap(exc, what, stage)

    def check_errors(self, *, stage: str | None = None) -> None:
        """Raise the context's pending error, if any: synchronises the context (not while capturing).

        Raises
        ------
        CUDAError
            With the CUDA error name and code, the stage and the device UUID. After a sticky error every
            later call raises too: the context is unusable until the process restarts.
        """
        self._check_usable()
        if self._capturing:
            return
        self._bind_thread()
        (err,) = self._driver.cuCtxSynchronize()
        if int(err) != 0:
            raise self._error(int(err), "the device", stage)

    # -- memory (the composed CUDAMemory does the work) --------------------------------------------
    def set_allocator(self, kind: str) -> None:
        """``"async"``: stream-ordered pool (cuMemAllocAsync); ``"legacy"``: synchronous cuMemAlloc."""
        self.memory.set_allocator(kind)

    def _allocate(self, nbytes: int, alignment: int, stream: Any, *, shared: bool = False) -> Allocation:
        ptr, raw = self.memory.allocate(nbytes, alignment)
        self.memory.accounted(self._stats.allocated_bytes + nbytes)
        return Allocation(ptr, nbytes, raw, self)

    def _free(self, alloc: Allocation) -> None:
        raw, alloc.handle = alloc.handle, None
        self.memory.release(raw)
        self.memory.accounted(self._stats.allocated_bytes)

    def _memcpy(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self.memory.memcpy(dst, src, nbytes, stream)

    def _fill_stats(self, stats: MemoryStats) -> None:
        self.memory.fill_stats(stats)

    def clear_pool(self) -> None:
        """Free every cached block, then trim the stream-ordered pool to what is in use."""
        self.memory.clear()

    def empty(self, shape: tuple[int, ...], dtype: DType, *, stream: Any = None) -> Tensor:
        """A contiguous device tensor from the pool; its block returns to the pool when it is dropped. With
        ``stream`` (a run's stream), the block is reused later only for work on that stream (pool.py)."""
        if stream is None or stream is self._main:
            return self.memory.empty(shape, dtype)
        return self.memory.empty(shape, dtype, stream_tag(int(self.handle_of(stream))))

    def pinned_empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A NumPy array in page-locked host memory (fast, asynchronous host <-> device copies)."""
        return self.memory.pinned_empty(shape, dtype)

    def empty_mapped(self, shape: tuple[int, ...], dtype: DType) -> Tensor:
        """A tensor of this device over new host-mapped memory (kernels use it in place)."""
        self._check_usable()
        return self.memory.mapped_empty(shape, dtype)

    # -- tensors and inputs (the composed CUDAInputs does the work) ---------------------------------
    def view(
        self,
        alloc: Allocation,
        offset: int,
        shape: tuple[int, ...],
        dtype: DType,
        strides: tuple[int, ...] | None = None,
    ) -> Tensor:
        return Tensor(alloc.ptr + offset, shape, dtype, self.device, strides, owner=alloc)

    def wrap(self, arg: Tensor) -> Tensor:
        return arg

    def signature_of(self, arg: Tensor) -> tuple[tuple[int, ...], str, bool]:
        return arg.shape, arg.dtype.name, arg.is_contiguous

    def import_input(
        self,
        value: Any,
        *,
        stream: Any = None,
        dtype: DType | None = None,
        pinned_key: str | None = None,
        producers: list | None = None,
    ) -> Tensor:
        """A user's input as a device Tensor: CUDA DLPack producers zero-copy, host data uploaded."""
        self._check_usable()
        return self._inputs.import_input(
            value,
            stream if stream is not None else self._main,
            dtype=dtype,
            pinned_key=pinned_key,
            producers=producers,
        )

    def order_after(self, producers: list) -> None:
        """Make each of our streams wait for the work queued so far on a producer's stream."""
        self._inputs.order_after(producers)

    def match_inputs(self, signature: tuple, given: dict, stream: Any) -> dict | None:
        """``given`` as kernel arguments when every input already lives on this device with the shape,
        dtype and layout of ``signature`` (a plan's), ordered after PyTorch's current stream; None when
        any input needs the general import (host data, another device or signature, a DLPack producer
        other than PyTorch)."""
        return self._inputs.match(signature, given, stream, True)

    def match_places(self, signature: tuple, given: dict, stream: Any) -> tuple | None:
        """As :meth:`match_inputs`, but only where each input lives: ``(pointer, strides)`` per input in
        signature order (the key of a captured graph), without building kernel arguments."""
        return self._inputs.match(signature, given, stream, False)

    def to_host(self, tensor: Tensor) -> Tensor:
        """A NumPy-backed copy of a device tensor (synchronises the backend's main stream)."""
        self._check_usable()
        if not tensor.is_cuda:
            return tensor
        self._inputs.check_device(tensor)
        src = tensor
        if not tensor.is_contiguous:
            src = self.empty(tensor.shape, tensor.dtype)
            self.copy(src, tensor, stream=self._main)
        out = np.empty(tensor.shape, dtype=tensor.dtype.numpy)
        self.memcpy(out.ctypes.data, src.ptr, out.nbytes, stream=self._main)
        self.synchronize(self._main)
        return Tensor.from_numpy(out)

    def order_for_consumer(self, tensor: Tensor, stream: Any) -> None:
        """Make a DLPack consumer's stream (an int handle) wait for the work queued on our main stream."""
        if self._capturing or self._health.corrupted:
            return
        event = self._main.record(options=self._event_opts[False])
        check_driver(
            self._driver.cuStreamWaitEvent(self._driver.CUstream(int(stream)), event.handle, 0),
            "cuStreamWaitEvent",
        )

    def copy(self, dst: Tensor, src: Tensor, *, stream: Any = None) -> None:
        """``dst[...] = src``, stream-ordered and capture-safe: the dims of both views merged
        (``helpers.plan_copy``), then one cuMemcpyAsync when both walk one run, else the strided kernel."""
        self._check_usable()
        stream = stream if stream is not None else self._main
        if tuple(dst.shape) != tuple(src.shape) or dst.dtype != src.dtype:
            raise InvalidArgumentError(
                f"copy needs equal shapes and dtypes (got {src.shape} {src.dtype} -> {dst.shape} {dst.dtype})"
            )
        if src.nbytes == 0:
            return
        if src.is_contiguous and dst.is_contiguous:
            self.memory.memcpy(dst.ptr, src.ptr, src.nbytes, stream)
            return
        plan = self._plan_copy(dst, src)
        if plan.kind == "memcpy":
            self.memory.memcpy(plan.dst, plan.src, plan.units * plan.unit, stream)
            return
        self._strided_copy(plan, stream)

    def _plan_copy(self, dst: Tensor, src: Tensor) -> CopyPlan:
        return plan_copy(
            tuple(src.shape),
            tuple(src.strides),
            tuple(dst.strides),
            src.dtype.itemsize,
            src.ptr,
            dst.ptr,
            max_threads=max_threads(int(self.info.features["sm_count"])),
        )

    def count_nonfinite(self, arg: Tensor, *, stream: Any = None) -> int:
        """NaN/Inf elements of a floating tensor, counted on the device (synchronises ``stream``)."""
        if self._capturing:
            raise InvalidArgumentError("check_finite cannot run while a CUDA graph is being captured")
        return self._count_nonfinite(arg, stream if stream is not None else self._main, self._memset)

    def _memset(self, ptr: int, nbytes: int, stream: Any) -> None:
        check_driver(self._driver.cuMemsetD8Async(ptr, 0, nbytes, self.handle_of(stream)), "cuMemsetD8Async")

    # -- streams and events ------------------------------------------------------------------------
    def default_stream(self) -> Any:
        """The backend's own main stream (non-blocking; never the legacy default stream)."""
        return self._main

    def new_stream(self) -> Any:
        """A new non-blocking stream (one per logical stream id of a plan)."""
        self._check_usable()
        self._bind_thread()
        return self._dev.create_stream(options=self._stream_options)

    def record_event(self, stream: Any, timing: bool = False) -> Any:
        """An event recorded on ``stream`` (timing-enabled when asked)."""
        try:
            target = stream if stream is not None else self._main
            return target.record(options=self._event_opts[bool(timing)])
        except Exception as e:
            raise self.raise_cuda(e, "cuEventRecord") from e

    def wait_event(self, stream: Any, event: Any) -> None:
        """Make ``stream`` wait for ``event`` (device-side)."""
        if event is None:
            return
        try:
            (stream if stream is not None else self._main).wait(event)
        except Exception as e:
            raise self.raise_cuda(e, "cuStreamWaitEvent") from e

    def elapsed(self, start: Any, end: Any) -> float:
        """Seconds between two timing events (waits for ``end``)."""
        try:
            end.sync()
            return float(end - start) / 1000.0
        except Exception as e:
            raise self.raise_cuda(e, "cuEventElapsedTime") from e

    def synchronize(self, stream: Any = None) -> None:
        """Wait for ``stream`` (or for the whole device)."""
        self._check_usable()
        self._bind_thread()
        try:
            if stream is None:
                self._dev.sync()
            else:
                stream.sync()
        except Exception as e:
            raise self.raise_cuda(e, "synchronize") from e

    # -- the caller's streams and buffers (docs/interop.md) ----------------------------------------
    def stream_of(self, stream: Any) -> Any:
        """A caller's stream (``__cuda_stream__``, ``torch.cuda.Stream``, a raw handle) as a cuda.core
        stream our kernels launch on; a cuda.core stream is used as it is."""
        if type(stream).__module__.startswith("cuda.core"):
            return stream
        handle = stream_handle(stream)
        return self._main if handle == int(self._main_handle) else self._callers.stream(handle)

    def caller_stream(self, values: Iterable[Any]) -> Any:
        """PyTorch's current stream when PyTorch tensors came in, else the backend's main stream."""
        raw = self._inputs.torch_stream(values)
        return self._main if raw is None else self._callers.stream(raw)

    def is_capturing(self, stream: Any) -> bool:
        """Whether a caller's stream is being captured (``cuStreamIsCapturing``); never our main stream,
        which only our own captures use. Binds the thread's context first: a caller's legacy stream (0,
        PyTorch's default) names the current context's, and a new thread has none yet."""
        if stream is self._main:
            return False
        self._bind_thread()
        return self._callers.is_capturing(stream)

    @property
    def is_capture_active(self) -> bool:
        return self._capturing > 0

    @contextlib.contextmanager
    def foreign_capture(self) -> Iterator[None]:
        """A run queued into someone else's capture: frees held, raw allocations on the side stream, the
        thread's capture mode relaxed (streams.CallerStreams.relaxed)."""
        self._guard()
        with self._callers.relaxed():
            self._capturing += 1
            self.memory.hold_frees(True)
            try:
                yield
            finally:
                self._capturing -= 1
                if not self._capturing:
                    self.memory.hold_frees(False)

    def import_output(self, name: str, value: Any, *, stream: Any = None) -> Tensor:
        """A caller's device buffer for output ``name``, written in place (contiguous, this device)."""
        self._check_usable()
        return self._inputs.import_output(name, value, stream if stream is not None else self._main)

    # -- graphs ------------------------------------------------------------------------------------
    def begin_capture(self, stream: Any) -> None:
        """Start capturing the work queued on ``stream`` (and on streams that join it through events)."""
        self._guard()
        begin_capture(
            self._driver, self.handle_of(stream if stream is not None else self._main), uuid=self.info.uuid
        )
        self._capturing += 1
        self.memory.hold_frees(True)

    def end_capture(self, stream: Any) -> CUDAGraph:
        """End the capture started on ``stream``; returns the instantiated graph."""
        try:
            graph = end_capture(
                self._driver,
                self.handle_of(stream if stream is not None else self._main),
                uuid=self.info.uuid,
            )
        finally:
            self._capturing = max(0, self._capturing - 1)
            if not self._capturing:
                self.memory.hold_frees(False)
        return CUDAGraph.instantiate(graph, self._driver, uuid=self.info.uuid)

    def launch_graph(self, graph: CUDAGraph, stream: Any) -> None:
        """Replay a captured graph on ``stream``."""
        if self._health.corrupted is not None:
            self._check_usable()
        handle = self.handle_of(stream) if stream is not None else self._main_handle
        (err,) = self._driver.cuGraphLaunch(graph.exec, handle)
        if err != 0:
            raise self._error(int(err), "cuGraphLaunch")

    # -- kernels -----------------------------------------------------------------------------------
    @property
    def compiler(self) -> Any:
        """The NVRTC compiler with its memory and disk cubin caches (created on first use)."""
        if self._compiler is None:
            with self._compiler_lock:
                if self._compiler is None:
                    self._compiler = KernelCompiler(self.arch)
        return self._compiler

    def finish_run(self, stream: Any, *, keepalive: Any = None) -> Any:
        """Return without waiting: record an event and hold the run's inputs until it completes, so a
        producer (PyTorch's caching allocator, say) cannot reuse their memory under our kernels. Events
        are reused once their run has completed. After a run on a caller's stream our main stream waits
        for its end too, so ``to_host`` and DLPack consumers ordered after the main stream see its outputs."""
        if stream is self._main:
            return self._fences.finish(self._main_handle, keepalive)
        return self._fences.finish(stream.handle, keepalive, join=self._main_handle)

    def note_native_bytes(self, held: int) -> bool:
        self.memory.note_native(held)
        return True

    def hot_path_parts(self) -> dict[str, Any]:
        """What ``runtime/_hotpath.c`` runs with: the output pool, the main stream (its handle as an int and
        as :meth:`finish_run` passes it) and the fence that holds a run's inputs until it is done."""
        return {
            "pool": self.memory.pool,
            "main_stream": int(self._main_handle),
            "main_handle": self._main_handle,
            "finish": self._fences.finish,
        }

    def handle_of(self, stream: Any) -> Any:
        """The driver handle of one of our streams (the main stream's is cached)."""
        return self._main_handle if stream is self._main else stream.handle

    def compile_kernel(
        self,
        source_text: str,
        name: str,
        options: Mapping[str, Any] | None = None,
        include_dirs: Sequence[str] = (),
    ) -> Any:
        """The cuda.core ``Kernel`` ``name`` of ``source_text``, compiled for this device (cached).

        Parameters
        ----------
        source_text : str
            CUDA C++; the kernel must be ``extern "C"``.
        name : str
        options : mapping, optional
            ``cuda.core.ProgramOptions`` keyword arguments (``define_macro``, ``std``, ...).
        include_dirs : sequence of str

        Raises
        ------
        ModuleLoadError
            NVRTC rejected the source (with the compiler log), or no kernel of that name.
        """
        self._bind_thread()
        return self.compiler.get(source_text, name, options, include_dirs)

    def kernel_function(self, kernel: Any) -> Any:
        """The driver handle (``CUfunction``) of a kernel from :meth:`compile_kernel`, for
        :meth:`launch_prepared`."""
        return self._driver.CUfunction(int(kernel.handle))

    def launch_prepared(
        self,
        function: Any,
        dims: tuple,
        params_address: int,
        stream: Any,
        *,
        what: str,
        stage: str | None = None,
    ) -> None:
        """Launch ``function`` with a prebuilt kernel-parameter array (``void*[]`` at ``params_address``).

        ``dims`` is ``(gx, gy, gz, bx, by, bz, shared_mem)``. The driver copies the parameter values at
        the launch, so their storage may be rewritten as soon as this returns.

        Raises
        ------
        CUDAError
            The launch failed (``what`` and ``stage`` name it; sticky errors mark the context).
        """
        (err,) = self._driver.cuLaunchKernel(function, *dims, self.handle_of(stream), params_address, 0)
        if err != 0:
            raise self._error(int(err), what, stage)

    def launch(self, stream: Any, config: Any, kernel: Any, *args: Any, stage: str | None = None) -> None:
        """``cuda.core.launch`` with CUDA failures turned into :class:`CUDAError`."""
        from cuda.core import launch

        try:
            launch(stream, config, kernel, *args)
        except Exception as e:
            raise self.raise_cuda(e, "kernel launch", stage) from e

    # -- lifetime ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Wait for pending work and return cached memory (called at interpreter exit)."""
        if self._health.corrupted is not None:
            return
        try:
            self._release_workspaces()
            self.clear_pool()
        except Exception as e:  # noqa: BLE001 - best effort at exit
            log.debug("pipelink: closing %s: %s", self.device, e)

    def __repr__(self) -> str:
        return f"<CUDABackend {self.device} {self.info.name} ({self.arch})>"


def _runtime_version() -> str | None:
    try:
        from cuda.bindings import runtime

        err, version = runtime.cudaRuntimeGetVersion()
        if int(err) == 0:
            return version_text(int(version))
    except Exception:  # noqa: BLE001 - informational only
        pass
    try:
        import cuda.bindings

        return str(cuda.bindings.__version__)
    except Exception:  # noqa: BLE001
        return None
