"""The elementwise family's NumPy reference kernels (the CPU variant, and the truth the CUDA kernels are
tested against).

Kernels write their preallocated outputs in place and never return arrays. Half types (float16,
bfloat16) are computed in float32 and rounded once on the store; float64 is computed in float64.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import ml_dtypes
import numpy as np

from ...descriptor import KernelContext
from ...dtypes import get_dtype
from ...errors import DTypeMismatchError, InvalidArgumentError
from .._common import FLOATS, HALF_DTYPES, host_scratch

__all__ = [
    "bitcast_bind",
    "infer_bitcast",
    "erf",
    "gelu_into",
    "gelu_tanh_into",
    "relu_into",
    "silu_into",
    "sigmoid_into",
    "tanh_into",
    "hardswish_into",
    "erf_into",
    "exp_into",
    "sqrt_into",
    "math_into",
    "make_silu",
    "make_shrink",
    "infer_shrink",
    "bitwise_not_into",
    "bit_shift",
    "bit_shift_bind",
    "unary_bind",
    "fixed",
    "make_gelu",
    "make_scale",
    "binary_bind",
    "identity_bind",
    "cast_bind",
    "infer_precision_cast",
]

Compute = Callable[[np.ndarray, np.ndarray], None]  # compute(x, out): out = f(x); out never aliases x

INV_SQRT2 = 1.0 / math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)

# erf coefficients from FreeBSD msun s_erf.c. Copyright (C) 1993 by Sun Microsystems, Inc. All rights
# reserved. Developed at SunSoft, a Sun Microsystems, Inc. business. Permission to use, copy, modify,
# and distribute this software is freely granted, provided that this notice is preserved.
_ERX = 8.45062911510467529297e-01
_PP = (
    1.28379167095512558561e-01,
    -3.25042107247001499370e-01,
    -2.84817495755985104766e-02,
    -5.77027029648944159157e-03,
    -2.37630166566501626084e-05,
)
_QQ = (
    1.0,
    3.97917223959155352819e-01,
    6.50222499887672944485e-02,
    5.08130628187576562776e-03,
    1.32494738004321644526e-04,
    -3.96022827877536812320e-06,
)
_PA = (
    -2.36211856075265944077e-03,
    4.14856118683748331666e-01,
    -3.72207876035701323847e-01,
    3.18346619901161753674e-01,
    -1.10894694282396677476e-01,
    3.54783043256182359371e-02,
    -2.16637559486879084300e-03,
)
_QA = (
    1.0,
    1.06420880400844228286e-01,
    5.40397917702171048937e-01,
    7.18286544141962662868e-02,
    1.26171219808761642112e-01,
    1.36370839120290507362e-02,
    1.19844998467991074170e-02,
)
_RA = (
    -9.86494403484714822705e-03,
    -6.93858572707181764372e-01,
    -1.05586262253232909814e01,
    -6.23753324503260060396e01,
    -1.62396669462573470355e02,
    -1.84605092906711035994e02,
    -8.12874355063065934246e01,
    -9.81432934416914548592e00,
)
_SA = (
    1.0,
    1.96512716674392571292e01,
    1.37657754143519042600e02,
    4.34565877475229228821e02,
    6.45387271733267880336e02,
    4.29008140027567833386e02,
    1.08635005541779435134e02,
    6.57024977031928170135e00,
    -6.04244152148580987438e-02,
)
_RB = (
    -9.86494292470009928597e-03,
    -7.99283237680523006574e-01,
    -1.77579549177547519889e01,
    -1.60636384855821916062e02,
    -6.37566443368389627722e02,
    -1.02509513161107724954e03,
    -4.83519191608651397019e02,
)
_SB = (
    1.0,
    3.03380607434824582924e01,
    3.25792512996573918826e02,
    1.53672958608443695994e03,
    3.19985821950859553908e03,
    2.55305040643316442583e03,
    4.74528541206955367215e02,
    -2.24409524465858183362e01,
)


def _poly(z: np.ndarray, coeffs: tuple[float, ...]) -> np.ndarray:
    """Horner evaluation of ``sum(c[i] * z**i)`` in the dtype of ``z``."""
    acc = np.full_like(z, coeffs[-1])
    for c in coeffs[-2::-1]:
        acc *= z
        acc += c
    return acc


def erf(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The error function, vectorised (NumPy has none and SciPy is not a dependency).

    Piecewise rational approximations of fdlibm's ``s_erf.c``; in float64 the error is a few ulp.
    Evaluated in the dtype of ``x`` (float32 or float64).

    Parameters
    ----------
    x : ndarray of float32 or float64
    out : ndarray, optional
        Where to write the result; may be ``x`` itself.

    Returns
    -------
    ndarray
        ``out`` (or a new array) holding ``erf(x)``; NaN stays NaN, ``erf(±inf) = ±1``.
    """
    x = np.asarray(x)
    if out is None:
        out = np.empty_like(x)
    ax = np.abs(x)
    res = np.empty_like(ax)
    # |x| < 0.84375: x + x * P(x^2) / Q(x^2)
    m = ax < 0.84375
    t = ax[m]
    z = t * t
    res[m] = t + t * (_poly(z, _PP) / _poly(z, _QQ))
    # 0.84375 <= |x| < 1.25: erx + P(|x|-1) / Q(|x|-1)
    m = (ax >= 0.84375) & (ax < 1.25)
    s = ax[m] - 1.0
    res[m] = _ERX + _poly(s, _PA) / _poly(s, _QA)
    # 1.25 <= |x| < 6: 1 - exp(-x^2 - 0.5625 + R(1/x^2) / S(1/x^2)) / |x|
    for lo, hi, num, den in ((1.25, 1.0 / 0.35, _RA, _SA), (1.0 / 0.35, 6.0, _RB, _SB)):
        m = (ax >= lo) & (ax < hi)
        t = ax[m]
        s = 1.0 / (t * t)
        res[m] = 1.0 - np.exp(-t * t - 0.5625 + _poly(s, num) / _poly(s, den)) / t
    # |x| >= 6 rounds to 1; NaN compares false everywhere above and must stay NaN.
    m = ~(ax < 6.0)
    res[m] = np.where(np.isnan(ax[m]), ax[m], 1.0)
    np.copysign(res, x, out=out)
    return out


