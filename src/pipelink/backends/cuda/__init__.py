"""The CUDA backend package: device facts and errors (``device``), memory (``memory``, ``pool``), run
inputs (``inputs``), the NVRTC compiler and cubin cache (``compiler``), the backend's own kernels
(``helpers.cu``), graphs (``graphs``) and :class:`CUDABackend` (``backend``), which ties them together.

It knows devices, memory, streams, compilers and graph capture, and nothing about any operator. CUDA
packages are imported inside functions: importing this package works on a machine without them.
"""

from __future__ import annotations

from .backend import CUDABackend, unavailable_reason
from .device import device_count
from .graphs import CUDAGraph

__all__ = ["CUDABackend", "CUDAGraph", "device_count", "unavailable_reason"]
