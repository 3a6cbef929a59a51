"""Process isolation on the GPU: the stage runs in a worker process with its own CUDA context.

The stage's inputs and outputs cross through one device staging block allocated with plain cuMemAlloc
and shared with the worker by a CUDA IPC handle: device-to-device copies in and out, no host round trip.
An illegal address, a trap or a crash kills only the worker's context; the caller's context (and every
other stage) is untouched, and the worker is restarted for the next run. Imports CUDA packages: only the
CUDA backend's plans load it.
"""

from __future__ import annotations

import weakref

from ..errors import CUDAError
from ..tensor import Tensor
from .isolation import _ALIGN, IsolatedKernel, _nbytes, _shutdown_proc, worker_spec

__all__ = ["CUDAIsolatedKernel"]


class CUDAIsolatedKernel(IsolatedKernel):
    """An isolated stage on a CUDA device (see the module docstring)."""

    def __init__(self, stage, variant, ctx, backend):  # noqa: D107 - documented on the class
        from cuda.bindings import driver

        self.stage = stage
        self.backend = backend
        self.timeout_s = (
            stage.config.constraints.timeout_ms / 1000.0
            if stage.config.constraints.timeout_ms is not None
            else None
        )
        self._driver = driver
        shapes = [s for s in ctx.in_shapes if s is not None] + list(ctx.out_shapes)
        dtypes = [d for d in ctx.in_dtypes if d is not None] + list(ctx.out_dtypes)
        offsets, total = [], 0
        for shape, dtype in zip(shapes, dtypes, strict=True):
            offsets.append(total)
            total += (_nbytes(shape, dtype) + _ALIGN - 1) // _ALIGN * _ALIGN
        backend.synchronize()
        err, ptr = driver.cuMemAlloc(max(total, 1))
        if err != driver.CUresult.CUDA_SUCCESS:
            raise CUDAError(
                f"stage {stage.id!r}: cannot allocate {total} bytes of IPC staging memory ({err.name})",
                stage=stage.id,
                cuda_error=err.name,
            )
        self._staging_ptr = int(ptr)
        err, handle = driver.cuIpcGetMemHandle(ptr)
        if err != driver.CUresult.CUDA_SUCCESS:
            driver.cuMemFree(ptr)
            raise CUDAError(
                f"stage {stage.id!r}: cuIpcGetMemHandle failed ({err.name})",
                stage=stage.id,
                cuda_error=err.name,
            )
        self._offsets = offsets
        self.spec = worker_spec(
            stage,
            variant,
            ctx,
            device=backend.device,
            ipc_handle=bytes(handle.reserved),
            staged=variant.device != backend.info.kind,
            offsets=tuple(offsets),
        )
        self._proc = None
        self._conn = None
        self.restarts = 0
        self._finalizer = self._make_finalizer([None, None])
        self._start()

    def _make_finalizer(self, handles: list):
        return weakref.finalize(self, _free_staging, self._driver, self._staging_ptr, handles)

    def _view(self, slot: int, like):
        return Tensor(self._staging_ptr + self._offsets[slot], like.shape, like.dtype, self.backend.device)

    def __call__(self, inputs, outputs, stream) -> None:
        slot = 0
        for x in inputs:
            if x is None:
                continue
            self.backend.copy(self._view(slot, x), x, stream=stream)
            slot += 1
        # The worker's context sees the staging block once our copies are done.
        self.backend.synchronize(stream)
        self._roundtrip(("run",))
        for j, y in enumerate(outputs):
            self.backend.copy(y, self._view(slot + j, y), stream=stream)


def _free_staging(driver, ptr: int, handles: list) -> None:
    _shutdown_proc(handles)
    driver.cuMemFree(ptr)
