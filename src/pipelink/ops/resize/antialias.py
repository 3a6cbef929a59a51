"""Resize's antialiasing filters (ONNX ``antialias=1``, modes linear and cubic): which inputs each output
blends along one axis, and with which weights.

Downsampling at ``scale < 1`` stretches the filter by ``1 / scale`` (linear's triangle of half-width 1,
Keys' cubic of half-width 2), so an output blends ``2 - 2 * start`` inputs, ``start = floor(-w / scale)
+ 1``; upsampling uses the plain filter (2 or 4 taps). As onnx's reference: tap ``j`` of a coordinate
``c`` is input ``c - r + start + j``, where ``r`` is c's fraction past its floor (1, not 0, at a whole
``c``), weighted by the filter at ``(start + j - r) * min(scale, 1)``; the weights are normalised to sum
to 1, and with ``exclude_outside`` a tap outside the axis weighs 0 and the rest are renormalised. Taps
past an edge repeat the edge. ``resize.cu`` evaluates the same formulas on the device.
Pure NumPy on coordinates; it never touches array data.
"""

from __future__ import annotations

import math

import numpy as np

from .cubic import keys

__all__ = ["HALF_WIDTHS", "antialias_tap_count", "antialias_taps"]

HALF_WIDTHS = {"linear": 1.0, "cubic": 2.0}
"""The filter's half-width at scale 1, per mode: the triangle's and Keys' cubic's."""


def _start(scale: float, mode: str) -> int:
    """Offset of the first tap from ``floor(c)`` (``c - r``): ``floor(-w / min(scale, 1)) + 1``."""
    return math.floor(-HALF_WIDTHS[mode] / min(scale, 1.0)) + 1


def antialias_tap_count(scale: float, mode: str) -> int:
    """How many inputs each output of an axis resized by ``scale`` blends (the same for every output):
    2 (linear) or 4 (cubic) from scale 1 up, more below (about ``2 * w / scale``)."""
    return 2 - 2 * _start(scale, mode)


def antialias_taps(
    coords: np.ndarray, in_size: int, scale: float, mode: str, a: float, exclude_outside: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The antialiased taps of each source coordinate of one axis.

    Parameters
    ----------
    coords : ndarray
        Source coordinates (float64, ``source_coordinates``), one per output index.
    in_size : int
        The axis's length (> 0).
    scale : float
        The axis's scale (``out / in`` for sizes).
    mode : str
        ``"linear"`` or ``"cubic"``.
    a : float
        Keys' coefficient (cubic).
    exclude_outside : bool
        Taps outside the axis weigh 0; the others are renormalised.

    Returns
    -------
    (indices, weights)
        Each ``[len(coords), antialias_tap_count(scale, mode)]``: the input indices (clamped into the axis)
        and their weights (float64).
    """
    start, count = _start(scale, mode), antialias_tap_count(scale, mode)
    base = np.floor(coords)
    whole = coords == base  # a whole coordinate counts as 1 past the previous index, as onnx's reference
    ratio = np.where(whole, 1.0, coords - base)
    offsets = np.arange(start, start + count)
    args = (offsets[None, :] - ratio[:, None]) * min(scale, 1.0)
    raw = keys(args, a) if mode == "cubic" else np.clip(1 - np.abs(args), 0, 1)
    weights = raw / raw.sum(axis=1, keepdims=True)
    taps = (base.astype(np.int64) - whole)[:, None] + offsets[None, :]
    if exclude_outside:
        weights = np.where((taps >= 0) & (taps < in_size), weights, 0.0)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(taps, 0, in_size - 1).astype(np.intp), weights
