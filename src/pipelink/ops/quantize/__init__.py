"""Linear (de)quantization (ONNX QuantizeLinear / DequantizeLinear): int8, uint8, int16, uint16, the 8-bit
floats (float8_e4m3fn, float8_e5m2, their fnuz variants and float8_e8m0fnu) and the sub-byte types (int4,
uint4, int2, uint2, float4_e2m1fn: one value per byte), per tensor or per axis. Descriptors and NumPy
references.

Quantize computes ``x / scale`` in float32, rounds half to even, adds the zero point and saturates to the
integer range (int4 [-8, 7], uint4 [0, 15], int2 [-2, 1], uint2 [0, 3]); float8 outputs round to nearest
even and, with ``saturate``, clip to the largest finite value (without it, overflow is NaN, inf for e5m2,
as ONNX says); float4_e2m1fn rounds to nearest even and always saturates to +-6 (it has no infinity; a NaN
quotient gives a zero of the opposite sign, as ml_dtypes and onnx's reference convert). A float zero point
(float8, float4_e2m1fn; the spec's is 0) is added to the quotient before the rounding and subtracted by
dequantize, as the spec's formula says. float8_e8m0fnu (an exponent alone, no
zero: no zero point) converts as ONNX's Cast into it does: by ``round_mode`` (up, down, nearest) on the
float32 quotient's exponent field, ``saturate`` keeping the largest exponent from rounding into NaN; ONNX's
Cast to FLOAT8E8M0 is this by a scale of 1. The CUDA variants (``cuda.py``, ``quantize.cu``) compute the
same float32 values and convert bit-exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np

from ...descriptor import Attr, KernelContext, OperatorDescriptor, Port
from ...dtypes import FLOAT8_DTYPES, SUB_BYTE_DTYPES, get_dtype
from ...errors import DTypeMismatchError, InvalidArgumentError, ShapeMismatchError
from ...limits import shape_nbytes
from .._common import builtin_operator, numpy_dtype
from .._dims import normalize_axis
from ..kernel import cuda_variant
from . import cuda

__all__ = [
    "descriptors",
    "INTEGER_QUANTIZED",
    "QUANTIZED_DTYPES",
    "ROUND_MODES",
    "SCALE_DTYPES",
    "scale_layout",
    "to_e8m0",
]

QUANTIZED_DTYPES = frozenset({"int8", "uint8", "int16", "uint16"}) | FLOAT8_DTYPES | SUB_BYTE_DTYPES
#: the quantized types that round half to even and saturate to their range (the rest are floats)
INTEGER_QUANTIZED = frozenset(d for d in QUANTIZED_DTYPES if not get_dtype(d).is_floating)
SCALE_DTYPES = frozenset({"float32", "float16", "bfloat16"})
#: ONNX Cast's round_mode into float8_e8m0fnu (onnx.numpy_helper.to_float8e8m0), in fp8.cuh's order
ROUND_MODES = ("up", "down", "nearest")
_E8M0 = "float8_e8m0fnu"


# The CUDA kernels' dtypes of every input: x / y and the scale (floats), the zero point (a quantized type).
_CUDA_DTYPES = frozenset(cuda.FLOAT_TYPES) | frozenset(cuda.Q_KINDS)


def scale_layout(op: str, x_shape: tuple, scale_shape: tuple, zero_shape, axis: int) -> int | None:
    """The axis a scale applies along (None: one scale for the whole tensor).

    Raises
    ------
    ShapeMismatchError
        The scale is neither a scalar/[1] nor 1-d of x's size along ``axis``, or the zero point's shape
        differs from the scale's (per tensor, each may be a scalar or [1]: onnx's own tests pair a [1]
        zero point with a scalar scale).
    """
    per_tensor = {(), (1,)}
    shapes = (tuple(scale_shape), None if zero_shape is None else tuple(zero_shape))
    if shapes[1] is not None and shapes[1] != shapes[0] and not set(shapes) <= per_tensor:
        raise ShapeMismatchError(
            f"{op}: the zero point's shape {list(zero_shape)} must equal the scale's {list(scale_shape)}",
            port="zero_point",
            expected=list(scale_shape),
            got=list(zero_shape),
        )
    if shapes[0] in per_tensor:
        return None
    axis = normalize_axis(axis, len(x_shape), op=op)
    if len(scale_shape) != 1 or scale_shape[0] != x_shape[axis]:
        raise ShapeMismatchError(
            f"{op}: the scale {list(scale_shape)} must be a scalar (per tensor) or 1-d with x's size "
            f"{x_shape[axis]} along axis {axis} (per axis); x is {list(x_shape)}",
            port="scale",
            expected=[x_shape[axis]],
            got=list(scale_shape),
        )
    return axis


def _quantized_dtype(attrs: Mapping[str, Any], zero_dtype: str | None) -> str:
    wanted = attrs["output_dtype"]
    if wanted is not None and zero_dtype is not None and wanted != zero_dtype:
        raise DTypeMismatchError(
            f"quantize_linear: output_dtype {wanted} differs from the zero point's dtype {zero_dtype}; "
            "make them agree or leave one out",
            port="zero_point",
            expected=wanted,
            got=zero_dtype,
        )
    dtype = wanted or zero_dtype or "uint8"
    if dtype not in QUANTIZED_DTYPES:
        raise DTypeMismatchError(
            f"quantize_linear: output_dtype must be one of {sorted(QUANTIZED_DTYPES)} (got {dtype})",
            port="y",
            expected=sorted(QUANTIZED_DTYPES),
            got=dtype,
        )
    return dtype


def _check_e8m0(op: str, q_dtype: str, zero_dtype: str | None, round_mode: str) -> None:
    """float8_e8m0fnu has no zero (no zero point); round_mode rounds into it alone (the other types round
    to nearest even)."""
    if q_dtype == _E8M0 and zero_dtype is not None:
        raise DTypeMismatchError(
            f"{op}: float8_e8m0fnu has no zero, so no zero point (leave it out)",
            port="zero_point",
            expected=None,
            got=zero_dtype,
        )
    if q_dtype != _E8M0 and round_mode != "up":
        raise InvalidArgumentError(
            f"{op}: round_mode {round_mode!r} applies to float8_e8m0fnu only; {q_dtype} rounds to nearest "
            "even (leave round_mode at 'up')",
            attr="round_mode",
        )


def to_e8m0(q: np.ndarray, out: np.ndarray, *, saturate: bool, round_mode: str) -> None:
    """float32 ``q`` into float8_e8m0fnu ``out`` as ONNX's Cast (onnx.numpy_helper.to_float8e8m0): the
    exponent field alone (the sign unread, zero gives 0x00), plus one for any fraction (up), never (down)
    or from the half on (nearest: ties up, but from exponent 0, whose half is 2^-127 itself); with
    ``saturate`` exponent 0xfe never rounds up into NaN; inf and NaN give 0xff."""
    bits = q.view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint8)
    fraction = bits & 0x7FFFFF
    if round_mode == "up":
        up = fraction != 0
    elif round_mode == "nearest":
        up = ((fraction & 0x400000) != 0) & (((fraction & 0x3FFFFF) != 0) | (exponent > 0))
    else:
        up = np.zeros(q.shape, bool)
    up &= exponent != 0xFF
    if saturate:
        up &= exponent != 0xFE
    np.add(exponent, up, out=out.view(np.uint8), casting="unsafe")


def infer_quantize(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of quantize_linear: x's shape in the quantized dtype (output_dtype, else the zero
    point's, else uint8)."""
    x = tuple(in_shapes[0])
    scale_layout("quantize_linear", x, tuple(in_shapes[1]), in_shapes[2], int(attrs["axis"]))
    q_dtype = _quantized_dtype(attrs, in_dtypes[2])
    _check_e8m0("quantize_linear", q_dtype, in_dtypes[2], attrs["round_mode"])
    return (x,), (q_dtype,)


