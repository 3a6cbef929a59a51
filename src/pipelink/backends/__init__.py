"""Backend selection: one shared backend instance per device. Only ``cuda.py`` imports CUDA packages."""

from __future__ import annotations

import logging
import threading

from ..errors import HardwareUnsupportedError, InvalidArgumentError
from ..tensor import parse_device
from .base import Allocation, Backend, MemoryStats
from .cpu import CPUBackend

__all__ = [
    "Backend",
    "Allocation",
    "MemoryStats",
    "CPUBackend",
    "get_backend",
    "resolve_device",
    "loaded_backends",
    "cuda_unavailable_reason",
]

log = logging.getLogger("pipelink")
_backends: dict[str, Backend] = {}
_lock = threading.Lock()


def cuda_unavailable_reason() -> str | None:
    """None when a CUDA device can be used, else why not (packages missing, no driver, no device)."""
    try:
        from . import cuda
    except ImportError as e:
        missing = e.name or str(e)
        if missing.startswith("pipelink"):
            return f"the CUDA backend failed to import: {e}"
        return (
            f"the CUDA packages are not installed (missing {missing}); "
            "install them with: pip install 'pipelink[cuda]'"
        )
    return cuda.unavailable_reason()


def resolve_device(device: str | None) -> str:
    """``"auto"`` -> ``"cuda:0"`` when a GPU works, else ``"cpu"`` (with one info line)."""
    if device is None or str(device).lower() == "auto":
        reason = cuda_unavailable_reason()
        if reason is None:
            return "cuda:0"
        log.info("pipelink: no usable GPU (%s); running on the CPU", reason)
        return "cpu"
    kind, index = parse_device(device)
    return "cpu" if kind == "cpu" else f"cuda:{index}"


def get_backend(device: str | None = "cpu") -> Backend:
    """The shared backend of a device (created on first use).

    Raises
    ------
    HardwareUnsupportedError
        CUDA was asked for and cannot be used; the message says why.
    """
    name = resolve_device(device)
    with _lock:
        backend = _backends.get(name)
        if backend is not None:
            return backend
        if name == "cpu":
            backend = CPUBackend()
        else:
            reason = cuda_unavailable_reason()
            if reason is not None:
                raise HardwareUnsupportedError(
                    f"device {name!r} requested, but CUDA is unavailable: {reason}", device=name
                )
            from .cuda import CUDABackend

            try:
                backend = CUDABackend(int(name.split(":")[1]))
            except (ValueError, IndexError) as e:
                raise InvalidArgumentError(f"bad CUDA device {name!r}: {e}") from e
        _backends[name] = backend
        return backend


def loaded_backends() -> list[Backend]:
    with _lock:
        return list(_backends.values())
