"""``pl.memory``: statistics and control of the runtime's allocators (seed section 3.2 and 5.3)."""

from __future__ import annotations

from typing import Any

from .backends import get_backend, loaded_backends
from .errors import InvalidArgumentError

__all__ = ["stats", "clear_pool", "set_allocator", "get_allocator"]

_ALLOCATORS = ("async", "legacy")
_allocator = "async"


def stats(device: str | None = None) -> dict[str, Any]:
    """Allocated, peak and reserved bytes and per-bin block counts.

    With ``device`` the stats of that device; otherwise a dict per loaded device.
    """
    if device is not None:
        return get_backend(device).memory_stats().to_dict()
    return {b.device: b.memory_stats().to_dict() for b in loaded_backends()}


def clear_pool(device: str | None = None) -> None:
    """Return every cached free block to the driver (seed: ``pipeLinkClearMemoryPool()``)."""
    backends = [get_backend(device)] if device is not None else loaded_backends()
    for b in backends:
        b.clear_pool()


def set_allocator(kind: str) -> None:
    """``"async"`` (stream-ordered pool, default) or ``"legacy"`` (plain synchronous ``cuMemAlloc``).

    Legacy is for code that needs plain device allocations (legacy CUDA IPC handles, tools that do not
    follow stream-ordered memory) or for ruling the pool out while debugging. It is not needed inside a
    foreign CUDA-graph capture: a captured run allocates nothing from either (docs/interop.md).
    """
    global _allocator
    if kind not in _ALLOCATORS:
        raise InvalidArgumentError(f"allocator must be one of {list(_ALLOCATORS)} (got {kind!r})")
    _allocator = kind
    for b in loaded_backends():
        b.set_allocator(kind)


def get_allocator() -> str:
    return _allocator
