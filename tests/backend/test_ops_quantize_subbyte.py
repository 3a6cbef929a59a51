"""The sub-byte types (int4, uint4, int2, uint2, float4_e2m1fn: one value per byte, as ml_dtypes holds them)
and int16/uint16 through cast, quantize_linear and dequantize_linear, on every device. Casts are checked
against ml_dtypes' (onnx's reference casts with it) byte for byte: every byte a kernel writes is the byte
ml_dtypes would hold (the value in the low bits, the high bits zero), so the 0xCD poison never passes.
(De)quantization is checked against the spec's formula written out here in NumPy: ``x / scale`` in
float32, rounded half to even, plus the zero point, saturated to the type's range (float4_e2m1fn: the
quotient plus its zero point, rounded to nearest even by ml_dtypes, saturating at 6); ``(x - zero) *
scale`` back.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from pipelink.dtypes import get_dtype
from pipelink.errors import DTypeMismatchError

from .ops_helpers import assert_same_bytes, make_registry, run_op

SUB_INTS = ("int4", "uint4", "int2", "uint2")
FP4 = "float4_e2m1fn"
#: each integer type's (min, max)
RANGES = {
    name: (int(ml_dtypes.iinfo(get_dtype(name).numpy).min), int(ml_dtypes.iinfo(get_dtype(name).numpy).max))
    for name in (*SUB_INTS, "int16", "uint16")
}


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _floats(rng, dtype) -> np.ndarray:
    """Random values over and past the sub-byte ranges, the integers and halves of -20..20 (the ties of
    float4's grid among them), the float4 grid's midpoints, zeros, the infinities and NaN."""
    grid = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    grid = np.unique(grid)
    parts = [
        rng.uniform(-20, 20, 600),
        rng.standard_normal(200) * 2.0 ** rng.integers(-6, 6, 200),
        np.arange(-40, 41) / 2,
        (grid[1:] + grid[:-1]) / 2,
        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e6, -1e6, 0.99, -0.99, 7.99, -8.99, 15.99],
    ]
    with np.errstate(over="ignore", invalid="ignore"):
        return np.concatenate([np.asarray(p, np.float64) for p in parts]).astype(get_dtype(dtype).numpy)


@pytest.mark.parametrize("dst", [*SUB_INTS, FP4])
@pytest.mark.parametrize("src", ["float32", "float64", "float16", "bfloat16", "float8_e4m3fn"])
def test_cast_floats_into_sub_byte_types_as_ml_dtypes(reg, device, rng, src, dst):
    """Into the integers: truncated toward zero, 0 outside the range (NaN, inf too); into float4_e2m1fn:
    round to nearest even, +-6 past the range, a zero of the opposite sign for NaN."""
    x = _floats(rng, src)
    (y,) = run_op(reg, "cast", [x], {"dtype": dst}, device=device)
    if dst == FP4:
        with np.errstate(invalid="ignore", over="ignore"):
            want = x.astype(get_dtype(dst).numpy)
    else:  # ml_dtypes 0.7's rule, written out: older versions wrap the values outside the range instead
        lo, hi = RANGES[dst]
        with np.errstate(invalid="ignore"):
            whole = np.trunc(x.astype(np.float64))
            ints = np.where((whole >= lo) & (whole <= hi), whole, 0).astype(np.int64)
        want = _from_bits(ints, dst)
    assert_same_bytes(y, want, f"{src} -> {dst}")


def _from_bits(ints: np.ndarray, dst: str) -> np.ndarray:
    """Integers as the sub-byte integer type ``dst``: their low bits, held alone in each byte."""
    return (ints & ((1 << get_dtype(dst).value_bits) - 1)).astype(np.uint8).view(get_dtype(dst).numpy)


def _values_of(x: np.ndarray) -> np.ndarray:
    """A sub-byte array's values from its bytes: the integers' low bits (sign-extended for int4 and int2)
    as int64, float4's codes as float32 (any high bit the sign), as ml_dtypes reads them."""
    dtype, raw = get_dtype(x.dtype), x.view(np.uint8).astype(np.int64)
    if dtype.name == FP4:
        magnitude = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)[raw & 7]
        return np.where(raw & 0xF8, -magnitude, magnitude)
    bits = dtype.value_bits
    low = raw & ((1 << bits) - 1)
    return np.where(low >= 1 << (bits - 1), low - (1 << bits), low) if dtype.name.startswith("int") else low


