"""CUDA graphs of the CUDA backend: an instantiated graph that is destroyed with its Python object."""

from __future__ import annotations

import contextlib
from typing import Any

__all__ = ["CUDAGraph"]


class CUDAGraph:
    """A captured and instantiated CUDA graph; destroyed with the object (or by :meth:`close`)."""

    def __init__(self, graph: Any, exec_: Any, driver: Any):
        self.graph = graph
        self.exec = exec_
        self._driver = driver

    def close(self) -> None:
        exec_, graph, self.exec, self.graph = self.exec, self.graph, None, None
        if exec_ is not None:
            self._driver.cuGraphExecDestroy(exec_)
        if graph is not None:
            self._driver.cuGraphDestroy(graph)

    def __del__(self):
        with contextlib.suppress(Exception):  # at interpreter exit the driver may be gone
            self.close()
