"""quantize_linear / dequantize_linear against element-by-element references: Python's round (half to
even) and clamping for int8/uint8, and for float8 a search over all 256 codes for the nearest value (ties
to the even code); ONNX's reference evaluator as a second oracle. Per tensor and per axis (negative axes),
saturation, NaN and inf, 16-bit inputs, errors at load.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import pipelink as pl
from pipelink.errors import DTypeMismatchError, ShapeMismatchError

from .ops_helpers import check_close, make_registry, run_op

FP8 = {
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
    "float8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "float8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
}
QTYPES = ["int8", "uint8", *FP8]


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _codes(dtype):
    """Every finite value of a float8 type with its bit pattern, sorted by value."""
    values = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)
    return sorted((v, c) for c, v in enumerate(values) if math.isfinite(v))


def _nearest_fp8(v: float, dtype, saturate: bool):
    table = _codes(dtype)
    top = table[-1][0]
    if math.isnan(v):
        return math.nan
    if abs(v) > top:
        if saturate:
            return math.copysign(top, v)
        # Beyond the largest finite value by at least half an ulp: inf (e5m2), else NaN (no inf).
        below = table[-1][0] - table[-2][0]
        if abs(v) < top + below / 2 or (abs(v) == top + below / 2 and table[-1][1] % 2 == 0):
            return math.copysign(top, v)
        return math.copysign(math.inf, v) if dtype is ml_dtypes.float8_e5m2 else math.nan
    best = min(table, key=lambda vc: (abs(vc[0] - v), vc[1] % 2))
    return 0.0 * math.copysign(1, v) if best[0] == 0 else best[0]


def _quant_ref(x, scale, zero, axis, dtype, saturate=True):
    x32 = x.astype(np.float32)
    out = np.empty(x.shape, np.float64)
    for pos in np.ndindex(x.shape):
        k = 0 if scale.size == 1 else pos[axis]
        s = np.float32(scale.ravel()[k])
        z = 0 if zero is None else float(zero.ravel()[k])
        v = float(np.float32(x32[pos] / s))
        if dtype in ("int8", "uint8"):
            info = np.iinfo(dtype)
            out[pos] = min(max(round(v) + z, info.min), info.max)  # round(): half to even
        else:
            out[pos] = _nearest_fp8(v + z, FP8[dtype], saturate)
    return out


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("xtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(
    ("shape", "axis", "per_axis"),
    [((4, 6), 1, False), ((3, 5, 2), 1, True), ((3, 5, 2), -1, True), ((0, 4), 1, True)],
)
def test_quantize_against_elementwise_reference(reg, device, qtype, xtype, shape, axis, per_axis):
    rng = np.random.default_rng(71)
    x = (rng.standard_normal(shape) * 40).astype(ml_dtypes.bfloat16 if xtype == "bfloat16" else xtype)
    n = shape[axis] if per_axis else 1
    scale = rng.uniform(0.05, 0.5, size=(n,) if per_axis else ()).astype(x.dtype)
    if qtype in ("int8", "uint8"):
        zero = rng.integers(0 if qtype == "uint8" else -20, 20, size=scale.shape).astype(qtype)
    else:
        zero = np.zeros(scale.shape, FP8[qtype])
    x.flat[:2] = np.array([2.5, -2.5]) * scale.ravel()[0] if x.size else x.flat[:2]  # ties go to even
    (y,) = run_op(reg, "quantize_linear", [x, scale, zero], {"axis": axis}, device=device)
    assert y.dtype == np.dtype(FP8.get(qtype, qtype)) and y.shape == x.shape
    ref = _quant_ref(x, scale, zero, axis % len(shape), qtype)
    assert np.array_equal(y.astype(np.float64), ref, equal_nan=True)


@pytest.mark.parametrize("qtype", list(FP8))
@pytest.mark.parametrize("saturate", [True, False])
def test_float8_saturation_nan_and_inf(reg, device, qtype, saturate):
    big = float(ml_dtypes.finfo(FP8[qtype]).max)
    x = np.array([big * 4, -big * 4, np.inf, -np.inf, np.nan, 1e-9, big, 3.3], np.float32)
    (y,) = run_op(
        reg,
        "quantize_linear",
        [x, np.float32(1.0)],
        {"output_dtype": qtype, "saturate": saturate},
        device=device,
    )
    ref = [_nearest_fp8(float(v), FP8[qtype], saturate) for v in x]
    if not saturate:  # infinities stay infinite where the type has them (e5m2), else NaN
        ref[2:4] = [math.inf, -math.inf] if qtype == "float8_e5m2" else [math.nan, math.nan]
    else:
        ref[2:4] = [big, -big]
    assert np.array_equal(y.astype(np.float64), np.array(ref), equal_nan=True)


def test_integers_always_saturate_and_default_to_uint8(reg, device):
    x = np.array([-1000.0, 1000.0, 0.5, 1.5, -0.5], np.float32)
    (y,) = run_op(reg, "quantize_linear", [x, np.float32(1.0)], device=device)
    assert y.dtype == np.uint8 and y.tolist() == [0, 255, 0, 2, 0]
    (y,) = run_op(reg, "quantize_linear", [x, np.float32(1.0)], {"output_dtype": "int8"}, device=device)
    assert y.tolist() == [-128, 127, 0, 2, 0]


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("stype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("per_axis", [False, True])
def test_dequantize_against_formula(reg, device, qtype, stype, per_axis):
    rng = np.random.default_rng(72)
    npq = FP8.get(qtype, qtype)
    codes = rng.integers(0, 256, size=(3, 4, 5)).astype(np.uint8)
    x = codes.view(np.dtype(npq))
    if qtype in FP8:
        x = np.where(np.isfinite(x.astype(np.float32)), x, np.zeros((), npq)).astype(npq)
    npt = ml_dtypes.bfloat16 if stype == "bfloat16" else stype
    scale = rng.uniform(0.01, 2, size=(4,) if per_axis else ()).astype(npt)
    zero = (
        rng.integers(0, 20, size=scale.shape).astype(qtype)
        if qtype in ("int8", "uint8")
        else np.zeros(scale.shape, npq)
    )
    (y,) = run_op(reg, "dequantize_linear", [x, scale, zero], {"axis": -2}, device=device)
    assert y.dtype == scale.dtype
    s = scale.astype(np.float64).reshape((4, 1) if per_axis else ())
    z = zero.astype(np.float64).reshape((4, 1) if per_axis else ())
    check_close(y, (x.astype(np.float64) - z) * s, stype)


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "error", "match"),
    [
        ("quantize_linear", [(4, 6), (5,)], {}, ShapeMismatchError, "size 6 along axis 1"),
        ("quantize_linear", [(4, 6), (6,), (1,)], {}, ShapeMismatchError, "zero point's shape"),
        ("dequantize_linear", [(4, 6), (2, 6)], {"axis": 0}, ShapeMismatchError, "must be a scalar"),
    ],
)
def test_layout_errors(reg, op, inputs, attrs, error, match):
    dtypes = ["float32", "float32", "uint8"] if op == "quantize_linear" else ["uint8", "float32", "uint8"]
    arrays = [np.zeros(s, d) for s, d in zip(inputs, dtypes, strict=False)]
    with pytest.raises(error, match=match):
        run_op(reg, op, arrays, attrs)


@pytest.mark.parametrize(("scale_shape", "zero_shape"), [((), (1,)), ((1,), ())])
def test_a_per_tensor_scale_and_zero_point_may_each_be_a_scalar_or_one_element(
    reg, device, scale_shape, zero_shape
):
    """onnx's own tests pair a [1] zero point with a scalar scale: both are one scale for the tensor."""
    x = np.array([-3.0, 0.0, 1.5, 2.5, 300.0], np.float32)
    scale = np.full(scale_shape, 0.5, np.float32)
    zero = np.full(zero_shape, 10, np.uint8)
    (y,) = run_op(reg, "quantize_linear", [x, scale, zero], {}, device=device)
    np.testing.assert_array_equal(y, np.array([4, 10, 13, 15, 255], np.uint8))
    (back,) = run_op(reg, "dequantize_linear", [y, scale, zero], {}, device=device)
    np.testing.assert_array_equal(back, (y.astype(np.float32) - 10) * 0.5)