def infer_dequantize(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of dequantize_linear: x's shape in the scale's dtype."""
    x = tuple(in_shapes[0])
    scale_layout("dequantize_linear", x, tuple(in_shapes[1]), in_shapes[2], int(attrs["axis"]))
    _check_e8m0("dequantize_linear", in_dtypes[0], in_dtypes[2], "up")
    return (x,), (in_dtypes[1],)


def _broadcastable(ndim: int, axis: int | None, length: int) -> tuple[int, ...]:
    """The shape that lines a per-axis vector up with x (a scalar stays a scalar)."""
    if axis is None:
        return ()
    shape = [1] * ndim
    shape[axis] = length
    return tuple(shape)


def _float32_scratch(ctx: KernelContext, shape: tuple) -> np.ndarray:
    """The float32 buffer of x's shape a CPU kernel computes in, made once at bind: refused with the
    numbers (OutOfMemoryError) before anything is allocated when the device cannot hold it, as every
    backend allocation is."""
    ctx.backend.check_fits(shape_nbytes(shape, 4), tag=f"stage {ctx.stage!r} float32 scratch")
    return np.empty(shape, np.float32)  # host memory: the kernel is NumPy's


def _quantize_bind(ctx: KernelContext):
    x_shape = tuple(ctx.in_shapes[0])
    axis = scale_layout(
        "quantize_linear", x_shape, tuple(ctx.in_shapes[1]), ctx.in_shapes[2], int(ctx.attrs["axis"])
    )
    vec = _broadcastable(len(x_shape), axis, x_shape[axis] if axis is not None else 1)
    out_dtype = ctx.out_dtypes[0]
    is_int = out_dtype in INTEGER_QUANTIZED
    limits = (ml_dtypes.iinfo if is_int else ml_dtypes.finfo)(numpy_dtype(out_dtype))  # int4's too
    saturate = bool(ctx.attrs["saturate"])
    round_mode = ctx.attrs["round_mode"]
    buf = _float32_scratch(ctx, x_shape)

    def kernel(inputs, outputs, stream):
        x, scale, zero = inputs
        with np.errstate(all="ignore"):  # IEEE: an overflowing quotient is inf, 0 / 0 NaN
            np.divide(x, scale.reshape(vec), out=buf, dtype=np.float32)
        if out_dtype == _E8M0:  # no zero point (infer_quantize refuses one)
            to_e8m0(buf, outputs[0], saturate=saturate, round_mode=round_mode)
            return
        if is_int:
            np.rint(buf, out=buf)  # round half to even
        if zero is not None:
            np.add(buf, zero.reshape(vec).astype(np.float32), out=buf)
        if is_int or saturate:
            np.clip(buf, limits.min, limits.max, out=buf)  # NaN stays NaN (float8) before the cast
        with np.errstate(invalid="ignore", over="ignore"):
            np.copyto(outputs[0], buf, casting="unsafe")

    return kernel


def _dequantize_bind(ctx: KernelContext):
    x_shape = tuple(ctx.in_shapes[0])
    axis = scale_layout(
        "dequantize_linear", x_shape, tuple(ctx.in_shapes[1]), ctx.in_shapes[2], int(ctx.attrs["axis"])
    )
    vec = _broadcastable(len(x_shape), axis, x_shape[axis] if axis is not None else 1)
    buf = _float32_scratch(ctx, x_shape)

    def kernel(inputs, outputs, stream):
        x, scale, zero = inputs
        np.copyto(buf, x, casting="unsafe")  # every quantized value is exact in float32
        if zero is not None:
            np.subtract(buf, zero.reshape(vec).astype(np.float32), out=buf)
        np.multiply(buf, scale.reshape(vec), out=buf, dtype=np.float32)
        with np.errstate(over="ignore"):  # IEEE: past a 16-bit scale's range the product is inf
            np.copyto(outputs[0], buf, casting="unsafe")

    return kernel


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of quantize_linear and dequantize_linear (one set per registry)."""
    axis = Attr("axis", "int", 1, doc="the axis a 1-d scale runs along (per-axis quantization)")
    scale_doc = "a scalar or [1] (per tensor), or 1-d of x's size along axis (per axis)"
    return [
        builtin_operator(
            "quantize_linear",
            doc="y = saturate(round_half_even(x / scale) + zero_point) in a quantized type (8-bit, 16-bit "
            "and sub-byte integers, float8, float4_e2m1fn).",
            inputs=[
                Port("x", dtype="T"),
                Port("scale", dtype="T", doc=scale_doc),
                Port(
                    "zero_point",
                    dtype=QUANTIZED_DTYPES,
                    optional=True,
                    doc="same shape as scale; its dtype is the output's",
                ),
            ],
            outputs=[Port("y", doc="x's shape, a quantized type")],
            attrs=[
                axis,
                Attr(
                    "saturate",
                    "bool",
                    True,
                    doc="float8 only: clip to the largest finite value (integers and float4_e2m1fn, which "
                    "has no infinity, always saturate)",
                ),
                Attr(
                    "round_mode",
                    "str",
                    "up",
                    choices=ROUND_MODES,
                    doc="float8_e8m0fnu only (ONNX Cast's): the exponent rounded up, down or to nearest",
                ),
                Attr(
                    "output_dtype",
                    "dtype",
                    None,
                    doc="the quantized dtype (default: the zero point's, else uint8)",
                ),
            ],
            dtype_vars={"T": SCALE_DTYPES},
            variant_dtypes=SCALE_DTYPES | QUANTIZED_DTYPES,
            infer=infer_quantize,
            bind=_quantize_bind,
            cuda=cuda_variant(cuda.quantize_bind(scale_layout), _CUDA_DTYPES),
            onnx="QuantizeLinear",
        ),
        builtin_operator(
            "dequantize_linear",
            doc="y = (x - zero_point) * scale, from a quantized type to the scale's type.",
            inputs=[
                Port("x", dtype="Q"),
                Port("scale", dtype=SCALE_DTYPES, doc=scale_doc),
                Port("zero_point", dtype="Q", optional=True, doc="same shape as scale, x's dtype"),
            ],
            outputs=[Port("y", doc="x's shape, the scale's dtype")],
            attrs=[axis],
            dtype_vars={"Q": QUANTIZED_DTYPES},
            variant_dtypes=SCALE_DTYPES | QUANTIZED_DTYPES,
            infer=infer_dequantize,
            bind=_dequantize_bind,
            cuda=cuda_variant(cuda.dequantize_bind(scale_layout), _CUDA_DTYPES),
            onnx="DequantizeLinear",
        ),
    ]
