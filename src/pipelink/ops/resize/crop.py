"""Resize's ``tf_crop_and_resize`` coordinates (ONNX Resize with a ``roi``, as TensorFlow's
CropAndResize): the crop window of each axis, its coordinates, and the value of outputs sampled outside x.

The roi gives a start and an end per axis, normalised to the axis (``[start0, ..., end0, ...]``, 2 * rank
values; 0 and 1 crop nothing); output ``o`` of an axis of ``in`` inputs resized by ``scale`` samples
``o * (end - start) * (in - 1) / (in * scale - 1) + start * (in - 1)``, or the window's middle when
``in * scale`` is 1, as onnx's reference computes it (float64, in that order). An output whose coordinate on
any resized axis is not in ``[0, in - 1]`` (NaN included) takes ``extrapolation_value`` instead of being
interpolated, as the reference does axis by axis. ``resize.cu`` evaluates the same formulas on the device.
Pure NumPy on coordinates; it never touches array data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np

from ...dtypes import get_dtype
from ...errors import InvalidArgumentError

__all__ = ["TF_CROP", "crop_windows", "crop_coordinates", "outside_axis", "extrapolation_fill"]

TF_CROP = "tf_crop_and_resize"
FULL = (0.0, 1.0)
"""The window of an axis tf_crop_and_resize does not crop."""


def crop_windows(rank: int, attrs: Mapping[str, Any]) -> tuple[tuple[float, float], ...] | None:
    """The ``(start, end)`` of each axis that ``roi`` gives (None for the other coordinate modes).

    Raises
    ------
    InvalidArgumentError
        tf_crop_and_resize without a roi of ``2 * rank`` finite values; a roi or a nonzero
        extrapolation_value with another coordinate mode (they would be ignored).
    """
    roi = tuple(attrs.get("roi", ()))
    fill = attrs.get("extrapolation_value", 0.0)
    if attrs["coordinate_transformation_mode"] != TF_CROP:
        if roi or not (isinstance(fill, int | float) and fill == 0):
            raise InvalidArgumentError(
                "resize: 'roi' and 'extrapolation_value' apply to coordinate_transformation_mode "
                f"{TF_CROP!r} only (got roi={list(roi)}, extrapolation_value={fill} with "
                f"{attrs['coordinate_transformation_mode']!r}); drop them or use that mode",
                attr="roi" if roi else "extrapolation_value",
            )
        return None
    if len(roi) != 2 * rank:
        raise InvalidArgumentError(
            f"resize: {TF_CROP!r} needs 'roi' with a start and an end per axis of the {rank}-d input: "
            f"{2 * rank} values [start0, ..., end0, ...] (got {len(roi)}: {list(roi)})",
            attr="roi",
            got=list(roi),
        )
    if not all(isinstance(v, int | float) and math.isfinite(v) for v in roi):
        raise InvalidArgumentError(
            f"resize: 'roi' must be finite numbers (got {list(roi)})", attr="roi", got=list(roi)
        )
    return tuple((float(roi[k]), float(roi[rank + k])) for k in range(rank))


def crop_coordinates(out_size: int, in_size: int, scale: float, window: tuple[float, float]) -> np.ndarray:
    """Where each of ``out_size`` outputs samples an axis of ``in_size`` inputs cropped to ``window``
    (float64, onnx's reference's operations in its order)."""
    start, end = window
    span = in_size - 1
    length = in_size * scale
    with np.errstate(over="ignore", invalid="ignore"):  # a huge window's inf or NaN is outside x
        if length == 1:
            coords = np.full(out_size, (end - start) * span / 2)
        else:
            coords = np.arange(out_size, dtype=np.float64) * (end - start) * span / (length - 1)
        return coords + start * span


def outside_axis(coords: np.ndarray, in_size: int) -> np.ndarray:
    """The outputs whose coordinate is not in ``[0, in_size - 1]`` (a NaN is not): they extrapolate."""
    return ~((coords >= 0) & (coords <= in_size - 1))


def extrapolation_fill(dtype: str, value: Any) -> np.ndarray:
    """``extrapolation_value`` as a 0-d array of ``dtype``, the value both the CPU reference and the
    kernel store (a float rounded once, to nearest; NaN and infinities kept).

    Raises
    ------
    InvalidArgumentError
        A value the dtype cannot hold: for an integer dtype one that is not whole or out of its range,
        for a float dtype a finite value beyond its largest (it would round to infinity).
    """
    dt = get_dtype(dtype)
    v = float(value)
    if dt.is_floating:
        largest = float(ml_dtypes.finfo(dt.numpy).max)
        if math.isfinite(v) and abs(v) > largest:
            raise InvalidArgumentError(
                f"resize: 'extrapolation_value' {v} is beyond {dt.name}'s largest value {largest}",
                attr="extrapolation_value",
                got=v,
            )
        return np.asarray(v).astype(dt.numpy)
    info = np.iinfo(dt.numpy)
    if not (math.isfinite(v) and v == math.floor(v) and info.min <= v <= info.max):
        raise InvalidArgumentError(
            f"resize: 'extrapolation_value' {v} is not a value of {dt.name} (a whole number in "
            f"[{info.min}, {info.max}]), the dtype of y",
            attr="extrapolation_value",
            got=v,
        )
    return np.asarray(int(v), dt.numpy)
