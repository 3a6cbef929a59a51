"""Output-shape rules of the shape operators (ONNX semantics), checked at load on symbolic shapes.

Each ``infer_*`` takes ``(in_shapes, in_dtypes, attrs)`` and returns ``(out_shapes, out_dtypes)``; the
resolved index plans (``slice_plan``, ``split_sizes``, ``reshape_target``) are shared with the kernels so
the rule and the kernel cannot disagree.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ...errors import InvalidArgumentError, ShapeMismatchError
from ...shapes import Mismatch, broadcast_shapes, unify
from .._dims import derived, is_known, normalize_axes, normalize_axis, product

__all__ = [
    "MAX_PARTS",
    "index_out_of_range",
    "reshape_target",
    "infer_reshape",
    "infer_flatten",
    "infer_squeeze",
    "infer_unsqueeze",
    "infer_concat",
    "split_sizes",
    "infer_split",
    "slice_plan",
    "infer_slice",
    "infer_gather",
    "infer_gather_elements",
    "infer_where",
    "infer_expand",
]

MAX_PARTS = 64
"""Inputs of concat and outputs of split: ports ``x0 .. x63`` / ``y0 .. y63`` (a DenseNet block joins 33)."""


def _present(in_shapes) -> list[tuple]:
    return [tuple(s) for s in in_shapes if s is not None]


def reshape_target(shape: tuple, target: tuple[int, ...], allowzero: bool) -> tuple:
    """ONNX Reshape: ``0`` copies the input dimension (a literal 0 with ``allowzero``), one ``-1`` is
    inferred from the element count.

    Raises
    ------
    InvalidArgumentError
        Two ``-1``, a value below ``-1``, ``0`` past the input's rank, or ``-1`` with ``0`` under allowzero.
    ShapeMismatchError
        The element counts differ, or ``-1`` cannot be inferred (the other dimensions multiply to 0).
    """
    if sum(1 for t in target if t == -1) > 1 or any(t < -1 for t in target):
        raise InvalidArgumentError(
            f"reshape: attribute 'shape' may hold one -1 and no other negative value (got {list(target)})",
            attr="shape",
            got=list(target),
        )
    if allowzero and 0 in target and -1 in target:
        raise InvalidArgumentError(
            f"reshape: with allowzero, 'shape' cannot hold both 0 and -1 (got {list(target)})",
            attr="shape",
            got=list(target),
        )
    out: list = []
    for i, t in enumerate(target):
        if t == 0 and not allowzero:
            if i >= len(shape):
                raise InvalidArgumentError(
                    f"reshape: 'shape'[{i}] is 0 (copy the input dimension), but the input has only "
                    f"{len(shape)} dimensions {list(shape)}; set allowzero for an empty dimension",
                    attr="shape",
                    got=list(target),
                )
            out.append(shape[i])
        else:
            out.append(t)
    if -1 in out:
        i = out.index(-1)
        out[i] = _inferred_dim(shape, out[:i] + out[i + 1 :], target)
        return tuple(out)
    total, new_total = product(shape, op="reshape"), product(out, op="reshape")
    if is_known(total, new_total) and total != new_total:
        raise ShapeMismatchError(
            f"reshape: input 'x' {list(shape)} has {total} elements, but 'shape' {list(target)} holds "
            f"{new_total}",
            port="x",
            attr="shape",
            expected=new_total,
            got=total,
        )
    return tuple(out)


def _inferred_dim(shape: tuple, rest: list, target: tuple):
    """The ``-1`` of reshape: elements of x over the product of the other dimensions. Symbols common to
    both sides cancel (``[B, 3, 4] -> [B, -1]`` gives 12)."""
    if 0 in rest:
        raise ShapeMismatchError(
            f"reshape: cannot infer the -1 in 'shape' {list(target)}: the other dimensions multiply to 0",
            port="x",
            attr="shape",
            got=list(target),
        )
    left = Counter(d for d in shape if not isinstance(d, int))
    right = Counter(d for d in rest if not isinstance(d, int))
    total = math.prod(d for d in shape if isinstance(d, int))
    known = math.prod(d for d in rest if isinstance(d, int))
    if right - left or left - right:
        return derived("reshape", product(shape, op="reshape"), product(rest, op="reshape"))
    if total % known:
        raise ShapeMismatchError(
            f"reshape: input 'x' {list(shape)} has {total} elements, not a multiple of {known} "
            f"(the dimensions of 'shape' {list(target)} other than -1)",
            port="x",
            attr="shape",
            expected=known,
            got=total,
        )
    return total // known


def infer_reshape(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of reshape (see :func:`reshape_target`)."""
    target = reshape_target(tuple(in_shapes[0]), tuple(attrs["shape"]), bool(attrs["allowzero"]))
    return (target,), (in_dtypes[0],)


