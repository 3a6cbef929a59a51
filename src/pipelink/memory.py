"""``pl.memory``: statistics and control of the runtime's allocators (seed section 3.2 and 5.3)."""

from __future__ import annotations

from typing import Any

from .backends import get_backend, loaded_backends
from .errors import InvalidArgumentError
from .native import arena_stats, held_bytes

__all__ = ["stats", "clear_pool", "set_allocator", "get_allocator"]

_ALLOCATORS = ("async", "legacy")
_allocator = "async"


def stats(device: str | None = None) -> dict[str, Any]:
    """Allocated, peak and reserved bytes and per-bin block counts, the native core's memory included.

    With ``device`` the stats of that device; otherwise a dict per loaded device.

    ``"native"`` is what the native core's loaded plans hold on the device (``pipeLinkGetArenaStats``): the
    arena of each execution context (``n_contexts``, ``arena_bytes``; one per thread running a plan at once,
    kept until the plan is destroyed), their workspaces (``workspace_bytes``) and the plans' bound weights
    (``constant_bytes``), with ``peak_bytes`` of their sum. These are counted into the device's totals:
    ``allocated_bytes`` and ``reserved_bytes`` add what the core holds now. On a CUDA device ``peak_bytes``
    is the most the two held together: the backend hears what the core holds whenever a plan is loaded or
    first run and whenever these stats are read, and its peak follows Python's and the core's bytes
    together (never below the core's own peak). On the CPU it adds the core's peak to the Python side's
    (an upper bound: the two may come at different times).
    """
    if device is not None:
        return _with_native(get_backend(device))
    return {b.device: _with_native(b) for b in loaded_backends()}


def _with_native(backend) -> dict[str, Any]:
    native = arena_stats(backend.info.kind, backend.info.index)
    held = held_bytes(native)
    follows = backend.note_native_bytes(held)  # before reading: the peak then includes what is held now
    found = backend.memory_stats().to_dict()
    found["allocated_bytes"] += held
    found["reserved_bytes"] += held
    if follows:
        found["peak_bytes"] = max(found["peak_bytes"], native["peak_bytes"], found["allocated_bytes"])
    else:
        found["peak_bytes"] += native["peak_bytes"]
    found["native"] = native
    return found


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
