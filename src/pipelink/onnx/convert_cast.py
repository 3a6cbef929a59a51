"""ONNX cast and quantization converters: Cast, CastLike (saturating into float8), BitCast, QuantizeLinear and
DequantizeLinear (per tensor, per axis, and in blocks lowered onto elementwise stages). The sub-byte types
(INT4, UINT4, INT2, UINT2, FLOAT4E2M1) are PipeLink's one value per byte, as onnx.numpy_helper unpacks
their initializers and as the arrays fed for them hold them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import PipeLinkError
from ..ops.quantize import ROUND_MODES, SCALE_DTYPES
from .convert_common import _attr, _inputs, _only, saturating_cast
from .graph import Graph, Node, Unsupported, dtype_of, onnx_dtype, shape_of, show_shape
from .lowerings import table_problem

__all__: list[str] = []


#: float8 dtypes: ONNX's Cast and CastLike saturate into them by default.
_FLOAT8 = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")

#: The exponent-only float8: ONNX's Cast into it rounds by round_mode (saturating by default), as
#: ``quantize_linear`` into it by a scale of 1 computes; QuantizeLinear and DequantizeLinear lack it.
_E8M0 = "float8_e8m0fnu"


#: What quantize_linear (the saturating cast) reads.
_SATURATING_FROM = ("float32", "float16", "bfloat16")

#: The integer types ONNX quantizes into (those PipeLink has): blocked, PipeLink computes them in
#: float32, which holds every value of them exactly.
_BLOCKED_INTEGERS = ("int8", "uint8", "int16", "uint16")

#: The sub-byte integers: blocked as the others, both ways (float32 holds them; the saturating cast takes
#: their bounds from ml_dtypes.iinfo).
_SUB_BYTE_INTEGERS = ("int4", "uint4", "int2", "uint2")

#: float4_e2m1fn: blocked as the float8s into it (quantize_linear by a scale of 1) and as the integers out
#: of it (float32 holds every value).
_FLOAT4 = "float4_e2m1fn"


def _cast_to(g: Graph, node: Node, dtype: str) -> None:
    """Cast, CastLike: ``cast`` to ``dtype``; into a float8 type with saturate (ONNX's default) a value
    beyond the finite range (or an infinity) clips to its largest finite value, as ``quantize_linear``
    by a scale of 1 computes it (round to nearest even, then clip); saturate 0 is the plain cast (NaN, or
    inf for float8_e5m2). Into float8_e8m0fnu: ``_cast_to_e8m0`` (round_mode applies to it alone). Into
    float4_e2m1fn, which has no infinity, the plain cast saturates either way (to +-6; NaN gives a zero of
    the opposite sign, as onnx's reference); into the sub-byte integers an integer keeps its low bits and
    a float is truncated, 0 outside the range (the spec leaves it undefined; onnx's reference gives 0)."""
    round_mode = _attr(node, "round_mode", "up")
    if round_mode not in ROUND_MODES:
        raise Unsupported(f"round_mode {round_mode!r}: the spec's are {', '.join(ROUND_MODES)}")
    saturate = bool(_attr(node, "saturate", 1))
    if dtype == _E8M0:
        _cast_to_e8m0(g, node, saturate, round_mode)
        return
    if dtype not in _FLOAT8 or not saturate:
        g.stage(node, "cast", node.inputs[:1], node.outputs[:1], dtype=dtype)
        return
    source = g.dtypes.get(node.inputs[0])
    if source not in _SATURATING_FROM:
        raise Unsupported(
            f"a saturating cast to {dtype} from {source or 'an unknown dtype'}: PipeLink saturates from "
            f"{', '.join(_SATURATING_FROM)} (cast to float32 first, or set saturate=0)"
        )
    one = _unit_scale(g, node.outputs[0], source)
    g.stage(node, "quantize_linear", [node.inputs[0], one], node.outputs[:1], output_dtype=dtype)


def _cast_to_e8m0(g: Graph, node: Node, saturate: bool, round_mode: str) -> None:
    """Cast into float8_e8m0fnu as onnx's reference (numpy_helper.to_float8e8m0): x as float32 (a
    ``cast`` first from any other dtype, rounding to nearest even as NumPy does), then ``quantize_linear``
    by a scale of 1 with the node's round_mode and saturate."""
    x, source = node.inputs[0], dtype_of(g, node.inputs[0])
    if source is None:
        raise Unsupported("a cast to float8_e8m0fnu needs its input's dtype (the graph does not give it)")
    if source not in _SATURATING_FROM:
        x = f"{node.outputs[0]}__float32"
        g.stage(node, "cast", node.inputs[:1], [x], dtype="float32")
        source = "float32"
    attrs: dict[str, Any] = {"output_dtype": _E8M0, "round_mode": round_mode}
    if not saturate:
        attrs["saturate"] = False
    g.stage(node, "quantize_linear", [x, _unit_scale(g, node.outputs[0], source)], node.outputs[:1], **attrs)


def _cast(g: Graph, node: Node) -> None:
    _cast_to(g, node, onnx_dtype(int(_attr(node, "to"))))


def _bitcast(g: Graph, node: Node) -> None:
    """BitCast: x's bytes reinterpreted as ``to``, a type as wide (``bitcast`` says when it is not)."""
    g.stage(node, "bitcast", node.inputs[:1], node.outputs[:1], dtype=onnx_dtype(int(_attr(node, "to"))))


def _cast_like(g: Graph, node: Node) -> None:
    """CastLike: cast to the dtype of the second input, read from the graph's types (its values are not
    needed: it is no stage input)."""
    like = node.inputs[1] if len(node.inputs) > 1 else ""
    dtype = g.dtypes.get(like)
    if dtype is None and like in g.constants:
        try:
            dtype = get_dtype(g.constants[like].dtype).name
        except PipeLinkError:
            raise Unsupported(
                f"target_type {like!r} has dtype {g.constants[like].dtype}, which PipeLink lacks"
            ) from None
    if dtype is None:
        raise Unsupported(
            f"CastLike needs the dtype of its target_type input {like!r} (the graph does not give it)"
        )
    _cast_to(g, node, dtype)


def _quantize(g: Graph, node: Node) -> None:
    """QuantizeLinear: ``quantize_linear`` per tensor or per axis; with block_size, ``_quantize_blocked``.
    precision (opset 23) is refused: PipeLink divides in float32 (x's dtype when blocked)."""
    _only(node, precision=0)
    block = _block_size(node)
    if block:
        _quantize_blocked(g, node, block)
        return
    attrs: dict[str, Any] = {"axis": int(_attr(node, "axis", 1))}
    if not _attr(node, "saturate", 1):
        attrs["saturate"] = False
    if _attr(node, "output_dtype", 0):
        attrs["output_dtype"] = onnx_dtype(int(_attr(node, "output_dtype")))
    _refuse_e8m0(node, attrs.get("output_dtype") or dtype_of(g, node.inputs[2] if node.inputs[2:3] else ""))
    g.stage(node, "quantize_linear", _inputs(node, 3), node.outputs[:1], **attrs)


def _refuse_e8m0(node: Node, dtype: str | None) -> None:
    """QuantizeLinear's output and DequantizeLinear's input are never float8_e8m0fnu in ONNX (it is a scale
    type there, and PipeLink's scales are float32, float16 or bfloat16)."""
    if dtype == _E8M0:
        raise Unsupported(
            f"{node.op_type} of float8_e8m0fnu: ONNX quantizes into (and dequantizes from) the other 8-bit "
            "types; Cast converts into float8_e8m0fnu"
        )


def _dequantize(g: Graph, node: Node) -> None:
    """DequantizeLinear: ``dequantize_linear`` per tensor or per axis; with block_size,
    ``_dequantize_blocked``."""
    block = _block_size(node)
    if block:
        _dequantize_blocked(g, node, block)
        return
    _only(node, output_dtype=0)
    _refuse_e8m0(node, dtype_of(g, node.inputs[0]))
    g.stage(node, "dequantize_linear", _inputs(node, 3), node.outputs[:1], axis=int(_attr(node, "axis", 1)))


# -- blocked quantization (opset 21): a scale (and zero point) per block of block_size along the axis ----
def _block_size(node: Node) -> int:
    block = int(_attr(node, "block_size", 0))
    if block < 0:
        raise Unsupported(f"block_size={block}: it must be 0 (per tensor or per axis) or positive")
    return block


def _block_index(g: Graph, node: Node, block: int) -> tuple[int, np.ndarray]:
    """The axis and, for each of x's positions along it, the block it is in (``arange(D) // block``),
    after checking the scale's shape: x's, except ``ceil(D / block)`` along the axis (the spec's rule)."""
    x, scale = node.inputs[:2]
    x_shape, s_shape = shape_of(g, x), shape_of(g, scale)
    if x_shape is None or s_shape is None:
        raise Unsupported(
            f"blocked {node.op_type} needs the shapes of x and the scale (shape inference gave none)"
        )
    rank = len(x_shape)
    axis = int(_attr(node, "axis", 1))
    if not -rank <= axis < rank:
        raise Unsupported(f"axis {axis} is out of range for x of rank {rank}")
    axis %= rank
    length = x_shape[axis]
    if not isinstance(length, int):
        raise Unsupported(f"blocked {node.op_type} needs x's length along axis {axis} (it is {length!r})")
    want = [-(-length // block) if k == axis else d for k, d in enumerate(x_shape)]
    if len(s_shape) != rank or any(a != b for a, b in zip(s_shape, want, strict=True)):
        raise Unsupported(
            f"a blocked scale of shape {show_shape(tuple(s_shape))} for x {show_shape(tuple(x_shape))}: it "
            f"must be {show_shape(tuple(want))} (x's shape, ceil({length} / {block}) along axis {axis})"
        )
    if node.inputs[2:3] and node.inputs[2] and shape_of(g, node.inputs[2]) != s_shape:
        raise Unsupported(
            f"the zero point's shape {show_shape(shape_of(g, node.inputs[2]))} differs from the scale's"
        )
    why = table_problem(
        f"blocked {node.op_type}'s index of x's {length} positions along axis {axis}", (length,), "int64"
    )
    if why:  # a hostile declared length: refused before the index is allocated
        raise Unsupported(why)
    return axis, np.arange(length, dtype=np.int64) // block


def _blocks(g: Graph, node: Node, name: str, axis: int, index: np.ndarray, dtype: str, tag: str) -> str:
    """``name`` (one entry per block) repeated along ``axis`` to x's shape, in ``dtype``: folded at import
    when it is a constant and the table is within the bound on bound weights, else ``cast`` (where its
    dtype differs) and ``gather`` by the constant block index."""
    out = f"{node.outputs[0]}__blocked_{tag}"
    value = g.constants.get(name)
    if value is not None:
        shape = value.shape[:axis] + index.shape + value.shape[axis + 1 :]
        if table_problem(tag, shape, dtype) is None:
            g.constants[out] = np.take(value, index, axis=axis).astype(get_dtype(dtype).numpy)
            g.dtypes[out] = dtype
            return out
    if dtype_of(g, name) != dtype:
        g.stage(node, "cast", [name], [f"{out}_{dtype}"], dtype=dtype)
        name = f"{out}_{dtype}"
    g.constants[f"{out}_index"] = index
    g.dtypes[f"{out}_index"] = "int64"
    g.stage(node, "gather", [name, f"{out}_index"], [out], axis=axis)
    return out


def _dequantize_blocked(g: Graph, node: Node, block: int) -> None:
    """Blocked DequantizeLinear as onnx's reference computes it: ``(float32(x) - zero) * scale`` in
    float32, the scale and zero point repeated over their blocks (``_blocks``), then ``cast`` to
    output_dtype (default: the scale's dtype). x of an integer type, the sub-byte ones included, or
    float4_e2m1fn (float8 is dequantized per tensor or per axis only), the zero point of x's."""
    x, scale = node.inputs[:2]
    zero = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    blocked = (*_BLOCKED_INTEGERS, *_SUB_BYTE_INTEGERS, _FLOAT4)
    if dtype_of(g, x) not in blocked:
        raise Unsupported(
            f"blocked DequantizeLinear of x {dtype_of(g, x) or 'of unknown dtype'}: PipeLink blocks "
            f"{', '.join(blocked)} (float8 per tensor or per axis)"
        )
    if zero is not None and dtype_of(g, zero) != dtype_of(g, x):
        raise Unsupported(f"the zero point's dtype {dtype_of(g, zero)} differs from x's {dtype_of(g, x)}")
    scale_dtype = dtype_of(g, scale)
    out_dtype = (
        onnx_dtype(int(_attr(node, "output_dtype"))) if _attr(node, "output_dtype", 0) else scale_dtype
    )
    if scale_dtype not in SCALE_DTYPES or out_dtype not in SCALE_DTYPES:
        raise Unsupported(
            f"blocked DequantizeLinear of scale {scale_dtype} to {out_dtype}: both must be one of "
            f"{', '.join(sorted(SCALE_DTYPES))}"
        )
    axis, index = _block_index(g, node, block)
    y = node.outputs[0]
    value = f"{y}__float32"
    g.stage(node, "cast", [x], [value], dtype="float32")  # every value of x's dtype is exact in float32
    if zero is not None:
        g.stage(
            node,
            "sub",
            [value, _blocks(g, node, zero, axis, index, "float32", "zero_point")],
            [f"{y}__shifted"],
        )
        value = f"{y}__shifted"
    product = y if out_dtype == "float32" else f"{y}__product"
    g.stage(node, "mul", [value, _blocks(g, node, scale, axis, index, "float32", "scale")], [product])
    if product != y:
        g.stage(node, "cast", [product], [y], dtype=out_dtype)


def _quantize_blocked(g: Graph, node: Node, block: int) -> None:
    """Blocked QuantizeLinear as onnx's reference computes it: ``x / scale`` in x's dtype, the scale
    repeated over its blocks (``_blocks``). Into an integer type: ``round`` (halves to even), ``cast`` to
    float32, ``add`` of the repeated zero point (exact: integers), saturated by ``max`` and ``min`` to the
    type's range and ``cast`` (exact: an integer in range; a quotient beyond int32 saturates, where the
    reference's int32 cast wraps; a NaN gives an unspecified value). Into float8 and float4_e2m1fn:
    ``quantize_linear`` by a scale of 1 converts the quotient (saturate as the node says; no zero point:
    the spec's is 0). The sub-byte integers as the other integers."""
    x, scale = node.inputs[:2]
    zero = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    x_dtype = dtype_of(g, x)
    if x_dtype not in SCALE_DTYPES or dtype_of(g, scale) != x_dtype:
        raise Unsupported(
            f"blocked QuantizeLinear of x {x_dtype} by a scale of {dtype_of(g, scale)}: PipeLink takes x one "
            f"of {', '.join(sorted(SCALE_DTYPES))} and a scale of x's dtype"
        )
    wanted = onnx_dtype(int(_attr(node, "output_dtype"))) if _attr(node, "output_dtype", 0) else None
    zero_dtype = dtype_of(g, zero) if zero is not None else None
    if wanted and zero_dtype and wanted != zero_dtype:
        raise Unsupported(f"output_dtype {wanted} differs from the zero point's dtype {zero_dtype}")
    out_dtype = wanted or zero_dtype or "uint8"
    integers = (*_BLOCKED_INTEGERS, *_SUB_BYTE_INTEGERS)
    blocked = (*integers, *_FLOAT8, _FLOAT4)
    if out_dtype not in blocked:
        raise Unsupported(
            f"blocked QuantizeLinear to {out_dtype}: PipeLink quantizes in blocks to {', '.join(blocked)}"
        )
    if zero is not None and out_dtype not in integers:
        raise Unsupported(
            f"a blocked {out_dtype} zero point: the spec's float8 zero point is 0, as float4's is "
            "(leave it out)"
        )
    axis, index = _block_index(g, node, block)
    y = node.outputs[0]
    quotient = f"{y}__quotient"
    g.stage(node, "div", [x, _blocks(g, node, scale, axis, index, x_dtype, "scale")], [quotient])
    attrs: dict[str, Any] = {"output_dtype": out_dtype}
    if out_dtype not in integers:
        if not _attr(node, "saturate", 1):
            attrs["saturate"] = False
        g.stage(node, "quantize_linear", [quotient, _unit_scale(g, y, x_dtype)], [y], **attrs)
        return
    g.stage(node, "round", [quotient], [f"{y}__rounded"])
    value = f"{y}__rounded"
    if x_dtype != "float32":
        g.stage(node, "cast", [value], [f"{y}__rounded_float32"], dtype="float32")
        value = f"{y}__rounded_float32"
    if zero is not None:
        zero_full = _blocks(g, node, zero, axis, index, "float32", "zero_point")
        g.stage(node, "add", [value, zero_full], [f"{y}__shifted"])
        value = f"{y}__shifted"
    saturating_cast(g, node, value, y, out_dtype, "float32")


def _unit_scale(g: Graph, y: str, dtype: str) -> str:
    one = f"{y}__unit_scale"
    g.constants[one] = np.ones((), get_dtype(dtype).numpy)
    g.dtypes[one] = dtype
    return one