def infer_flatten(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of flatten: ``[prod(shape[:axis]), prod(shape[axis:])]``, axis in ``[-r, r]``."""
    shape = tuple(in_shapes[0])
    axis = normalize_axis(int(attrs["axis"]), len(shape), op="flatten", inclusive=True)
    outer, inner = product(shape[:axis], op="flatten"), product(shape[axis:], op="flatten")
    return ((outer, inner),), (in_dtypes[0],)


def infer_squeeze(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of squeeze: drop the named axes (each must be 1), or every known 1 when none is named.

    Raises
    ------
    ShapeMismatchError
        A named axis has a size other than 1.
    """
    shape = tuple(in_shapes[0])
    axes = normalize_axes(attrs["axes"], len(shape), op="squeeze")
    if not axes:
        return (tuple(d for d in shape if d != 1),), (in_dtypes[0],)
    for a in axes:
        if isinstance(shape[a], int) and shape[a] != 1:
            raise ShapeMismatchError(
                f"squeeze: axis {a} of input 'x' {list(shape)} has size {shape[a]}; only size-1 axes can be "
                f"squeezed",
                port="x",
                attr="axes",
                symbol=f"axis {a}",
                expected=1,
                got=shape[a],
            )
    return (tuple(d for i, d in enumerate(shape) if i not in axes),), (in_dtypes[0],)


def infer_unsqueeze(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of unsqueeze: insert size-1 axes at ``axes`` (positions in the output)."""
    shape = tuple(in_shapes[0])
    rank = len(shape) + len(attrs["axes"])
    axes = normalize_axes(attrs["axes"], rank, op="unsqueeze")
    rest = iter(shape)
    return (tuple(1 if i in axes else next(rest) for i in range(rank)),), (in_dtypes[0],)


def infer_concat(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of concat: inputs of one rank, equal except along ``axis``, whose sizes add up.

    Raises
    ------
    ShapeMismatchError
        Ranks differ, or a dimension other than ``axis`` differs.
    """
    shapes = _present(in_shapes)
    first = shapes[0]
    axis = normalize_axis(int(attrs["axis"]), len(first), op="concat")
    out = list(first)
    for i, shape in enumerate(in_shapes):
        if shape is None or i == 0:
            continue
        shape = tuple(shape)
        if len(shape) != len(first):
            raise ShapeMismatchError(
                f"concat: input 'x{i}' {list(shape)} has {len(shape)} dimensions, input 'x0' {list(first)} "
                f"has {len(first)}",
                port=f"x{i}",
                symbol="rank",
                expected=len(first),
                got=len(shape),
            )
        for j, (a, b) in enumerate(zip(out, shape, strict=True)):
            if j == axis:
                continue
            merged = unify(a, b)
            if merged is None:
                raise ShapeMismatchError(
                    f"concat: input 'x{i}' {list(shape)} has size {b} on axis {j}, but 'x0' {list(first)} "
                    f"has {a}; only axis {axis} may differ",
                    port=f"x{i}",
                    symbol=f"axis {j}",
                    expected=a,
                    got=b,
                )
            out[j] = merged
    sizes = [s[axis] for s in shapes]
    out[axis] = sum(sizes) if is_known(*sizes) else derived("concat", "+".join(map(str, sizes)))
    return (tuple(out),), (in_dtypes[0],)


def index_out_of_range(
    stage: str, index: int, axis: int, size: int, *, op: str = "gather"
) -> InvalidArgumentError:
    """The error of a gather (or ``op``) index outside ``[-size, size)`` (ONNX: an error), for the caller to
    raise."""
    return InvalidArgumentError(
        f"stage {stage!r}: {op} index {index} is out of range for axis {axis} of size {size} "
        f"(valid: {-size} .. {size - 1})",
        stage=stage,
        port="indices",
        got=index,
    )


def split_sizes(dim, split: tuple[int, ...], num_outputs: int) -> tuple:
    """The part sizes of split (ONNX 18): ``split`` itself, or ``num_outputs`` parts of ``ceil(dim / n)``
    with a smaller last part.

    Raises
    ------
    InvalidArgumentError
        Both or neither of ``split``/``num_outputs``, more than ``MAX_PARTS`` parts, a negative size, or
        ``num_outputs`` larger than a known ``dim``.
    ShapeMismatchError
        The sizes of ``split`` do not add up to ``dim``.
    """
    if bool(split) == bool(num_outputs):
        raise InvalidArgumentError(
            "split: give exactly one of 'split' (the part sizes) and 'num_outputs' "
            f"(got split={list(split)}, num_outputs={num_outputs})",
            attr="split",
        )
    count = len(split) or num_outputs
    if not 1 <= count <= MAX_PARTS:
        raise InvalidArgumentError(
            f"split: between 1 and {MAX_PARTS} parts are supported (got {count})",
            attr="num_outputs",
            got=count,
        )
    if split:
        if any(s < 0 for s in split):
            raise InvalidArgumentError(f"split: part sizes must be >= 0 (got {list(split)})", attr="split")
        if isinstance(dim, int) and sum(split) != dim:
            raise ShapeMismatchError(
                f"split: the sizes {list(split)} add up to {sum(split)}, but the axis has size {dim}",
                port="x",
                attr="split",
                expected=dim,
                got=sum(split),
            )
        return tuple(split)
    if not isinstance(dim, int):
        return tuple(derived("split", dim, f"{i}/{count}") for i in range(count))
    if count > dim and dim > 0:
        raise InvalidArgumentError(
            f"split: num_outputs {count} is larger than the axis size {dim}", attr="num_outputs", got=count
        )
    chunk = -(-dim // count)
    return tuple(max(0, min(chunk, dim - i * chunk)) for i in range(count))


def infer_split(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of split: one shape per part; the ports past the part count get an empty part."""
    shape = tuple(in_shapes[0])
    axis = normalize_axis(int(attrs["axis"]), len(shape), op="split")
    sizes = split_sizes(shape[axis], tuple(attrs["split"]), int(attrs["num_outputs"]))
    sizes += (0,) * (MAX_PARTS - len(sizes))
    shapes = tuple(shape[:axis] + (s,) + shape[axis + 1 :] for s in sizes)
    return shapes, (in_dtypes[0],) * MAX_PARTS


def slice_plan(shape: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """ONNX Slice with constant ``starts``/``ends``/``axes``/``steps``: the Python slice per axis and the
    output shape. Indices are clamped as ONNX says (negative ones count from the end).

    Raises
    ------
    InvalidArgumentError
        Lengths of starts/ends/axes/steps differ, an axis is out of range or repeated, a step is 0.
    """
    starts, ends = tuple(attrs["starts"]), tuple(attrs["ends"])
    axes = tuple(attrs["axes"]) or tuple(range(len(starts)))
    steps = tuple(attrs["steps"]) or (1,) * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise InvalidArgumentError(
            f"slice: 'starts', 'ends', 'axes' and 'steps' need one entry per sliced axis (got "
            f"{len(starts)}, {len(ends)}, {len(axes)}, {len(steps)})",
            attr="ends",
        )
    if 0 in steps:
        raise InvalidArgumentError(f"slice: 'steps' cannot hold 0 (got {list(steps)})", attr="steps")
    axes = normalize_axes(axes, len(shape), op="slice")
    index = [slice(None)] * len(shape)
    out = list(shape)
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        dim = shape[axis]
        if not isinstance(dim, int):
            out[axis] = derived("slice", dim, start, end, step)
            continue
        start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
            out[axis] = max(0, -(-(end - start) // step))
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
            out[axis] = max(0, -(-(start - end) // -step))
        # end == -1 with a negative step means "past index 0": Python spells that None.
        index[axis] = slice(start, None if end < 0 else end, step)
    return tuple(index), tuple(out)


def infer_slice(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of slice (see :func:`slice_plan`)."""
    return (slice_plan(tuple(in_shapes[0]), attrs)[1],), (in_dtypes[0],)


def infer_gather(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of gather: ``data.shape[:axis] + indices.shape + data.shape[axis+1:]``."""
    data, indices = tuple(in_shapes[0]), tuple(in_shapes[1])
    axis = normalize_axis(int(attrs["axis"]), len(data), op="gather")
    return (data[:axis] + indices + data[axis + 1 :],), (in_dtypes[0],)


def infer_gather_elements(
    in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]
) -> tuple[tuple, tuple]:
    """Output rule of gather_elements (ONNX GatherElements): indices' shape, data's dtype. indices has
    data's rank; off the axis each of its dims is at most data's (its size on the axis is free).

    Raises
    ------
    InvalidArgumentError
        ``axis`` outside ``[-rank, rank)`` (a 0-d data has no axis).
    ShapeMismatchError
        indices has another rank than data, or a known dim off the axis larger than data's.
    """
    data, indices = tuple(in_shapes[0]), tuple(in_shapes[1])
    axis = normalize_axis(int(attrs["axis"]), len(data), op="gather_elements")
    if len(indices) != len(data):
        raise ShapeMismatchError(
            f"gather_elements: input 'indices' {list(indices)} has {len(indices)} dimensions, but 'data' "
            f"{list(data)} has {len(data)}; they need the same rank",
            port="indices",
            symbol="rank",
            expected=len(data),
            got=len(indices),
        )
    for k, (d, i) in enumerate(zip(data, indices, strict=True)):
        if k != axis and is_known(d, i) and i > d:
            raise ShapeMismatchError(
                f"gather_elements: input 'indices' {list(indices)} has size {i} on axis {k}, larger than "
                f"'data' {list(data)} ({d}); off the axis {axis} indices may not exceed data",
                port="indices",
                symbol=f"axis {k}",
                expected=d,
                got=i,
            )
    return (indices,), (in_dtypes[0],)


def _broadcast(op: str, named: dict[str, tuple]) -> tuple:
    result = broadcast_shapes(*named.values())
    if isinstance(result, Mismatch):
        raise ShapeMismatchError(
            f"{op}: shapes {', '.join(f'{k} {list(v)}' for k, v in named.items())} do not broadcast "
            f"({result.symbol}: {result.expected} vs {result.got})",
            port=list(named)[-1],
            symbol=result.symbol,
            expected=result.expected,
            got=result.got,
        )
    return result


def infer_where(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of where: the broadcast of cond, x and y; x's dtype."""
    names = ("condition", "x", "y")
    shape = _broadcast("where", {f"'{n}'": tuple(s) for n, s in zip(names, in_shapes, strict=True)})
    return (shape,), (in_dtypes[1],)


def infer_expand(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of expand: the broadcast of x's shape and ``shape`` (either may hold the 1s)."""
    target = tuple(attrs["shape"])
    if any(d < 0 for d in target):
        raise InvalidArgumentError(
            f"expand: 'shape' must be >= 0 everywhere (got {list(target)})", attr="shape", got=list(target)
        )
    return (_broadcast("expand", {"'x'": tuple(in_shapes[0]), "'shape'": target}),), (in_dtypes[0],)


def trilu_diagonal(rows: int, cols: int, k: int) -> int:
    """trilu's diagonal ``k`` clamped to ``[-rows, cols]``: beyond it every element is kept or none is,
    so the clamp changes nothing but keeps the arithmetic in range (a k of 2**62 is allowed)."""
    return max(-rows, min(cols, int(k)))


SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")
"""scatter_nd's ``reduction`` values (ONNX ScatterND 18)."""


def infer_scatter_nd(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of scatter_nd (ONNX ScatterND): data's shape and dtype. indices ``[..., k]`` (rank >= 1)
    addresses the first k <= rank(data) dims; updates is ``indices.shape[:-1] + data.shape[k:]``.

    Raises
    ------
    ShapeMismatchError
        indices of rank 0, k larger than data's rank (or unknown), updates of another shape.
    """
    data, indices, updates = (tuple(s) for s in in_shapes[:3])
    if not indices or not isinstance(indices[-1], int) or indices[-1] > len(data):
        raise ShapeMismatchError(
            f"scatter_nd: input 'indices' {list(indices)} needs a known last dim k <= rank of 'data' "
            f"{list(data)} ({len(data)}): each row of k indices addresses data's first k dims",
            port="indices",
            expected=f"[..., k <= {len(data)}]",
            got=list(indices),
        )
    want = indices[:-1] + data[indices[-1] :]
    if len(updates) != len(want) or any(
        is_known(a, b) and a != b for a, b in zip(updates, want, strict=True)
    ):
        raise ShapeMismatchError(
            f"scatter_nd: input 'updates' {list(updates)} must have shape indices[:-1] + data[k:] = "
            f"{list(want)}",
            port="updates",
            expected=list(want),
            got=list(updates),
        )
    return (data,), (in_dtypes[0],)
