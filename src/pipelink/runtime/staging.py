"""A host variant run for a device backend: its inputs are copied to host memory, it runs there, and its
outputs are copied back, all ordered on the stage's stream (``Variant.host_ok``, chosen by the registry
as ``VariantChoice.staged``).

Host code never sees a device tensor. The host buffers are allocated once, when the plan is built
(page-locked where the backend has such memory); a run only copies.
"""

from __future__ import annotations

from typing import Any

from ..descriptor import KernelContext
from ..dtypes import get_dtype

__all__ = ["HostStaged"]


class HostStaged:
    """The kernel of a staged stage: ``kernel(inputs, outputs, stream)`` over device tensors.

    Parameters
    ----------
    kernel : callable
        The host variant's bound kernel (takes NumPy arrays, runs synchronously).
    ctx : KernelContext
        The stage's context (shapes and dtypes of its ports).
    backend : Backend
        The device backend whose tensors the stage reads and writes.
    """

    # A captured CUDA graph cannot call back into Python between its copies: run this stage eagerly.
    graph_safe = False

    def __init__(self, kernel: Any, ctx: KernelContext, backend: Any):
        self._kernel = kernel
        self._backend = backend
        self._host_in = [
            None if shape is None else backend.pinned_empty(tuple(shape), get_dtype(dtype))
            for shape, dtype in zip(ctx.in_shapes, ctx.in_dtypes, strict=True)
        ]
        self._host_out = [
            backend.pinned_empty(tuple(shape), get_dtype(dtype))
            for shape, dtype in zip(ctx.out_shapes, ctx.out_dtypes, strict=True)
        ]
        self._contiguous: dict[int, Any] = {}  # input index -> device buffer for a strided input

    def __call__(self, inputs: list, outputs: list, stream: Any) -> None:
        be = self._backend
        for i, (x, host) in enumerate(zip(inputs, self._host_in, strict=False)):
            if x is None or host is None:
                continue
            be.memcpy(host.ctypes.data, self._dense(i, x, stream).ptr, host.nbytes, stream=stream)
        # The host reads the inputs only once the copies (and the work before them) are done.
        be.synchronize(stream)
        self._kernel(list(self._host_in), self._host_out, None)
        for y, host in zip(outputs, self._host_out, strict=True):
            be.memcpy(y.ptr, host.ctypes.data, host.nbytes, stream=stream)

    def _dense(self, i: int, x: Any, stream: Any) -> Any:
        """``x`` itself when contiguous, else a contiguous device copy (its buffer made once)."""
        if x.is_contiguous:
            return x
        buf = self._contiguous.get(i)
        if buf is None or tuple(buf.shape) != tuple(x.shape):
            buf = self._contiguous[i] = self._backend.empty(tuple(x.shape), x.dtype)
        self._backend.copy(buf, x, stream=stream)
        return buf
