"""ONNX indexing converters: Slice, the Gather and Scatter family, OneHot, EyeLike, Trilu, Compress and
ReverseSequence.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import get_dtype
from .convert_common import _attr
from .graph import Graph, Node, Unsupported, onnx_dtype
from .graph import shape_of as _shape
from .lowerings import table_problem
from .runtime_dims import RuntimeDimsError, arange_to_dim

__all__: list[str] = []


def _slice(g: Graph, node: Node) -> None:
    if len(node.inputs) > 2 and isinstance(g.symbolic.get(node.inputs[2]), list):
        _slice_to_run_time_end(g, node)
        return
    starts = g.ints(node, 1, "starts", "starts")
    ends = g.ints(node, 2, "ends", "ends")
    axes = g.ints(node, 3, "axes", "axes")
    steps = g.ints(node, 4, "steps", "steps")
    if starts is None or ends is None:
        raise Unsupported("Slice needs its starts and ends")
    attrs: dict[str, Any] = {"starts": starts, "ends": ends}
    if axes:
        attrs["axes"] = axes
    if steps:
        attrs["steps"] = steps
    g.stage(node, "slice", node.inputs[:1], node.outputs[:1], **attrs)


def _slice_to_run_time_end(g: Graph, node: Node) -> None:
    """A Slice of one axis by 1 from a constant start to an end known only when the model runs
    (``position_ids[:, :seq]``, BERT's position table cut to the sequence): the entries gathered at
    ``arange(start, end)`` (runtime_dims.py), with their indices checked, since Slice would clamp an end
    past the axis and a gather cannot: such a run is an error, not a shorter output."""
    ends = g.symbolic[node.inputs[2]]
    starts, axes, steps = (
        g.ints(node, k, "", what) for k, what in ((1, "starts"), (3, "axes"), (4, "steps"))
    )
    x_shape = _shape(g, node.inputs[0])
    if (
        starts is None
        or len(ends) != 1
        or len(starts) != 1
        or (axes and len(axes) != 1)
        or steps not in (None, [], [1])
    ):
        raise Unsupported(
            "Slice to an end known only when the model runs: PipeLink takes one axis, a constant start and "
            f"step 1 (got starts {starts}, {len(ends)} ends, axes {axes}, steps {steps})"
        )
    if x_shape is None:
        raise Unsupported("Slice to an end known only when the model runs needs its input's rank")
    axis = (axes[0] if axes else 0) % max(len(x_shape), 1)
    size = x_shape[axis]
    if not isinstance(size, int) or not 0 <= starts[0] <= size:
        raise Unsupported(
            f"Slice to an end known only when the model runs needs a start within the axis, whose size is "
            f"known (axis {axis} of size {size}, start {starts[0]})"
        )
    index = f"{node.outputs[0]}__index"
    try:
        arange_to_dim(g, node, starts[0], ends[0], 1, "int64", index)
    except RuntimeDimsError as why:
        raise Unsupported(f"Slice to an end known only when the model runs: {why}") from None
    g.stage(node, "gather", [node.inputs[0], index], node.outputs[:1], axis=axis, check_indices=True)


def _gather(g: Graph, node: Node) -> None:
    value = g.symbolic.get(node.inputs[0])
    index = g.constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if isinstance(value, list) and index is not None and np.asarray(index).dtype.kind in "iu":
        bad = [int(i) for i in np.asarray(index).reshape(-1) if not -len(value) <= int(i) < len(value)]
        if bad:  # a shape value's length is known at import: so is an index past it
            raise Unsupported(
                f"Gather index {bad[0]} is out of range for {node.inputs[0]!r}, a shape of "
                f"{len(value)} entries"
            )
    g.stage(node, "gather", node.inputs[:2], node.outputs[:1], axis=int(_attr(node, "axis", 0)))


def _gather_elements(g: Graph, node: Node) -> None:
    g.stage(node, "gather_elements", node.inputs[:2], node.outputs[:1], axis=int(_attr(node, "axis", 0)))


def _gather_nd(g: Graph, node: Node) -> None:
    g.stage(
        node, "gather_nd", node.inputs[:2], node.outputs[:1], batch_dims=int(_attr(node, "batch_dims", 0))
    )


def _scatter_elements(g: Graph, node: Node) -> None:
    g.stage(
        node,
        "scatter_elements",
        node.inputs[:3],
        node.outputs[:1],
        axis=int(_attr(node, "axis", 0)),
        reduction=str(_attr(node, "reduction", "none")),
    )


def _one_hot(g: Graph, node: Node) -> None:
    """OneHot: depth a constant (a positive integer, becoming one_hot's attribute), values [off, on] a
    stage input (its dtype is the output's); float indices cast to int64 first (toward zero), as the
    spec says (onnx's reference compares them unconverted, so 1.5 matches no class there). Opset 11's
    semantics: before it, a negative index meant an all-off line instead of counting from the end."""
    if g.opset < 11:
        raise Unsupported(
            f"OneHot of opset {g.opset}: a negative index means an all-off line there, but one_hot counts "
            "it from the end (opset 11); convert the model to opset 11 or later"
        )
    depth = g.const(node, 1, "the depth")
    if depth is None or np.size(depth) != 1:
        raise Unsupported("depth (input 1) must be a constant scalar")
    value = np.asarray(depth).reshape(-1)[0]
    if value.dtype.kind == "f" and (not np.isfinite(value) or value != np.floor(value)):
        raise Unsupported(f"depth must be a whole number (got {value})")
    if int(value) < 1:
        raise Unsupported(f"depth must be >= 1 (got {int(value)})")
    indices = node.inputs[0]
    dtype = g.dtypes.get(indices)
    if dtype is not None and get_dtype(dtype).is_floating:  # the spec: cast to int64 before use
        cast = f"{node.outputs[0]}__indices_int64"
        g.stage(node, "cast", [indices], [cast], dtype="int64")
        indices = cast
    g.stage(
        node,
        "one_hot",
        [indices, node.inputs[2]],
        node.outputs[:1],
        depth=int(value),
        axis=int(_attr(node, "axis", -1)),
    )


def _eye_like(g: Graph, node: Node) -> None:
    """EyeLike: k and the optional dtype attribute (absent: the input's dtype)."""
    attrs: dict[str, Any] = {"k": int(_attr(node, "k", 0))}
    if _attr(node, "dtype") is not None:
        attrs["dtype"] = onnx_dtype(int(_attr(node, "dtype")))
    g.stage(node, "eye_like", node.inputs[:1], node.outputs[:1], **attrs)


def _trilu(g: Graph, node: Node) -> None:
    """Trilu: k an optional constant input (a scalar), upper an attribute (default 1)."""
    k = g.ints(node, 1, "", "k")
    if k is not None and len(k) != 1:
        raise Unsupported("k (input 1) must be a scalar")
    g.stage(
        node,
        "trilu",
        node.inputs[:1],
        node.outputs[:1],
        k=k[0] if k else 0,
        upper=bool(_attr(node, "upper", 1)),
    )


def _compress(g: Graph, node: Node) -> None:
    """ONNX Compress with a constant condition: a ``gather`` of the indices where it is true along the
    axis (no axis: of the input flattened by a ``reshape``). A computed condition is refused: the output
    size would depend on its values."""
    x, y = node.inputs[0], node.outputs[0]
    if len(node.inputs) < 2 or node.inputs[1] not in g.constants:
        if len(node.inputs) > 1 and node.inputs[1] in g.inputs:
            g.const(node, 1, "the condition")  # a graph input: the refusal asks for its value
        raise Unsupported(
            "Compress with a condition the graph computes: its output size depends on the condition's "
            "values, and PipeLink's sizes are known before a stage runs (the condition must be a constant)"
        )
    condition = np.asarray(g.constants[node.inputs[1]])
    if condition.ndim != 1:
        raise Unsupported(f"Compress's condition must be 1-d (got shape {list(condition.shape)})")
    shape, axis = _shape(g, x), _attr(node, "axis")
    if shape is None:
        raise Unsupported("Compress needs its input's rank")
    if axis is not None and not -len(shape) <= int(axis) < len(shape):
        raise Unsupported(f"Compress axis {axis} is out of range for a rank-{len(shape)} input")
    dims = list(shape) if axis is None else [shape[int(axis) % len(shape)]]
    if not all(isinstance(d, int) for d in dims):
        raise Unsupported("Compress needs the size it selects from known at import (the axis, or every dim)")
    length, picked = int(np.prod(dims)), np.flatnonzero(condition).astype(np.int64)
    if picked.size and picked[-1] >= length:
        raise Unsupported(f"Compress's condition is true at {int(picked[-1])}, past the {length} entries")
    if not picked.size:
        raise Unsupported("Compress's condition selects nothing (an empty output)")
    indices = f"{y}__compress_indices"
    g.constants[indices], g.dtypes[indices] = picked, "int64"
    source = x
    if axis is None:
        source = f"{y}__flat"
        g.stage(node, "reshape", [x], [source], shape=[-1], allowzero=False)
    g.stage(node, "gather", [source, indices], [y], axis=0 if axis is None else int(axis))


def _reverse_sequence(g: Graph, node: Node) -> None:
    """ONNX ReverseSequence with constant sequence_lens: x ``[T, B, ...]`` (or ``[B, T, ...]``) viewed as
    ``[T*B, -1]``, a ``gather`` of its rows by a constant permutation (batch b's first lens[b] steps
    reversed), viewed back. T and B must be known; computed lengths are refused."""
    x, y = node.inputs[0], node.outputs[0]
    if len(node.inputs) < 2 or node.inputs[1] not in g.constants:
        if len(node.inputs) > 1 and node.inputs[1] in g.inputs:
            g.const(node, 1, "sequence_lens")  # a graph input: the refusal asks for its value
        raise Unsupported(
            "ReverseSequence with sequence_lens the graph computes; the reversal is a permutation built at "
            "import, so sequence_lens must be a constant"
        )
    lens = np.asarray(g.constants[node.inputs[1]]).reshape(-1).astype(np.int64)
    batch_axis, time_axis = int(_attr(node, "batch_axis", 1)), int(_attr(node, "time_axis", 0))
    if {batch_axis, time_axis} != {0, 1}:
        raise Unsupported(f"batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1, one each")
    shape = _shape(g, x)
    if shape is None or len(shape) < 2 or not all(isinstance(d, int) for d in shape[:2]):
        raise Unsupported("ReverseSequence needs its input's rank (2 or more) and its batch and time sizes")
    rest = [d if isinstance(d, int) else -1 for d in shape[2:]]
    if rest.count(-1) > 1:
        raise Unsupported("ReverseSequence needs every dim after the first two known but one")
    batch, time = int(shape[batch_axis]), int(shape[time_axis])
    if lens.size != batch or (lens.size and (lens.min() < 0 or lens.max() > time)):
        raise Unsupported(
            f"sequence_lens {lens.tolist()} must have {batch} entries (the batch), each in [0, {time}]"
        )
    too_large = table_problem("ReverseSequence's row permutation", (time * batch,), "int64")
    if too_large:
        raise Unsupported(too_large)
    rows = np.arange(time * batch, dtype=np.int64).reshape(shape[0], shape[1])
    steps = rows if time_axis == 0 else rows.T  # [time, batch]
    order = steps.copy()
    for b, n in enumerate(lens.tolist()):
        order[:n, b] = steps[:n, b][::-1]
    perm = f"{y}__reverse_rows"
    g.constants[perm] = np.ascontiguousarray(order if time_axis == 0 else order.T).reshape(-1)
    g.dtypes[perm] = "int64"
    g.stage(node, "reshape", [x], [f"{y}__rows"], shape=[time * batch, -1], allowzero=False)
    g.stage(node, "gather", [f"{y}__rows", perm], [f"{y}__reversed"], axis=0)
    g.stage(node, "reshape", [f"{y}__reversed"], [y], shape=[*shape[:2], *rest], allowzero=False)