def relu_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = max(x, 0)`` (NaN propagates)."""
    np.maximum(x, 0, out=out)


def silu_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = x * sigmoid(x) = x / (1 + exp(-x))``; ``out`` must not alias ``x``."""
    with np.errstate(over="ignore"):  # exp(-x) -> inf for very negative x gives the right limit, -0
        np.negative(x, out=out)
        np.exp(out, out=out)
    np.add(out, 1.0, out=out)
    np.divide(x, out, out=out)


def make_silu(ctx: KernelContext) -> Compute:
    """``out = x * sigmoid(alpha * x) = x / (1 + exp(-alpha x))`` (ONNX Swish); alpha 1 is SiLU,
    :func:`silu_into` itself."""
    alpha = float(ctx.attrs["alpha"])
    if alpha == 1.0:
        return silu_into

    def swish_into(x, out):
        # exp(-alpha x) -> inf gives the limit -0, -> 0 the limit x; inf * 0 (alpha 0) is NaN, as the formula
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            np.multiply(x, -alpha, out=out)
            np.exp(out, out=out)
        np.add(out, 1.0, out=out)
        np.divide(x, out, out=out)

    return swish_into


def sigmoid_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = 1 / (1 + exp(-x))``; ``out`` must not alias ``x``."""
    with np.errstate(over="ignore"):  # exp(-x) -> inf for very negative x gives the right limit, 0
        np.negative(x, out=out)
        np.exp(out, out=out)
    np.add(out, 1.0, out=out)
    np.reciprocal(out, out=out)


def tanh_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = tanh(x)``."""
    np.tanh(x, out=out)


