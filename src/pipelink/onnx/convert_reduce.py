"""ONNX reduction converters: Reduce* (those PipeLink composes too), ArgMax/ArgMin, CumSum/CumProd, TopK,
and the losses (lowered in losses.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .convert_common import Converter, _attr
from .graph import Graph, Node, Unsupported
from .losses import LossError

__all__: list[str] = []


def _reduce_attrs(g: Graph, node: Node, axes_input_opset: int) -> dict[str, Any]:
    """A Reduce* node's axes (an input from ``axes_input_opset``, an attribute before), keepdims and
    noop_with_empty_axes, as PipeLink's reduce operators take them."""
    axes = g.ints(node, 1, "axes", "the axes") if g.opset >= axes_input_opset else None
    if axes is None and "axes" in node.attrs:
        axes = [int(a) for a in node.attrs["axes"]]
    attrs: dict[str, Any] = {"keepdims": bool(_attr(node, "keepdims", 1))}
    if axes:
        attrs["axes"] = axes
    if _attr(node, "noop_with_empty_axes", 0):
        attrs["noop_with_empty_axes"] = True
    return attrs


def _reduce(operator: str, axes_input_opset: int) -> Converter:
    def convert_node(g: Graph, node: Node) -> None:
        g.stage(node, operator, node.inputs[:1], node.outputs[:1], **_reduce_attrs(g, node, axes_input_opset))

    return convert_node


def _arg_reduce(operator: str) -> Converter:
    """ArgMax / ArgMin: axis (default 0), keepdims (default 1), select_last_index (opset 12+, default 0)."""

    def convert_node(g: Graph, node: Node) -> None:
        g.stage(
            node,
            operator,
            node.inputs[:1],
            node.outputs[:1],
            axis=int(_attr(node, "axis", 0)),
            keepdims=bool(_attr(node, "keepdims", 1)),
            select_last_index=bool(_attr(node, "select_last_index", 0)),
        )

    return convert_node


def _scan(operator: str) -> Converter:
    """CumSum, CumProd: the axis a constant input (a scalar or one element), exclusive and reverse
    attributes."""

    def convert_node(g: Graph, node: Node) -> None:
        axis = g.ints(node, 1, "", "the axis")
        if axis is None or len(axis) != 1:
            raise Unsupported("the axis (input 1) must be a constant scalar")
        g.stage(
            node,
            operator,
            node.inputs[:1],
            node.outputs[:1],
            axis=axis[0],
            exclusive=bool(_attr(node, "exclusive", 0)),
            reverse=bool(_attr(node, "reverse", 0)),
        )

    return convert_node


def _top_k(g: Graph, node: Node) -> None:
    """TopK: K a constant input of one int64 element (opset 10+; the attribute k in opset 1), made top_k's
    ``k``; axis (default -1), largest and sorted (opset 11+, default 1) attributes."""
    if g.opset >= 10:
        k = g.const(node, 1, "K")
        if k is None or np.asarray(k).size != 1 or np.asarray(k).dtype != np.int64:
            got = "absent" if k is None else f"{np.asarray(k).dtype} of shape {list(np.asarray(k).shape)}"
            raise Unsupported(f"K (input 1) must be a constant 1-element int64 tensor (got {got})")
        k = int(np.asarray(k).reshape(-1)[0])
    else:
        k = int(_attr(node, "k", 0))
    g.stage(
        node,
        "top_k",
        node.inputs[:1],
        node.outputs[:2],
        k=k,
        axis=int(_attr(node, "axis", -1)),
        largest=bool(_attr(node, "largest", 1)),
        sorted=bool(_attr(node, "sorted", 1)),
    )


# ReduceSumSquare = sum(x * x), ReduceL2 = sqrt(sum(x * x)), ReduceL1 = sum(|x|),
# ReduceLogSum = log(sum(x)):
# (before, the reduction, after) in PipeLink's elementwise and reduce operators.
_COMPOSED_REDUCTIONS = {
    "ReduceSumSquare": ("square", "reduce_sum", None, 18),
    "ReduceL2": ("square", "reduce_sum", "sqrt", 18),
    "ReduceL1": ("abs", "reduce_sum", None, 18),
    "ReduceLogSum": (None, "reduce_sum", "log", 18),
}


def _reduce_log_sum_exp(g: Graph, node: Node) -> None:
    """ONNX ReduceLogSumExp as ``log(sum(exp(x - m))) + m``, m the maximum over the axes (kept for the
    subtraction, squeezed when keepdims is 0), so no exp overflows."""
    attrs = _reduce_attrs(g, node, 18)
    if attrs.get("noop_with_empty_axes") and "axes" not in attrs:
        raise Unsupported("ReduceLogSumExp with noop_with_empty_axes and no axes (the input unreduced)")
    x, y = node.inputs[0], node.outputs[0]
    keep = attrs | {"keepdims": True}
    g.stage(node, "reduce_max", [x], [f"{y}__max"], **keep)
    g.stage(node, "sub", [x, f"{y}__max"], [f"{y}__shifted"])
    g.stage(node, "exp", [f"{y}__shifted"], [f"{y}__exp"])
    g.stage(node, "reduce_sum", [f"{y}__exp"], [f"{y}__sum"], **attrs)
    g.stage(node, "log", [f"{y}__sum"], [f"{y}__log_sum"])
    m = f"{y}__max"
    if not attrs["keepdims"]:
        m = f"{y}__max_squeezed"
        g.stage(node, "squeeze", [f"{y}__max"], [m], **({"axes": attrs["axes"]} if "axes" in attrs else {}))
    g.stage(node, "add", [f"{y}__log_sum", m], [y])


def _composed_reduction(g: Graph, node: Node) -> None:
    before, reduction, after, axes_input_opset = _COMPOSED_REDUCTIONS[node.op_type]
    attrs = _reduce_attrs(g, node, axes_input_opset)
    if attrs.get("noop_with_empty_axes") and "axes" not in attrs:
        raise Unsupported(f"{node.op_type} with noop_with_empty_axes and no axes (the input unreduced)")
    x, y = node.inputs[0], node.outputs[0]
    pre = x if before is None else f"{y}__{before}"
    if before is not None:
        g.stage(node, "mul" if before == "square" else before, [x, x] if before == "square" else [x], [pre])
    reduced = y if after is None else f"{y}__{reduction}"
    g.stage(node, reduction, [pre], [reduced], **attrs)
    if after is not None:
        g.stage(node, after, [reduced], [y])


def _loss(lower: Converter) -> Converter:
    """A loss lowering of onnx/losses.py, its LossError reported as the node's Unsupported."""

    def convert_loss(g: Graph, node: Node) -> None:
        try:
            lower(g, node)
        except LossError as e:
            raise Unsupported(str(e)) from None

    return convert_loss
