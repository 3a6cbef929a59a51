"""Shape operators (ONNX semantics): reshape, flatten, squeeze, unsqueeze, concat, split, slice, gather,
gather_elements, scatter_nd, where, expand, trilu — descriptors and their NumPy reference kernels.

Every output shape is known at load from the input shapes and the attributes (``rules.py``); the kernels
copy into the preallocated outputs and never allocate arrays of the data's size. Every operator here
also runs on CUDA (``cuda.py``, ``shape.cu``), for every dtype.
"""

from __future__ import annotations

import numpy as np

from ...descriptor import REQUIRED, Attr, KernelContext, OperatorDescriptor, Port
from ...dtypes import DTYPES
from ...errors import InvalidArgumentError, ShapeMismatchError
from .._common import builtin_operator, host_scratch
from .._dims import normalize_axis
from ..kernel import contiguous_strides, cuda_variant
from . import cuda
from .rules import (
    MAX_PARTS,
    SCATTER_REDUCTIONS,
    index_out_of_range,
    infer_concat,
    infer_expand,
    infer_flatten,
    infer_gather,
    infer_gather_elements,
    infer_reshape,
    infer_scatter_nd,
    infer_slice,
    infer_split,
    infer_squeeze,
    infer_unsqueeze,
    infer_where,
    slice_plan,
    split_sizes,
    trilu_diagonal,
)

__all__ = ["descriptors", "MAX_PARTS"]

ANY = frozenset(DTYPES)
INDEX = frozenset({"int32", "int64"})


def _copy_reshaped_bind(ctx: KernelContext):
    """reshape, flatten, squeeze, unsqueeze: the same elements in the same order, another shape."""
    out_shape = tuple(ctx.out_shapes[0])

    def kernel(inputs, outputs, stream):
        np.copyto(outputs[0], inputs[0].reshape(out_shape))

    return kernel


def _broadcast_copy_bind(ctx: KernelContext):
    """expand: NumPy's copy broadcasts x to y's shape."""

    def kernel(inputs, outputs, stream):
        np.copyto(outputs[0], inputs[0])

    return kernel


def _infer_trilu(in_shapes: tuple, in_dtypes: tuple, attrs) -> tuple[tuple, tuple]:
    """Output rule of trilu: x's shape and dtype; x needs at least 2 dims (the matrices)."""
    shape = tuple(in_shapes[0])
    if len(shape) < 2:
        raise ShapeMismatchError(
            f"trilu: input 'x' needs at least 2 dims, [..., rows, cols] (got shape {list(shape)})",
            port="x",
            expected="rank >= 2",
            got=len(shape),
        )
    return (shape,), (in_dtypes[0],)


def _trilu_bind(ctx: KernelContext):
    rows, cols = ctx.in_shapes[0][-2:]
    k, upper = trilu_diagonal(rows, cols, ctx.attrs["k"]), bool(ctx.attrs["upper"])
    keep = host_scratch(ctx, (rows, cols), bool, "the kept triangle")
    keep[...] = (np.triu if upper else np.tril)(np.ones((rows, cols), bool), k)

    def kernel(inputs, outputs, stream):
        outputs[0][...] = 0
        np.copyto(outputs[0], inputs[0], where=keep)

    return kernel


def _concat_bind(ctx: KernelContext):
    axis = normalize_axis(int(ctx.attrs["axis"]), len(ctx.out_shapes[0]), op="concat")

    def kernel(inputs, outputs, stream):
        np.concatenate([a for a in inputs if a is not None], axis=axis, out=outputs[0])

    return kernel