def hardswish_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = x * clip(x / 6 + 1/2, 0, 1)`` (ONNX HardSwish: alpha 1/6, beta 0.5; NaN propagates, and
    -inf gives -inf * 0 = NaN as IEEE says)."""
    np.multiply(x, 1.0 / 6.0, out=out)
    np.add(out, 0.5, out=out)
    np.clip(out, 0.0, 1.0, out=out)
    with np.errstate(invalid="ignore"):
        np.multiply(out, x, out=out)


def erf_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = erf(x)`` (:func:`erf`)."""
    erf(x, out=out)


def exp_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = exp(x)``; overflow gives inf, as in IEEE arithmetic."""
    with np.errstate(over="ignore"):
        np.exp(x, out=out)


def sqrt_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = sqrt(x)``; a negative input gives NaN (ONNX Sqrt), without a warning."""
    with np.errstate(invalid="ignore"):
        np.sqrt(x, out=out)


def neg_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = -x``."""
    np.negative(x, out=out)


def abs_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = |x|`` (abs(-0) = +0; NaN stays NaN)."""
    np.abs(x, out=out)


def log_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = ln(x)``; log(0) = -inf and a negative input gives NaN (IEEE), without a warning."""
    with np.errstate(divide="ignore", invalid="ignore"):
        np.log(x, out=out)


def reciprocal_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = 1 / x``; 1/0 = inf (IEEE), without a warning."""
    with np.errstate(divide="ignore"):
        np.reciprocal(x, out=out)


def sin_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = sin(x)``; sin(+-inf) is NaN (IEEE), without a warning."""
    with np.errstate(invalid="ignore"):
        np.sin(x, out=out)


def cos_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = cos(x)``; cos(+-inf) is NaN (IEEE), without a warning."""
    with np.errstate(invalid="ignore"):
        np.cos(x, out=out)


def math_into(ufunc: np.ufunc) -> Compute:
    """``out = ufunc(x)`` for tan and the inverse and hyperbolic functions: IEEE results without a
    warning (NaN out of the domain, as arcsin(2) or arccosh(0.5); +-inf for arctanh(+-1) and on
    overflow, as sinh(1000))."""

    def compute(x, out):
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            ufunc(x, out=out)

    return compute


def floor_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = floor(x)`` (-0, infinities and NaN kept)."""
    np.floor(x, out=out)


def ceil_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = ceil(x)`` (ceil(-0.5) = -0; infinities and NaN kept)."""
    np.ceil(x, out=out)


def round_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = round(x)``, halves to the even integer (ONNX Round: round(2.5) = 2, round(-1.5) = -2)."""
    np.rint(x, out=out)


def sign_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = sign(x)``: -1, 0 or 1 (sign(-0) = 0, NaN stays NaN)."""
    np.sign(x, out=out)


def softplus_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = ln(1 + exp(x))``, as ``max(x, 0) + log1p(exp(-|x|))``: no overflow for large x (the
    result is x), no cancellation for very negative x (the result is exp(x)); NaN propagates."""
    np.abs(x, out=out)
    np.negative(out, out=out)
    np.exp(out, out=out)
    np.log1p(out, out=out)
    np.add(out, np.maximum(x, 0), out=out)


def softsign_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = x / (1 + |x|)`` (ONNX Softsign; IEEE: +-inf gives inf / inf = NaN, as the formula)."""
    np.abs(x, out=out)
    np.add(out, 1.0, out=out)
    with np.errstate(invalid="ignore"):
        np.divide(x, out, out=out)


