"""The backend contract: memory, views, copies, streams, events, kernels and graph capture for one device.

The runtime talks only to this interface and asks a backend's :class:`Capabilities`, never its kind.
Public methods validate and account; a backend fills in the private hooks of the same name
(``allocate`` -> ``_allocate``). A backend without graph support says ``cuda_graphs=False`` and the
runtime runs eagerly. Nothing here knows about any operator.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..dtypes import DType, get_dtype
from ..errors import HardwareUnsupportedError, InvalidArgumentError, OutOfMemoryError, PipeLinkError
from ..hardware import HardwareInfo
from ..limits import check_fits, format_bytes, total_bytes
from ..tensor import Tensor

__all__ = ["Allocation", "Backend", "Capabilities", "MemoryStats"]


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do: the questions the runtime asks at plan time instead of its kind."""

    host_access: bool  # kernel arguments are host memory (NumPy) Python code may read directly
    asynchronous: bool  # work is queued on streams; timing/results need events and synchronisation
    cuda_graphs: bool  # begin_capture / end_capture / launch_graph work
    isolation: str  # how a process-isolated stage gets its tensors: "shared_memory" | "ipc" | "none"


@dataclass
class Allocation:
    """A block of device (or host) memory. ``handle`` is the backend's own object keeping it alive."""

    ptr: int
    nbytes: int
    handle: Any
    backend: Backend
    tag: str = ""
    freed: bool = False
    shared: Any = None  # a SharedMemory (CPU) or IPC handle (CUDA) when other processes map it

    def free(self) -> None:
        if not self.freed:
            self.freed = True
            self.backend.free(self)


