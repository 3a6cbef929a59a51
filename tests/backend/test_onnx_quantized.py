"""ONNX's integer and quantized linear operators (``onnx/convert_quantized.py``: MatMulInteger, ConvInteger,
QLinearMatMul, QLinearConv) and blocked QuantizeLinear / DequantizeLinear (``onnx/convert_cast.py``),
each a one-node model against onnx's ReferenceEvaluator on random int8/uint8 data, bit for bit, on every
device; products deep enough that float32 would not be exact; and every refusal."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import pipelink as pl  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402
from pipelink.onnx.convert_quantized import EXACT_FLOAT32, accumulator_dtype  # noqa: E402
from tests.backend import onnx_models as om  # noqa: E402

U8, I8, F32, F16 = np.uint8, np.int8, np.float32, np.float16


def _model(op, feeds, inits, attrs=None, *, inputs, opset=21):
    """A one-node model reading ``inputs`` (names in ``feeds`` or ``inits``, "" for an absent one)."""
    return om.one_node_model(op, inputs, feeds, inits, attrs or {}, ["y"], opset=opset, name="quantized")


def _ints(rng, dtype, *shape) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, size=shape).astype(dtype)


def _run(model, feeds, device) -> np.ndarray:
    with pl.from_onnx(model, device=device) as pipe:
        return np.asarray(pipe.run(feeds)["y"].numpy())


def _exactly(model, feeds, device, want=None) -> np.ndarray:
    """PipeLink's y equals ``want`` (default: onnx's ReferenceEvaluator's) in shape, dtype and every bit."""
    got = _run(model, feeds, device)
    want = om.reference_evaluator(model, feeds)[0] if want is None else want
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    np.testing.assert_array_equal(got, want)
    return got


def _accumulator(model) -> str:
    """The dtype the import's product accumulates in: that of the cast of its first operand (a or x)."""
    config, _ = import_model(model)
    (dtype,) = {
        s["attrs"]["dtype"]
        for s in config["pipeline"]
        if s["name"] == "cast" and re.search(r"__(a|x)_float(32|64)$", s["outputs"][0])
    }
    return dtype


def _refused(model, why):
    assert om.refused(model, why)[0]["node"] == "the_node"


# -- the accumulator ---------------------------------------------------------------------------------------
def test_accumulator_is_float32_only_while_every_partial_sum_is_exact():
    assert accumulator_dtype(256, 256, 256) == "float32"  # 2**24 exactly
    assert accumulator_dtype(257, 256, 256) == "float64"
    assert accumulator_dtype(256, 256, 256, bias=1) == "float64"
    assert accumulator_dtype(33025, 255, 255) == "float64"  # 2147450625 <= 2**31 - 1
    assert accumulator_dtype(33026, 255, 255) is None  # ONNX's int32 could overflow


# -- MatMulInteger ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("a_shape", "b_shape", "dtypes", "zeros"),
    [
        ((4, 7), (7, 5), (U8, U8), "scalar"),
        ((4, 7), (7, 5), (I8, I8), "none"),
        ((4, 7), (7, 5), (U8, I8), "per_axis"),  # a per row ([M, 1]), b per column ([N])
        ((3, 4, 6), (3, 6, 5), (U8, U8), "scalar"),  # batched
        ((2, 3, 4, 6), (6, 5), (I8, U8), "per_axis"),  # b broadcast over the batch
    ],
)
@pytest.mark.parametrize("b_constant", [False, True])
def test_matmul_integer_matches_the_reference(rng, device, a_shape, b_shape, dtypes, zeros, b_constant):
    a, b = _ints(rng, dtypes[0], *a_shape), _ints(rng, dtypes[1], *b_shape)
    feeds, inits = {"a": a}, {}
    (inits if b_constant else feeds)["b"] = b
    names = ["a", "b"]
    if zeros == "scalar":
        inits |= {"az": _ints(rng, dtypes[0], 1), "bz": _ints(rng, dtypes[1])}
        names += ["az", "bz"]
    elif zeros == "per_axis":
        inits |= {"az": _ints(rng, dtypes[0], *a_shape[:-1], 1), "bz": _ints(rng, dtypes[1], b_shape[-1])}
        names += ["az", "bz"]
    model = _model("MatMulInteger", feeds, inits, inputs=names, opset=10)
    got = _exactly(model, {k: v for k, v in feeds.items()}, device)
    assert got.dtype == np.int32


