"""The elementwise operator family: activations (relu, silu (swish), gelu, sigmoid, tanh, leaky_relu, elu,
celu, mish, softplus, shrink, ...), scale, identity, neg/abs/log/reciprocal, the trigonometric and
hyperbolic functions, rounding, add/mul/max/min/prelu/mod, the bitwise ops and shifts, bias_add and casts.

This file declares each operator (ports, attributes, dtypes) with its two variants: the NumPy reference
of ``reference.py`` and the CUDA kernels of ``cuda.py`` (``elementwise.cu``, ``cast.cu``). Adding an
operator here is one entry in :func:`descriptors`.
"""

from __future__ import annotations

import numpy as np

from ...descriptor import REQUIRED, Attr, OperatorDescriptor, Port
from .._common import FLOATS, INTS, NUMERIC, builtin_operator
from ..kernel import cuda_variant
from . import cuda, reference
from .integer import divide, power
from .reference import (
    binary_bind,
    bit_shift_bind,
    bitcast_bind,
    cast_bind,
    fixed,
    identity_bind,
    infer_bitcast,
    infer_precision_cast,
    infer_shrink,
    make_celu,
    make_elu,
    make_gelu,
    make_leaky_relu,
    make_scale,
    make_shrink,
    make_silu,
    make_thresholded_relu,
    math_into,
    unary_bind,
)

__all__ = ["descriptors"]


def _unary(
    name: str,
    doc: str,
    make,
    attrs=(),
    *,
    kernel: str | None = None,
    x: str = "x",
    y: str = "y",
    onnx: str = "",
    dtypes=FLOATS,
    infer=None,
) -> OperatorDescriptor:
    """A unary operator of ``dtypes`` (floats by default): ``make(ctx) -> compute(x, out)`` on the CPU,
    the ``kernel`` op of elementwise.cu (default: ``name``) on CUDA, for ``cuda.UNARY_DTYPES`` of it;
    ``infer``: an operator's own rule (y is x's shape and dtype by default)."""
    kernel = kernel or name
    return builtin_operator(
        name,
        doc=doc,
        inputs=[Port(x, shape=None, dtype="T", doc="any shape")],
        outputs=[Port(y, shape=x, dtype="T")],
        attrs=attrs,
        dtype_vars={"T": dtypes},
        variant_dtypes=dtypes,
        infer=infer,
        bind=unary_bind(make),
        cuda=cuda_variant(cuda.unary_bind(kernel), frozenset(cuda.UNARY_DTYPES[kernel]) & dtypes),
        onnx=onnx,
    )


# tan and the inverse and hyperbolic functions: (name, NumPy ufunc, ONNX op, doc)
_MATH = (
    ("tan", np.tan, "Tan", "Tangent: y = tan(x); tan(+-inf) is NaN"),
    ("asin", np.arcsin, "Asin", "Arcsine: y = asin(x) in [-pi/2, pi/2]; |x| > 1 gives NaN"),
    ("acos", np.arccos, "Acos", "Arccosine: y = acos(x) in [0, pi]; |x| > 1 gives NaN"),
    ("atan", np.arctan, "Atan", "Arctangent: y = atan(x) in [-pi/2, pi/2]; atan(+-inf) = +-pi/2"),
    ("sinh", np.sinh, "Sinh", "Hyperbolic sine: y = sinh(x); overflow gives +-inf"),
    ("cosh", np.cosh, "Cosh", "Hyperbolic cosine: y = cosh(x); overflow gives inf"),
    ("asinh", np.arcsinh, "Asinh", "Inverse hyperbolic sine: y = asinh(x)"),
    ("acosh", np.arccosh, "Acosh", "Inverse hyperbolic cosine: y = acosh(x); x < 1 gives NaN"),
    ("atanh", np.arctanh, "Atanh", "Inverse hyperbolic tangent: y = atanh(x); +-1 gives +-inf, |x| > 1 NaN"),
)


