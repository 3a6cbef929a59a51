"""ONNX's integer and quantized linear operators lowered onto PipeLink's float ones: MatMulInteger,
ConvInteger, QLinearMatMul and QLinearConv. It must never give a product that is not ONNX's int32 one
exactly: the accumulator's float type is chosen so that every partial sum is an exact integer, and a
product ONNX's int32 accumulator could overflow is refused.
"""

from __future__ import annotations

import math

import numpy as np

from ..dtypes import get_dtype
from .convert_common import saturating_cast
from .convert_window import conv2d_stage
from .graph import Graph, Node, Unsupported, dtype_of, shape_of, show_shape

__all__ = ["EXACT_FLOAT32", "INT32_MAX", "accumulator_dtype"]

#: float32 holds every integer of magnitude up to 2**24 exactly (its significand has 24 bits).
EXACT_FLOAT32 = 2**24
#: The largest value of ONNX's int32 accumulator.
INT32_MAX = 2**31 - 1
#: The 8-bit integer types these operators read, with their ranges.
_RANGES = {"int8": (-128, 127), "uint8": (0, 255)}


def accumulator_dtype(k: int, bound_a: int, bound_b: int, bias: int = 0) -> str | None:
    """The float type an integer product of depth ``k`` accumulates in exactly (None: ONNX's int32
    accumulator itself could overflow).

    Each of the ``k`` terms is at most ``bound_a * bound_b`` in magnitude, so every partial sum (in any
    order: a blocked GEMM's, a split-K's, cuDNN's) is an integer of magnitude at most
    ``k * bound_a * bound_b + bias``. While that is at most 2**24 float32 represents every one of them,
    and every addition and fused multiply-add is exact; beyond, float64 is exact up to 2**53, far above
    the 2**31 - 1 where ONNX's int32 would overflow.

    Parameters
    ----------
    k : int
        The number of products summed into one output (K of a matmul, C/group * kH * kW of a conv).
    bound_a, bound_b : int
        The largest magnitude of an operand after its zero point is subtracted.
    bias : int
        The largest magnitude of an int32 bias added to the sum (QLinearConv's B).
    """
    total = k * bound_a * bound_b + bias
    if total > INT32_MAX:
        return None
    return "float32" if total <= EXACT_FLOAT32 else "float64"


def _integer_dtype(g: Graph, node: Node, name: str, what: str) -> str:
    dtype = dtype_of(g, name)
    if dtype not in _RANGES:
        raise Unsupported(
            f"{node.op_type} {what} of dtype {dtype or 'unknown'}: PipeLink takes int8 or uint8"
        )
    return dtype


def _zero_point(g: Graph, node: Node, index: int, dtype: str, what: str) -> np.ndarray | str | None:
    """A zero point input: None (absent), its value (a constant, as int64), or its name (computed: then
    it must be one value, a scalar or [1], for the sub to broadcast it)."""
    if index >= len(node.inputs) or not node.inputs[index]:
        return None
    name = node.inputs[index]
    if dtype_of(g, name) != dtype:
        raise Unsupported(f"{what} has dtype {dtype_of(g, name)}; the spec makes it its operand's ({dtype})")
    if name in g.constants:
        return np.asarray(g.constants[name]).astype(np.int64)
    if shape_of(g, name) not in ((), (1,)):  # per row or column: its values are needed at import
        return np.asarray(g.const(node, index, f"{what}, not one value")).astype(np.int64)
    return name


def _bound(g: Graph, name: str, dtype: str, zero: np.ndarray | str | None) -> int:
    """The largest ``|x - zero|`` possible (``zero`` already in the shape it broadcasts in): from x's own
    values when x and its zero point are constants (weights), else from its dtype's range and the zero
    point's values (a computed zero point: anywhere in the range)."""
    lo, hi = _RANGES[dtype]
    if name in g.constants and not isinstance(zero, str):
        x = np.asarray(g.constants[name]).astype(np.int64)
        shifted = x if zero is None else x - zero
        return int(np.abs(shifted).max(initial=0))
    if zero is None:
        return max(-lo, hi)
    if isinstance(zero, str):
        return hi - lo
    return int(max(zero.max() - lo, hi - zero.min()))


