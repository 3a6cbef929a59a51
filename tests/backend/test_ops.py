"""CPU reference kernels of the elementwise built-ins, their registration, and the vectorised erf.

Every kernel runs on fresh random inputs into poisoned outputs and is compared with a float64 reference
written here (never by calling the kernel code).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from pipelink.descriptor import Variant, infer_outputs
from pipelink.dtypes import FLOAT8_DTYPES, get_dtype
from pipelink.errors import DTypeMismatchError, InvalidArgumentError, ShapeMismatchError
from pipelink.modules.registry import OperatorRegistry
from pipelink.ops import BUILTIN_OPERATORS, register_builtins
from pipelink.ops.elementwise.reference import erf

from .ops_helpers import (
    FLOAT_NAMES,
    INT_NAMES,
    TOL,
    as64,
    check_close,
    make_registry,
    poison,
    rand,
    ref_erf,
    run_op,
)

SHAPES = [(3, 7), (2, 5, 33), (2, 4099)]  # 4099: vector tails and more than one block
WITH_CUDA = {
    "identity",
    "relu",
    "silu",
    "gelu",
    "scale",
    "add",
    "mul",
    "bias_add",
    "cast",
    "bitcast",
    "silu_activation",
    "layer_norm",
    "rms_norm",
    "softmax",
    "batch_norm",
    "layer_norm_v1",
    "gemm",
    "matmul",
    "transpose",
    "as_strided",
    "precision_cast",
    "sigmoid",
    "tanh",
    "hardswish",
    "erf",
    "exp",
    "sqrt",
    "neg",
    "abs",
    "log",
    "reciprocal",
    "leaky_relu",
    "sin",
    "cos",
    "floor",
    "ceil",
    "round",
    "sign",
    "softplus",
    "softsign",
    "mish",
    "elu",
    "celu",
    "thresholded_relu",
    "prelu",
    "sub",
    "div",
    "pow",
    "max",
    "min",
    "reshape",
    "flatten",
    "squeeze",
    "unsqueeze",
    "concat",
    "split",
    "slice",
    "gather",
    "gather_elements",
    "where",
    "expand",
    "reduce_mean",
    "reduce_sum",
    "reduce_max",
    "reduce_min",
    "argmax",
    "argmin",
    "max_pool2d",
    "avg_pool2d",
    "max_pool3d",
    "avg_pool3d",
    "global_average_pool",
    "resize",
    "roi_align",
    "col2im",
    "deform_conv2d",
    "deform_im2col",
    "pixel_shuffle",
    "quantize_linear",
    "dequantize_linear",
    "conv2d",
    "conv_transpose2d",
    "conv3d",
    "conv_transpose3d",
    "attention",
    "rotary_embedding",
    "equal",
    "less",
    "greater",
    "less_equal",
    "greater_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "is_nan",
    "is_inf",
    "cumsum",
    "trilu",
    "scatter_nd",
    "mod",
    "fmod",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "asinh",
    "acosh",
    "atanh",
    "shrink",
    "bitwise_not",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bit_shift",
    "top_k",
    "reduce_prod",
    "cumprod",
    "hardmax",
    "gather_nd",
    "scatter_elements",
    "one_hot",
    "eye_like",
}
# cuDNN's operators keep their reference for staged runs where cuDNN declines (ops/_common.py).
STAGED_FALLBACK = {
    "conv2d",
    "conv_transpose2d",
    "conv3d",
    "conv_transpose3d",
    "attention",
    "scatter_nd",
    "scatter_elements",
    "top_k",
    "gather_nd",
}
# ... and scatter_nd's combining reductions
CUDNN = {"conv2d", "conv_transpose2d", "conv3d", "conv_transpose3d", "attention"}
# Issue-15 collectives: their GPU variant is NCCL (ops/collective), not an NVRTC kernel.
WITH_NCCL = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv"}
# No CUDA kernel: the reference runs on staged host copies on CUDA (ops/resize, ops/gemm, ops/indexing
# HOST_ONLY).
HOST_ONLY = {"grid_sample", "affine_grid", "det", "tfidf_vectorizer"}
EXPECTED_OPS = WITH_CUDA | WITH_NCCL | HOST_ONLY


@pytest.fixture(scope="module")
def reg():
    return make_registry()


# ---------------------------------------------------------------------------------------------- registry


def test_register_builtins_registers_every_operator_once_with_a_numpy_variant():
    registry = OperatorRegistry()
    added = register_builtins(registry)
    assert set(BUILTIN_OPERATORS) == EXPECTED_OPS == set(registry.names())
    assert len(added) == len(EXPECTED_OPS)
    for name in EXPECTED_OPS:
        (desc,) = registry.versions(name)
        assert str(desc.version) == "1.0.0" and desc.source == "builtin"
        gpu = "cuda:cudnn" if name in CUDNN else "cuda:nvrtc"  # cuDNN's operators say so
        gpu = "cuda:cublaslt" if name in ("gemm", "matmul") else gpu  # and cuBLASLt's
        expected = ["cpu:numpy"] + ([gpu] if name in WITH_CUDA else [])
        expected += ["cuda:nccl"] if name in WITH_NCCL else []
        expected += ["cuda:cublaslt"] if name in ("conv2d", "conv3d") else []  # pointwise GEMM, first
        assert [v.name for v in desc.variants] == expected  # each family declares its variants
        assert desc.variants[0].host_ok == (name in STAGED_FALLBACK | HOST_ONLY)
        assert desc.doc and "\n" not in desc.doc, f"{name} needs a one-line doc"
        assert all(p.contiguous for p in desc.inputs)
        assert desc.to_dict()["name"] == name


def test_register_builtins_is_idempotent_and_keeps_attached_variants():
    registry = OperatorRegistry()
    register_builtins(registry)
    cuda = Variant(device="cuda", bind=lambda ctx: None, name="cuda:test")
    registry.add_variant("relu", cuda)
    assert register_builtins(registry) == []
    assert len(registry.versions("relu")) == 1
    assert [v.name for v in registry.get("relu").variants] == ["cpu:numpy", "cuda:nvrtc", "cuda:test"]


def test_each_registry_gets_its_own_descriptors():
    first, second = make_registry(), make_registry()
    first.add_variant("gelu", Variant(device="cuda", bind=lambda ctx: None))
    assert len(second.get("gelu").variants) == 2  # its own cpu:numpy and cuda:nvrtc only


# ---------------------------------------------------------------------------------------------- erf


def test_erf_matches_math_erf_in_float64():
    x = np.linspace(-6.0, 6.0, 120_001)
    err = np.abs(erf(x) - ref_erf(x)).max()
    assert err < 2e-7, err


def test_erf_in_float32_and_beyond_the_fitted_range(rng):
    x = rng.uniform(-7.0, 7.0, 50_000).astype(np.float32)
    got = erf(x)
    assert got.dtype == np.float32
    assert np.abs(as64(got) - ref_erf(x)).max() < 2e-7
    special = erf(np.array([np.nan, np.inf, -np.inf, 0.0, 30.0, -30.0, 1e-30]))
    assert np.isnan(special[0])
    np.testing.assert_array_equal(special[1:6], [1.0, -1.0, 0.0, 1.0, -1.0])
    assert special[6] == pytest.approx(2 / math.sqrt(math.pi) * 1e-30, rel=1e-15)


# ---------------------------------------------------------------------------------------------- unary


def _silu(x):
    return x / (1.0 + np.exp(-x))


def _gelu(x):
    return 0.5 * x * (1.0 + ref_erf(x / math.sqrt(2.0)))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


UNARY = [
    ("relu", {}, lambda x: np.maximum(x, 0.0)),
    ("silu", {}, _silu),
    ("silu_activation", {}, _silu),
    ("gelu", {}, _gelu),
    ("gelu", {"approximate": "tanh"}, _gelu_tanh),
    ("scale", {}, lambda x: x),
    ("scale", {"factor": -2.5}, lambda x: -2.5 * x),
    ("sigmoid", {}, lambda x: 1.0 / (1.0 + np.exp(-x))),
    ("tanh", {}, lambda x: (np.exp(x) - np.exp(-x)) / (np.exp(x) + np.exp(-x))),
    ("hardswish", {}, lambda x: x * np.minimum(np.maximum(x + 3.0, 0.0), 6.0) / 6.0),
    ("erf", {}, ref_erf),
    ("exp", {}, lambda x: np.exp(x)),
    ("neg", {}, lambda x: -x),
    ("abs", {}, np.abs),
    ("leaky_relu", {}, lambda x: np.where(x < 0, 0.01 * x, x)),
    ("leaky_relu", {"alpha": 0.25}, lambda x: np.where(x < 0, 0.25 * x, x)),
    ("sin", {}, np.sin),
    ("cos", {}, np.cos),
    ("floor", {}, np.floor),
    ("ceil", {}, np.ceil),
    ("round", {}, lambda x: np.round(x)),  # NumPy's round: halves to even, as ONNX Round
    ("sign", {}, np.sign),
    ("softplus", {}, lambda x: np.log(1.0 + np.exp(x))),
    ("softsign", {}, lambda x: x / (1.0 + np.abs(x))),
    ("mish", {}, lambda x: x * np.tanh(np.log(1.0 + np.exp(x)))),
    ("elu", {}, lambda x: np.where(x < 0, np.exp(x) - 1.0, x)),
    ("elu", {"alpha": 0.5}, lambda x: np.where(x < 0, 0.5 * (np.exp(x) - 1.0), x)),
    ("celu", {"alpha": 2.0}, lambda x: np.maximum(0.0, x) + np.minimum(0.0, 2.0 * (np.exp(x / 2.0) - 1.0))),
    ("thresholded_relu", {}, lambda x: np.where(x > 1.0, x, 0.0)),
    ("thresholded_relu", {"alpha": -0.5}, lambda x: np.where(x > -0.5, x, 0.0)),
]


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("name", "attrs", "ref"), UNARY, ids=[f"{n}{a}" for n, a, _ in UNARY])
def test_unary_float_ops(reg, device, rng, name, attrs, ref, shape, dtype):
    for _ in range(2):  # twice: scratch buffers kept by bind must not leak the previous run
        x = rand(rng, shape, dtype, -6.0, 6.0)
        (y,) = run_op(reg, name, [x], attrs, device=device)
        assert y.dtype == x.dtype and y.shape == x.shape
        check_close(y, ref(as64(x)), dtype)


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize("shape", SHAPES)
def test_sqrt_of_positive_inputs(reg, device, rng, shape, dtype):
    x = rand(rng, shape, dtype, 0.0, 50.0)
    (y,) = run_op(reg, "sqrt", [x], device=device)
    check_close(y, np.sqrt(as64(x)), dtype)


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
def test_ieee_edges_of_sqrt_exp_erf_and_hardswish(reg, device, dtype):
    """ONNX follows IEEE: sqrt(-1) is NaN, exp overflows to inf, erf saturates at +-1, hardswish is 0
    below -3 and x above 3 (so hardswish(-inf) = -inf * 0 is NaN); NaN goes through every one of them."""
    npd = get_dtype(dtype).numpy
    x = np.array([-4.0, -1.0, -0.0, 0.0, 1.0, 4.0, 1e5, np.inf, -np.inf, np.nan]).astype(npd)
    with np.errstate(all="ignore"):
        expect = {
            "sqrt": np.sqrt(as64(x)),
            "exp": np.exp(as64(x)),
            "erf": np.where(np.isnan(as64(x)), np.nan, ref_erf(np.nan_to_num(as64(x)))),
            "hardswish": as64(x) * np.clip(as64(x) / 6.0 + 0.5, 0.0, 1.0),
        }
    for name, ref in expect.items():
        (y,) = run_op(reg, name, [x], device=device)
        got = as64(y)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg=name)
        finite = ~np.isnan(ref)
        np.testing.assert_allclose(got[finite], ref[finite], rtol=TOL[dtype][0], err_msg=name)


def test_silu_of_very_negative_inputs_is_minus_zero_not_nan(reg, device):
    x = np.array([-1000.0, -100.0, 0.0, 100.0], dtype=np.float32)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        (y,) = run_op(reg, "silu", [x], device=device)
    np.testing.assert_allclose(y, [0.0, -100.0 * math.exp(-100.0), 0.0, 100.0], atol=1e-30)


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
def test_sigmoid_and_tanh_saturate_without_nan(reg, device, dtype):
    """Far tails: exp overflows to inf inside sigmoid, and tanh must reach exactly +-1, never NaN."""
    x = np.array([-1000.0, -100.0, -20.0, -1e-6, 0.0, 1e-6, 20.0, 100.0, 1000.0])
    x = x.astype(get_dtype(dtype).numpy)
    (s,) = run_op(reg, "sigmoid", [x], device=device)
    (t,) = run_op(reg, "tanh", [x], device=device)
    assert not np.isnan(as64(s)).any() and not np.isnan(as64(t)).any()
    assert as64(s)[0] == 0.0 and as64(s)[-1] == 1.0 and as64(s)[4] == 0.5
    assert as64(t)[0] == -1.0 and as64(t)[-1] == 1.0 and as64(t)[4] == 0.0
    # tanh(x) ~ x for tiny x: relative accuracy, not absolute
    np.testing.assert_allclose(as64(t)[[3, 5]], as64(x)[[3, 5]], rtol=TOL[dtype][0])


def test_relu_propagates_nan(reg, device):
    (y,) = run_op(reg, "relu", [np.array([np.nan, -1.0, 2.0], dtype=np.float32)], device=device)
    assert np.isnan(y[0]) and y[1] == 0.0 and y[2] == 2.0


@pytest.mark.parametrize("dtype", FLOAT_NAMES + INT_NAMES + ("bool",))
def test_identity_copies_any_dtype(reg, device, rng, dtype):
    x = rand(rng, (2, 5, 33), dtype)
    (y,) = run_op(reg, "identity", [x], device=device)
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))


@pytest.mark.parametrize(
    "name",
    [
        "relu",
        "silu",
        "gelu",
        "scale",
        "sigmoid",
        "tanh",
        "hardswish",
        "erf",
        "exp",
        "sqrt",
        "bias_add",
        "sin",
        "round",
        "softplus",
        "elu",
        "prelu",
    ],
)
def test_float_only_ops_refuse_ints(reg, name):
    desc = reg.get(name)
    ins = [(3, 7), (7,)][: len(desc.inputs)]
    with pytest.raises(DTypeMismatchError, match="int32"):
        infer_outputs(desc, tuple(ins), ("int32",) * len(ins), desc.resolve_attrs({}, where="s"), stage="s")


def test_gelu_rejects_an_unknown_approximation(reg):
    with pytest.raises(InvalidArgumentError, match="approximate"):
        reg.get("gelu").resolve_attrs({"approximate": "sigmoid"}, where="stage 'g'")


# ---------------------------------------------------------------------------------------------- binary

BINARY_SHAPES = [((3, 7), (3, 7)), ((2, 5, 33), (33,)), ((4, 1, 3), (5, 3)), ((1, 7), (3, 1))]


def _wrap(values: np.ndarray, dtype: str) -> np.ndarray:
    """Python ints reduced modulo 2**bits into the range of an integer dtype."""
    bits = np.dtype(dtype).itemsize * 8
    signed = np.issubdtype(np.dtype(dtype), np.signedinteger)

    def one(v: int) -> int:
        v %= 1 << bits
        return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v

    return np.vectorize(one, otypes=[object])(values)


@pytest.mark.parametrize(
    ("name", "op"),
    [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("max", np.maximum), ("min", np.minimum)],
)
@pytest.mark.parametrize("dtype", FLOAT_NAMES + INT_NAMES)
@pytest.mark.parametrize(("sa", "sb"), BINARY_SHAPES)
def test_binary_ops_broadcast(reg, device, rng, name, op, dtype, sa, sb):
    a, b = rand(rng, sa, dtype), rand(rng, sb, dtype)
    (c,) = run_op(reg, name, [a, b], device=device)
    assert c.shape == np.broadcast_shapes(sa, sb) and c.dtype == a.dtype
    if dtype in INT_NAMES:
        # Integer arithmetic wraps like C: exact in Python ints, then reduced to the dtype's width.
        exact = op(a.astype(object), b.astype(object))
        np.testing.assert_array_equal(c.astype(object), _wrap(exact, dtype))
    else:
        check_close(c, op(as64(a), as64(b)), dtype)


@pytest.mark.parametrize("dtype", INT_NAMES)
@pytest.mark.parametrize("shape", SHAPES)
def test_neg_abs_and_sign_of_integers(reg, device, rng, dtype, shape):
    """neg and abs wrap at the dtype's minimum (-(-128) is -128 in int8, as NumPy; uint8 negates modulo
    256), sign is -1, 0 or 1."""
    info = np.iinfo(dtype)
    x = rand(rng, shape, dtype)
    x.reshape(-1)[:3] = [info.min, info.max, 0]
    exact = x.astype(object)
    for name, ref in (("neg", lambda v: -v), ("abs", abs), ("sign", lambda v: (v > 0) - (v < 0))):
        (y,) = run_op(reg, name, [x], device=device)
        assert y.dtype == x.dtype
        np.testing.assert_array_equal(
            y.astype(object), _wrap(np.vectorize(ref, otypes=[object])(exact), dtype)
        )


@pytest.mark.parametrize("dtype", INT_NAMES)
@pytest.mark.parametrize("name", ["add", "sub", "mul", "max", "min"])
def test_integer_arithmetic_wraps_at_the_dtypes_limits(reg, device, dtype, name):
    """Sums, differences and products past the dtype's range wrap around (two's complement, as NumPy);
    max and min of the extremes are exact."""
    info = np.iinfo(dtype)
    lo = info.min if info.min < 0 else 1  # uint8: no negatives, and 0 - 1 wraps to 255
    a = np.array([info.max, info.min, info.max, info.min, lo, 0, 7, info.max // 2 + 3], dtype=dtype)
    b = np.array([1, 1, info.max, lo, info.min, info.max, 3, 2], dtype=dtype)
    (c,) = run_op(reg, name, [a, b], device=device)
    op = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[name]
    np.testing.assert_array_equal(c.astype(object), _wrap(op(a.astype(object), b.astype(object)), dtype))


@pytest.mark.parametrize("dtype", INT_NAMES)
@pytest.mark.parametrize(("sa", "sb"), BINARY_SHAPES)
def test_integer_div_truncates_toward_zero(reg, device, rng, dtype, sa, sb):
    """Integer quotients truncate toward zero (-7 / 2 is -3, not floor's -4), as C and ONNX's reference;
    0 where b is 0; the minimum / -1 wraps to the minimum (two's complement)."""
    info = np.iinfo(dtype)
    a, b = rand(rng, sa, dtype), rand(rng, sb, dtype)
    a.reshape(-1)[:2] = [info.max, info.min]
    b.reshape(-1)[:1] = 0
    (q,) = run_op(reg, "div", [a, b], device=device)
    assert q.dtype == a.dtype
    xa, xb = np.broadcast_arrays(a.astype(object), b.astype(object))
    exact = [
        0 if d == 0 else (abs(n) // abs(d)) * (1 if (n < 0) == (d < 0) else -1)
        for n, d in zip(xa.flat, xb.flat, strict=True)
    ]
    np.testing.assert_array_equal(q.astype(object).reshape(-1), _wrap(np.array(exact, object), dtype))
    if info.min < 0:  # the one overflowing quotient
        (w,) = run_op(
            reg, "div", [np.array([info.min, -7, 7], dtype), np.array([-1, 2, -2], dtype)], device=device
        )
        assert w.tolist() == [info.min, -3, -3]


@pytest.mark.parametrize("dtype", INT_NAMES)
@pytest.mark.parametrize(("sa", "sb"), BINARY_SHAPES)
def test_integer_pow_wraps_and_truncates_negative_exponents(reg, device, rng, dtype, sa, sb):
    """Integer powers wrap in the type (NumPy's power: 3**50 keeps its low bits); a negative exponent
    gives the real power truncated toward zero: 1 for a base of 1, +-1 for -1, else 0."""
    info = np.iinfo(dtype)
    a = rand(rng, sa, dtype)
    b = rng.integers(0 if info.min == 0 else -3, 70, size=sb, endpoint=True).astype(dtype)
    (p,) = run_op(reg, "pow", [a, b], device=device)
    assert p.dtype == a.dtype
    xa, xb = np.broadcast_arrays(a.astype(object), b.astype(object))

    def exact(n: int, e: int) -> int:
        if e >= 0:
            return pow(n, e, 1 << (8 * np.dtype(dtype).itemsize))
        return 1 if n == 1 else ((-1) ** e if n == -1 else 0)

    want = np.array([exact(n, e) for n, e in zip(xa.flat, xb.flat, strict=True)], object)
    np.testing.assert_array_equal(p.astype(object).reshape(-1), _wrap(want, dtype))
    edges = [[info.max, info.min, 0, 0, 1, 2], [2, 3, 0, 5, info.max, 8 * np.dtype(dtype).itemsize]]
    (e,) = run_op(reg, "pow", [np.array(edges[0], dtype), np.array(edges[1], dtype)], device=device)
    np.testing.assert_array_equal(
        e.astype(object), _wrap(np.array([exact(n, k) for n, k in zip(*edges, strict=True)], object), dtype)
    )


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize(("sa", "sb"), BINARY_SHAPES)
def test_div_and_pow_broadcast(reg, device, rng, dtype, sa, sb):
    # away from 0 and from negative bases: the quotient and the power stay finite and well conditioned
    a, b = rand(rng, sa, dtype, 0.5, 4.0), rand(rng, sb, dtype, -2.0, 2.0)
    b = np.where(np.abs(as64(b)) < 0.25, 0.25, as64(b)).astype(b.dtype)
    (q,) = run_op(reg, "div", [a, b], device=device)
    check_close(q, as64(a) / as64(b), dtype)
    (p,) = run_op(reg, "pow", [a, b], device=device)
    # pow amplifies the input rounding by |b log a|, which stays below 3 here: three tolerances
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(as64(p), as64(a) ** as64(b), rtol=3 * rtol, atol=atol)


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
def test_div_by_zero_and_pow_of_a_negative_base_follow_ieee(reg, device, dtype):
    npd = get_dtype(dtype).numpy
    a, b = np.array([1.0, -1.0, 0.0, -8.0, -8.0]).astype(npd), np.array([0.0, 0.0, 0.0, 0.5, 3.0]).astype(npd)
    (q,) = run_op(reg, "div", [a, b], device=device)
    (p,) = run_op(reg, "pow", [a, b], device=device)
    assert as64(q)[0] == np.inf and as64(q)[1] == -np.inf and np.isnan(as64(q)[2])
    assert np.isnan(as64(p)[3]) and as64(p)[4] == -512.0


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
def test_log_reciprocal_max_min_and_leaky_relu_follow_ieee(reg, device, dtype):
    """log(0) = -inf, log(-1) = NaN, 1/0 = inf, 1/-0 = -inf; max and min give NaN when either side is
    NaN (as numpy.maximum, the ONNX reference); leaky_relu keeps NaN and -0."""
    npd = get_dtype(dtype).numpy
    x = np.array([0.0, -1.0, 4.0, np.nan, -0.0, 0.5]).astype(npd)
    (lg,) = run_op(reg, "log", [x], device=device)
    (rc,) = run_op(reg, "reciprocal", [x], device=device)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal(np.isnan(as64(lg)), np.isnan(np.log(as64(x))))
        check_close(lg[[2, 5]], np.log(as64(x)[[2, 5]]), dtype)
    assert as64(lg)[0] == -np.inf and as64(rc)[0] == np.inf and as64(rc)[4] == -np.inf
    check_close(rc[[1, 2, 5]], 1.0 / as64(x)[[1, 2, 5]], dtype)
    y = np.array([1.0, np.nan, 3.0, 0.0, 2.0, -7.0]).astype(npd)
    (mx,) = run_op(reg, "max", [x, y], device=device)
    (mn,) = run_op(reg, "min", [x, y], device=device)
    np.testing.assert_array_equal(np.isnan(as64(mx)), [False, True, False, True, False, False])
    np.testing.assert_array_equal(np.isnan(as64(mn)), [False, True, False, True, False, False])
    assert list(as64(mx)[[0, 2, 5]]) == [1.0, 4.0, 0.5] and list(as64(mn)[[0, 2, 5]]) == [0.0, 3.0, -7.0]
    (lr,) = run_op(reg, "leaky_relu", [x], {"alpha": 0.5}, device=device)
    assert np.isnan(as64(lr)[3]) and np.signbit(as64(lr)[4]) and as64(lr)[1] == -0.5


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
def test_rounding_sign_and_the_softplus_family_at_their_edges(reg, device, dtype):
    """Halves round to even; ceil(-0.5) is -0; sign(-0) is +0 and sign(NaN) NaN; softplus neither
    overflows for large x (it is x) nor cancels for very negative x; elu and celu keep -0 and NaN;
    thresholded_relu gives 0 for NaN (not above the threshold); sin and cos of inf are NaN."""
    npd = get_dtype(dtype).numpy
    x = np.array([2.5, -2.5, 0.5, -0.5, 1.5, -0.0, np.nan, np.inf, -np.inf, 1e4, -8.0]).astype(npd)
    out = {n: as64(run_op(reg, n, [x], device=device)[0]) for n in ("round", "ceil", "floor", "sign")}
    np.testing.assert_array_equal(out["round"][:5], [2.0, -2.0, 0.0, -0.0, 2.0])
    assert np.signbit(out["round"][3]) and np.signbit(out["ceil"][3]) and out["ceil"][0] == 3.0
    assert out["floor"][1] == -3.0 and out["floor"][7] == np.inf and np.isnan(out["floor"][6])
    assert out["sign"][5] == 0.0 and not np.signbit(out["sign"][5]) and np.isnan(out["sign"][6])
    assert list(out["sign"][[0, 1, 7, 8]]) == [1.0, -1.0, 1.0, -1.0]
    (sp,) = run_op(reg, "softplus", [x], device=device)
    sp = as64(sp)
    assert sp[7] == np.inf and sp[8] == 0.0 and np.isnan(sp[6])
    np.testing.assert_allclose(
        sp[[9, 10]], [as64(x)[9], math.log1p(math.exp(as64(x)[10]))], rtol=TOL[dtype][0]
    )
    for name, attrs in (("elu", {}), ("celu", {"alpha": 2.0})):
        (e,) = run_op(reg, name, [x], attrs, device=device)
        e = as64(e)
        assert np.signbit(e[5]) and np.isnan(e[6]) and e[7] == np.inf, name
        assert e[8] == -(attrs.get("alpha", 1.0)), name  # alpha * (exp(-inf) - 1)
    (t,) = run_op(reg, "thresholded_relu", [x], {"alpha": 0.0}, device=device)
    np.testing.assert_array_equal(as64(t)[[0, 1, 6, 7, 8]], [2.5, 0.0, 0.0, np.inf, 0.0])
    for name in ("sin", "cos"):
        (y,) = run_op(reg, name, [x], device=device)
        assert np.isnan(as64(y)[[6, 7, 8]]).all(), name


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize(("sa", "sb"), [((2, 3, 4, 5), (3, 1, 1)), ((3, 7), (1,)), ((2, 4099), (2, 4099))])
def test_prelu_scales_the_negative_part_by_the_broadcast_slope(reg, device, rng, dtype, sa, sb):
    x, slope = rand(rng, sa, dtype), rand(rng, sb, dtype, -1.0, 1.0)
    (y,) = run_op(reg, "prelu", [x, slope], device=device)
    assert y.shape == sa and y.dtype == x.dtype
    check_close(y, np.where(as64(x) < 0, as64(slope) * as64(x), as64(x)), dtype)
    edges = np.array([np.nan, -0.0, -np.inf, np.inf]).astype(x.dtype)
    (e,) = run_op(reg, "prelu", [edges, np.array([0.5]).astype(x.dtype)], device=device)
    assert np.isnan(as64(e)[0]) and np.signbit(as64(e)[1]) and list(as64(e)[2:]) == [-np.inf, np.inf]


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize("shape", SHAPES)
def test_log_and_reciprocal_away_from_their_poles(reg, device, rng, dtype, shape):
    x = rand(rng, shape, dtype, 0.25, 8.0)
    (lg,) = run_op(reg, "log", [x], device=device)
    check_close(lg, np.log(as64(x)), dtype)
    x = np.where(rng.random(shape) < 0.5, -1, 1) * as64(x)
    x = x.astype(get_dtype(dtype).numpy)
    (rc,) = run_op(reg, "reciprocal", [x], device=device)
    check_close(rc, 1.0 / as64(x), dtype)


def _remainder_ref(a, b, floored: bool):
    """Python's floored remainder (``%``) or C's truncated one, element by element on exact values; an
    integer divisor of 0 gives 0 (NumPy's answer), a float one NaN."""
    import math

    def one(x, y):
        if isinstance(x, int):
            if y == 0:
                return 0
            return x % y if floored else (abs(x) % abs(y)) * (1 if x >= 0 else -1)
        if y == 0 or math.isinf(x) or math.isnan(x) or math.isnan(y):
            return math.nan
        r = math.fmod(x, y)
        if floored:
            r = math.copysign(0.0, y) if r == 0 else (r + y if (r < 0) != (y < 0) else r)
        return r

    return np.vectorize(one, otypes=[object])(a, b)


@pytest.mark.parametrize("name", ["mod", "fmod"])
@pytest.mark.parametrize("dtype", FLOAT_NAMES + INT_NAMES)
@pytest.mark.parametrize(("sa", "sb"), BINARY_SHAPES)
def test_mod_and_fmod_broadcast(reg, device, rng, name, dtype, sa, sb):
    """Floored (mod: the divisor's sign) and truncated (fmod: the dividend's sign) remainders of mixed
    signs, divisors of 0 included for the integers, against Python's exact arithmetic."""
    a, b = rand(rng, sa, dtype), rand(rng, sb, dtype)
    if dtype in FLOAT_NAMES:
        b = np.where(np.abs(as64(b)) < 0.25, 1.5, as64(b)).astype(b.dtype)  # well-conditioned quotients
    (c,) = run_op(reg, name, [a, b], device=device)
    assert c.shape == np.broadcast_shapes(sa, sb) and c.dtype == a.dtype
    if dtype in INT_NAMES:
        want = _remainder_ref(a.astype(object), b.astype(object), name == "mod")
        np.testing.assert_array_equal(c.astype(object), want)
    else:
        want = _remainder_ref(as64(a).astype(object), as64(b).astype(object), name == "mod")
        check_close(c, np.asarray(want, np.float64), dtype)


@pytest.mark.parametrize("dtype", INT_NAMES)
def test_integer_remainders_at_the_limits(reg, device, dtype):
    """0 for a divisor of 0 and for the minimum % -1 (C leaves both undefined; NumPy gives 0)."""
    info = np.iinfo(dtype)
    neg = -1 if info.min < 0 else 1
    a = np.array([info.min, info.max, 7, 0, info.min, 5], dtype)
    b = np.array([neg, 0, 0, 3, info.max, 2 if neg > 0 else -2], dtype)
    for name, floored in (("mod", True), ("fmod", False)):
        (c,) = run_op(reg, name, [a, b], device=device)
        np.testing.assert_array_equal(
            c.astype(object), _remainder_ref(a.astype(object), b.astype(object), floored)
        )


def test_float_remainders_follow_ieee(reg, device):
    """fmod: NaN for b = 0 or an infinite a, a for an infinite b; mod: a zero remainder takes b's sign."""
    a = np.array([5.0, np.inf, 3.0, -3.0, 4.0, -4.0, -0.0], np.float32)
    b = np.array([0.0, 2.0, np.inf, np.inf, -2.0, 2.0, 3.0], np.float32)
    (f,) = run_op(reg, "fmod", [a, b], device=device)
    (m,) = run_op(reg, "mod", [a, b], device=device)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(f, np.fmod(a, b))
        np.testing.assert_array_equal(m, np.mod(a, b))
    assert np.signbit(m[4]) and not np.signbit(m[5])


def test_cuda_variants_of_add_sub_mul_max_min_cover_the_integers(reg):
    """Every integer dtype's add, sub, mul, div, pow, max, min and remainders on CUDA (wrap-around; a T5
    export's position buckets are int64 arithmetic); prelu stays float-only."""
    ints = set(INT_NAMES)
    with_ints = ("add", "sub", "mul", "div", "pow", "max", "min", "mod", "fmod")
    for name in (*with_ints, "prelu"):
        (cuda,) = [v for v in reg.get(name).variants if v.device == "cuda"]
        assert ints <= cuda.dtypes if name in with_ints else not cuda.dtypes & ints, name


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize("shape", SHAPES)
def test_bias_add(reg, device, rng, dtype, shape):
    x, bias = rand(rng, shape, dtype), rand(rng, shape[-1:], dtype)
    (y,) = run_op(reg, "bias_add", [x, bias], device=device)
    check_close(y, as64(x) + as64(bias), dtype)


def test_broadcast_shape_inference(reg):
    desc = reg.get("add")
    shapes, dtypes = infer_outputs(desc, ((4, 1, 3), (5, 3)), ("float32", "float32"), {}, stage="sum")
    assert shapes == ((4, 5, 3),) and dtypes == ("float32",)
    shapes, _ = infer_outputs(desc, (("B", 3), (1, 3)), ("int8", "int8"), {}, stage="sum")
    assert shapes == (("B", 3),)


def test_non_broadcastable_shapes_name_the_stage_and_axis(reg):
    with pytest.raises(ShapeMismatchError) as info:
        infer_outputs(reg.get("mul"), ((4, 3), (4, 2)), ("float32", "float32"), {}, stage="mix")
    err = info.value
    assert "'mix'" in str(err) and "axis -1" in str(err) and err.stage == "mix"
    assert err.symbol == "axis -1" and {err.expected, err.got} == {3, 2}


def test_add_refuses_mixed_dtypes(reg):
    with pytest.raises(DTypeMismatchError, match="cast"):
        infer_outputs(reg.get("add"), ((3,), (3,)), ("float32", "float16"), {}, stage="s")


def test_bias_add_checks_n(reg):
    with pytest.raises(ShapeMismatchError, match="N") as info:
        infer_outputs(reg.get("bias_add"), ((3, 7), (8,)), ("float32", "float32"), {}, stage="b")
    assert info.value.symbol == "N" and info.value.stage == "b"


# ---------------------------------------------------------------------------------------------- cast

CASTS = [
    ("float32", "int32"),
    ("float64", "int8"),
    ("bfloat16", "int64"),
    ("float16", "uint8"),
    ("float32", "bfloat16"),
    ("float64", "float16"),
    ("bfloat16", "float32"),
    ("float16", "float64"),
    ("int32", "float32"),
    ("uint8", "float16"),
    ("int64", "int8"),
    ("int8", "bfloat16"),
    ("bool", "float32"),
    ("float32", "bool"),
    ("int32", "bool"),
    ("float32", "float32"),
    ("float32", "uint16"),
    ("float64", "uint64"),
    ("bfloat16", "int16"),
    ("uint64", "float32"),
    ("uint32", "float64"),
    ("int16", "float16"),
    ("int64", "uint32"),
    ("uint32", "int8"),
    ("int16", "uint64"),
    ("uint16", "bool"),
]


def _cast_reference(x: np.ndarray, target: str) -> np.ndarray:
    """Element by element, in plain Python: C conversion rules."""
    flat = []
    for v in x.reshape(-1).tolist():
        v = float(v) if not isinstance(v, bool | int) else v
        if target == "bool":
            flat.append(v != 0)
        elif target in INT_NAMES:
            bits = np.dtype(target).itemsize * 8
            n = math.trunc(v) % (1 << bits)
            signed = np.dtype(target).kind == "i"
            flat.append(n - (1 << bits) if signed and n >= 1 << (bits - 1) else n)
        else:
            flat.append(float(v))
    return np.array(flat, dtype=np.float64 if target in FLOAT_NAMES else object).reshape(x.shape)


@pytest.mark.parametrize(("src", "dst"), CASTS)
def test_cast(reg, device, rng, src, dst):
    # Floats headed for a narrow or unsigned int stay in range (out of range is unspecified, as in C).
    unsigned = np.dtype(get_dtype(dst).numpy).kind == "u"
    x = rand(rng, (2, 5, 33), src, -0.9 if unsigned else -120.0, 250.0 if unsigned else 120.0)
    if src in FLOAT_NAMES and dst == "bool":
        x.reshape(-1)[::3] = 0.0
    (y,) = run_op(reg, "cast", [x], {"dtype": dst}, device=device)
    assert y.dtype == get_dtype(dst).numpy and y.shape == x.shape
    ref = _cast_reference(x, dst)
    if dst in FLOAT_NAMES:
        check_close(y, ref, dst)
    else:
        assert y.tolist() == ref.tolist()


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        ("float32", "float8_e4m3fn"),
        ("float16", "float8_e5m2"),
        ("bfloat16", "float8_e4m3fn"),
        ("float64", "float8_e5m2"),
        ("float64", "float8_e4m3fn"),
        ("float8_e4m3fn", "float32"),
        ("float8_e5m2", "float16"),
        ("float8_e4m3fn", "float8_e5m2"),
        ("float8_e5m2", "int32"),
        ("float32", "float8_e4m3fnuz"),
        ("float16", "float8_e5m2fnuz"),
        ("bfloat16", "float8_e4m3fnuz"),
        ("float64", "float8_e5m2fnuz"),
        ("float8_e4m3fnuz", "float32"),
        ("float8_e5m2fnuz", "float16"),
        ("float8_e4m3fn", "float8_e4m3fnuz"),
        ("float8_e5m2fnuz", "float8_e5m2"),
        ("float8_e4m3fnuz", "int32"),
        ("float32", "float8_e8m0fnu"),
        ("bfloat16", "float8_e8m0fnu"),
        ("float16", "float8_e8m0fnu"),
        ("float64", "float8_e8m0fnu"),
        ("float8_e8m0fnu", "float32"),
        ("float8_e8m0fnu", "bfloat16"),
        ("float8_e8m0fnu", "float64"),
        ("float8_e8m0fnu", "int32"),
        ("float8_e5m2fnuz", "float8_e8m0fnu"),
    ],
)
def test_cast_to_and_from_float8_is_ml_dtypes_bit_for_bit(reg, device, rng, src, dst):
    """Into a float8: round to nearest even, no saturation (NaN, or inf for e5m2, past the largest finite
    value; the fnuz formats have no -0: a negative value rounding to zero is +0; e8m0: the nearest power
    of two, ties up, zero and negatives NaN), a float64 rounded once; out of one: exact.
    Every float8 value, their midpoints and the values beyond the range (as ml_dtypes, the CPU reference)."""
    if src.startswith("float8"):
        x = np.arange(256, dtype=np.uint8).view(get_dtype(src).numpy)
        if dst == "int32":  # NaN, inf and values past 2^31 have no int32 (unspecified, as in C)
            values = x.astype(np.float32)
            x = x[np.isfinite(values) & (np.abs(values) < 2.0**31)]
    else:
        grid = np.arange(256, dtype=np.uint8).view(get_dtype(dst).numpy).astype(np.float64)
        grid = np.sort(grid[np.isfinite(grid)])
        mids = (grid[:-1] + grid[1:]) / 2
        edges = [np.inf, -np.inf, np.nan, 1e6, -1e6, 3e38, 1e-30, -0.0]
        x = [grid, mids, edges]
        if src != "float64":  # the GPU host's ml_dtypes rounds a float64 through float32 (twice) just off
            # a midpoint; 0.7's and PipeLink's round once (tests/unit/test_fp8_conversion.py checks them)
            x += [np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)]
        x = np.concatenate(x)
        x = np.concatenate([x, rng.standard_normal(512) * 2.0 ** rng.integers(-20, 20, 512)])
        if dst == "float8_e8m0fnu":  # every power of two; below 2^-126 only where ml_dtypes rounds to
            # nearest there as PipeLink does (0.7 on; 0.6 rounds 1.25 * 2^-127 up)
            x = np.concatenate([x, rng.standard_normal(512) * 2.0 ** rng.integers(-127, 128, 512)])
            if not _E8M0_NEAREST_BELOW_2_126:
                x = x[~((np.abs(x) < 2.0**-126) & (x != 0))]
        with np.errstate(over="ignore"):
            x = x.astype(get_dtype(src).numpy)
    (y,) = run_op(reg, "cast", [x], {"dtype": dst}, device=device)
    # between two float8s through float32 (exact for every float8): older ml_dtypes (the GPU host's) have
    # no direct cast from a fnuz type into e8m0
    exact = x.astype(np.float32) if src in FLOAT8_DTYPES and dst in FLOAT8_DTYPES else x
    want = exact.astype(get_dtype(dst).numpy)
    assert y.dtype == want.dtype and y.shape == want.shape
    nan = np.isnan(want.astype(np.float32)) if dst != "int32" else np.zeros(want.shape, bool)
    if dst != "int32":
        np.testing.assert_array_equal(np.isnan(y.astype(np.float32)), nan)
    bits = np.dtype(f"u{want.itemsize}")  # compared as bits: -0.0 is not 0.0
    same = y[~nan].view(bits) == want[~nan].view(bits)
    assert same.all(), (x[~nan][~same][:8], y[~nan][~same][:8], want[~nan][~same][:8])