@pytest.mark.parametrize("dst", [*SUB_INTS, FP4])
@pytest.mark.parametrize("src", ["int8", "uint8", "int32", "int64", "uint64", "bool", "int16"])
def test_cast_integers_into_sub_byte_types_as_ml_dtypes(reg, device, rng, src, dst):
    """Into the integers an integer keeps its low bits (two's complement: ONNX Cast's wrap, 200 -> int4 -8);
    into float4_e2m1fn it rounds to nearest even and saturates."""
    if src == "bool":
        x = rng.integers(0, 2, 300).astype(bool)
    else:
        info = np.iinfo(src)
        x = np.concatenate(
            [
                rng.integers(info.min, info.max, 500, dtype=src, endpoint=True),
                np.arange(max(info.min, -40), 41).astype(src),
                np.array([info.min, info.max], src),
            ]
        )
    (y,) = run_op(reg, "cast", [x], {"dtype": dst}, device=device)
    assert_same_bytes(y, x.astype(get_dtype(dst).numpy), f"{src} -> {dst}")


@pytest.mark.parametrize("src", [*SUB_INTS, FP4])
@pytest.mark.parametrize(
    "dst",
    [
        "float32",
        "float64",
        "float16",
        "bfloat16",
        "int8",
        "uint8",
        "int64",
        "uint64",
        "bool",
        "float8_e4m3fn",
        "float8_e8m0fnu",
        *SUB_INTS,
        FP4,
    ],
)
def test_cast_out_of_sub_byte_types_as_ml_dtypes(reg, device, src, dst):
    """Out of a sub-byte type: its value (every byte, the high bits read as ml_dtypes reads them), then as
    any cast into ``dst``: an integer into an integer wraps (int4 -1 is uint8 255); a negative float4 has no
    unsigned value and is left out (unspecified, as in C)."""
    if src == dst:
        pytest.skip("a cast to the same dtype is a copy")
    x = np.arange(256, dtype=np.uint8).view(get_dtype(src).numpy)
    if dst in ("uint8", "uint64") and src == FP4:
        x = x[x.astype(np.float32) >= 0]
    (y,) = run_op(reg, "cast", [x], {"dtype": dst}, device=device)
    values = _values_of(x)  # older ml_dtypes cannot cast between the sub-byte types, nor into e8m0
    if dst in SUB_INTS and src == FP4:  # a float: truncated, 0 outside the range
        lo, hi = RANGES[dst]
        whole = np.trunc(values)
        want = _from_bits(np.where((whole >= lo) & (whole <= hi), whole, 0).astype(np.int64), dst)
    elif dst in SUB_INTS:  # an integer: its low bits
        want = _from_bits(values.astype(np.int64), dst)
    else:
        plain = (
            values.astype(np.float32)
            if dst.startswith("float") and dst not in ("float32", "float64")
            else values
        )
        with np.errstate(invalid="ignore"):  # ml_dtypes warns on some of its own casts
            want = plain.astype(get_dtype(dst).numpy)
    assert_same_bytes(y, want, f"{src} -> {dst}")


def _quantize_spec(x, scale, zero, dtype: str, axis: int | None) -> np.ndarray:
    """QuantizeLinear's formula: float32 x / scale, half to even, + zero, clipped to the range."""
    shape = [1] * x.ndim
    if axis is not None:
        shape[axis] = -1
    s = np.asarray(scale, np.float32).reshape(shape if axis is not None else ())
    npd = get_dtype(dtype).numpy
    z = 0.0 if zero is None else np.asarray(zero).astype(np.float32).reshape(s.shape)
    with np.errstate(all="ignore"):  # inf quotients; NaN's integer is left out by the caller
        q = x.astype(np.float32) / s
        if dtype == FP4:
            return (q + z).astype(npd)
        lo, hi = RANGES[dtype]
        return np.clip(np.rint(q) + z, lo, hi).astype(np.int64).astype(npd)


def _zero(rng, dtype: str, n: int) -> np.ndarray:
    if dtype == FP4:  # a float zero point: a few grid values
        return rng.choice(np.array([0.0, 0.5, -1.0, 2.0], np.float32), n).astype(get_dtype(FP4).numpy)
    lo, hi = RANGES[dtype]
    return rng.integers(lo, hi, n, endpoint=True).astype(get_dtype(dtype).numpy)