@dataclass
class MemoryStats:
    """What ``pl.memory.stats()`` reports for one backend."""

    device: str
    allocated_bytes: int = 0
    peak_bytes: int = 0
    reserved_bytes: int = 0
    allocations: int = 0
    frees: int = 0
    bins: dict[int, int] = field(default_factory=dict)  # bin size -> blocks cached in that bin

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Backend:
    """Base class of the CPU and CUDA backends. One instance per device, shared by pipelines.

    ``kind`` names the backend in messages and reports only; the runtime decides by ``capabilities``.
    """

    kind = "abstract"
    capabilities = Capabilities(host_access=False, asynchronous=False, cuda_graphs=False, isolation="none")

    def __init__(self, device: str, info: HardwareInfo):
        self.device = device
        self.info = info
        self._stats = MemoryStats(device)
        self._stats_lock = threading.Lock()
        self._workspaces: dict[Any, Allocation] = {}
        self._retired_workspaces: list[Allocation] = []
        self._workspace_lock = threading.Lock()

    # -- memory ------------------------------------------------------------------------------------
    def allocate(
        self, nbytes: int, *, alignment: int = 256, stream: Any = None, tag: str = "", shared: bool = False
    ) -> Allocation:
        """``nbytes`` of memory aligned to ``alignment`` (a power of two); ``shared`` makes it mappable
        by worker processes (``capabilities.isolation == "shared_memory"``).

        Raises
        ------
        InvalidArgumentError
            A negative size, an alignment that is not a power of two, or ``shared`` on a backend whose
            workers do not map host memory.
        """
        if nbytes < 0:
            raise InvalidArgumentError(f"allocation size must be >= 0 (got {nbytes})")
        if alignment <= 0 or alignment & (alignment - 1):
            raise InvalidArgumentError(f"alignment must be a power of two (got {alignment})")
        if shared and self.capabilities.isolation != "shared_memory":
            raise InvalidArgumentError(
                f"the {self.kind} backend cannot share memory with worker processes "
                f"(its isolation is {self.capabilities.isolation!r})"
            )
        self.check_fits(nbytes, tag=tag)
        what = f"the {tag} allocation" if tag else "an allocation"
        try:
            alloc = self._allocate(max(int(nbytes), 1), alignment, stream, shared=shared)
        except MemoryError as e:  # NumPy's raw error on the host; a PipeLinkError passes through
            if isinstance(e, PipeLinkError):
                raise
            check_fits(int(nbytes), what, self.info.kind, self.info.features)
            raise OutOfMemoryError(
                f"{what} of {format_bytes(int(nbytes))} failed on {self.info.kind} ({e}); use smaller shapes",
                requested=int(nbytes),
            ) from e
        alloc.tag = tag
        with self._stats_lock:
            s = self._stats
            s.allocated_bytes += alloc.nbytes
            s.peak_bytes = max(s.peak_bytes, s.allocated_bytes)
            s.allocations += 1
        return alloc

    def check_fits(self, nbytes: int, *, tag: str = "") -> None:
        """Refuse, allocating nothing, ``nbytes`` that is more than the device has in all (what
        :meth:`allocate` checks first; a plan whose arena is allocated later checks it when planned).

        Raises
        ------
        OutOfMemoryError
            With the numbers.
        """
        what = f"the {tag} allocation" if tag else "an allocation"
        limit = total_bytes(self.info.kind, self.info.features)
        check_fits(int(nbytes), what, self.info.kind, self.info.features, limit=limit)

    def free(self, alloc: Allocation) -> None:
        with self._stats_lock:
            self._stats.allocated_bytes -= alloc.nbytes
            self._stats.frees += 1
        self._free(alloc)

    def workspace(self, nbytes: int, *, stream: Any) -> Allocation:
        """A scratch buffer of at least ``nbytes`` shared by every kernel queued on ``stream``.

        Kernels of one stream run one after another, so one buffer per stream serves them all (cuBLASLt's
        workspace, say) instead of one per stage. It grows to the largest request (a power of two, at
        least 256 bytes: small GEMMs often need none); a buffer it outgrows stays allocated until the
        backend closes, because a graph captured earlier may still use it. Call it when binding a kernel
        (or on a kernel's first call on a stream), not on every run.

        Raises
        ------
        InvalidArgumentError
            For a negative size.
        """
        if nbytes < 0:
            raise InvalidArgumentError(f"workspace size must be >= 0 (got {nbytes})")
        stream = stream if stream is not None else self.default_stream()
        handle = self.handle_of(stream)
        key = int(handle) if handle is not None else id(stream)
        with self._workspace_lock:
            current = self._workspaces.get(key)
            if current is not None and current.nbytes >= nbytes:
                return current
            size = max(256, 1 << max(int(nbytes) - 1, 0).bit_length())
            grown = self.allocate(size, stream=stream, tag="workspace")
            if current is not None:
                self._retired_workspaces.append(current)
            self._workspaces[key] = grown
            return grown

    def memory_stats(self) -> MemoryStats:
        with self._stats_lock:
            stats = MemoryStats(**{**self._stats.__dict__, "bins": dict(self._stats.bins)})
        self._fill_stats(stats)
        return stats

    def clear_pool(self) -> None:
        """Return cached free memory to the system."""

    def set_allocator(self, kind: str) -> None:
        """Choose the device allocator (``pl.memory.set_allocator``); a host backend has only one."""
        if kind not in ("async", "legacy"):
            raise InvalidArgumentError(f"allocator must be 'async' or 'legacy' (got {kind!r})")

    def empty(self, shape: tuple[int, ...], dtype: DType) -> Any:
        """A fresh contiguous kernel argument of ``shape`` and ``dtype`` (returned outputs, ``pl.empty``)."""
        raise NotImplementedError

    def pinned_empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A NumPy array in page-locked host memory where the device has such memory (plain host memory
        elsewhere): the host side of asynchronous copies."""
        return np.empty(shape, dtype=get_dtype(dtype).numpy)

    def empty_mapped(self, shape: tuple[int, ...], dtype: DType) -> Tensor:
        """A device tensor over host memory mapped into the device (``pl.empty(device="cuda_host")``),
        where the device has such memory."""
        raise HardwareUnsupportedError(
            f"the {self.kind} backend has no host-mapped memory: device='cuda_host' needs a CUDA device"
        )

    # -- views and tensors -------------------------------------------------------------------------
    def view(
        self,
        alloc: Allocation,
        offset: int,
        shape: tuple[int, ...],
        dtype: DType,
        strides: tuple[int, ...] | None = None,
    ) -> Any:
        """The kernel argument for a region of an allocation (NumPy array on CPU, Tensor on CUDA)."""
        raise NotImplementedError

    def reshaped(self, arg: Any, shape: tuple[int, ...]) -> Any:
        """The kernel argument of a contiguous ``arg``'s elements under another shape of the same size:
        a view of its memory, never a copy (a stage run as a view of an input)."""
        return Tensor(arg.ptr, tuple(shape), arg.dtype, arg.device, owner=arg)

    def wrap(self, arg: Any) -> Tensor:
        """A user-facing Tensor for a kernel argument (zero-copy)."""
        raise NotImplementedError

    def import_input(
        self,
        value: Any,
        *,
        stream: Any = None,
        dtype: Any = None,
        pinned_key: str | None = None,
        producers: list | None = None,
    ) -> Any:
        """A user's input (NumPy, DLPack producer, Tensor) as a kernel argument on this device.

        ``dtype`` types a Python scalar; ``pinned_key`` names an input declared ``pin_memory`` (a device
        backend gives it host-mapped memory of its own that kernels read in place); ``producers``
        collects the streams of inputs still being written elsewhere, for one :meth:`order_after` per
        run."""
        raise NotImplementedError

    def order_after(self, producers: list) -> None:
        """Make our streams wait for the producers' streams collected by :meth:`import_input`."""

    def match_inputs(self, signature: tuple, given: dict, stream: Any) -> dict | None:
        """The run's inputs as kernel arguments when each is already in the form a plan of ``signature``
        takes (no upload, conversion or relayout): the fast path of ``run()``. None sends the run through
        the general import."""
        return None

    def match_places(self, signature: tuple, given: dict, stream: Any) -> tuple | None:
        """Where each input of ``given`` lives, ``(pointer, strides)`` in signature order, when all are
        device tensors of ``signature`` (the key of a captured graph, see ``runtime.graphs``); None
        otherwise. Only backends with ``capabilities.cuda_graphs`` are asked."""
        return None

    def signature_of(self, arg: Any) -> tuple[tuple[int, ...], str, bool]:
        """(shape, dtype name, is_contiguous) of a kernel argument."""
        raise NotImplementedError

    def copy(self, dst: Any, src: Any, *, stream: Any = None) -> None:
        """Copy ``src`` into ``dst`` (same shape and dtype; ``src`` may be strided)."""
        raise NotImplementedError

    def memcpy(self, dst: int, src: int, nbytes: int, *, stream: Any = None) -> None:
        """Copy ``nbytes`` between two raw addresses (host or device), ordered on ``stream``.

        Raises
        ------
        InvalidArgumentError
            For a negative size.
        """
        if nbytes < 0:
            raise InvalidArgumentError(f"copy size must be >= 0 (got {nbytes})")
        if nbytes:
            self._memcpy(
                int(dst), int(src), int(nbytes), stream if stream is not None else self.default_stream()
            )

    def to_host(self, tensor: Tensor) -> Tensor:
        raise NotImplementedError

    def count_nonfinite(self, arg: Any, *, stream: Any = None) -> int:
        """Number of NaN/Inf elements (0 for integer dtypes)."""
        raise NotImplementedError

    def order_for_consumer(self, tensor: Tensor, stream: Any) -> None:
        """Make ``stream`` (a DLPack consumer's) wait for our pending work on ``tensor``."""

    # -- streams, events, graphs -------------------------------------------------------------------
    def default_stream(self) -> Any:
        return None

    def new_stream(self) -> Any:
        return None

    def note_native_bytes(self, held: int) -> bool:
        """Tell the backend what the native core's plans hold on its device now (``held`` bytes), so its peak
        follows the two together over time. Returns whether it does; a backend that does not (the CPU) has
        ``pl.memory.stats`` add the core's own peak to its peak instead (an upper bound)."""
        return False

    def hot_path_parts(self) -> dict[str, Any]:
        """What ``runtime/_hotpath.c`` needs of a device backend to run plans from C (its output pool, main
        stream and run fence); nothing for a backend whose runs are synchronous (the CPU)."""
        return {}

    def handle_of(self, stream: Any) -> Any:
        """The native handle of one of our streams (None on a backend without streams)."""
        return None

    def record_event(self, stream: Any, timing: bool = False) -> Any:
        """An event marking the work queued on ``stream`` so far (``timing``: usable by :meth:`elapsed`)."""
        return None

    def wait_event(self, stream: Any, event: Any) -> None:
        return None

    def elapsed(self, start: Any, end: Any) -> float:
        """Seconds between two timing events of an asynchronous backend (waits for ``end``)."""
        raise InvalidArgumentError(f"the {self.kind} backend runs synchronously: time it on the host")

    def synchronize(self, stream: Any = None) -> None:
        return None

    def begin_capture(self, stream: Any) -> None:
        raise InvalidArgumentError(f"the {self.kind} backend does not support graph capture")

    def end_capture(self, stream: Any) -> Any:
        raise InvalidArgumentError(f"the {self.kind} backend does not support graph capture")

    def launch_graph(self, graph: Any, stream: Any) -> None:
        raise InvalidArgumentError(f"the {self.kind} backend does not support graph capture")

    # -- the caller's streams and buffers (docs/interop.md) ----------------------------------------
    def stream_of(self, stream: Any) -> Any:
        """The backend stream a run goes to when the caller passes ``run(stream=...)``.

        Raises
        ------
        InvalidArgumentError
            On a backend without streams (the CPU runs synchronously), or for an object that is no stream.
        """
        raise InvalidArgumentError(
            f"the {self.kind} backend runs synchronously on no stream: leave stream= out "
            f"(got {type(stream).__name__})"
        )

    def caller_stream(self, values: Iterable[Any]) -> Any:
        """The stream of a run whose caller names none (``values``: its inputs and output buffers): the
        current stream of the framework whose tensors came in (PyTorch's), else the backend's own."""
        return self.default_stream()

    def is_capturing(self, stream: Any) -> bool:
        """Whether work queued on a caller's ``stream`` goes into a CUDA graph being captured now."""
        return False

    @property
    def is_capture_active(self) -> bool:
        """Whether a capture this backend takes part in (one of its own, or a caller's it is recording a
        run into) is in progress: what waits on the device (timing at bind) must not run now."""
        return False

    def foreign_capture(self) -> contextlib.AbstractContextManager:
        """A context for a run queued into someone else's capture: frees are held, allocations stay off the
        captured stream, and the thread's capture mode is relaxed while it lasts."""
        return contextlib.nullcontext()

    def import_output(self, name: str, value: Any, *, stream: Any = None) -> Any:
        """A caller's buffer for output ``name`` (``run(out=...)``) as a kernel argument this backend's
        kernels write in place: contiguous and writable memory of this device, never a copy.

        Raises
        ------
        InvalidArgumentError
            For memory of another device, a strided or read-only buffer, or a value that is no tensor.
        """
        raise NotImplementedError

    def finish_run(self, stream: Any, *, keepalive: Any = None) -> Any:
        """End of a ``run()``: by default wait for its work (a device backend may return early, keeping
        ``keepalive`` (the run's inputs) alive until the work completes). Returns an event a later run on
        another stream waits for (None when the work is already done)."""
        self.synchronize(stream)
        return None

    # -- kernels -----------------------------------------------------------------------------------
    def compile_kernel(
        self,
        source_text: str,
        name: str,
        options: Mapping[str, Any] | None = None,
        include_dirs: Sequence[str] = (),
    ) -> Any:
        """The compiled kernel ``name`` of a device source (cached)."""
        raise HardwareUnsupportedError(
            f"the {self.kind} backend compiles no device kernels", device=self.device
        )

    def kernel_function(self, kernel: Any) -> Any:
        """The native handle of a kernel from :meth:`compile_kernel`, for :meth:`launch_prepared`."""
        raise HardwareUnsupportedError(
            f"the {self.kind} backend launches no device kernels", device=self.device
        )

    def launch(self, stream: Any, config: Any, kernel: Any, *args: Any, stage: str | None = None) -> None:
        """Launch a compiled kernel with a launch configuration and its arguments on ``stream``."""
        raise HardwareUnsupportedError(
            f"the {self.kind} backend launches no device kernels", device=self.device
        )

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
        """Launch ``function`` with a prebuilt kernel-parameter array (``void*[]`` at
        ``params_address``)."""
        raise HardwareUnsupportedError(
            f"the {self.kind} backend launches no device kernels", device=self.device
        )

    def run_context(self):
        """A context manager around one run (the CPU silences NumPy's floating-point warnings: NaN is
        a stage result that ``check_finite`` judges, not a warning for the caller)."""
        return contextlib.nullcontext()

    def check_errors(self, *, stage: str | None = None) -> None:
        """Raise the backend's pending asynchronous error, if any (CUDA: sticky errors)."""

    def close(self) -> None:
        """Release what the backend holds (called at interpreter exit)."""
        self._release_workspaces()

    def _release_workspaces(self) -> None:
        with self._workspace_lock:
            held = list(self._workspaces.values()) + self._retired_workspaces
            self._workspaces, self._retired_workspaces = {}, []
        for alloc in held:
            alloc.free()

    # -- hooks -------------------------------------------------------------------------------------
    def _allocate(self, nbytes: int, alignment: int, stream: Any, *, shared: bool = False) -> Allocation:
        raise NotImplementedError

    def _free(self, alloc: Allocation) -> None:
        raise NotImplementedError

    def _memcpy(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        raise NotImplementedError

    def _fill_stats(self, stats: MemoryStats) -> None:
        return None
