"""The indexing family's NumPy reference kernels: the CPU variant, the truth the CUDA kernels are tested
against, and (:func:`scatter_elements`) what the ONNX import folds a ScatterElements of constants with.

Kernels write their preallocated outputs in place and never return arrays. Indices are normalised by the
shape family's rule (negatives count from the end; out of range is an error naming the stage).
"""

from __future__ import annotations

import numpy as np

from ...descriptor import KernelContext
from ...dtypes import get_dtype
from .._common import HALF_DTYPES
from .._dims import normalize_axis
from ..kernel import contiguous_strides, prod
from ..shape import _wrap_indices  # the shape family's index normalisation (gather's contract)
from ..shape.rules import trilu_diagonal
from .rules import infer_scatter_elements

__all__ = [
    "gather_nd_bind",
    "scatter_elements",
    "scatter_elements_bind",
    "one_hot_bind",
    "eye_like_bind",
]

_COMBINE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def gather_nd_bind(ctx: KernelContext):
    """y = the slices of data that the index tuples (last dim of indices, k long) name, batch by batch:
    read as rows of ``data`` seen as ``[batch * prod(data[b:b+k]), prod(data[b+k:])]``, their row numbers
    computed every run from the wrapped indices."""
    data_shape, index_shape = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    b = int(ctx.attrs["batch_dims"])
    k = index_shape[-1]
    batch, rows = prod(data_shape[:b]), prod(index_shape[b:-1])
    addressed, width = prod(data_shape[b : b + k]), prod(data_shape[b + k :])
    row_strides = np.array(contiguous_strides(data_shape[b : b + k]), np.int64)
    batch_base = (np.arange(batch, dtype=np.int64) * addressed).reshape(batch, 1)
    fixed = np.empty((batch, rows, k), np.int64)  # indices wrapped, reused every run
    stage = ctx.stage

    def kernel(inputs, outputs, stream):
        data, indices = inputs
        tuples = indices.reshape(batch, rows, k)
        for j in range(k):  # each position of the tuple indexes its own dim of data
            _wrap_indices(fixed[..., j], tuples[..., j], data_shape[b + j], stage, b + j, "gather_nd")
        row = fixed @ row_strides + batch_base
        np.take(
            data.reshape(batch * addressed, width), row.reshape(-1), axis=0, out=outputs[0].reshape(-1, width)
        )

    return kernel


def scatter_elements(
    data: np.ndarray,
    indices: np.ndarray,
    updates: np.ndarray,
    *,
    axis: int = 0,
    reduction: str = "none",
    out: np.ndarray | None = None,
    stage: str = "scatter_elements",
) -> np.ndarray:
    """ONNX ScatterElements (opset 18): a copy of ``data`` with ``updates[p]`` written at p with its
    ``axis`` coordinate replaced by ``indices[p]`` (negatives count from the end), or combined there by
    ``reduction`` (add, mul, max, min), in row-major order of p. Half types combine in float32.

    With reduction "none", duplicate targets leave one of their updates (ONNX leaves which undefined;
    here the last one in row-major order, as onnx's reference).

    Parameters
    ----------
    data, indices, updates : numpy.ndarray
        indices and updates of one shape, data's rank, no larger than data off the axis.
    axis : int
    reduction : {"none", "add", "mul", "max", "min"}
    out : numpy.ndarray, optional
        Written in place (data's shape and dtype); a new array when None.
    stage : str
        The stage an out-of-range index is reported for.

    Returns
    -------
    numpy.ndarray
        ``out``, or the new array.

    Raises
    ------
    InvalidArgumentError
        An index outside ``[-n, n)`` for the axis' size n, an axis out of range.
    ShapeMismatchError
        Shapes that do not fit (see :func:`~pipelink.ops.indexing.rules.infer_scatter_elements`).
    """
    dtype = get_dtype(data.dtype).name
    infer_scatter_elements((data.shape, indices.shape, updates.shape), (dtype,) * 3, {"axis": axis})
    ax = normalize_axis(int(axis), data.ndim, op="scatter_elements")
    fixed = np.empty(indices.shape, np.int64)
    _wrap_indices(fixed, indices, data.shape[ax], stage, ax, "scatter_elements")
    grid = np.ogrid[tuple(slice(n) for n in indices.shape)]
    where = tuple(fixed if j == ax else g for j, g in enumerate(grid))
    y = np.empty_like(data) if out is None else out
    if reduction == "none":
        np.copyto(y, data)
        y[where] = updates
        return y
    half = dtype in HALF_DTYPES
    acc = data.astype(np.float32) if half else y
    if not half:
        np.copyto(acc, data)
    _COMBINE[reduction].at(acc, where, updates.astype(np.float32) if half else updates)  # in order
    if half:
        np.copyto(y, acc, casting="unsafe")
    return y


def scatter_elements_bind(ctx: KernelContext):
    axis, reduction, stage = int(ctx.attrs["axis"]), str(ctx.attrs["reduction"]), ctx.stage

    def kernel(inputs, outputs, stream):
        data, indices, updates = inputs
        scatter_elements(data, indices, updates, axis=axis, reduction=reduction, out=outputs[0], stage=stage)

    return kernel


def one_hot_bind(ctx: KernelContext):
    """y = off everywhere, on where the inserted axis' coordinate equals the index (negatives + depth);
    an index outside ``[-depth, depth)`` matches nothing (an all-off line, as ONNX says)."""
    shape = tuple(ctx.in_shapes[0])
    depth = int(ctx.attrs["depth"])
    axis = normalize_axis(int(ctx.attrs["axis"]), len(shape) + 1, op="one_hot")
    positions = np.arange(depth, dtype=np.int64).reshape((depth,) + (1,) * (len(shape) - axis))
    wrapped = np.empty(shape, np.int64)

    def kernel(inputs, outputs, stream):
        indices, values = inputs
        # an unsigned index past int64 (uint64) is out of range as depth is: clipped there, not wrapped
        np.copyto(
            wrapped, np.minimum(indices, depth) if indices.dtype.kind == "u" else indices, casting="unsafe"
        )
        wrapped[wrapped < 0] += depth
        y = outputs[0]
        y[...] = values[0]
        np.copyto(y, values[1], where=np.expand_dims(wrapped, axis) == positions)

    return kernel


def eye_like_bind(ctx: KernelContext):
    """y = 0, with 1 on diagonal k (column - row == k) of the matrix."""
    rows, cols = ctx.out_shapes[0]
    k = trilu_diagonal(rows, cols, int(ctx.attrs["k"]))  # beyond the matrix: no diagonal element
    r = np.arange(max(0, -k), max(0, min(rows, cols - k)))

    def kernel(inputs, outputs, stream):
        y = outputs[0]
        y[...] = 0
        y[r, r + k] = 1

    return kernel