@pytest.mark.parametrize("xtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("with_zero", [True, False])
@pytest.mark.parametrize("axis", [None, 1])
@pytest.mark.parametrize("dtype", [*SUB_INTS, FP4, "int16", "uint16"])
def test_quantize_into_sub_byte_and_16_bit_types(reg, device, rng, dtype, axis, with_zero, xtype):
    """Saturating at the type's range (int4 [-8, 7], uint4 [0, 15], int2 [-2, 1], uint2 [0, 3], int16,
    uint16; float4 +-6), per tensor and per axis, with a zero point and without (then its dtype is
    output_dtype)."""
    lo, hi = RANGES.get(dtype, (-6, 6))
    x = rng.uniform(2.5 * lo - 3, 2.5 * hi + 3, (4, 7, 5)).clip(-60000, 60000)  # float16 holds it
    x[0, 0, :3] = [np.nan, np.inf, -np.inf]
    x = x.astype(get_dtype(xtype).numpy)
    n = 7 if axis is not None else 1
    scale = rng.uniform(0.4, 2.5, n).astype(get_dtype(xtype).numpy)
    scale = scale if axis is not None else scale.reshape(())
    zero = _zero(rng, dtype, n).reshape(scale.shape) if with_zero else None
    attrs = {"axis": axis if axis is not None else 1}
    if not with_zero:
        attrs["output_dtype"] = dtype
    inputs = [x, scale] + ([zero] if with_zero else [])
    (y,) = run_op(reg, "quantize_linear", inputs, attrs, device=device)
    want = _quantize_spec(x, scale, zero, dtype, axis)
    finite = np.isfinite(x.astype(np.float32))
    if dtype != FP4:  # NaN has no integer: unspecified on the CPU (NumPy), 0 on CUDA
        y, want = y[finite], want[finite]
    assert_same_bytes(y, want, f"quantize {xtype} -> {dtype}")


@pytest.mark.parametrize("stype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("axis", [None, 0])
@pytest.mark.parametrize("dtype", [*SUB_INTS, FP4, "int16", "uint16"])
def test_dequantize_from_sub_byte_and_16_bit_types(reg, device, rng, dtype, axis, stype):
    """(x - zero) * scale in float32, rounded once to the scale's dtype; x of every value of the type."""
    npd = get_dtype(dtype).numpy
    if dtype in RANGES:
        lo, hi = RANGES[dtype]
        x = rng.integers(lo, hi, (6, 40), endpoint=True).astype(npd)
    else:
        x = rng.integers(0, 16, (6, 40)).astype(np.uint8).view(npd)
    n = 6 if axis is not None else 1
    scale = rng.uniform(0.1, 3.0, n).astype(get_dtype(stype).numpy)
    scale = scale if axis is not None else scale.reshape(())
    zero = _zero(rng, dtype, n).reshape(scale.shape)
    (y,) = run_op(reg, "dequantize_linear", [x, scale, zero], {"axis": 0}, device=device)
    shape = (-1, 1) if axis is not None else ()
    shifted = x.astype(np.float32) - zero.astype(np.float32).reshape(shape)
    with np.errstate(over="ignore"):  # int16 times a float16 scale past 65504: inf on both sides
        want = (shifted * scale.astype(np.float32).reshape(shape)).astype(get_dtype(stype).numpy)
    assert y.dtype == want.dtype
    np.testing.assert_array_equal(y.astype(np.float32), want.astype(np.float32))


def test_bitcast_pairs_sub_byte_types_of_one_width(reg, device):
    """int4 <-> uint4 <-> float4_e2m1fn (and int2 <-> uint2) keep the value's bits (-1 is uint4 15 and
    float4 -6); a sub-byte type and an 8-bit one are not of one width (ONNX BitCast) and are refused."""
    x = np.arange(-8, 8).astype(ml_dtypes.int4)
    (u,) = run_op(reg, "bitcast", [x], {"dtype": "uint4"}, device=device)
    assert u.astype(np.int32).tolist() == [*range(8, 16), *range(8)]
    (f,) = run_op(reg, "bitcast", [u], {"dtype": FP4}, device=device)
    assert_same_bytes(f, x.view(np.uint8).view(ml_dtypes.float4_e2m1fn), "uint4 -> float4")
    with pytest.raises(DTypeMismatchError, match="int4 is 4 bits wide and int8 8.*same width"):
        run_op(reg, "bitcast", [x], {"dtype": "int8"}, device=device)
    with pytest.raises(DTypeMismatchError, match="same width"):
        run_op(reg, "bitcast", [np.zeros(3, ml_dtypes.int2)], {"dtype": "int4"}, device=device)
