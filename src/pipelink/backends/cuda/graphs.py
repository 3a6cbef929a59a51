"""CUDA graphs of the CUDA backend: stream capture, and an instantiated graph destroyed with its Python
object. The backend keeps the bookkeeping around a capture (allocations and frees held meanwhile)."""

from __future__ import annotations

import contextlib
from typing import Any

from ...errors import CUDAError
from .device import check_driver

__all__ = ["CUDAGraph", "begin_capture", "end_capture"]


def begin_capture(driver: Any, stream_handle: Any, *, uuid: str | None) -> None:
    """Start capturing the work queued on a stream (and on streams that join it through events);
    relaxed mode, so other threads' unrelated CUDA calls are not refused meanwhile."""
    check_driver(
        driver.cuStreamBeginCapture(stream_handle, driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
        "cuStreamBeginCapture",
        device_uuid=uuid,
    )


def end_capture(driver: Any, stream_handle: Any, *, uuid: str | None) -> Any:
    """End the capture on a stream; returns the captured (not yet instantiated) graph."""
    return check_driver(driver.cuStreamEndCapture(stream_handle), "cuStreamEndCapture", device_uuid=uuid)


class CUDAGraph:
    """A captured and instantiated CUDA graph; destroyed with the object (or by :meth:`close`)."""

    def __init__(self, graph: Any, exec_: Any, driver: Any):
        self.graph = graph
        self.exec = exec_
        self._driver = driver

    @classmethod
    def instantiate(cls, graph: Any, driver: Any, *, uuid: str | None) -> CUDAGraph:
        """The executable graph of a captured one (the captured graph is destroyed if that fails)."""
        try:
            exec_ = check_driver(driver.cuGraphInstantiate(graph, 0), "cuGraphInstantiate", device_uuid=uuid)
        except CUDAError:
            driver.cuGraphDestroy(graph)
            raise
        return cls(graph, exec_, driver)

    def close(self) -> None:
        exec_, graph, self.exec, self.graph = self.exec, self.graph, None, None
        if exec_ is not None:
            self._driver.cuGraphExecDestroy(exec_)
        if graph is not None:
            self._driver.cuGraphDestroy(graph)

    def __del__(self):
        with contextlib.suppress(Exception):  # at interpreter exit the driver may be gone
            self.close()
