"""quantize_linear into float8_e8m0fnu (ONNX Cast's conversion into it: round_mode up, down, nearest, with
and without saturate) against onnx's reference (``onnx.numpy_helper.to_float8e8m0`` of the float32
quotient), dequantize_linear from it (exact powers of two times the scale), and what e8m0 refuses: a zero
point (it has no zero) and a round_mode on another quantized type.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from pipelink.errors import DTypeMismatchError, InvalidArgumentError

from .ops_helpers import check_close, make_registry, run_op

E8M0 = ml_dtypes.float8_e8m0fnu


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _inputs(rng, dtype) -> np.ndarray:
    """Random magnitudes over the whole float32 range with both signs, every power of two and its
    midpoints (1.5 * 2^k: the ties) and the values just off them, zeros, infinities and NaN."""
    powers = 2.0 ** np.arange(-126, 128)
    mids = 1.5 * powers[:-1]
    parts = [
        rng.standard_normal(3000) * 2.0 ** rng.integers(-140, 128, 3000),
        powers,
        mids,
        np.nextafter(mids.astype(np.float32), np.float32(0)),
        np.nextafter(mids.astype(np.float32), np.float32(np.inf)),
        -mids[::7],
        [0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, 2.0**-127, 2.0**-149],
    ]
    with np.errstate(over="ignore"):
        x = np.concatenate([np.asarray(p, np.float64) for p in parts]).astype(np.float32)
        return x.astype(dtype)


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("xtype", [np.float32, ml_dtypes.bfloat16, np.float16])
def test_quantize_into_e8m0_is_onnx_casts_rounding(reg, device, rng, round_mode, saturate, xtype):
    numpy_helper = pytest.importorskip("onnx.numpy_helper")
    x = _inputs(rng, xtype)
    scale = np.asarray(0.75 if xtype is not np.float32 else 1.0, xtype)  # x / 0.75: off the powers of two
    (y,) = run_op(
        reg,
        "quantize_linear",
        [x, scale],
        {"output_dtype": "float8_e8m0fnu", "saturate": saturate, "round_mode": round_mode},
        device=device,
    )
    assert y.dtype == np.dtype(E8M0) and y.shape == x.shape
    with np.errstate(all="ignore"):
        quotient = np.divide(x, scale, dtype=np.float32)
    want = numpy_helper.to_float8e8m0(quotient, saturate, round_mode).view(np.uint8)
    bad = np.flatnonzero(y.view(np.uint8) != want)
    assert bad.size == 0, (quotient[bad[:6]], want[bad[:6]], y.view(np.uint8)[bad[:6]])


def test_quantize_into_e8m0_per_axis(reg, device, rng):
    """One scale per index of the axis: element (i, j, k) divides by scale[j] before its rounding."""
    numpy_helper = pytest.importorskip("onnx.numpy_helper")
    x = (rng.standard_normal((3, 5, 4)) * 1e3).astype(np.float32)
    scale = rng.uniform(0.1, 8.0, 5).astype(np.float32)
    attrs = {"output_dtype": "float8_e8m0fnu", "round_mode": "nearest", "axis": 1}
    (y,) = run_op(reg, "quantize_linear", [x, scale], attrs, device=device)
    want = numpy_helper.to_float8e8m0(x / scale.reshape(1, 5, 1), True, "nearest").view(np.uint8)
    np.testing.assert_array_equal(y.view(np.uint8), want)


@pytest.mark.parametrize("stype", ["float32", "float16", "bfloat16"])
def test_dequantize_from_e8m0_is_the_power_of_two_times_the_scale(reg, device, rng, stype):
    # every code but NaN (0xff); float16: those whose products lie in its range (2^-24 to 2^15)
    codes = np.arange(103, 143) if stype == "float16" else np.arange(255)
    x = np.concatenate([rng.permutation(codes), [0xFF]]).astype(np.uint8).view(E8M0)
    npt = ml_dtypes.bfloat16 if stype == "bfloat16" else stype
    scale = np.asarray(1.25, npt)
    (y,) = run_op(reg, "dequantize_linear", [x, scale], device=device)
    assert y.dtype == scale.dtype and np.isnan(y[-1].astype(np.float32))
    want = 2.0 ** (x[:-1].view(np.uint8).astype(np.float64) - 127) * float(scale)
    with np.errstate(over="ignore"):
        want = want.astype(np.float32).astype(npt).astype(np.float64)  # rounded as the output dtype
    check_close(y[:-1], want, stype)


def test_e8m0_has_no_zero_point_and_round_mode_is_its_alone(reg):
    x, s = np.ones((2, 3), np.float32), np.float32(1)
    with pytest.raises(DTypeMismatchError, match="no zero point"):
        run_op(reg, "quantize_linear", [x, s, np.ones((), E8M0)])
    with pytest.raises(DTypeMismatchError, match="no zero point"):
        run_op(reg, "dequantize_linear", [np.ones(3, E8M0), s, np.ones((), E8M0)])
    with pytest.raises(InvalidArgumentError, match="round_mode 'down' applies to float8_e8m0fnu only"):
        run_op(reg, "quantize_linear", [x, s], {"output_dtype": "int8", "round_mode": "down"})
    with pytest.raises(InvalidArgumentError, match="round_mode"):
        run_op(reg, "quantize_linear", [x, s], {"output_dtype": "float8_e8m0fnu", "round_mode": "even"})