def test_matmul_integer_per_row_vector_and_computed_zero_point(rng, device):
    """a's zero point as a vector of M (the spec's 2-d form; the reference broadcasts it along K, so the
    oracle is the spec's formula in int64) and b's a graph input (computed: per tensor, a stage)."""
    a, b = _ints(rng, U8, 5, 9), _ints(rng, I8, 9, 4)
    az, bz = _ints(rng, U8, 5), _ints(rng, I8, 1)
    model = _model(
        "MatMulInteger", {"a": a, "b": b, "bz": bz}, {"az": az}, inputs=["a", "b", "az", "bz"], opset=10
    )
    want = ((a.astype(np.int64) - az[:, None]) @ (b.astype(np.int64) - bz)).astype(np.int32)
    _exactly(model, {"a": a, "b": b, "bz": bz}, device, want)


def test_matmul_integer_beyond_float32s_exact_range_is_exact(rng, device):
    """K = 4096 of uint8 near 255 times int8 near -128: every sum is about 1.3e8, far past 2**24, where
    float32 would round (the check below proves it would); the import chooses float64 and is exact."""
    k = 4096
    a = rng.integers(200, 256, size=(3, k)).astype(U8)
    b = rng.integers(-128, -100, size=(k, 5)).astype(I8)
    a[:, 0] = 255  # make the sums odd: a float32 of that size cannot hold them
    b[0, :] = -127
    exact = a.astype(np.int64) @ b.astype(np.int64)
    assert np.abs(exact).max() > EXACT_FLOAT32
    assert not np.array_equal((a.astype(F32) @ b.astype(F32)).astype(np.int64), exact)  # float32 rounds
    model = _model("MatMulInteger", {"a": a}, {"b": b}, inputs=["a", "b"], opset=10)
    assert _accumulator(model) == "float64"
    _exactly(model, {"a": a}, device, exact.astype(np.int32))


def test_matmul_integer_with_symbolic_batch_dims(rng, device):
    """Only K must be known at import: the batch and row dims may be symbols."""
    a, b = _ints(rng, I8, 3, 5, 16), _ints(rng, I8, 16, 4)
    feeds = {"a": ("int8", ["batch", "rows", 16])}
    model = _model("MatMulInteger", feeds, {"b": b, "bz": np.array(3, I8)}, inputs=["a", "b", "", "bz"])
    _exactly(model, {"a": a}, device)


def test_matmul_integer_stays_float32_where_that_is_exact(rng):
    """Constant weights bound the product by their own values: |b| <= 3 with K = 512 and a uint8 less a
    constant zero point 128 (|a - 128| <= 128) sums to at most 196608, exact in float32."""
    b = rng.integers(-3, 4, size=(512, 8)).astype(I8)
    model = _model(
        "MatMulInteger",
        {"a": ("uint8", [2, 512])},
        {"b": b, "az": np.array(128, U8)},
        inputs=["a", "b", "az"],
    )
    assert _accumulator(model) == "float32"


# -- ConvInteger -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs"),
    [
        ((1, 3, 7, 6), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
        ((2, 4, 9, 8), (6, 2, 3, 2), {"strides": [2, 1], "group": 2, "pads": [1, 0, 2, 1]}),
        ((1, 2, 8, 8), (2, 2, 2, 2), {"dilations": [2, 2], "auto_pad": "SAME_UPPER"}),
        ((1, 4, 5, 5), (4, 1, 3, 3), {"group": 4}),  # depthwise
    ],
)
@pytest.mark.parametrize("dtypes", [(U8, U8), (U8, I8), (I8, I8)])
def test_conv_integer_matches_the_reference(rng, device, x_shape, w_shape, attrs, dtypes):
    x, w = _ints(rng, dtypes[0], *x_shape), _ints(rng, dtypes[1], *w_shape)
    inits = {"w": w, "xz": _ints(rng, dtypes[0]), "wz": _ints(rng, dtypes[1], w_shape[0])}  # w per channel
    model = _model("ConvInteger", {"x": x}, inits, attrs, inputs=["x", "w", "xz", "wz"], opset=10)
    _exactly(model, {"x": x}, device)