def test_dtype_errors(reg):
    x, s = np.zeros((2, 3), np.float32), np.float32(1)
    with pytest.raises(DTypeMismatchError, match="differs from the zero point's dtype"):
        run_op(reg, "quantize_linear", [x, s, np.int8(0)], {"output_dtype": "uint8"})
    with pytest.raises(DTypeMismatchError, match="output_dtype must be one of"):
        run_op(reg, "quantize_linear", [x, s], {"output_dtype": "int32"})
    with pytest.raises(DTypeMismatchError):
        run_op(reg, "dequantize_linear", [np.zeros(3, np.int8), s, np.uint8(0)])


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_roundtrip_matches_onnx(reg, device, qtype, per_axis):
    pytest.importorskip("onnx")
    from .onnx_oracle import run_onnx

    rng = np.random.default_rng(73)
    x = (rng.standard_normal((3, 4, 5)) * 30).astype(np.float32)
    scale = rng.uniform(0.05, 0.5, size=(4,) if per_axis else ()).astype(np.float32)
    zero = (
        rng.integers(0, 20, size=scale.shape).astype(qtype)
        if qtype in ("int8", "uint8")
        else np.zeros(scale.shape, FP8[qtype])
    )
    (y,) = run_op(reg, "quantize_linear", [x, scale, zero], {"axis": 1}, device=device)
    (ref,) = run_onnx("QuantizeLinear", [x, scale, zero], {"axis": 1}, opset=21)
    assert np.array_equal(y.astype(np.float64), ref.astype(np.float64), equal_nan=True)
    (back,) = run_op(reg, "dequantize_linear", [y, scale, zero], {"axis": 1}, device=device)
    (ref_back,) = run_onnx("DequantizeLinear", [ref, scale, zero], {"axis": 1}, opset=21)
    check_close(back, ref_back.astype(np.float64))


