"""Run fences of the CUDA backend: ``run()`` returns without waiting, and an event per run keeps what the
run reads alive until the device is done with it."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from ...errors import CUDAError

__all__ = ["RunFences"]


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

    def finish(self, stream_handle: Any, keepalive: Any) -> None:
        """Record the end of the work queued on ``stream_handle``; hold ``keepalive`` until it is done."""
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
            pending.append((event, handle, keepalive))
            if len(pending) > self._limit:
                entry = pending.popleft()
                entry[0].sync()
                spare.append(entry[:2])