def mish_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = x * tanh(softplus(x))`` (ONNX Mish); softplus as :func:`softplus_into`."""
    softplus_into(x, out)
    np.tanh(out, out=out)
    with np.errstate(invalid="ignore"):  # -inf * tanh(0) = -inf * 0 is NaN (IEEE), as the formula
        np.multiply(out, x, out=out)


def make_elu(ctx: KernelContext) -> Compute:
    """``out = x`` where x >= 0, ``alpha * (exp(x) - 1)`` below (expm1: accurate near 0); NaN
    propagates."""
    alpha = float(ctx.attrs["alpha"])

    def elu_into(x, out):
        np.expm1(np.minimum(x, 0), out=out)
        np.multiply(out, alpha, out=out)
        np.copyto(out, x, where=~(x < 0))

    return elu_into


def make_celu(ctx: KernelContext) -> Compute:
    """``out = max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` (ONNX Celu): x where x >= 0,
    ``alpha * expm1(x / alpha)`` below (the min's argument is never positive there, whatever alpha's
    sign); NaN propagates."""
    alpha = float(ctx.attrs["alpha"])

    def celu_into(x, out):
        with np.errstate(divide="ignore", invalid="ignore"):  # alpha 0: x / 0 = -inf, the limit relu
            np.divide(np.minimum(x, 0), alpha, out=out)
        np.expm1(out, out=out)
        np.multiply(out, alpha, out=out)
        np.copyto(out, x, where=~(x < 0))

    return celu_into


def make_thresholded_relu(ctx: KernelContext) -> Compute:
    """``out = x`` where x > alpha, else 0 (ONNX ThresholdedRelu: a NaN is not above alpha, so 0)."""
    alpha = float(ctx.attrs["alpha"])

    def thresholded_relu_into(x, out):
        out[...] = 0
        np.copyto(out, x, where=x > alpha)

    return thresholded_relu_into


def _shrink_value(x: float, lambd: float, bias: float) -> float:
    """One element of Shrink as the ONNX reference computes it, in float64."""
    return x + bias if x < -lambd else (x - bias if x > lambd else 0.0)


def infer_shrink(in_shapes: tuple, in_dtypes: tuple, attrs) -> tuple[tuple, tuple]:
    """y has x's shape and dtype. On the integers the ONNX reference computes ``x +- bias`` in float64
    and truncates toward zero into the dtype: exact for the integers of up to 32 bits, defined where every
    result stays in the dtype's range (checked here at the ends of both branches, where the results are
    extreme, since they grow with x); int64 and uint64 are refused (float64 rounds their large values,
    and the cast of a result past the range, which x near the maximum gives for any small bias, is
    undefined).

    Raises
    ------
    DTypeMismatchError
        int64 or uint64 x.
    InvalidArgumentError
        An integer x with a lambd and bias that take some value of the dtype out of its range.
    """
    dtype, lambd, bias = in_dtypes[0], float(attrs["lambd"]), float(attrs["bias"])
    if dtype in ("int64", "uint64"):
        raise DTypeMismatchError(
            f"shrink of {dtype}: the ONNX reference computes x +- bias in float64, inexact above 2**53 and "
            f"undefined past the {dtype} range; cast x to float64 (or to a 32-bit integer) first",
            port="x",
            dtype=dtype,
        )
    if dtype is not None and dtype not in FLOATS:
        info = np.iinfo(dtype)
        below = (info.min, min(math.ceil(-lambd) - 1, info.max)) if math.isfinite(lambd) else None
        above = (
            (max(math.floor(lambd) + 1, math.ceil(-lambd), info.min), info.max)
            if math.isfinite(lambd)
            else None
        )
        if math.isinf(lambd):  # -inf: every x is below -lambd; +inf: none is outside [-lambd, lambd]
            below = (info.min, info.max) if lambd < 0 else None
        for ends in (below, above):
            if ends is None or ends[0] > ends[1]:
                continue
            for x in ends:
                y = _shrink_value(float(x), lambd, bias)
                if not (math.isfinite(y) and info.min <= math.trunc(y) <= info.max):
                    raise InvalidArgumentError(
                        f"shrink of {dtype}: lambd={lambd!r} and bias={bias!r} take x={x} to {y!r}, "
                        f"outside {dtype}'s range [{info.min}, {info.max}] (the ONNX reference's cast is "
                        "undefined there); choose a smaller bias, or cast x to a float first",
                        port="x",
                        dtype=dtype,
                        lambd=lambd,
                        bias=bias,
                    )
    return (tuple(in_shapes[0]),), (dtype,)


def make_shrink(ctx: KernelContext) -> Compute:
    """``out = x + bias`` where x < -lambd, ``x - bias`` where x > lambd, else 0 (ONNX Shrink; NaN: 0).
    Floats in their own dtype (half types: float32, :func:`unary_bind`); integers in float64, truncated
    toward zero, as the reference (:func:`infer_shrink` has checked that every result fits)."""
    lambd, bias = float(ctx.attrs["lambd"]), float(ctx.attrs["bias"])

    def shrink_into(x, out):
        v = x if x.dtype.kind == "f" else x.astype(np.float64)
        lo, hi = v.dtype.type(-lambd), v.dtype.type(lambd)
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is NaN; a huge bias overflows
            y = np.where(v < lo, v + v.dtype.type(bias), np.where(v > hi, v - v.dtype.type(bias), 0))
        np.copyto(out, y, casting="unsafe")

    return shrink_into


def bitwise_not_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = ~x`` (the integers)."""
    np.bitwise_not(x, out=out)


def bit_shift(a: np.ndarray, b: np.ndarray, out: np.ndarray, left: bool) -> None:
    """``out = a << b`` or ``a >> b`` broadcast (ONNX BitShift, opset 28): a left shift drops the bits
    past the top (the sign bit included, computed in the unsigned type of the same width), a right
    shift of a signed value is arithmetic; an amount below 0 or of at least the bit width gives the sign
    fill alone: 0, or -1 for a right shift of a negative value."""
    a, b = np.broadcast_arrays(a, b)
    bits = a.dtype.itemsize * 8
    valid = (b >= 0) & (b < bits)
    amount = np.where(valid, b, 0)
    if left:
        unsigned = np.dtype(f"u{a.dtype.itemsize}")
        shifted = np.left_shift(a.astype(unsigned), amount.astype(unsigned)).astype(a.dtype)
        fill = np.zeros_like(a)
    else:
        shifted = np.right_shift(a, amount.astype(a.dtype))
        fill = np.where(a < 0, -1, 0).astype(a.dtype)
    np.copyto(out, np.where(valid, shifted, fill))


def bit_shift_bind(ctx: KernelContext):
    """The CPU bind of bit_shift (``direction`` LEFT or RIGHT)."""
    left = ctx.attrs["direction"] == "LEFT"

    def kernel(inputs, outputs, stream):
        bit_shift(inputs[0], inputs[1], outputs[0], left)

    return kernel


def prelu(x: np.ndarray, slope: np.ndarray, out: np.ndarray, dtype=None, casting: str = "same_kind") -> None:
    """``out = x`` where x >= 0, ``slope * x`` below, broadcast (ONNX PRelu; NaN propagates): the
    ufunc-like call :func:`binary_bind` makes (``dtype``: compute in it, then round once into ``out``)."""
    if dtype is not None:
        x, slope = x.astype(dtype), slope.astype(dtype)
    np.copyto(out, np.where(x < 0, slope * x, x), casting="unsafe" if dtype is not None else casting)


def make_leaky_relu(ctx: KernelContext) -> Compute:
    """``out = x`` where x >= 0, ``alpha * x`` below (NaN propagates)."""
    alpha = float(ctx.attrs["alpha"])

    def leaky_relu_into(x, out):
        np.multiply(x, alpha, out=out)
        np.copyto(out, x, where=~(x < 0))

    return leaky_relu_into


def gelu_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = x/2 * (1 + erf(x/sqrt(2)))``; ``out`` must not alias ``x``."""
    np.multiply(x, INV_SQRT2, out=out)
    erf(out, out=out)
    np.add(out, 1.0, out=out)
    np.multiply(out, x, out=out)
    np.multiply(out, 0.5, out=out)


def gelu_tanh_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))``; ``out`` must not alias ``x``."""
    np.multiply(x, x, out=out)
    np.multiply(out, 0.044715, out=out)
    np.add(out, 1.0, out=out)
    np.multiply(out, x, out=out)
    np.multiply(out, SQRT_2_OVER_PI, out=out)
    np.tanh(out, out=out)
    np.add(out, 1.0, out=out)
    np.multiply(out, x, out=out)
    np.multiply(out, 0.5, out=out)


def unary_bind(make: Callable[[KernelContext], Compute]):
    """A ``Variant.bind`` for a float unary op given ``make(ctx) -> compute(x, out)``."""

    def bind(ctx: KernelContext):
        compute = make(ctx)
        if ctx.in_dtypes[0] not in HALF_DTYPES:

            def kernel(inputs, outputs, stream):
                compute(inputs[0], outputs[0])

            return kernel
        # Half types: widen once into scratch allocated here (not per run), round once on the store.
        xs = host_scratch(ctx, tuple(ctx.in_shapes[0]), np.float32, "float32 scratch of x")
        ys = host_scratch(ctx, tuple(ctx.out_shapes[0]), np.float32, "float32 scratch of y")

        def half_kernel(inputs, outputs, stream):
            np.copyto(xs, inputs[0], casting="unsafe")
            compute(xs, ys)
            np.copyto(outputs[0], ys, casting="unsafe")

        return half_kernel

    return bind


def fixed(compute: Compute) -> Callable[[KernelContext], Compute]:
    """A ``make`` for an op without attributes."""
    return lambda ctx: compute


def make_gelu(ctx: KernelContext) -> Compute:
    return gelu_tanh_into if ctx.attrs["approximate"] == "tanh" else gelu_into


def make_scale(ctx: KernelContext) -> Compute:
    factor = float(ctx.attrs["factor"])

    def scale_into(x, out):
        np.multiply(x, factor, out=out)

    return scale_into


def binary_bind(ufunc: np.ufunc):
    """``c = ufunc(a, b)`` with broadcasting; half types go through a float32 loop, rounded once."""

    def bind(ctx: KernelContext):
        if ctx.in_dtypes[0] in HALF_DTYPES:

            def half_kernel(inputs, outputs, stream):
                with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are the answer, not an error
                    ufunc(inputs[0], inputs[1], out=outputs[0], dtype=np.float32, casting="unsafe")

            return half_kernel

        def kernel(inputs, outputs, stream):
            with np.errstate(all="ignore"):
                ufunc(inputs[0], inputs[1], out=outputs[0])

        return kernel

    return bind


def identity_bind(ctx: KernelContext):
    def kernel(inputs, outputs, stream):
        np.copyto(outputs[0], inputs[0])

    return kernel


#: float4_e2m1fn's magnitudes by the three low bits of its code.
_E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], np.float32)


def _sub_byte_value(x: np.ndarray) -> np.ndarray:
    """The values of a sub-byte array read from its bytes, as ml_dtypes reads them: an integer type's low
    bits (sign-extended for int4, int2) as int64; float4_e2m1fn's code as float32, any high bit its sign."""
    dtype, raw = get_dtype(x.dtype), x.view(np.uint8).astype(np.int64)
    if dtype.is_floating:
        magnitude = _E2M1[raw & 0x7]
        return np.where(raw & 0xF8, -magnitude, magnitude)
    bits = dtype.value_bits
    low = raw & ((1 << bits) - 1)
    return low - ((low >> (bits - 1)) << bits) if _signed(dtype) else low


def _signed(dtype) -> bool:
    return dtype.name in ("int4", "int2")


def _sub_byte_store(values: np.ndarray, out: np.ndarray) -> None:
    """``values`` (a NumPy bool, integer or float array) cast into the sub-byte array ``out``: an integer
    into int4/uint4/int2/uint2 keeps its low bits (two's complement; the byte holds them alone, as
    ml_dtypes stores them); a float truncates toward zero and gives 0 outside the type's range, NaN and inf
    too (the spec leaves it undefined; ml_dtypes 0.7's choice, and the CUDA kernel's); into
    float4_e2m1fn through float32, rounding to nearest even and saturating at +-6."""
    dtype = get_dtype(out.dtype)
    if dtype.is_floating:
        with np.errstate(invalid="ignore", over="ignore"):
            np.copyto(out, np.asarray(values, np.float32).astype(out.dtype))
        return
    if values.dtype.kind == "f":
        info = ml_dtypes.iinfo(out.dtype)
        with np.errstate(invalid="ignore"):
            whole = np.trunc(values.astype(np.float64))
            inside = (whole >= info.min) & (whole <= info.max)
        ints = np.where(inside, whole, 0).astype(np.int64)
    else:
        ints = values.astype(np.int64)
    out.view(np.uint8)[...] = (ints & ((1 << dtype.value_bits) - 1)).astype(np.uint8)


def cast_bind(ctx: KernelContext):
    # NumPy's unsafe cast is C's: float -> int truncates toward zero, anything -> bool is "!= 0",
    # bool -> number is 0/1. NaN, inf and out-of-range values give unspecified integers, as in C.
    # The sub-byte types go through their values (_sub_byte_value, _sub_byte_store): ml_dtypes' own
    # casts among them, and into some types, differ between its versions or are missing in older ones.
    sub_in, sub_out = get_dtype(ctx.in_dtypes[0]).is_sub_byte, get_dtype(ctx.out_dtypes[0]).is_sub_byte
    if not (sub_in or sub_out):

        def kernel(inputs, outputs, stream):
            with np.errstate(invalid="ignore", over="ignore"):
                np.copyto(outputs[0], inputs[0], casting="unsafe")

        return kernel

    def sub_byte_kernel(inputs, outputs, stream):
        values = _sub_byte_value(inputs[0]) if sub_in else inputs[0]
        if values.dtype.kind not in "biuf":  # bfloat16, the float8s: through float32 (exact)
            values = values.astype(np.float32)
        if sub_out:
            _sub_byte_store(values, outputs[0])
            return
        if outputs[0].dtype.kind not in "biuf":  # into bfloat16 or a float8: from float32
            values = values.astype(np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            np.copyto(outputs[0], values, casting="unsafe")

    return sub_byte_kernel


def infer_bitcast(in_shapes: tuple, in_dtypes: tuple, attrs) -> tuple[tuple, tuple]:
    """bitcast keeps the shape and takes ``dtype``, whose values must be as wide as x's (ONNX BitCast): a
    sub-byte type pairs with another of its width alone (int4, uint4, float4_e2m1fn; int2, uint2), whose
    byte holds the same bits where its value is.

    Raises
    ------
    DTypeMismatchError
        A target dtype of another width.
    """
    source, target = get_dtype(in_dtypes[0]), get_dtype(attrs["dtype"])
    if source.value_bits != target.value_bits:
        raise DTypeMismatchError(
            f"bitcast: {source.name} is {source.value_bits} bits wide and {target.name} "
            f"{target.value_bits}; a bitcast reinterprets bits between dtypes of the same width (use cast "
            "to convert values)",
            port="x",
            expected=f"a {target.value_bits}-bit dtype",
            got=source.name,
        )
    return (tuple(in_shapes[0]),), (target.name,)


def bitcast_bind(ctx: KernelContext):
    """x's bytes as y's dtype (NumPy's ``view``): no value is converted, bit patterns kept."""

    def kernel(inputs, outputs, stream):
        np.copyto(outputs[0].view(inputs[0].dtype), inputs[0])

    return kernel


def infer_precision_cast(in_shapes: tuple, in_dtypes: tuple, attrs) -> tuple[tuple, tuple]:
    """Floats take the target dtype (the ``like`` input's, else the ``dtype`` attribute); the rest keep
    theirs."""
    target = in_dtypes[1] if len(in_dtypes) > 1 and in_dtypes[1] is not None else attrs["dtype"]
    return (tuple(in_shapes[0]),), (target if in_dtypes[0] in FLOATS else in_dtypes[0],)
