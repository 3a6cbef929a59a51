"""Which worker an isolated stage gets: the backend's ``capabilities.isolation`` decides (shared host
memory for the CPU, a CUDA IPC staging block for a GPU)."""

from __future__ import annotations

from ..errors import InvalidArgumentError, ModuleLoadError
from .isolation import IsolatedKernel
from .isolation_cuda import CUDAIsolatedKernel

__all__ = ["isolate"]


def isolate(stage, variant, ctx, backend, arena) -> IsolatedKernel:
    """The kernel of an isolated stage: same call signature, runs in a worker process."""
    if variant.source == "python" and variant.origin is None:
        raise ModuleLoadError(
            f"stage {stage.id!r}: operator {stage.desc.name!r} cannot be rebuilt in a worker", stage=stage.id
        )
    how = backend.capabilities.isolation
    if how == "ipc":
        return CUDAIsolatedKernel(stage, variant, ctx, backend)
    if how != "shared_memory":
        raise InvalidArgumentError(
            f"stage {stage.id!r}: isolation 'process' is not available on the {backend.kind} backend; "
            "use isolation 'none'",
            stage=stage.id,
        )
    return IsolatedKernel(stage, variant, ctx, arena)