def _shifted(g: Graph, node: Node, name: str, zero: np.ndarray | str | None, compute: str, tag: str) -> str:
    """``cast(x, compute) - zero``: the operand in the accumulator's type with its zero point taken off (a
    constant zero point already in the shape it broadcasts in)."""
    y = node.outputs[0]
    cast = f"{y}__{tag}_{compute}"
    g.stage(node, "cast", [name], [cast], dtype=compute)
    if zero is None:
        return cast
    if isinstance(zero, str):
        zf = f"{y}__{tag}_zero_{compute}"
        g.stage(node, "cast", [zero], [zf], dtype=compute)
    else:
        zf = f"{y}__{tag}_zero"
        g.constants[zf] = zero.astype(get_dtype(compute).numpy)
        g.dtypes[zf] = compute
    out = f"{y}__{tag}_shifted"
    g.stage(node, "sub", [cast, zf], [out])
    return out


def _known_shape(g: Graph, node: Node, name: str, what: str, depth: int | None = None) -> tuple:
    """The shape of input ``name``: every dim known (``depth`` None), or its rank and its length along
    axis ``depth`` (a product's K; the other dims may be symbols)."""
    shape = shape_of(g, name)
    dims = () if shape is None else shape if depth is None else shape[depth:][:1]
    if shape is None or not shape or any(not isinstance(d, int) for d in dims):
        along = "" if depth is None else " along the product (K)"
        raise Unsupported(
            f"{node.op_type} needs the length of {what}{along} ({name!r}: {show_shape(shape)}) to choose "
            "an accumulator that is exact"
        )
    return tuple(shape)


def _matmul_zero(zero, shape: tuple[int, ...], row: bool, what: str):
    """A matmul zero point in the shape it broadcasts in: per tensor (a scalar), per row of a (a vector of
    M becomes [M, 1]) or per column of b (a vector of N); an N-d one must already broadcast with a 1 along
    K (``[..., M, 1]`` for a, ``[..., 1, N]`` for b), as the spec's MatMulInteger says. A computed one
    (its name) is per tensor."""
    if zero is None or isinstance(zero, str):
        return zero
    if zero.size == 1:
        return zero.reshape(())
    if zero.ndim == 1 and len(shape) >= 2:
        length = shape[-2] if row else shape[-1]
        if zero.shape[0] == length:
            return zero.reshape((length, 1) if row else (length,))
    elif (
        len(shape) >= 2
        and zero.ndim == len(shape)
        and zero.shape[-1 if row else -2] == 1
        and all(z in (1, d) for z, d in zip(zero.shape, shape, strict=True))
    ):
        return zero
    axis = "row of a (M)" if row else "column of b (N)"
    raise Unsupported(
        f"{what} of shape {list(zero.shape)} for an operand of shape {list(shape)}: it must be one value, "
        f"or one per {axis}"
    )


def _matmul_product(g: Graph, node: Node, a: int, a_zero: int, b: int, b_zero: int) -> tuple[str, str]:
    """The exact int32 product of inputs ``a`` and ``b`` less their zero points, as a float tensor (an
    exact integer in every element) and its dtype."""
    operands = []
    for index, zero_index, tag, row in ((a, a_zero, "a", True), (b, b_zero, "b", False)):
        name = node.inputs[index]
        dtype = _integer_dtype(g, node, name, tag)
        depth = -2 if not row and len(shape_of(g, name) or ()) >= 2 else -1  # K: a's last, b's next to last
        shape = _known_shape(g, node, name, tag, depth)
        what = f"{tag}'s zero point"
        zero = _matmul_zero(_zero_point(g, node, zero_index, dtype, what), shape, row, what)
        operands.append((name, zero, _bound(g, name, dtype, zero), shape))
    k = operands[0][3][-1]
    compute = accumulator_dtype(k, operands[0][2], operands[1][2])
    if compute is None:
        raise Unsupported(f"a product of depth K={k} whose int32 accumulator could overflow")
    shifted = [
        _shifted(g, node, n, z, compute, tag) for (n, z, _, _), tag in zip(operands, "ab", strict=True)
    ]
    acc = f"{node.outputs[0]}__acc"
    g.stage(node, "matmul", shifted, [acc])
    return acc, compute


def _matmul_integer(g: Graph, node: Node) -> None:
    """MatMulInteger: ``int32((a - a_zero_point) @ (b - b_zero_point))`` as ``cast``, ``sub`` and a float
    ``matmul`` (``accumulator_dtype``: float32 where that is exact, else float64), then ``cast`` to int32
    (every element an exact integer within int32's range)."""
    acc, _ = _matmul_product(g, node, 0, 2, 1, 3)
    g.stage(node, "cast", [acc], node.outputs[:1], dtype="int32")


