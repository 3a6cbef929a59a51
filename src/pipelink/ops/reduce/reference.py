"""argmax / argmin (ONNX ArgMax / ArgMin): the rule for their one axis (shared by the shape rule, the NumPy
reference and the CUDA plan) and the NumPy reference; the NumPy reference of cumsum (ONNX CumSum).
Imports nothing CUDA.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import ShapeMismatchError
from .._common import FLOATS, HALF_DTYPES, compute_dtype
from .._dims import normalize_axis

__all__ = ["ARG_KINDS", "arg_axis", "arg_shape", "arg_reduce_into", "cumsum_into"]

ARG_KINDS = ("max", "min")


def arg_axis(shape: Sequence, attrs: Mapping[str, Any], *, op: str) -> int:
    """The axis ``op`` (argmax or argmin) folds: ``axis`` normalised against the rank of ``shape``.

    Raises
    ------
    InvalidArgumentError
        ``axis`` is outside ``[-rank, rank)`` (a 0-d input has no axis to fold).
    ShapeMismatchError
        The axis has size 0 (known at load; a symbolic size is checked when it is bound): the index of
        an extreme of no elements does not exist. A size-0 *other* axis only makes the output empty.
    """
    axis = normalize_axis(int(attrs["axis"]), len(shape), op=op)
    if shape[axis] == 0:
        raise ShapeMismatchError(
            f"{op}: axis {attrs['axis']} of input 'x' (shape {list(shape)}) has size 0, so there is no "
            f"extreme to index; {op} needs at least one element along its axis",
            port="x",
            attr="axis",
            expected="at least 1",
            got=0,
        )
    return axis


def arg_shape(shape: Sequence, axis: int, keepdims: bool) -> tuple:
    """The output shape: ``shape`` with ``axis`` kept as 1 (``keepdims``) or removed."""
    return tuple(1 if i == axis else d for i, d in enumerate(shape) if keepdims or i != axis)


def arg_reduce_into(
    kind: str, x: np.ndarray, y: np.ndarray, *, axis: int, select_last_index: bool = False
) -> None:
    """``y`` = the int64 index along ``axis`` of the maximum (``kind="max"``) or minimum of ``x``.

    A NaN is the extreme, as in ``np.argmax`` / ``np.argmin``; ties (NaNs included) go to the first index,
    or to the last with ``select_last_index``. ``y`` has the output shape, with or without keepdims.
    """
    if np.dtype(x.dtype).name in HALF_DTYPES:
        x = np.asarray(x, np.float32)  # exact: the order of 16-bit values is that of their floats
    find = np.argmax if kind == "max" else np.argmin
    idx = find(x, axis=axis)
    if select_last_index:  # the first extreme of the reversed axis is the last one of the axis
        idx = (x.shape[axis] - 1) - find(np.flip(x, axis), axis=axis)
    np.copyto(y, np.asarray(idx, np.int64).reshape(y.shape))


def cumsum_into(
    x: np.ndarray, y: np.ndarray, *, axis: int, exclusive: bool = False, reverse: bool = False
) -> None:
    """``y`` = the running sum of ``x`` along ``axis`` (normalised): at k, the sum of the elements up to
    k (before k with ``exclusive``; from the end of the axis with ``reverse``).

    Floats sum in their compute type (float32 for the half types, rounded once per output), integers in
    their own type, wrapping (ONNX and NumPy).
    """
    name = np.dtype(x.dtype).name
    dtype = compute_dtype(name) if name in FLOATS else x.dtype
    a = np.flip(x, axis) if reverse else x
    sums = np.cumsum(a, axis=axis, dtype=dtype)
    if exclusive:
        shifted = np.zeros_like(sums)
        into = [slice(None)] * sums.ndim
        into[axis] = slice(1, None)
        frm = [slice(None)] * sums.ndim
        frm[axis] = slice(None, -1)
        shifted[tuple(into)] = sums[tuple(frm)]
        sums = shifted
    if reverse:
        sums = np.flip(sums, axis)
    np.copyto(y, sums, casting="unsafe")
