"""Memory limits checked before anything is allocated: the exact size of a shape and whether it fits the
memory a device has, so a huge shape ends as ``PIPELINK_ERR_OUT_OF_MEMORY`` with the numbers, never as a
raw ``MemoryError`` or an overflow. Never allocates.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence

from .errors import OutOfMemoryError

__all__ = ["available_bytes", "total_bytes", "shape_nbytes", "check_fits", "format_bytes"]


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``; exact below 1 KiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def shape_nbytes(shape: Sequence[int], itemsize: int) -> int:
    """Bytes of a dense array, as an exact Python int (no int64 overflow for dimensions like 2**64)."""
    return math.prod(int(d) for d in shape) * int(itemsize)


def _host_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


@functools.cache
def _host_total() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def total_bytes(kind: str, features: dict | None = None) -> int | None:
    """All the memory of a device (constant, cheap to ask on every allocation): the host's physical RAM
    for ``cpu``, ``features["memory_bytes"]`` for a CUDA device; None when unknown."""
    if kind.startswith("cpu"):
        return _host_total()
    total = (features or {}).get("memory_bytes")
    return int(total) if total else None


def available_bytes(device: str = "cpu", features: dict | None = None) -> int | None:
    """Memory a device can give at most: the host's available RAM for ``cpu``, the device's total memory
    (``features["memory_bytes"]``) for a CUDA device; None when unknown."""
    if device.startswith("cpu"):
        return _host_available()
    total = (features or {}).get("memory_bytes")
    return int(total) if total else None


def check_fits(
    nbytes: int, what: str, device: str = "cpu", features: dict | None = None, *, limit: int | None = None
) -> None:
    """Raise when ``nbytes`` cannot fit in the memory of ``device``.

    Parameters
    ----------
    limit : int, optional
        The bytes to compare with; by default what the device has available now.

    Raises
    ------
    OutOfMemoryError
        With the size wanted and the size available, before any allocation.
    """
    limit = available_bytes(device, features) if limit is None else limit
    if limit is not None and nbytes > limit:
        raise OutOfMemoryError(
            f"{what} needs {format_bytes(nbytes)} ({nbytes} bytes), but {device} has only "
            f"{format_bytes(limit)} ({limit} bytes); use smaller shapes",
            requested=nbytes,
            available=limit,
            device=device,
        )
