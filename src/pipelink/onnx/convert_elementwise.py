"""ONNX elementwise and activation converters that compose stages: alpha attributes, Selu, Sum/Mean,
Max/Min, Clip, HardSigmoid, Gelu, Pow, Softmax/Hardmax/LogSoftmax and Dropout.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import get_dtype
from .convert_common import Converter, _attr, _scalar
from .graph import Graph, Node, Unsupported, dtype_of, float32_attr

__all__: list[str] = []


def _with_alpha(operator: str, default: float) -> Converter:
    """A unary op whose ONNX ``alpha`` attribute is the PipeLink operator's (LeakyRelu, Elu, Celu,
    ThresholdedRelu)."""

    def convert_node(g: Graph, node: Node) -> None:
        alpha = float32_attr(_attr(node, "alpha", default))
        g.stage(node, operator, node.inputs[:1], node.outputs[:1], alpha=alpha)

    return convert_node


# Selu's defaults, the float32 values the spec gives
_SELU_ALPHA, _SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875


def _selu(g: Graph, node: Node) -> None:
    """ONNX Selu as ``gamma * elu(x, alpha)``: elu, then scale."""
    y = node.outputs[0]
    alpha = float32_attr(_attr(node, "alpha", _SELU_ALPHA))
    g.stage(node, "elu", node.inputs[:1], [f"{y}__elu"], alpha=alpha)
    g.stage(node, "scale", [f"{y}__elu"], [y], factor=float32_attr(_attr(node, "gamma", _SELU_GAMMA)))


def _variadic_sum(mean: bool) -> Converter:
    """ONNX Sum / Mean of any number of inputs (broadcast together): a chain of ``add``, left to right,
    then for Mean a ``scale`` by 1/n (one input: a copy, or the input itself scaled by 1)."""

    def convert_node(g: Graph, node: Node) -> None:
        inputs = [n for n in node.inputs if n]
        if not inputs:
            raise Unsupported(f"{node.op_type} needs at least one input")
        y = node.outputs[0]
        total = y if not mean else f"{y}__sum"
        if len(inputs) == 1:
            g.stage(node, "identity", inputs, [total])
        acc = inputs[0]
        for k, other in enumerate(inputs[1:], start=1):
            out = total if k == len(inputs) - 1 else f"{y}__add{k}"
            g.stage(node, "add", [acc, other], [out])
            acc = out
        if mean:
            dtype = g.dtypes.get(inputs[0])
            if dtype is not None and not get_dtype(dtype).is_floating:
                raise Unsupported(f"Mean of {dtype} inputs (PipeLink's mean is a float scale)")
            g.stage(node, "scale", [total], [y], factor=1.0 / len(inputs))

    return convert_node


def _dropout(g: Graph, node: Node) -> None:
    """ONNX Dropout at inference, or in training mode with a ratio of 0 (nothing dropped, a scale of 1):
    the output is the input (a copy); the optional mask is all true, made by expanding a constant to the
    input's shape (which must then be known). Training mode with a ratio above 0 draws a random mask:
    refused (PipeLink has no random operators), and so is a training_mode or ratio the graph computes."""
    if len(node.inputs) > 2 and node.inputs[2]:
        training = g.const(node, 2, "training_mode")
        if bool(np.asarray(training).reshape(-1)[0]):
            given = g.const(node, 1, "ratio")
            ratio = 0.5 if given is None else float(np.asarray(given, dtype=np.float64).reshape(-1)[0])
            if ratio != 0.0:
                raise Unsupported(
                    f"training_mode is true with ratio {ratio}: that drops a random {ratio:.0%} of the "
                    "input, and PipeLink has no random operators (with ratio 0, or training_mode false, "
                    "Dropout is a copy)"
                )
    x = node.inputs[0]
    g.stage(node, "identity", [x], node.outputs[:1])
    if len(node.outputs) > 1 and node.outputs[1]:
        shape = g.shapes.get(x)
        if shape is None or not all(isinstance(d, int) for d in shape):
            raise Unsupported("the mask output needs the input's shape, every dim known")
        true = f"{node.outputs[1]}__true"
        g.constants[true] = np.array(True)
        g.dtypes[true] = "bool"
        g.stage(node, "expand", [true], node.outputs[1:2], shape=[int(d) for d in shape])


def _log_softmax(g: Graph, node: Node) -> None:
    """ONNX LogSoftmax as ``d - log(sum(exp(d)))`` with ``d = x - max(x)`` over the axis (from opset 13)
    or every axis from it on (before: the 2-d view of the spec), so no exp overflows and no log of an
    underflowed probability is taken: reduce_max, sub, exp, reduce_sum, log, sub."""
    x, y = node.inputs[0], node.outputs[0]
    axis = int(_attr(node, "axis", -1 if g.opset >= 13 else 1))
    if g.opset >= 13:
        axes = [axis]
    else:
        shape = g.shapes.get(x)
        if shape is None:
            raise Unsupported(
                "LogSoftmax before opset 13 normalises over every dim from the axis on; that needs the "
                "input's rank"
            )
        rank = len(shape)
        if not -rank <= axis < rank:
            raise Unsupported(f"LogSoftmax axis {axis} is out of range for a rank-{rank} input")
        axes = list(range(axis % rank, rank))
    g.stage(node, "reduce_max", [x], [f"{y}__max"], axes=axes, keepdims=True)
    g.stage(node, "sub", [x, f"{y}__max"], [f"{y}__shifted"])
    g.stage(node, "exp", [f"{y}__shifted"], [f"{y}__exp"])
    g.stage(node, "reduce_sum", [f"{y}__exp"], [f"{y}__sum"], axes=axes, keepdims=True)
    g.stage(node, "log", [f"{y}__sum"], [f"{y}__log_sum"])
    g.stage(node, "sub", [f"{y}__shifted", f"{y}__log_sum"], [y])


def _extremum(operator: str) -> Converter:
    """ONNX Max / Min of any number of inputs (broadcast together): one input is a copy, more a chain of
    the two-input ``max`` / ``min``, left to right."""

    def convert_node(g: Graph, node: Node) -> None:
        inputs = [n for n in node.inputs if n]
        if not inputs:
            raise Unsupported(f"{node.op_type} needs at least one input")
        if len(inputs) == 1:
            g.stage(node, "identity", inputs, node.outputs[:1])
            return
        acc = inputs[0]
        for k, other in enumerate(inputs[1:], start=1):
            out = node.outputs[0] if k == len(inputs) - 1 else f"{node.outputs[0]}__{operator}{k}"
            g.stage(node, operator, [acc, other], [out])
            acc = out

    return convert_node


def _clip(g: Graph, node: Node) -> None:
    """ONNX Clip as ``min(max(x, lo), hi)``: the bounds are inputs from opset 11 (either absent), the
    attributes ``min`` and ``max`` before it. ``lo > hi`` gives hi everywhere, as the spec says."""
    x = node.inputs[0]
    if g.opset >= 11:
        lo = node.inputs[1] if len(node.inputs) > 1 and node.inputs[1] else None
        hi = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    else:
        dtype = g.dtypes.get(x)
        if dtype is None:
            raise Unsupported("Clip before opset 11 needs its input's dtype (for the bounds' constants)")
        lo = hi = None
        for attr in ("min", "max"):
            if attr in node.attrs:
                name = f"{node.outputs[0]}__clip_{attr}"
                g.constants[name] = np.array(node.attrs[attr], dtype=get_dtype(dtype).numpy)
                g.dtypes[name] = dtype
                lo, hi = (name, hi) if attr == "min" else (lo, name)
    parts = [(op, bound) for op, bound in (("max", lo), ("min", hi)) if bound is not None]
    if not parts:
        g.stage(node, "identity", [x], node.outputs[:1])
        return
    acc = x
    for k, (op, bound) in enumerate(parts):
        out = node.outputs[0] if k == len(parts) - 1 else f"{node.outputs[0]}__clip_low"
        g.stage(node, op, [acc, bound], [out])
        acc = out


def _hard_sigmoid(g: Graph, node: Node) -> None:
    """ONNX HardSigmoid as ``min(max(alpha * x + beta, 0), 1)``: scale, add, max, min."""
    x, y = node.inputs[0], node.outputs[0]
    beta, zero, one = (
        _scalar(g, node, x, f"hard_sigmoid_{key}", value)
        for key, value in (("beta", float(_attr(node, "beta", 0.5))), ("zero", 0.0), ("one", 1.0))
    )
    g.stage(node, "scale", [x], [f"{y}__scaled"], factor=float32_attr(_attr(node, "alpha", 0.2)))
    g.stage(node, "add", [f"{y}__scaled", beta], [f"{y}__shifted"])
    g.stage(node, "max", [f"{y}__shifted", zero], [f"{y}__low"])
    g.stage(node, "min", [f"{y}__low", one], [y])


def _gelu(g: Graph, node: Node) -> None:
    approximate = _attr(node, "approximate", "none")
    g.stage(node, "gelu", node.inputs[:1], node.outputs[:1], approximate=approximate)


def _pow(g: Graph, node: Node) -> None:
    """Pow: ONNX lets the exponent have its own type, and PipeLink's pow takes one. A float base's
    exponent of another type is converted to the base's: a constant at import, a computed one by a
    ``cast`` stage (an integer exponent is exact in the base's type up to its significand, 2**24 for
    float32). An integer base with a float exponent is the reference's ``power(a, b).astype(a.dtype)``:
    both cast to float64, pow, the result cast back (truncated toward zero). An integer base with an
    integer exponent runs pow's integer kernel (wrapping), the exponent cast to the base's type."""
    base, exponent = node.inputs[:2]
    want, have = dtype_of(g, base), dtype_of(g, exponent)
    if want is not None and want not in _POW_FLOATS and have in _POW_FLOATS:
        y = node.outputs[0]
        g.stage(node, "cast", [base], [f"{y}__base_as_float64"], dtype="float64")
        g.stage(node, "cast", [exponent], [f"{y}__exponent_as_float64"], dtype="float64")
        g.stage(node, "pow", [f"{y}__base_as_float64", f"{y}__exponent_as_float64"], [f"{y}__float64"])
        g.stage(node, "cast", [f"{y}__float64"], [y], dtype=want)
        return
    if exponent in g.constants and want is not None and str(g.constants[exponent].dtype) != want:
        folded = f"{exponent}.as_{want}"
        g.constants[folded] = g.constants[exponent].astype(get_dtype(want).numpy)
        exponent = folded
    elif want is not None and have is not None and have != want:
        cast = f"{node.outputs[0]}__exponent_as_{want}"
        g.stage(node, "cast", [exponent], [cast], dtype=want)
        exponent = cast
    g.stage(node, "pow", [base, exponent], node.outputs[:1])


_POW_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})


def _along_axis(operator: str) -> Converter:
    """Softmax, Hardmax: along ``axis`` from opset 13; before, over the 2-d view of the spec."""

    def convert_node(g: Graph, node: Node) -> None:
        axis = int(_attr(node, "axis", -1 if g.opset >= 13 else 1))
        shape = g.shapes.get(node.inputs[0])
        rank = len(shape) if shape is not None else None
        if g.opset >= 13 or axis == -1 or (rank is not None and axis in (rank - 1, -1)):
            g.stage(node, operator, node.inputs[:1], node.outputs[:1], axis=axis)
            return
        # Before opset 13 the input is seen as 2-d, [prod(dims before axis), prod(dims from axis)], and each
        # row is taken whole: flatten at the axis, the operator over the last axis, reshape back (both
        # views, no copy).
        op = node.op_type
        if rank is None or sum(not isinstance(d, int) for d in shape) > 1:  # None or a symbol: unknown here
            raise Unsupported(
                f"{op} before opset 13 with axis={axis} works over every dim from the axis on; that needs "
                "the input's rank and at most one unknown dim (re-export at opset 13+ or with fixed shapes)"
            )
        if not -rank <= axis <= rank:
            raise Unsupported(f"{op} axis {axis} is out of range for a rank-{rank} input")
        flat, rows = f"{node.outputs[0]}__flat", f"{node.outputs[0]}__rows"
        g.stage(node, "flatten", node.inputs[:1], [flat], axis=axis)
        g.stage(node, operator, [flat], [rows], axis=-1)
        back = [int(d) if isinstance(d, int) else -1 for d in shape]
        g.stage(node, "reshape", [rows], node.outputs[:1], shape=back, allowzero=False)

    return convert_node
