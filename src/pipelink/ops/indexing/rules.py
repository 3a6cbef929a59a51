"""Output-shape rules of the indexing operators (ONNX semantics), checked at load on symbolic shapes.

Each ``infer_*`` takes ``(in_shapes, in_dtypes, attrs)`` and returns ``(out_shapes, out_dtypes)``; the
NumPy references and the CUDA plans call the same rules, so a shape one accepts the others accept too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...dtypes import DTYPES
from ...errors import InvalidArgumentError, PipeLinkError, ShapeMismatchError
from ...shapes import unify
from .._dims import is_known, normalize_axis
from ..shape.rules import infer_gather_elements

__all__ = [
    "EYE_DTYPES",
    "infer_gather_nd",
    "infer_scatter_elements",
    "infer_one_hot",
    "infer_eye_like",
]

EYE_DTYPES = ("",) + tuple(sorted(DTYPES))
"""eye_like's ``dtype`` values: a PipeLink dtype, or "" for the input's."""


def infer_gather_nd(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of gather_nd (ONNX GatherND 13): ``indices.shape[:-1] + data.shape[b + k:]`` for
    ``b = batch_dims`` and index depth ``k = indices.shape[-1]``; data's dtype.

    Raises
    ------
    InvalidArgumentError
        ``batch_dims`` negative or not below the ranks of both data and indices.
    ShapeMismatchError
        data or indices of rank 0, an unknown k, k outside ``[1, rank(data) - b]``, or batch dims of
        data and indices that differ.
    """
    data, indices = tuple(in_shapes[0]), tuple(in_shapes[1])
    b = int(attrs["batch_dims"])
    if not data or not indices:
        raise ShapeMismatchError(
            f"gather_nd: inputs 'data' {list(data)} and 'indices' {list(indices)} need rank >= 1",
            port="data" if not data else "indices",
            expected="rank >= 1",
            got=len(data) if not data else len(indices),
        )
    if not 0 <= b < min(len(data), len(indices)):
        raise InvalidArgumentError(
            f"gather_nd: attribute 'batch_dims' must be in [0, {min(len(data), len(indices)) - 1}] "
            f"(below the ranks of 'data' {list(data)} and 'indices' {list(indices)}; got {b})",
            attr="batch_dims",
            got=b,
        )
    k = indices[-1]
    if not isinstance(k, int) or not 1 <= k <= len(data) - b:
        raise ShapeMismatchError(
            f"gather_nd: the last dim of 'indices' {list(indices)} is the index tuple's length k; it must be "
            f"known and in [1, {len(data) - b}] (the rank of 'data' {list(data)} minus batch_dims {b})",
            port="indices",
            expected=f"[..., 1 <= k <= {len(data) - b}]",
            got=list(indices),
        )
    batch = []
    for axis, (d, i) in enumerate(zip(data[:b], indices[:b], strict=True)):
        merged = unify(d, i)
        if merged is None:
            raise ShapeMismatchError(
                f"gather_nd: batch dim {axis} is {d} in 'data' {list(data)} but {i} in 'indices' "
                f"{list(indices)}; the first batch_dims={b} dims must match",
                port="indices",
                symbol=f"axis {axis}",
                expected=d,
                got=i,
            )
        batch.append(merged)
    return (tuple(batch) + indices[b:-1] + data[b + k :],), (in_dtypes[0],)


def infer_scatter_elements(
    in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]
) -> tuple[tuple, tuple]:
    """Output rule of scatter_elements (ONNX ScatterElements 18): data's shape and dtype. indices is
    gather_elements' (data's rank, no dim off the axis larger than data's) and updates has its shape.

    Raises
    ------
    InvalidArgumentError
        ``axis`` outside ``[-rank, rank)``.
    ShapeMismatchError
        indices of another rank than data or larger off the axis, updates of another shape than indices.
    """
    data, indices, updates = (tuple(s) for s in in_shapes[:3])
    try:  # indices addresses data as gather_elements' does: its rule, under this operator's name
        infer_gather_elements((data, indices), in_dtypes[:2], attrs)
    except PipeLinkError as e:
        e.message = e.message.replace("gather_elements:", "scatter_elements:", 1)
        e.args = (e.message,)
        raise
    if len(updates) != len(indices) or any(
        is_known(u, i) and u != i for u, i in zip(updates, indices, strict=True)
    ):
        raise ShapeMismatchError(
            f"scatter_elements: input 'updates' {list(updates)} must have the shape of 'indices' "
            f"{list(indices)}",
            port="updates",
            expected=list(indices),
            got=list(updates),
        )
    return (data,), (in_dtypes[0],)


def infer_one_hot(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of one_hot (ONNX OneHot 11): indices' shape with ``depth`` inserted at ``axis`` (in
    ``[-r - 1, r]`` for indices of rank r); the dtype of values, ``[off, on]``.

    Raises
    ------
    InvalidArgumentError
        ``depth`` below 1, ``axis`` out of range.
    ShapeMismatchError
        values not of shape [2].
    """
    indices, values = tuple(in_shapes[0]), tuple(in_shapes[1])
    depth = int(attrs["depth"])
    if depth < 1:
        raise InvalidArgumentError(
            f"one_hot: attribute 'depth' must be >= 1 (got {depth})", attr="depth", got=depth
        )
    if len(values) != 1 or (is_known(values[0]) and values[0] != 2):
        raise ShapeMismatchError(
            f"one_hot: input 'values' must be [off_value, on_value], shape [2] (got {list(values)})",
            port="values",
            expected=[2],
            got=list(values),
        )
    axis = normalize_axis(int(attrs["axis"]), len(indices) + 1, op="one_hot")
    return (indices[:axis] + (depth,) + indices[axis:],), (in_dtypes[1],)


def infer_eye_like(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of eye_like (ONNX EyeLike): x's shape (2-d), the ``dtype`` attribute's dtype or x's.

    Raises
    ------
    ShapeMismatchError
        x not 2-d.
    """
    shape = tuple(in_shapes[0])
    if len(shape) != 2:
        raise ShapeMismatchError(
            f"eye_like: input 'x' must be a matrix, 2-d (got shape {list(shape)})",
            port="x",
            expected="rank 2",
            got=len(shape),
        )
    return (shape,), (str(attrs["dtype"]) or in_dtypes[0],)
