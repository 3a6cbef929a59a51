"""Streams of the CUDA backend that are not its own: run fences (``run()`` returns without waiting, and an
event per run keeps what the run reads alive until the device is done with it), and the caller's streams
(``run(stream=...)``): their handles, whether they are being captured, and the relaxed capture mode a run
inside someone else's capture works under (docs/interop.md)."""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ...errors import CUDAError, InvalidArgumentError

__all__ = ["CallerStreams", "RunFences", "stream_handle"]


class RunFences:
    """Events marking the ends of asynchronous runs, each holding its run's inputs alive until then.

    - Events of completed runs are reused (no event is created per run once warm).
    - At most ``limit`` runs are in flight: the oldest is waited for beyond that (bounded run-ahead).

    Parameters
    ----------
    driver : module
        ``cuda.bindings.driver``.
    new_event : callable
        A fresh cuda.core event (recorded anywhere; it is re-recorded before use).
    error : callable
        ``(CUresult code, what) -> CUDAError``.
    limit : int
        Runs in flight before ``finish`` waits for the oldest.
    """

    def __init__(
        self,
        driver: Any,
        new_event: Callable[[], Any],
        error: Callable[[int, str], CUDAError],
        limit: int = 64,
    ):
        self._driver = driver
        self._new_event = new_event
        self._error = error
        self._limit = limit
        self._pending: collections.deque = collections.deque()  # (event, handle, what it holds alive)
        self._spare: list = []  # (event, handle) of completed runs
        self._lock = threading.Lock()  # pipelines on several threads share the backend

    def finish(self, stream_handle: Any, keepalive: Any, join: Any = None) -> Any:
        """Record the end of the work queued on ``stream_handle`` and return its event (cuda.core); hold
        ``keepalive`` until it is done.
        ``join``: the handle of a stream that waits for that end too (the backend's main stream after a
        run on a caller's stream, so what orders itself after the main stream sees the run's outputs)."""
        pending, spare = self._pending, self._spare
        with self._lock:
            while pending and pending[0][0].is_done:
                spare.append(pending.popleft()[:2])
            if spare:
                event, handle = spare.pop()
            else:
                event = self._new_event()
                handle = event.handle
            (err,) = self._driver.cuEventRecord(handle, stream_handle)
            if err != 0:
                spare.append((event, handle))
                raise self._error(int(err), "cuEventRecord")
            if join is not None:
                (err,) = self._driver.cuStreamWaitEvent(join, handle, 0)
                if err != 0:
                    raise self._error(int(err), "cuStreamWaitEvent")
            pending.append((event, handle, keepalive))
            if len(pending) > self._limit:
                entry = pending.popleft()
                entry[0].sync()
                spare.append(entry[:2])
            return event


def stream_handle(stream: Any) -> int:
    """The ``CUstream`` handle (an int) of a caller's stream.

    Accepts anything speaking the CUDA stream protocol (``__cuda_stream__``: cuda.core, CuPy, recent
    PyTorch), a ``torch.cuda.Stream`` (its ``cuda_stream``) and a raw handle (an int; 0 is the legacy
    default stream, PyTorch's default).

    Raises
    ------
    InvalidArgumentError
        For anything else, or a protocol version other than 0.
    """
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        version, handle = protocol()
        if version != 0:
            raise InvalidArgumentError(
                f"stream {stream!r} speaks __cuda_stream__ version {version}; PipeLink understands version 0"
            )
        return int(handle)
    handle = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream before __cuda_stream__
    if isinstance(handle, int):
        return handle
    if isinstance(stream, int) and not isinstance(stream, bool) and stream >= 0:
        return stream
    raise InvalidArgumentError(
        f"stream= must be a CUDA stream: an object with __cuda_stream__ (cuda.core, CuPy, PyTorch), a "
        f"torch.cuda.Stream or a raw CUstream handle as a non-negative int (got {type(stream).__name__})"
    )


class _Handle:
    """A raw handle speaking the stream protocol, for cuda.core to wrap (it owns nothing)."""

    __slots__ = ("handle",)

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


class CallerStreams:
    """The streams of a backend's callers as cuda.core streams (wrappers that own nothing, one per handle).

    Parameters
    ----------
    driver : module
        ``cuda.bindings.driver``.
    wrap : callable
        ``wrap(obj) -> cuda.core.Stream`` for an object with ``__cuda_stream__`` (``Device.create_stream``).
    error : callable
        ``(CUresult code, what) -> CUDAError``.
    """

    def __init__(self, driver: Any, wrap: Callable[[Any], Any], error: Callable[[int, str], CUDAError]):
        self._driver = driver
        self._wrap = wrap
        self._error = error
        self._streams: dict[int, Any] = {}
        self._lock = threading.Lock()
        capture = driver.CUstreamCaptureStatus
        self._not_capturing = capture.CU_STREAM_CAPTURE_STATUS_NONE
        self._implicit = int(driver.CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)

    def stream(self, handle: int) -> Any:
        """The cuda.core stream of a raw handle (the same object for the same handle)."""
        found = self._streams.get(handle)
        if found is None:
            with self._lock:
                if len(self._streams) > 256:  # handles of streams long destroyed
                    self._streams.clear()
                found = self._streams[handle] = self._wrap(_Handle(handle))
        return found

    def is_capturing(self, stream: Any) -> bool:
        """Whether work queued on ``stream`` now goes into a CUDA graph being captured (by anyone).

        Raises
        ------
        InvalidArgumentError
            The legacy default stream while another stream captures in global mode: work on it would
            invalidate that capture.
        """
        err, status = self._driver.cuStreamIsCapturing(stream.handle)
        if int(err) == self._implicit:
            raise InvalidArgumentError(
                "stream= is the legacy default stream (0) while another stream is being captured into a "
                "CUDA graph: work on it would invalidate that capture; run on the capturing stream or on a "
                "non-default stream"
            )
        if int(err) != 0:
            raise self._error(int(err), "cuStreamIsCapturing")
        return status != self._not_capturing

    @contextlib.contextmanager
    def relaxed(self) -> Iterator[None]:
        """This thread in relaxed capture mode: a capture begun in global mode (PyTorch's default) does
        not forbid the calls the run makes off the captured stream (a stream's first cuBLASLt handle or
        workspace, say); what the run queues on the captured stream is recorded into the graph."""
        d = self._driver
        err, previous = d.cuThreadExchangeStreamCaptureMode(
            d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        )
        if int(err) != 0:
            raise self._error(int(err), "cuThreadExchangeStreamCaptureMode")
        try:
            yield
        finally:
            d.cuThreadExchangeStreamCaptureMode(previous)