def test_conv_integer_deep_and_without_zero_points(rng, device):
    """C * kH * kW = 64 * 9 = 576 taps of uint8 by uint8 (sums to about 3.7e7 > 2**24): float64, exact."""
    x, w = _ints(rng, U8, 1, 64, 6, 6), _ints(rng, U8, 3, 64, 3, 3)
    model = _model("ConvInteger", {"x": x}, {"w": w}, inputs=["x", "w"], opset=10)
    assert _accumulator(model) == "float64"
    _exactly(model, {"x": x}, device)


# -- QLinearMatMul ---------------------------------------------------------------------------------------
def _zero_points(rng, dtype, *shape) -> np.ndarray:
    """Zero points near the middle of the range (so the products sum to either sign)."""
    middle = 128 if np.dtype(dtype) == U8 else 0
    return (middle + rng.integers(-24, 25, size=shape)).astype(dtype)


def _qlinear_matmul_inputs(rng, a_shape, b_shape, dtype, scale_dtype, per_column):
    """Scales and zero points of a QLinearMatMul: y_scale set so the outputs spread over about +-50 (a sum
    of K products of about +-74 each has a spread of about sqrt(K) * 74**2)."""
    n, k = b_shape[-1], a_shape[-1]
    vec = (n,) if per_column else (1,)
    a_scale = np.array([0.02 + rng.random() * 0.01], scale_dtype)
    b_scale = (0.01 + rng.random(vec) * 0.02).astype(scale_dtype)
    spread = np.sqrt(k) * 74.0**2 / 50
    return {
        "a_scale": a_scale,
        "a_zero_point": _zero_points(rng, dtype, 1),
        "b_scale": b_scale,
        "b_zero_point": _zero_points(rng, dtype, *vec),
        "y_scale": (a_scale.astype(np.float64) * b_scale * spread * (0.8 + 0.4 * rng.random(vec))).astype(
            scale_dtype
        ),
        "y_zero_point": _zero_points(rng, dtype, *vec),
    }


_QLINEAR_MATMUL_INPUTS = [
    "a",
    "a_scale",
    "a_zero_point",
    "b",
    "b_scale",
    "b_zero_point",
    "y_scale",
    "y_zero_point",
]