def _conv_product(g: Graph, node: Node, x: int, x_zero: int, w: int, w_zero: int, bias: int | None):
    """The exact int32 convolution of inputs ``x`` and ``w`` less their zero points (plus an int32 bias
    input, a constant), as a float tensor and its dtype. 2-d windows only."""
    names = node.inputs[x], node.inputs[w]
    dtypes = [_integer_dtype(g, node, n, what) for n, what in zip(names, ("x", "w"), strict=True)]
    zeros = [
        _zero_point(g, node, i, d, what)
        for i, d, what in zip((x_zero, w_zero), dtypes, ("x's zero point", "w's zero point"), strict=True)
    ]
    w_shape = _known_shape(g, node, names[1], "w")
    x_shape = shape_of(g, names[0])
    if len(w_shape) != 4 or (x_shape is not None and len(x_shape) != 4):
        raise Unsupported(f"a {len(w_shape) - 2}-d {node.op_type}; PipeLink lowers 2-d windows only")
    if isinstance(zeros[0], np.ndarray) and zeros[0].size != 1:
        raise Unsupported(f"x's zero point of shape {list(zeros[0].shape)}: the spec's is one value")
    if isinstance(zeros[0], np.ndarray):
        zeros[0] = zeros[0].reshape(())
    if isinstance(zeros[1], np.ndarray):
        if zeros[1].size != 1 and zeros[1].shape != (w_shape[0],):
            raise Unsupported(
                f"w's zero point of shape {list(zeros[1].shape)}: one value, or one per output channel "
                f"({w_shape[0]})"
            )
        zeros[1] = zeros[1].reshape((w_shape[0], 1, 1, 1) if zeros[1].size != 1 else ())
    bias_value = None
    if bias is not None and bias < len(node.inputs) and node.inputs[bias]:
        bias_value = g.const(node, bias, "the int32 bias B")
        if bias_value.dtype != np.int32 or bias_value.shape != (w_shape[0],):
            raise Unsupported(
                f"B of {bias_value.dtype} {list(bias_value.shape)}: the spec's is int32 [{w_shape[0]}]"
            )
    bias_bound = 0 if bias_value is None else int(np.abs(bias_value.astype(np.int64)).max(initial=0))
    k = math.prod(w_shape[1:])
    bounds = (_bound(g, n, d, z) for n, d, z in zip(names, dtypes, zeros, strict=True))
    compute = accumulator_dtype(k, *bounds, bias_bound)
    if compute is None:
        raise Unsupported(f"a convolution of depth {k} whose int32 accumulator could overflow")
    operands = [
        _shifted(g, node, names[0], zeros[0], compute, "x"),
        _shifted(g, node, names[1], zeros[1], compute, "w"),
    ]
    if bias_value is not None:  # added in the accumulator's type: exact, as the bound counts it
        b = f"{node.outputs[0]}__bias_{compute}"
        g.constants[b] = bias_value.astype(get_dtype(compute).numpy)
        g.dtypes[b] = compute
        operands.append(b)
    window = Node(node.op_type, node.name, node.domain, list(names), node.outputs, node.attrs)
    _, attrs = conv2d_stage(g, window)  # the window attributes, as Conv's converter reads them
    acc = f"{node.outputs[0]}__acc"
    g.stage(node, "conv2d", operands, [acc], **attrs)
    return acc, compute


def _conv_integer(g: Graph, node: Node) -> None:
    """ConvInteger: the int32 convolution of ``x - x_zero_point`` by ``w - w_zero_point`` (per output
    channel), padding with zeros after the shift as onnx's reference does; ``cast``, ``sub``, a float
    ``conv2d`` (``accumulator_dtype``) and ``cast`` to int32."""
    acc, _ = _conv_product(g, node, 0, 2, 1, 3, None)
    g.stage(node, "cast", [acc], node.outputs[:1], dtype="int32")


def _requantize(g: Graph, node: Node, acc: str, compute: str, factor: np.ndarray, zero: np.ndarray, dtype):
    """``y = saturate(round_half_even(acc * factor) + zero)`` in float64, as onnx's reference computes
    it (its int32 accumulator times the float scale factor promotes to float64): ``cast`` to float64
    (exact), ``mul``, ``add``, ``round``, ``max``, ``min`` and ``cast`` to the 8-bit type (exact: the
    value is an integer in its range)."""
    y = node.outputs[0]
    if compute != "float64":
        g.stage(node, "cast", [acc], [f"{y}__acc_float64"], dtype="float64")
        acc = f"{y}__acc_float64"
    steps = [("mul", factor, "scaled"), ("add", zero, "shifted")]
    value = acc
    for op, operand, tag in steps:
        name = f"{y}__requant_{tag}_by"
        g.constants[name] = np.asarray(operand, np.float64)
        g.dtypes[name] = "float64"
        g.stage(node, op, [value, name], [f"{y}__requant_{tag}"])
        value = f"{y}__requant_{tag}"
    g.stage(node, "round", [value], [f"{y}__requant_rounded"])
    value = f"{y}__requant_rounded"
    saturating_cast(g, node, value, y, dtype, "float64", "requant_")