def _split_bind(ctx: KernelContext):
    shape = tuple(ctx.in_shapes[0])
    axis = normalize_axis(int(ctx.attrs["axis"]), len(shape), op="split")
    sizes = split_sizes(shape[axis], tuple(ctx.attrs["split"]), int(ctx.attrs["num_outputs"]))
    bounds = np.cumsum((0,) + sizes)
    lead = (slice(None),) * axis
    parts = [lead + (slice(int(a), int(b)),) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def kernel(inputs, outputs, stream):
        x = inputs[0]
        for out, index in zip(outputs, parts, strict=False):  # ports past the parts hold empty tensors
            np.copyto(out, x[index])

    return kernel


def _slice_bind(ctx: KernelContext):
    index, _ = slice_plan(tuple(ctx.in_shapes[0]), ctx.attrs)

    def kernel(inputs, outputs, stream):
        np.copyto(outputs[0], inputs[0][index])

    return kernel


def _wrap_indices(fixed: np.ndarray, indices: np.ndarray, n: int, stage: str, axis: int, op: str) -> None:
    """``fixed`` = ``indices`` with negatives counted from the end of an axis of size ``n``.

    Raises
    ------
    InvalidArgumentError
        An index outside ``[-n, n)`` (the first one, in row-major order).
    """
    np.copyto(fixed, indices, casting="unsafe")
    fixed[fixed < 0] += n
    if fixed.size and (fixed.min() < 0 or fixed.max() >= n):
        bad = indices.flat[int(np.argmax((fixed < 0) | (fixed >= n)))]
        raise index_out_of_range(stage, int(bad), axis, n, op=op)


def _gather_bind(ctx: KernelContext):
    data_shape = tuple(ctx.in_shapes[0])
    axis = normalize_axis(int(ctx.attrs["axis"]), len(data_shape), op="gather")
    n = data_shape[axis]
    # indices with negatives wrapped, reused every run
    fixed = host_scratch(ctx, tuple(ctx.in_shapes[1]), np.int64, "wrapped indices")
    stage = ctx.stage

    def kernel(inputs, outputs, stream):
        data, indices = inputs
        _wrap_indices(fixed, indices, n, stage, axis, "gather")
        np.take(data, fixed, axis=axis, out=outputs[0])

    return kernel


_SCATTER_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_nd_bind(ctx: KernelContext):
    """y = data, then each update written (or combined by the reduction) at the position its row of k
    indices names; negative indices count from the end. Half types combine in float32."""
    data_shape, index_shape = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    k = index_shape[-1]
    dims = np.array(data_shape[:k], np.int64)
    rows = int(np.prod(index_shape[:-1], dtype=np.int64))
    fixed = np.empty((rows, k), np.int64)
    reduction, stage = str(ctx.attrs["reduction"]), ctx.stage
    half = ctx.in_dtypes[0] in ("float16", "bfloat16")

    def kernel(inputs, outputs, stream):
        data, indices, updates = inputs
        y = outputs[0]
        np.copyto(fixed, indices.reshape(rows, k), casting="unsafe")
        fixed[...] += np.where(fixed < 0, dims, 0)
        bad = (fixed < 0) | (fixed >= dims)
        if bad.any():
            row, col = (int(v) for v in np.argwhere(bad)[0])
            value = int(indices.reshape(rows, k)[row, col])
            raise InvalidArgumentError(
                f"stage {stage!r}: scatter_nd index {value} (row {row} "
                f"of 'indices', position {col}) is out of range for dim {col} of 'data' "
                f"{list(data_shape)} (valid: {-int(dims[col])} .. {int(dims[col]) - 1})",
                stage=stage,
                port="indices",
            )
        where = tuple(fixed.T)
        parts = updates.reshape((rows,) + data_shape[k:])
        if reduction == "none":
            np.copyto(y, data)
            y[where] = parts
            return
        acc = data.astype(np.float32) if half else data.copy()
        _SCATTER_UFUNCS[reduction].at(acc, where, parts.astype(acc.dtype) if half else parts)
        np.copyto(y, acc, casting="unsafe")

    return kernel


def _gather_elements_bind(ctx: KernelContext):
    """y[p] = data[p with its axis coordinate replaced by indices[p]], read as flat offsets into data: the
    off-axis part of each offset is computed once here, the axis part every run."""
    data_shape, index_shape = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    infer_gather_elements((data_shape, index_shape), tuple(ctx.in_dtypes), ctx.attrs)  # concrete shapes
    axis = normalize_axis(int(ctx.attrs["axis"]), len(data_shape), op="gather_elements")
    n, strides = data_shape[axis], contiguous_strides(data_shape)
    base = np.zeros(index_shape, np.int64)  # offset of p in data without its axis coordinate
    for k, (size, stride) in enumerate(zip(index_shape, strides, strict=True)):
        if k != axis:
            along = (-1,) + (1,) * (len(index_shape) - k - 1)  # broadcast along axis k
            base += (np.arange(size, dtype=np.int64) * stride).reshape(along)
    fixed = np.empty(index_shape, np.int64)  # indices wrapped, then the flat offsets; reused every run
    stage = ctx.stage

    def kernel(inputs, outputs, stream):
        data, indices = inputs
        _wrap_indices(fixed, indices, n, stage, axis, "gather_elements")
        np.multiply(fixed, strides[axis], out=fixed)
        np.add(fixed, base, out=fixed)
        np.take(data.reshape(-1), fixed, out=outputs[0])

    return kernel


def _where_bind(ctx: KernelContext):
    def kernel(inputs, outputs, stream):
        cond, x, y = inputs
        out = outputs[0]
        np.copyto(out, y)
        np.copyto(out, x, where=cond)

    return kernel


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of the shape operators (one set per registry)."""
    any_t = {"T": ANY}
    x_in, y_out = Port("x", dtype="T"), Port("y", dtype="T")
    check_indices = Attr(  # gather's and gather_elements'
        "check_indices",
        "bool",
        False,
        doc="on CUDA, raise on an out-of-range index as the CPU does (the stage then waits "
        "for the device each run and is not captured in a CUDA graph); the CPU always raises",
    )
    return [
        builtin_operator(
            "reshape",
            doc="New shape, same elements (0 copies a dimension, -1 is inferred).",
            inputs=[x_in],
            outputs=[y_out],
            attrs=[
                Attr("shape", "ints", REQUIRED, doc="0 copies x's dimension, -1 is inferred"),
                Attr("allowzero", "bool", False, doc="a 0 in shape is an empty dimension, not a copy"),
            ],
            dtype_vars=any_t,
            infer=infer_reshape,
            bind=_copy_reshaped_bind,
            cuda=cuda_variant(cuda.reshaped_bind, None),
            view=True,
            onnx="Reshape",
        ),
        builtin_operator(
            "flatten",
            doc="Flatten x into a matrix: [prod(shape[:axis]), prod(shape[axis:])].",
            inputs=[x_in],
            outputs=[y_out],
            attrs=[Attr("axis", "int", 1, doc="first axis of the inner dimension; in [-rank, rank]")],
            dtype_vars=any_t,
            infer=infer_flatten,
            bind=_copy_reshaped_bind,
            cuda=cuda_variant(cuda.reshaped_bind, None),
            view=True,
            onnx="Flatten",
        ),
        builtin_operator(
            "squeeze",
            doc="Remove size-1 axes (the named ones, or every one when axes is empty).",
            inputs=[x_in],
            outputs=[y_out],
            attrs=[Attr("axes", "ints", (), doc="size-1 axes to remove; negative counts from the end")],
            dtype_vars=any_t,
            infer=infer_squeeze,
            bind=_copy_reshaped_bind,
            cuda=cuda_variant(cuda.reshaped_bind, None),
            view=True,
            onnx="Squeeze",
        ),
        builtin_operator(
            "unsqueeze",
            doc="Insert size-1 axes at the given positions of the output.",
            inputs=[x_in],
            outputs=[y_out],
            attrs=[Attr("axes", "ints", REQUIRED, doc="positions in the output; negative from its end")],
            dtype_vars=any_t,
            infer=infer_unsqueeze,
            bind=_copy_reshaped_bind,
            cuda=cuda_variant(cuda.reshaped_bind, None),
            view=True,
            onnx="Unsqueeze",
        ),
        builtin_operator(
            "concat",
            doc=f"Join up to {MAX_PARTS} tensors along an axis.",
            inputs=[Port("x0", dtype="T")]
            + [Port(f"x{i}", dtype="T", optional=True) for i in range(1, MAX_PARTS)],
            outputs=[y_out],
            attrs=[Attr("axis", "int", REQUIRED, doc="the axis to join along; negative counts from the end")],
            dtype_vars=any_t,
            infer=infer_concat,
            bind=_concat_bind,
            cuda=cuda_variant(cuda.concat_bind, None),
            onnx="Concat",
        ),
        builtin_operator(
            "split",
            doc=f"Split x along an axis into up to {MAX_PARTS} parts (outputs y0, y1, ...).",
            inputs=[x_in],
            outputs=[
                Port(f"y{i}", dtype="T", doc="part i (empty past the part count)") for i in range(MAX_PARTS)
            ],
            attrs=[
                Attr("axis", "int", 0, doc="the axis to split; negative counts from the end"),
                Attr("split", "ints", (), doc="the part sizes (they add up to the axis size)"),
                Attr(
                    "num_outputs",
                    "int",
                    0,
                    doc="or: this many parts of ceil(size / num_outputs), the last one smaller",
                ),
            ],
            dtype_vars=any_t,
            infer=infer_split,
            bind=_split_bind,
            cuda=cuda_variant(cuda.split_bind, None),
            onnx="Split",
            output_count=lambda attrs: len(attrs["split"]) or int(attrs["num_outputs"]) or MAX_PARTS,
        ),
        builtin_operator(
            "slice",
            doc="Take x[starts:ends:steps] along the given axes (ONNX clamping of the indices).",
            inputs=[x_in],
            outputs=[y_out],
            attrs=[
                Attr("starts", "ints", REQUIRED, doc="first index per axis; negative counts from the end"),
                Attr("ends", "ints", REQUIRED, doc="end (exclusive) per axis; clamped as ONNX says"),
                Attr("axes", "ints", (), doc="the sliced axes (default: 0, 1, ...)"),
                Attr("steps", "ints", (), doc="step per axis, nonzero; negative walks backwards"),
            ],
            dtype_vars=any_t,
            infer=infer_slice,
            bind=_slice_bind,
            cuda=cuda_variant(cuda.slice_bind, None),
            onnx="Slice",
        ),
        builtin_operator(
            "gather",
            doc="Take entries of data along an axis at given indices (axis 0: embedding lookup). An "
            "index out of range is an error on the CPU; on CUDA only with check_indices (a wait for the "
            "device per run), else its output entries become zeros (never an out-of-bounds read).",
            inputs=[Port("data", dtype="T"), Port("indices", dtype=INDEX, doc="negative: from the end")],
            outputs=[Port("y", dtype="T", doc="data.shape[:axis] + indices.shape + data.shape[axis+1:]")],
            attrs=[
                Attr("axis", "int", 0, doc="the axis indexed; negative counts from the end"),
                check_indices,
            ],
            dtype_vars=any_t,
            infer=infer_gather,
            bind=_gather_bind,
            cuda=cuda_variant(cuda.gather_bind, None),
            onnx="Gather",
        ),
        builtin_operator(
            "gather_elements",
            doc="Take one entry of data per entry of indices along an axis: "
            "y[i][j][k] = data[indices[i][j][k]][j][k] for axis 0 (numpy.take_along_axis; ONNX "
            "GatherElements). An index out of range is an error on the CPU; on "
            "CUDA only with check_indices (a wait for the device per run), else its output entry becomes "
            "zero (never an out-of-bounds read).",
            inputs=[
                Port("data", dtype="T"),
                Port(
                    "indices",
                    dtype=INDEX,
                    doc="data's rank, each dim off the axis at most data's; negative: from the end",
                ),
            ],
            outputs=[Port("y", dtype="T", doc="indices' shape")],
            attrs=[
                Attr("axis", "int", 0, doc="the axis indexed; negative counts from the end"),
                check_indices,
            ],
            dtype_vars=any_t,
            infer=infer_gather_elements,
            bind=_gather_elements_bind,
            cuda=cuda_variant(cuda.gather_elements_bind, None),
            onnx="GatherElements",
        ),
        builtin_operator(
            "scatter_nd",
            doc="data with updates written at the positions rows of indices name (ONNX ScatterND).",
            inputs=[Port("data", dtype="T"), Port("indices", dtype="I"), Port("updates", dtype="T")],
            outputs=[Port("y", dtype="T")],
            attrs=[
                Attr(
                    "reduction",
                    "str",
                    "none",
                    doc="none: replace (duplicate rows: one of them wins); add, mul, max, min: combine",
                    choices=SCATTER_REDUCTIONS,
                )
            ],
            dtype_vars={"T": ANY, "I": INDEX},
            infer=infer_scatter_nd,
            bind=_scatter_nd_bind,
            cuda=cuda_variant(cuda.scatter_nd_bind, None),
            staged_fallback=True,
            onnx="ScatterND",
        ),
        builtin_operator(
            "where",
            doc="Choose x where condition is true, else y (all three broadcast).",
            inputs=[Port("condition", dtype="bool"), Port("x", dtype="T"), Port("y", dtype="T")],
            outputs=[Port("z", dtype="T")],
            dtype_vars=any_t,
            infer=infer_where,
            bind=_where_bind,
            cuda=cuda_variant(cuda.where_bind, None),
            onnx="Where",
        ),
        builtin_operator(
            "trilu",
            doc="The upper (upper) or lower triangle of the last two dims from diagonal k; the rest 0.",
            inputs=[x_in],
            outputs=[y_out],
            attrs=[
                Attr("k", "int", 0, doc="the diagonal: 0 the main one, > 0 above it, < 0 below"),
                Attr("upper", "bool", True, doc="keep j - i >= k (else j - i <= k)"),
            ],
            dtype_vars=any_t,
            infer=_infer_trilu,
            bind=_trilu_bind,
            cuda=cuda_variant(cuda.trilu_bind, None),
            onnx="Trilu",
        ),
        builtin_operator(
            "expand",
            doc="Broadcast x to a shape (x's size-1 axes stretch; the shape's 1s keep x's size).",
            inputs=[x_in],
            outputs=[y_out],
            attrs=[Attr("shape", "ints", REQUIRED, doc="broadcast with x's shape to give the output shape")],
            dtype_vars=any_t,
            infer=infer_expand,
            bind=_broadcast_copy_bind,
            cuda=cuda_variant(cuda.expand_bind, None),
            onnx="Expand",
        ),
    ]