@pytest.mark.parametrize(
    ("a_shape", "b_shape"), [((4, 16), (16, 6)), ((2, 3, 16), (2, 16, 5)), ((2, 3, 8), (8, 4))]
)
@pytest.mark.parametrize("dtype", [U8, I8])
@pytest.mark.parametrize("scale_dtype", [F32, F16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul_matches_the_reference(rng, device, a_shape, b_shape, dtype, scale_dtype, per_column):
    a, b = _ints(rng, dtype, *a_shape), _ints(rng, dtype, *b_shape)
    inits = _qlinear_matmul_inputs(rng, a_shape, b_shape, dtype, scale_dtype, per_column) | {"b": b}
    model = _model("QLinearMatMul", {"a": a}, inits, inputs=_QLINEAR_MATMUL_INPUTS)
    got = _exactly(model, {"a": a}, device)
    assert len(np.unique(got)) > 3  # the scales keep the outputs inside the range, mostly


def test_qlinear_matmul_per_row_a(rng, device):
    """a's scale and zero point per row (vectors of M, the spec's form; the reference broadcasts them
    along K, so the oracle is its formula written per row: the factor in float32, the rest in float64)."""
    a, b = _ints(rng, U8, 2, 6, 16), _ints(rng, U8, 16, 5)
    inits = _qlinear_matmul_inputs(rng, a.shape, b.shape, U8, F32, True) | {"b": b}
    inits["a_scale"] = (0.02 + rng.random(6) * 0.01).astype(F32)
    inits["a_zero_point"] = _zero_points(rng, U8, 6)
    model = _model("QLinearMatMul", {"a": a}, inits, inputs=_QLINEAR_MATMUL_INPUTS)
    acc = (a.astype(np.int64) - inits["a_zero_point"][:, None]) @ (b.astype(np.int64) - inits["b_zero_point"])
    factor = inits["a_scale"][:, None] * inits["b_scale"] / inits["y_scale"]
    want = np.clip(np.rint(acc * factor.astype(np.float64) + inits["y_zero_point"]), 0, 255).astype(U8)
    _exactly(model, {"a": a}, device, want)


def test_qlinear_matmul_deep_product_requantizes_exactly(rng, device):
    """K = 2048: the int32 sums pass 2**24, the float64 accumulator keeps them, the requantized uint8
    output matches the reference bit for bit."""
    a, b = _ints(rng, U8, 3, 2048), _ints(rng, U8, 2048, 7)
    inits = _qlinear_matmul_inputs(rng, a.shape, b.shape, U8, F32, False) | {"b": b}
    inits |= {"a_zero_point": np.array([0], U8), "b_zero_point": np.array([0], U8)}
    inits["y_scale"] = np.array([float(a.astype(np.int64).sum(1).max() * 255) / 200], F32)
    model = _model("QLinearMatMul", {"a": a}, inits, inputs=_QLINEAR_MATMUL_INPUTS)
    assert _accumulator(model) == "float64"
    _exactly(model, {"a": a}, device)


# -- QLinearConv -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs"),
    [
        ((1, 3, 8, 7), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
        ((2, 4, 9, 9), (6, 2, 3, 3), {"strides": [2, 2], "group": 2}),
        ((1, 6, 6, 6), (6, 1, 3, 3), {"group": 6, "pads": [0, 1, 2, 1], "dilations": [1, 2]}),
    ],
)
@pytest.mark.parametrize("dtype", [U8, I8])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_qlinear_conv_matches_the_reference(rng, device, x_shape, w_shape, attrs, dtype, per_channel, bias):
    x, w = _ints(rng, dtype, *x_shape), _ints(rng, dtype, *w_shape)
    channels = (w_shape[0],) if per_channel else (1,)
    inits = {
        "x_scale": np.array(0.03, F32),
        "x_zero_point": _ints(rng, dtype),
        "w": w,
        "w_scale": (0.01 + rng.random(channels) * 0.02).astype(F32),
        "w_zero_point": _ints(rng, dtype, *channels),
        "y_scale": np.array(0.4, F32),
        "y_zero_point": _ints(rng, dtype),
    }
    names = ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point"]
    if bias:
        inits["B"] = rng.integers(-20000, 20000, size=w_shape[0]).astype(np.int32)
        names.append("B")
    model = _model("QLinearConv", {"x": x}, inits, attrs, inputs=names, opset=10)
    _exactly(model, {"x": x}, device)


# -- blocked QuantizeLinear / DequantizeLinear -----------------------------------------------------------
_BLOCKED = [  # x's shape, axis, block size (dividing x's length along the axis or not)
    ((3, 8), 1, 2),
    ((3, 7), 1, 3),
    ((10, 4), 0, 4),
    ((2, 5, 3), -2, 2),
    ((2, 3, 9), -1, 9),
]


def _blocked_scale_shape(shape, axis, block):
    axis %= len(shape)
    return tuple(-(-d // block) if k == axis else d for k, d in enumerate(shape))


@pytest.mark.parametrize(("shape", "axis", "block"), _BLOCKED)
@pytest.mark.parametrize("dtype", [U8, I8])
@pytest.mark.parametrize(("scale_dtype", "constant"), [(F32, True), (F32, False), (F16, True)])
def test_blocked_dequantize_matches_the_reference(
    rng, device, shape, axis, block, dtype, scale_dtype, constant
):
    x = _ints(rng, dtype, *shape)
    s_shape = _blocked_scale_shape(shape, axis, block)
    params = {"scale": (0.01 + rng.random(s_shape)).astype(scale_dtype), "zero": _ints(rng, dtype, *s_shape)}
    feeds = {"x": x} | ({} if constant else params)
    model = _model(
        "DequantizeLinear",
        feeds,
        params if constant else {},
        {"axis": axis, "block_size": block},
        inputs=["x", "scale", "zero"],
    )
    _exactly(model, feeds, device)


@pytest.mark.parametrize(("shape", "axis", "block"), _BLOCKED)
@pytest.mark.parametrize("out", ["uint8", "int8", "float8_e4m3fn"])
@pytest.mark.parametrize(("x_dtype", "constant"), [(F32, True), (F32, False), (F16, True)])
def test_blocked_quantize_matches_the_reference(rng, device, shape, axis, block, out, x_dtype, constant):
    x = (rng.standard_normal(shape) * 4).astype(x_dtype)
    x.flat[0] = 1000  # saturates (finite in float16 too: the reference casts an inf to int32)
    s_shape = _blocked_scale_shape(shape, axis, block)
    params = {"scale": (0.02 + rng.random(s_shape) * 0.05).astype(x_dtype)}
    attrs = {"axis": axis, "block_size": block}
    if out == "float8_e4m3fn":
        attrs["output_dtype"] = onnx.TensorProto.FLOAT8E4M3FN
    else:
        params["zero"] = _ints(rng, np.dtype(out), *s_shape)
    feeds = {"x": x} | ({} if constant else params)
    model = _model("QuantizeLinear", feeds, params if constant else {}, attrs, inputs=["x", *params])
    _exactly(model, feeds, device)


def test_blocked_dequantize_output_dtype(rng, device):
    x, scale = _ints(rng, I8, 4, 6), (0.1 + rng.random((4, 2))).astype(F32)
    model = _model(
        "DequantizeLinear",
        {"x": x},
        {"scale": scale},
        {"axis": 1, "block_size": 3, "output_dtype": onnx.TensorProto.FLOAT16},
        inputs=["x", "scale"],
        opset=23,
    )
    assert _exactly(model, {"x": x}, device).dtype == F16


# -- refusals --------------------------------------------------------------------------------------------
def test_an_int32_accumulator_that_could_overflow_is_refused():
    model = _model(
        "MatMulInteger", {"a": ("uint8", [2, 40000]), "b": ("uint8", [40000, 3])}, {}, inputs=["a", "b"]
    )
    _refused(model, "depth K=40000 whose int32 accumulator could overflow")


def test_a_product_of_unknown_depth_is_refused():
    model = _model("MatMulInteger", {"a": ("int8", [2, "K"]), "b": ("int8", ["K", 3])}, {}, inputs=["a", "b"])
    _refused(model, r"needs the length of a along the product \(K\)")


def test_a_per_row_zero_point_must_be_a_constant():
    feeds = {"a": ("uint8", [4, 3]), "b": ("uint8", [3, 2]), "az": ("uint8", [4])}
    _refused(
        _model("MatMulInteger", feeds, {}, inputs=["a", "b", "az"]), "zero point, not one value.*constant"
    )


def test_a_zero_point_of_another_shape_is_refused():
    inits = {"az": np.zeros((3,), U8)}
    model = _model(
        "MatMulInteger", {"a": ("uint8", [4, 3]), "b": ("uint8", [3, 2])}, inits, inputs=["a", "b", "az"]
    )
    _refused(model, r"a's zero point of shape \[3\].*one per row of a")


def test_qlinear_scales_must_be_constants(rng):
    inits = _qlinear_matmul_inputs(rng, (2, 4), (4, 3), U8, F32, False)
    scale = inits.pop("a_scale")
    feeds = {"a": ("uint8", [2, 4]), "b": ("uint8", [4, 3]), "a_scale": scale}
    model = _model("QLinearMatMul", feeds, inits, inputs=_QLINEAR_MATMUL_INPUTS)
    _refused(model, "a_scale.*must be a constant")


def test_qlinear_scales_of_mixed_types_are_refused(rng):
    inits = _qlinear_matmul_inputs(rng, (2, 4), (4, 3), U8, F32, False)
    inits["y_scale"] = inits["y_scale"].astype(F16)
    model = _model(
        "QLinearMatMul",
        {"a": ("uint8", [2, 4]), "b": ("uint8", [4, 3])},
        inits,
        inputs=_QLINEAR_MATMUL_INPUTS,
    )
    _refused(model, "scales of dtypes float32, float32, float16")


def test_a_1d_integer_convolution_is_refused():
    inits = {"w": np.zeros((2, 1, 3), U8)}
    _refused(_model("ConvInteger", {"x": ("uint8", [1, 1, 8])}, inits, inputs=["x", "w"]), "2-d windows only")


def test_a_qlinear_conv_bias_of_another_type_is_refused(rng):
    inits = {
        "x_scale": np.array(0.1, F32),
        "x_zero_point": np.array(0, U8),
        "w": np.zeros((2, 1, 3, 3), U8),
        "w_scale": np.array(0.1, F32),
        "w_zero_point": np.array(0, U8),
        "y_scale": np.array(0.1, F32),
        "y_zero_point": np.array(0, U8),
        "B": np.zeros(2, np.int64),
    }
    names = ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point", "B"]
    model = _model("QLinearConv", {"x": ("uint8", [1, 1, 5, 5])}, inits, inputs=names, opset=10)
    _refused(model, r"B of int64 \[2\]: the spec's is int32")


@pytest.mark.parametrize(
    ("s_shape", "attrs", "why"),
    [
        ((3, 3), {"axis": 1, "block_size": 2}, r"must be \[3, 2\]"),
        ((3, 2), {"axis": 1, "block_size": 2, "precision": 1}, "precision=1 is not supported"),
        ((3, 2), {"axis": 1, "block_size": -2}, "block_size=-2"),
        ((3, 2), {"axis": 2, "block_size": 2}, "axis 2 is out of range"),
    ],
)
def test_bad_blocked_quantization_is_refused(s_shape, attrs, why):
    inits = {"scale": np.ones(s_shape, F32)}
    _refused(
        _model("QuantizeLinear", {"x": ("float32", [3, 4])}, inits, attrs, inputs=["x", "scale"], opset=23),
        why,
    )


def test_a_blocked_float8_zero_point_is_refused():
    inits = {"scale": np.ones((3, 2), F32), "zero": np.zeros((3, 2), ml_dtypes.float8_e4m3fn)}
    model = _model(
        "QuantizeLinear",
        {"x": ("float32", [3, 4])},
        inits,
        {"axis": 1, "block_size": 2},
        inputs=["x", "scale", "zero"],
    )
    _refused(model, "float8 zero point is 0")


def test_blocked_dequantize_of_float8_is_refused():
    x = np.zeros((3, 4), ml_dtypes.float8_e4m3fn)
    inits = {"scale": np.ones((3, 2), F32)}
    model = _model("DequantizeLinear", {"x": x}, inits, {"axis": 1, "block_size": 2}, inputs=["x", "scale"])
    _refused(model, "blocked DequantizeLinear of x float8_e4m3fn")


def test_a_zero_point_of_another_type_is_refused():
    inits = {"az": np.zeros((), I8)}
    model = _model(
        "MatMulInteger", {"a": ("uint8", [3, 4]), "b": ("uint8", [4, 2])}, inits, inputs=["a", "b", "az"]
    )
    _refused(model, "a's zero point has dtype int8; the spec makes it its operand's")
    inits = {"scale": np.ones((3, 2), F32), "zero": np.zeros((3, 2), I8)}
    attrs = {"axis": 1, "block_size": 2}
    model = _model("DequantizeLinear", {"x": ("uint8", [3, 4])}, inits, attrs, inputs=["x", "scale", "zero"])
    _refused(model, "the zero point's dtype int8 differs from x's uint8")


@pytest.mark.parametrize(
    ("x_dtype", "inits", "attrs", "why"),
    [
        ("float32", {"zero": np.zeros((3, 2), U8)}, {"output_dtype": onnx.TensorProto.INT8}, "differs from"),
        ("float32", {}, {"output_dtype": onnx.TensorProto.INT32}, "quantizes in blocks to int8, uint8"),
        ("float16", {}, {}, "by a scale of float32"),
    ],
)
def test_a_blocked_quantize_of_unsupported_types_is_refused(x_dtype, inits, attrs, why):
    inits = {"scale": np.ones((3, 2), F32)} | inits
    attrs = {"axis": 1, "block_size": 2} | attrs
    model = _model("QuantizeLinear", {"x": (x_dtype, [3, 4])}, inits, attrs, inputs=["x", *inits])
    _refused(model, why)


def test_a_float8_qlinear_matmul_is_refused(rng):
    inits = _qlinear_matmul_inputs(rng, (2, 4), (4, 3), U8, F32, False)
    inits["a_zero_point"] = np.zeros(1, ml_dtypes.float8_e4m3fn)
    feeds = {"a": (ml_dtypes.float8_e4m3fn, [2, 4]), "b": ("uint8", [4, 3])}
    model = _model("QLinearMatMul", feeds, inits, inputs=_QLINEAR_MATMUL_INPUTS)
    _refused(model, "QLinearMatMul a of dtype float8_e4m3fn: PipeLink takes int8 or uint8")


def _qlinear_conv_inits(channels=2, **changes):
    inits = {
        "x_scale": np.array(0.1, F32),
        "x_zero_point": np.array(3, U8),
        "w": np.ones((channels, 1, 3, 3), U8),
        "w_scale": np.array(0.1, F32),
        "w_zero_point": np.array(1, U8),
        "y_scale": np.array(0.1, F32),
        "y_zero_point": np.array(0, U8),
    }
    return inits | changes


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"w_scale": np.ones(3, F32)}, r"w_scale of shape \[3\]: one value, or \[2\] \(per output channel\)"),
        ({"x_scale": np.ones(2, F32)}, r"x_scale of shape \[2\]: one value\n"),
        ({"y_zero_point": np.zeros(2, U8)}, r"y_zero_point of shape \[2\]: the spec's is one value"),
        ({"x_zero_point": np.zeros(2, U8)}, r"x's zero point of shape \[2\]: the spec's is one value"),
        (
            {"w_zero_point": np.zeros(3, U8)},
            r"w's zero point of shape \[3\]: one value, or one per output channel",
        ),
    ],
)
def test_qlinear_conv_parameters_of_other_shapes_are_refused(changes, why):
    inits = _qlinear_conv_inits(**changes)
    names = ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point"]
    _refused(_model("QLinearConv", {"x": ("uint8", [1, 1, 5, 5])}, inits, inputs=names, opset=10), why)