def _scale(g: Graph, node: Node, index: int, what: str, lengths: dict[int, str]) -> np.ndarray:
    """A constant scale: a float array of one value, or 1-d of one of ``lengths`` (length -> its meaning)."""
    value = g.const(node, index, what)
    if not get_dtype(value.dtype).is_floating:
        raise Unsupported(f"{what} of dtype {value.dtype}: a scale is a float")
    if value.size != 1 and (value.ndim != 1 or value.shape[0] not in lengths):
        choices = "".join(f", or [{n}] ({meaning})" for n, meaning in lengths.items())
        raise Unsupported(f"{what} of shape {list(value.shape)}: one value{choices}")
    return value


def _flat(value: np.ndarray) -> np.ndarray:
    """A scalar for one value, else the 1-d vector (it broadcasts along the last axis)."""
    return value.reshape(-1 if value.size != 1 else ())


def _check_scale_dtypes(*scales: np.ndarray) -> None:
    if len({s.dtype for s in scales}) != 1:
        raise Unsupported(f"scales of dtypes {', '.join(str(s.dtype) for s in scales)}: the spec's share one")


def _qlinear_matmul(g: Graph, node: Node) -> None:
    """QLinearMatMul: the exact int32 product of ``a - a_zero_point`` and ``b - b_zero_point``
    (``_matmul_product``), requantized as onnx's reference: the factor ``a_scale * b_scale / y_scale``
    computed in the scales' own type (float16 in float16) at import, then ``_requantize`` in float64.
    Scales and y_zero_point are constants; a's per row (a vector of M), b's and y's per column (N)."""
    a_shape = _known_shape(g, node, node.inputs[0], "a", -1)
    b_shape = shape_of(g, node.inputs[3]) or ()  # its K is checked with the product
    m = a_shape[-2] if len(a_shape) >= 2 else 1
    n = b_shape[-1] if len(b_shape) >= 2 else 1
    a_scale = _scale(g, node, 1, "a_scale", {m: "per row of a"})
    b_scale = _scale(g, node, 4, "b_scale", {n: "per column of b"})
    y_scale = _scale(g, node, 6, "y_scale", {n: "per column of b"})
    _check_scale_dtypes(a_scale, b_scale, y_scale)
    y_zero = g.const(node, 7, "y_zero_point")  # required (check.py): it gives y's type
    dtype = _integer_dtype(g, node, node.inputs[7], "y_zero_point")
    if y_zero.size != 1 and y_zero.shape != y_scale.shape:
        raise Unsupported(f"y_zero_point of shape {list(y_zero.shape)}: the shape of y_scale")
    # a per-row scale lines up with c's rows, per-column ones with its columns (c is [..., M, N])
    factor = a_scale.reshape((m, 1) if a_scale.size != 1 else ()) * _flat(b_scale) / _flat(y_scale)
    acc, compute = _matmul_product(g, node, 0, 2, 3, 5)
    _requantize(g, node, acc, compute, factor, _flat(y_zero), dtype)


def _qlinear_conv(g: Graph, node: Node) -> None:
    """QLinearConv: the exact int32 convolution of ``x - x_zero_point`` by ``w - w_zero_point`` plus the
    int32 bias B (``_conv_product``), requantized as onnx's reference: the factor ``x_scale * w_scale /
    y_scale`` (w's per output channel) in the scales' own type at import, then ``_requantize`` in
    float64. Scales and y_zero_point are constants."""
    channels = _known_shape(g, node, node.inputs[3], "w")[0]
    x_scale = _scale(g, node, 1, "x_scale", {})
    w_scale = _scale(g, node, 4, "w_scale", {channels: "per output channel"})
    y_scale = _scale(g, node, 6, "y_scale", {})
    _check_scale_dtypes(x_scale, w_scale, y_scale)
    y_zero = g.const(node, 7, "y_zero_point")  # required (check.py): it gives y's type
    if y_zero.size != 1:
        raise Unsupported(f"y_zero_point of shape {list(y_zero.shape)}: the spec's is one value")
    dtype = _integer_dtype(g, node, node.inputs[7], "y_zero_point")
    per_channel = w_scale.reshape((1, channels, 1, 1) if w_scale.size != 1 else ())
    factor = x_scale.reshape(()) * per_channel / y_scale.reshape(())
    acc, compute = _conv_product(g, node, 0, 2, 3, 5, 8)
    _requantize(g, node, acc, compute, factor, y_zero.reshape(()), dtype)
