"""Which axes a reduction folds (shared by the NumPy reference and the CUDA plan)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._dims import normalize_axes

__all__ = ["reduced_axes"]


def reduced_axes(ndim: int, attrs: Mapping[str, Any], *, op: str) -> tuple[int, ...]:
    """The axes a reduction folds: ``axes``; all of them when empty, none under noop_with_empty_axes."""
    axes = normalize_axes(attrs["axes"], ndim, op=op)
    if not axes:
        return () if attrs["noop_with_empty_axes"] else tuple(range(ndim))
    return tuple(sorted(axes))
