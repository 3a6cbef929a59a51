"""The backend contract: memory, views, copies, streams, events and graph capture for one device.

The executor talks only to this interface. Public methods validate and account; a backend fills in
the private hooks of the same name (``allocate`` -> ``_allocate``). A backend without graph support
leaves ``supports_graphs`` False and the executor runs eagerly.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any

from ..dtypes import DType
from ..errors import InvalidArgumentError, OutOfMemoryError, PipeLinkError
from ..hardware import HardwareInfo
from ..limits import check_fits, format_bytes, total_bytes
from ..tensor import Tensor

__all__ = ["Allocation", "Backend", "MemoryStats"]


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
    """Base class of the CPU and CUDA backends. One instance per device, shared by pipelines."""

    kind = "abstract"
    supports_graphs = False

    def __init__(self, device: str, info: HardwareInfo):
        self.device = device
        self.info = info
        self._stats = MemoryStats(device)
        self._stats_lock = threading.Lock()

    # -- memory ------------------------------------------------------------------------------------
    def allocate(
        self, nbytes: int, *, alignment: int = 256, stream: Any = None, tag: str = "", shared: bool = False
    ) -> Allocation:
        """``nbytes`` of memory aligned to ``alignment`` (a power of two); ``shared`` makes it mappable
        by worker processes (process isolation)."""
        if nbytes < 0:
            raise InvalidArgumentError(f"allocation size must be >= 0 (got {nbytes})")
        if alignment & (alignment - 1):
            raise InvalidArgumentError(f"alignment must be a power of two (got {alignment})")
        # More than the device has in all can never succeed: say so with the numbers, allocating nothing.
        what = f"the {tag} allocation" if tag else "an allocation"
        check_fits(int(nbytes), what, self.info.kind, self.info.features,
                   limit=total_bytes(self.info.kind, self.info.features))
        try:
            alloc = (
                self._allocate(max(int(nbytes), 1), alignment, stream, shared=True)
                if shared
                else self._allocate(max(int(nbytes), 1), alignment, stream)
            )
        except MemoryError as e:  # NumPy's raw error on the host; a PipeLinkError passes through
            if isinstance(e, PipeLinkError):
                raise
            check_fits(int(nbytes), what, self.info.kind, self.info.features)
            raise OutOfMemoryError(
                f"{what} of {format_bytes(int(nbytes))} failed on {self.info.kind} ({e}); use smaller shapes",
                requested=int(nbytes)) from e
        alloc.tag = tag
        with self._stats_lock:
            s = self._stats
            s.allocated_bytes += alloc.nbytes
            s.peak_bytes = max(s.peak_bytes, s.allocated_bytes)
            s.allocations += 1
        return alloc

    def free(self, alloc: Allocation) -> None:
        with self._stats_lock:
            self._stats.allocated_bytes -= alloc.nbytes
            self._stats.frees += 1
        self._free(alloc)

    def memory_stats(self) -> MemoryStats:
        with self._stats_lock:
            stats = MemoryStats(**{**self._stats.__dict__, "bins": dict(self._stats.bins)})
        self._fill_stats(stats)
        return stats

    def clear_pool(self) -> None:
        """Return cached free memory to the system."""

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
        backend uploads it through a page-locked buffer of its own); ``producers`` collects the streams
        of inputs still being written elsewhere, for one :meth:`order_after` per run."""
        raise NotImplementedError

    def order_after(self, producers: list) -> None:
        """Make our streams wait for the producers' streams collected by :meth:`import_input`."""

    def match_inputs(self, signature: tuple, given: dict, stream: Any) -> dict | None:
        """The run's inputs as kernel arguments when each is already in the form a plan of ``signature``
        takes (no upload, conversion or relayout): the fast path of ``run()``. None sends the run through
        the general import."""
        return None

    def signature_of(self, arg: Any) -> tuple[tuple[int, ...], str, bool]:
        """(shape, dtype name, is_contiguous) of a kernel argument."""
        raise NotImplementedError

    def copy(self, dst: Any, src: Any, *, stream: Any = None) -> None:
        """Copy ``src`` into ``dst`` (same shape and dtype; ``src`` may be strided)."""
        raise NotImplementedError

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

    def record_event(self, stream: Any) -> Any:
        return None

    def wait_event(self, stream: Any, event: Any) -> None:
        return None

    def synchronize(self, stream: Any = None) -> None:
        return None

    def begin_capture(self, stream: Any) -> None:
        raise InvalidArgumentError(f"the {self.kind} backend does not support graph capture")

    def end_capture(self, stream: Any) -> Any:
        raise InvalidArgumentError(f"the {self.kind} backend does not support graph capture")

    def launch_graph(self, graph: Any, stream: Any) -> None:
        raise InvalidArgumentError(f"the {self.kind} backend does not support graph capture")

    def finish_run(self, stream: Any, *, keepalive: Any = None) -> None:
        """End of a ``run()``: by default wait for its work (a device backend may return early, keeping
        ``keepalive`` (the run's inputs) alive until the work completes)."""
        self.synchronize(stream)

    def tuned_params(self, desc, in_shapes: tuple, in_dtypes: tuple) -> tuple[dict, str, str] | None:
        """``(params, "tuned" | "default", reason)`` of a stage's kernel on this device (None when it has
        no tunables)."""
        return None

    def run_context(self):
        """A context manager around one run (the CPU silences NumPy's floating-point warnings: NaN is
        a stage result that ``check_finite`` judges, not a warning for the caller)."""
        return contextlib.nullcontext()

    def check_errors(self, *, stage: str | None = None) -> None:
        """Raise the backend's pending asynchronous error, if any (CUDA: sticky errors)."""

    def close(self) -> None:
        """Release what the backend holds (called at interpreter exit)."""

    # -- hooks -------------------------------------------------------------------------------------
    def _allocate(self, nbytes: int, alignment: int, stream: Any, shared: bool = False) -> Allocation:
        raise NotImplementedError

    def _free(self, alloc: Allocation) -> None:
        raise NotImplementedError

    def _fill_stats(self, stats: MemoryStats) -> None:
        return None