_E8M0 = ml_dtypes.float8_e8m0fnu
#: whether this ml_dtypes (the CPU reference) rounds as PipeLink's CUDA cast does where versions differ:
#: a float below 2^-126 to the nearest power of two, a 64-bit integer once (0.7 on; 0.6 goes through
#: float32, so 1.5 * 2^62 - 1 rounds up twice)
_E8M0_NEAREST_BELOW_2_126 = np.array([1.25 * 2.0**-127], np.float32).astype(_E8M0).view(np.uint8)[0] == 0
_E8M0_INTEGERS_ONCE = np.array([(3 << 61) - 1], np.int64).astype(_E8M0).view(np.uint8)[0] == 189


@pytest.mark.parametrize("src", ["int64", "uint64", "int32", "bool"])
def test_cast_integers_into_e8m0_round_once(reg, device, rng, src):
    """An integer into e8m0 (the nearest power of two, ties up; zero and negatives NaN) as ml_dtypes: a
    64-bit one just under a midpoint past 2^53 stays under it (through a double it would round up twice;
    compared where this ml_dtypes rounds it once)."""
    info = np.iinfo(src) if src != "bool" else None
    if info is None:
        x = np.array([True, False, True])
    else:
        top = int(np.log2(float(info.max)))
        powers = np.array([1 << k for k in range(top)], dtype=src)
        mids = powers[1:] + powers[:-1]
        x = np.concatenate([powers, mids, mids - 1, mids + 1, rng.integers(info.min, info.max, 512, src)])
        x = np.concatenate([x, np.array([0, info.max, info.min], src)])
        if not _E8M0_INTEGERS_ONCE:
            x = x[(x >= -(2**24)) & (x <= 2**24)]
    (y,) = run_op(reg, "cast", [x], {"dtype": "float8_e8m0fnu"}, device=device)
    want = x.astype(get_dtype("float8_e8m0fnu").numpy)
    np.testing.assert_array_equal(y.view(np.uint8), want.view(np.uint8))


def test_cast_truncates_toward_zero(reg, device):
    x = np.array([-2.9, -0.5, 0.5, 2.9, 7.0], dtype=np.float32)
    (y,) = run_op(reg, "cast", [x], {"dtype": "int32"}, device=device)
    assert y.tolist() == [-2, 0, 0, 2, 7]


def test_cast_dtype_inference_and_required_attr(reg):
    desc = reg.get("cast")
    attrs = desc.resolve_attrs({"dtype": "bfloat16"}, where="s")
    assert infer_outputs(desc, ((3, 7),), ("int8",), attrs, stage="s") == (((3, 7),), ("bfloat16",))
    with pytest.raises(InvalidArgumentError, match="dtype"):
        desc.resolve_attrs({}, where="s")
    with pytest.raises(InvalidArgumentError, match="complex64"):
        desc.resolve_attrs({"dtype": "complex64"}, where="s")


def test_poison_really_poisons():
    """The harness itself: an untouched output must fail check_close."""
    with pytest.raises(AssertionError, match="not written"):
        check_close(poison((3,), "float32"), np.zeros(3))
    assert (poison((4,), "int32").view(np.uint8) == 0xCD).all()
    assert TOL["float32"][0] == 1e-5