def test_pipeline_fp8_roundtrip_plans_and_runs():
    config = {
        "inputs": {"x": {"shape": [8, 16], "dtype": "bfloat16"}, "s": {"shape": [16], "dtype": "bfloat16"}},
        "pipeline": [
            {
                "name": "quantize_linear",
                "inputs": ["x", "s"],
                "outputs": ["q"],
                "attrs": {"output_dtype": "float8_e4m3fn"},
            },
            {"name": "dequantize_linear", "inputs": ["q", "s"], "outputs": ["y"]},
        ],
    }
    rng = np.random.default_rng(74)
    x = rng.standard_normal((8, 16)).astype(ml_dtypes.bfloat16)
    s = rng.uniform(0.01, 0.1, size=16).astype(ml_dtypes.bfloat16)
    with pl.load(config, device="cpu") as pipe:
        assert 0 < pipe.memory_plan.peak_bytes <= pipe.memory_plan.naive_bytes
        y = np.asarray(pipe.run(x=x, s=s)["y"])
    q = _quant_ref(x, s, None, 1, "float8_e4m3fn")
    check_close(y, q * s.astype(np.float64), "bfloat16")


def test_a_scratch_past_the_host_memory_is_out_of_memory_at_load():
    # The CPU kernel computes in a float32 buffer of x's shape, made when the stage is bound: with an
    # output (uint8) that fits the host and that buffer (4x) that does not, load raised NumPy's MemoryError
    # (or reserved twice the host's memory). Now it is refused with the numbers, as every allocation is.
    from pipelink.limits import total_bytes

    total = total_bytes("cpu")
    if total is None:
        pytest.skip("the host's memory is unknown here")
    n = total // 2 + 1
    doc = {
        "inputs": {"x": {"shape": [n], "dtype": "float32"}, "s": {"shape": [], "dtype": "float32"}},
        "pipeline": [{"name": "quantize_linear", "inputs": ["x", "s"], "outputs": ["y"]}],
    }
    with pytest.raises(pl.OutOfMemoryError) as info:
        pl.load(doc, device="cpu")
    assert info.value.code.name == "PIPELINK_ERR_OUT_OF_MEMORY"
    assert "stage 'quantize_linear' float32 scratch allocation needs" in str(info.value)
    assert f"({4 * n} bytes), but cpu has only" in str(info.value)