def test_a_qlinear_matmul_y_zero_point_of_another_shape_is_refused(rng):
    inits = _qlinear_matmul_inputs(rng, (2, 4), (4, 3), U8, F32, True)
    inits["y_zero_point"] = np.zeros(1, U8).repeat(2)
    feeds = {"a": ("uint8", [2, 4]), "b": ("uint8", [4, 3])}
    model = _model("QLinearMatMul", feeds, inits, inputs=_QLINEAR_MATMUL_INPUTS)
    _refused(model, r"y_zero_point of shape \[2\]: the shape of y_scale")


def test_a_deep_integer_convolution_that_could_overflow_is_refused():
    feeds = {"x": ("uint8", [1, 40000, 2, 2]), "w": ("uint8", [1, 40000, 1, 1])}
    _refused(_model("ConvInteger", feeds, {}, inputs=["x", "w"]), "depth 40000 whose int32 accumulator")


def test_blocked_quantization_needs_the_axis_length_and_one_zero_point_shape():
    inits = {"scale": np.ones((3, 2), F32)}
    attrs = {"axis": 1, "block_size": 2}
    model = _model("QuantizeLinear", {"x": ("float32", [3, "D"])}, inits, attrs, inputs=["x", "scale"])
    _refused(model, "needs x's length along axis 1")
    inits["zero"] = np.zeros((3, 1), U8)
    model = _model("QuantizeLinear", {"x": ("float32", [3, 4])}, inits, attrs, inputs=["x", "scale", "zero"])
    _refused(model, r"the zero point's shape \[3, 1\] differs from the scale's")


def test_a_hostile_blocked_length_is_refused_before_anything_is_allocated():
    inits = {"scale": np.ones((1, 1), F32)}
    attrs = {"axis": 1, "block_size": 2**62}
    model = _model("QuantizeLinear", {"x": ("float32", [1, 2**62])}, inits, attrs, inputs=["x", "scale"])
    _refused(model, "MAX_CONSTANT_BYTES")
