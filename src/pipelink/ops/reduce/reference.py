"""argmax / argmin (ONNX ArgMax / ArgMin) and top_k (ONNX TopK): the rules for their one axis (shared by
the shape rule, the NumPy reference and the CUDA plan) and their NumPy references; the NumPy references
of hardmax (argmax one-hot), cumsum and cumprod (ONNX CumSum, CumProd). Imports nothing CUDA.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError, ShapeMismatchError
from .._common import FLOATS, HALF_DTYPES, compute_dtype
from .._dims import normalize_axis

__all__ = [
    "ARG_KINDS",
    "SCAN_KINDS",
    "arg_axis",
    "arg_shape",
    "arg_reduce_into",
    "hardmax_into",
    "scan_into",
    "top_k_axis",
    "top_k_into",
]

ARG_KINDS = ("max", "min")
SCAN_KINDS = ("sum", "prod")  # cumsum, cumprod


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


def hardmax_into(x: np.ndarray, y: np.ndarray, *, axis: int) -> None:
    """``y`` = 1 at the first maximum of each line of ``x`` along ``axis`` (normalised), 0 elsewhere: the
    one-hot of argmax (a NaN is the maximum, as ``np.argmax`` and onnx's reference say). An empty ``x``
    gives an empty ``y``."""
    y[...] = 0
    if x.size == 0:
        return
    idx = np.empty(arg_shape(x.shape, axis, True), np.int64)
    arg_reduce_into("max", x, idx, axis=axis)
    np.put_along_axis(y, idx, 1, axis=axis)


def top_k_axis(shape: Sequence, attrs: Mapping[str, Any], *, op: str = "top_k") -> int:
    """The axis top_k selects along: ``axis`` normalised against the rank of ``shape``.

    Raises
    ------
    InvalidArgumentError
        ``axis`` is outside ``[-rank, rank)``, or ``k`` is negative.
    ShapeMismatchError
        ``k`` is larger than the axis (known at load; a symbolic size is checked when it is bound).
    """
    axis = normalize_axis(int(attrs["axis"]), len(shape), op=op)
    k = int(attrs["k"])
    if k < 0:
        raise InvalidArgumentError(
            f"{op}: attribute 'k' must be >= 0 (got {k}); k = 0 gives empty outputs", attr="k", got=k
        )
    n = shape[axis]
    if isinstance(n, int) and k > n:
        raise ShapeMismatchError(
            f"{op}: k={k} is larger than axis {attrs['axis']} of input 'x' (shape {list(shape)}), which has "
            f"{n} elements; k must be at most the axis length",
            port="x",
            attr="k",
            expected=f"at most {n}",
            got=k,
        )
    return axis


def top_k_into(
    x: np.ndarray, values: np.ndarray, indices: np.ndarray, *, axis: int, k: int, largest: bool = True
) -> None:
    """``values`` / ``indices`` (int64) = the ``k`` largest (smallest with ``largest`` False) elements of
    ``x`` along ``axis`` (normalised) and their indices, sorted, as onnx's reference orders them: equal
    values by the lower index first, and a NaN above every number either way (first of the largest, last
    of the smallest; NaNs among themselves by index)."""
    a = np.asarray(x, np.float32) if np.dtype(x.dtype).name in HALF_DTYPES else x  # exact
    a = np.moveaxis(a, axis, -1)
    pos = np.broadcast_to(np.arange(a.shape[-1], dtype=np.int64), a.shape)
    # largest: ascending by (value, -index), then flipped: descending values, ties by the lower index
    order = np.flip(np.lexsort((-pos, a), axis=-1), -1) if largest else np.lexsort((pos, a), axis=-1)
    order = np.ascontiguousarray(order[..., :k])
    np.copyto(indices, np.moveaxis(order, -1, axis))
    picked = np.take_along_axis(np.moveaxis(x, axis, -1), order, axis=-1)
    np.copyto(values, np.moveaxis(picked, -1, axis))


def scan_into(
    kind: str, x: np.ndarray, y: np.ndarray, *, axis: int, exclusive: bool = False, reverse: bool = False
) -> None:
    """``y`` = the running sum (``kind="sum"``) or product (``"prod"``) of ``x`` along ``axis``
    (normalised): at k, the combination of the elements up to k (before k with ``exclusive``, the first
    being 0 or 1; from the end of the axis with ``reverse``).

    Floats combine in their compute type (float32 for the half types, rounded once per output), integers
    in their own type, wrapping (ONNX and NumPy).
    """
    name = np.dtype(x.dtype).name
    dtype = compute_dtype(name) if name in FLOATS else x.dtype
    a = np.flip(x, axis) if reverse else x
    run = np.cumsum if kind == "sum" else np.cumprod
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 is NaN, overflow inf: IEEE, as ONNX
        sums = run(a, axis=axis, dtype=dtype)
    if exclusive:
        shifted = np.full_like(sums, 0 if kind == "sum" else 1)
        into = [slice(None)] * sums.ndim
        into[axis] = slice(1, None)
        frm = [slice(None)] * sums.ndim
        frm[axis] = slice(None, -1)
        shifted[tuple(into)] = sums[tuple(frm)]
        sums = shifted
    if reverse:
        sums = np.flip(sums, axis)
    np.copyto(y, sums, casting="unsafe")