def _binary(name: str, doc: str, ufunc: np.ufunc, onnx: str, dtypes=NUMERIC) -> OperatorDescriptor:
    """``c = a op b`` with broadcasting: ``dtypes`` on the CPU, ``cuda.BINARY_DTYPES[name]`` on CUDA."""
    return builtin_operator(
        name,
        doc=doc,
        inputs=[Port("a", dtype="T"), Port("b", dtype="T")],
        outputs=[Port("c", shape={"broadcast": ["a", "b"]}, dtype="T")],
        dtype_vars={"T": dtypes},
        variant_dtypes=dtypes,
        bind=binary_bind(ufunc),
        cuda=cuda_variant(cuda.binary_bind(name), cuda.BINARY_DTYPES[name]),
        onnx=onnx,
    )


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of every elementwise operator (one set per registry).

    Returns
    -------
    list of OperatorDescriptor
        ``identity, relu, silu, gelu, scale, sigmoid, tanh, hardswish, erf, exp, sqrt, neg, abs, log,
        reciprocal, leaky_relu, sin, cos, floor, ceil, round, sign, softplus, softsign, mish, elu, celu,
        thresholded_relu, precision_cast, add, sub, mul, div, pow, max, min, prelu, bias_add, cast, bitcast,
        silu_activation, tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh, shrink, bitwise_not,
        bitwise_and, bitwise_or, bitwise_xor, bit_shift``.
    """
    silu_make = fixed(reference.silu_into)
    return [
        builtin_operator(
            "identity",
            doc="Copy x to y unchanged (any dtype, any shape).",
            inputs=[Port("x")],
            outputs=[Port("y", shape="x")],
            bind=identity_bind,
            cuda=cuda_variant(cuda.copy_bind, None),
            onnx="Identity",
            view=True,
        ),
        _unary("relu", "Rectified linear unit: y = max(x, 0).", fixed(reference.relu_into), onnx="Relu"),
        # One operator for SiLU and ONNX Swish: swish is silu with a slope inside the sigmoid, and silu's
        # kernel takes it as its alpha (1: bit-identical to SiLU).
        _unary(
            "silu",
            "Sigmoid linear unit, or swish: y = x * sigmoid(alpha * x); alpha 1 is SiLU (ONNX Swish).",
            make_silu,
            attrs=[Attr("alpha", "float", 1.0, doc="the slope inside the sigmoid (1: SiLU)")],
            onnx="Swish",
        ),
        _unary(
            "gelu",
            "Gaussian error linear unit: y = x * Phi(x), exact (erf) or tanh approximation.",
            make_gelu,
            attrs=[
                Attr(
                    "approximate",
                    "str",
                    "none",
                    choices=("none", "tanh"),
                    doc="'none': erf form; 'tanh': tanh approximation",
                )
            ],
            onnx="Gelu",
        ),
        _unary(
            "scale",
            "Multiply by a constant: y = factor * x.",
            make_scale,
            attrs=[Attr("factor", "float", 1.0, doc="the multiplier")],
        ),
        _unary(
            "sigmoid",
            "Logistic sigmoid: y = 1 / (1 + exp(-x)) (ONNX Sigmoid).",
            fixed(reference.sigmoid_into),
            onnx="Sigmoid",
        ),
        _unary(
            "tanh", "Hyperbolic tangent: y = tanh(x) (ONNX Tanh).", fixed(reference.tanh_into), onnx="Tanh"
        ),
        _unary(
            "hardswish",
            "Hard swish: y = x * clip(x / 6 + 1/2, 0, 1) (ONNX HardSwish).",
            fixed(reference.hardswish_into),
            onnx="HardSwish",
        ),
        _unary("erf", "Error function: y = erf(x) (ONNX Erf).", fixed(reference.erf_into), onnx="Erf"),
        _unary(
            "exp",
            "Exponential: y = exp(x); overflow gives inf (ONNX Exp).",
            fixed(reference.exp_into),
            onnx="Exp",
        ),
        _unary(
            "sqrt",
            "Square root: y = sqrt(x); negative x gives NaN (ONNX Sqrt).",
            fixed(reference.sqrt_into),
            onnx="Sqrt",
        ),
        _unary(
            "neg",
            "Negation: y = -x; on integers the dtype's minimum wraps to itself, as NumPy (ONNX Neg).",
            fixed(reference.neg_into),
            onnx="Neg",
            dtypes=NUMERIC,
        ),
        _unary(
            "abs",
            "Absolute value: y = |x|; on integers the dtype's minimum wraps to itself, as NumPy (ONNX Abs).",
            fixed(reference.abs_into),
            onnx="Abs",
            dtypes=NUMERIC,
        ),
        _unary(
            "log",
            "Natural logarithm: y = ln(x); log(0) is -inf, a negative x gives NaN (ONNX Log).",
            fixed(reference.log_into),
            onnx="Log",
        ),
        _unary(
            "reciprocal",
            "Reciprocal: y = 1 / x; 1/0 is inf (ONNX Reciprocal).",
            fixed(reference.reciprocal_into),
            onnx="Reciprocal",
        ),
        _unary(
            "leaky_relu",
            "Leaky rectified linear unit: y = x for x >= 0, alpha * x below (ONNX LeakyRelu).",
            make_leaky_relu,
            attrs=[Attr("alpha", "float", 0.01, doc="the slope below 0")],
            onnx="LeakyRelu",
        ),
        _unary(
            "sin", "Sine: y = sin(x); sin(+-inf) is NaN (ONNX Sin).", fixed(reference.sin_into), onnx="Sin"
        ),
        _unary(
            "cos", "Cosine: y = cos(x); cos(+-inf) is NaN (ONNX Cos).", fixed(reference.cos_into), onnx="Cos"
        ),
        _unary("floor", "Round down: y = floor(x) (ONNX Floor).", fixed(reference.floor_into), onnx="Floor"),
        _unary("ceil", "Round up: y = ceil(x) (ONNX Ceil).", fixed(reference.ceil_into), onnx="Ceil"),
        _unary(
            "round",
            "Round to the nearest integer, halves to even: round(2.5) = 2 (ONNX Round).",
            fixed(reference.round_into),
            onnx="Round",
        ),
        _unary(
            "sign",
            "Sign: y = -1, 0 or 1 (sign(-0) = 0, NaN stays NaN) (ONNX Sign).",
            fixed(reference.sign_into),
            onnx="Sign",
            dtypes=NUMERIC,
        ),
        _unary(
            "softplus",
            "Softplus: y = ln(1 + exp(x)), computed without overflow as max(x, 0) + log1p(exp(-|x|)) "
            "(ONNX Softplus).",
            fixed(reference.softplus_into),
            onnx="Softplus",
        ),
        _unary(
            "softsign",
            "Softsign: y = x / (1 + |x|); +-inf gives NaN, as the formula (ONNX Softsign).",
            fixed(reference.softsign_into),
            onnx="Softsign",
        ),
        _unary(
            "mish",
            "Mish: y = x * tanh(softplus(x)) (ONNX Mish).",
            fixed(reference.mish_into),
            onnx="Mish",
        ),
        _unary(
            "elu",
            "Exponential linear unit: y = x for x >= 0, alpha * (exp(x) - 1) below (ONNX Elu).",
            make_elu,
            attrs=[Attr("alpha", "float", 1.0, doc="the scale of the negative part")],
            onnx="Elu",
        ),
        _unary(
            "celu",
            "Continuously differentiable ELU: y = max(0, x) + min(0, alpha * (exp(x / alpha) - 1)) "
            "(ONNX Celu).",
            make_celu,
            attrs=[Attr("alpha", "float", 1.0, doc="the scale of the negative part")],
            onnx="Celu",
        ),
        _unary(
            "thresholded_relu",
            "Thresholded ReLU: y = x where x > alpha, else 0 (a NaN is not above alpha: 0) "
            "(ONNX ThresholdedRelu).",
            make_thresholded_relu,
            attrs=[Attr("alpha", "float", 1.0, doc="the threshold")],
            onnx="ThresholdedRelu",
        ),
        builtin_operator(
            "precision_cast",
            doc="Cast a float tensor to a precision (inserted by the linker for precision_policy); "
            "non-float tensors pass through unchanged.",
            inputs=[Port("x"), Port("like", optional=True, doc="take this tensor's dtype")],
            outputs=[Port("y", shape="x")],
            attrs=[Attr("dtype", "dtype", "float32", doc="target dtype when 'like' is absent")],
            infer=infer_precision_cast,
            bind=cast_bind,
            cuda=cuda_variant(cuda.cast_bind, None),
            onnx="Cast",
        ),
        _binary("add", "Elementwise sum with NumPy broadcasting: c = a + b.", np.add, "Add"),
        _binary("sub", "Elementwise difference with NumPy broadcasting: c = a - b.", np.subtract, "Sub"),
        _binary("mul", "Elementwise product with NumPy broadcasting: c = a * b.", np.multiply, "Mul"),
        _binary(
            "div",
            "Elementwise quotient with NumPy broadcasting: c = a / b (floats IEEE: x / 0 is +-inf or NaN; "
            "integers truncate toward zero, 0 where b is 0, the minimum / -1 wraps, as ONNX's reference).",
            divide,
            "Div",
        ),
        _binary(
            "pow",
            "Elementwise power with NumPy broadcasting: c = a ** b (floats: a negative base with a "
            "non-integer exponent gives NaN; integers wrap, a negative exponent truncates toward zero).",
            power,
            "Pow",
        ),
        _binary(
            "max",
            "Elementwise maximum with NumPy broadcasting: c = max(a, b); a NaN on either side gives NaN "
            "(ONNX Max of two inputs).",
            np.maximum,
            "Max",
        ),
        _binary(
            "min",
            "Elementwise minimum with NumPy broadcasting: c = min(a, b); a NaN on either side gives NaN "
            "(ONNX Min of two inputs).",
            np.minimum,
            "Min",
        ),
        _binary(
            "mod",
            "Elementwise remainder with the divisor's sign, as NumPy's mod and Python's % (ONNX Mod, "
            "fmod 0); integers: 0 where b is 0.",
            np.mod,
            "Mod",
        ),
        _binary(
            "fmod",
            "Elementwise remainder with the dividend's sign, as C's fmod (ONNX Mod, fmod 1); integers "
            "truncate, 0 where b is 0.",
            np.fmod,
            "Mod",
        ),
        _binary(
            "prelu",
            "Parametric ReLU: c = a where a >= 0, b * a below, b the slope broadcast to a "
            "(ONNX PRelu; NaN propagates).",
            reference.prelu,
            "PRelu",
            FLOATS,
        ),
        builtin_operator(
            "bias_add",
            doc="Add a bias along the last axis: y[..., n] = x[..., n] + bias[n].",
            inputs=[Port("x", shape=["...", "N"], dtype="T"), Port("bias", shape=["N"], dtype="T")],
            outputs=[Port("y", shape="x", dtype="T")],
            dtype_vars={"T": FLOATS},
            variant_dtypes=FLOATS,
            bind=binary_bind(np.add),
            cuda=cuda_variant(cuda.bias_add_bind, FLOATS),
            onnx="Add",
        ),
        builtin_operator(
            "cast",
            doc=(
                "Convert to another dtype (C semantics: float -> int truncates, bool is 0/1). Into int4, "
                "uint4, int2, uint2 an integer keeps its low bits and a float truncates (0 when out of "
                "range, as ml_dtypes); into float4_e2m1fn and the float8s round to nearest even."
            ),
            inputs=[Port("x")],
            outputs=[Port("y", shape="x", dtype="attr:dtype")],
            attrs=[Attr("dtype", "dtype", REQUIRED, doc="name of the output dtype")],
            bind=cast_bind,
            cuda=cuda_variant(cuda.cast_bind, None),
            onnx="Cast",
        ),
        builtin_operator(
            "bitcast",
            doc=(
                "Reinterpret x's bytes as another dtype of the same value width (no value converted; the "
                "sub-byte types pair by their 4 or 2 bits)."
            ),
            inputs=[Port("x")],
            outputs=[Port("y", shape="x", dtype="attr:dtype")],
            attrs=[Attr("dtype", "dtype", REQUIRED, doc="name of the output dtype, as wide as x's")],
            infer=infer_bitcast,
            bind=bitcast_bind,
            cuda=cuda_variant(cuda.bitcast_bind, None),
            onnx="BitCast",
            view=True,
        ),
        _unary(
            "silu_activation",
            "The seed's SiLU module: output = input * sigmoid(input).",
            silu_make,
            kernel="silu",
            x="input",
            y="output",
        ),
        *(
            _unary(name, f"{doc} (ONNX {op}).", fixed(math_into(ufunc)), onnx=op)
            for name, ufunc, op, doc in _MATH
        ),
        _unary(
            "shrink",
            "Shrink: y = x + bias where x < -lambd, x - bias where x > lambd, else 0 (ONNX Shrink; integers "
            "in float64, truncated, as the ONNX reference; not int64 or uint64).",
            make_shrink,
            attrs=[
                Attr("lambd", "float", 0.5, doc="the half-width of the band mapped to 0"),
                Attr("bias", "float", 0.0, doc="subtracted above lambd, added below -lambd"),
            ],
            onnx="Shrink",
            dtypes=NUMERIC,
            infer=infer_shrink,
        ),
        _unary(
            "bitwise_not",
            "Bitwise complement of integers: y = ~x (ONNX BitwiseNot).",
            fixed(reference.bitwise_not_into),
            onnx="BitwiseNot",
            dtypes=INTS,
        ),
        _binary(
            "bitwise_and",
            "Bitwise and of integers with NumPy broadcasting: c = a & b.",
            np.bitwise_and,
            "BitwiseAnd",
            INTS,
        ),
        _binary(
            "bitwise_or",
            "Bitwise or of integers with NumPy broadcasting: c = a | b.",
            np.bitwise_or,
            "BitwiseOr",
            INTS,
        ),
        _binary(
            "bitwise_xor",
            "Bitwise xor of integers with NumPy broadcasting: c = a ^ b.",
            np.bitwise_xor,
            "BitwiseXor",
            INTS,
        ),
        builtin_operator(
            "bit_shift",
            doc="Shift the bits of integers with NumPy broadcasting: c = a << b or a >> b (arithmetic for "
            "signed a); an amount below 0 or of at least the bit width gives 0, -1 for a negative a shifted "
            "right (ONNX BitShift, opset 28).",
            inputs=[Port("a", dtype="T"), Port("b", dtype="T", doc="the shift amounts")],
            outputs=[Port("c", shape={"broadcast": ["a", "b"]}, dtype="T")],
            attrs=[
                Attr(
                    "direction",
                    "str",
                    REQUIRED,
                    choices=("LEFT", "RIGHT"),
                    doc="'LEFT': towards the high bits; 'RIGHT': towards the low bits",
                )
            ],
            dtype_vars={"T": INTS},
            variant_dtypes=INTS,
            bind=bit_shift_bind,
            cuda=cuda_variant(cuda.binary_bind("bit_shift"), cuda.BINARY_DTYPES["bit_shift_left"]),
            onnx="BitShift",
        ),
    ]
