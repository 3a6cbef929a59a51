"""ONNX Cast into the fnuz float8s and float8_e8m0fnu through PipeLink's import, against ONNX's
ReferenceEvaluator bit for bit: saturate or not (fnuz: no inf, no -0, 0x80 NaN), e8m0's three round_modes
from float32, float16 and (through a float32 cast, as the reference) float64 and int32; and what the
import refuses: a round_mode outside the spec, QuantizeLinear into e8m0, DequantizeLinear from it.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from tests.backend import onnx_models as om  # noqa: E402

TensorProto = onnx.TensorProto


def _cast_model(x: np.ndarray, attrs: dict, opset: int = 25):
    return om.one_node_model("Cast", ["x"], {"x": x}, {}, attrs, ["y"], opset=opset, name="cast_float8")


def _values(rng, dtype) -> np.ndarray:
    """Random magnitudes of the float8 ranges and beyond, both signs, powers of two and their midpoints,
    zeros, infinities and NaN."""
    powers = 2.0 ** np.arange(-30, 31)
    parts = [
        rng.standard_normal(2000) * 2.0 ** rng.integers(-30, 30, 2000),
        powers,
        1.5 * powers,
        -powers[::3],
        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e6, -1e6, 65000.0],
    ]
    x = np.concatenate([np.asarray(p, np.float64) for p in parts])
    if np.dtype(dtype).kind == "i":
        x = np.nan_to_num(x, posinf=2**30, neginf=-(2**30)).clip(-(2**31), 2**31 - 1)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(dtype)


def _same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype)
    bad = np.flatnonzero(got.view(np.uint8) != want.view(np.uint8))
    assert bad.size == 0, (what, bad[:6], got.view(np.uint8)[bad[:6]], want.view(np.uint8)[bad[:6]])


@pytest.mark.parametrize("to", [TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2FNUZ])
@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("src", [np.float32, np.float16])
def test_cast_into_fnuz_matches_the_reference(rng, device, to, saturate, src):
    x = _values(rng, src)
    model = _cast_model(x, {"to": to, "saturate": saturate})
    (got,) = om.run_pipeline(model, {"x": x}, device)
    (want,) = om.reference_evaluator(model, {"x": x})
    _same_bits(got, want, f"Cast to {to} saturate={saturate} from {np.dtype(src)}")


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("src", [np.float32, np.float16, np.float64, np.int32])
def test_cast_into_e8m0_matches_the_reference(rng, device, round_mode, saturate, src):
    x = _values(rng, src)
    if src is np.float32:  # the whole float32 range: the largest exponents (saturation), the subnormals
        x = np.concatenate([x, np.array([3.4e38, 2.0**127, 1.7e38, 2.0**-127, 1.4e-45, 2.0**-126], src)])
    model = _cast_model(x, {"to": TensorProto.FLOAT8E8M0, "saturate": saturate, "round_mode": round_mode})
    assert om.stage_names(model)[-1] == "quantize_linear"
    (got,) = om.run_pipeline(model, {"x": x}, device)
    (want,) = om.reference_evaluator(model, {"x": x})
    _same_bits(got, want, f"Cast to e8m0 {round_mode} saturate={saturate} from {np.dtype(src)}")


def test_cast_from_e8m0_and_fnuz_is_exact(device):
    """Out of the new float8s every code converts exactly (NaN to NaN)."""
    for dtype in (ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e8m0fnu):
        x = np.arange(256, dtype=np.uint8).view(dtype)
        model = _cast_model(x, {"to": TensorProto.FLOAT})
        (got,) = om.run_pipeline(model, {"x": x}, device)
        want = x.astype(np.float32)
        np.testing.assert_array_equal(got, want, err_msg=np.dtype(dtype).name)


def test_the_import_refuses_what_the_spec_lacks():
    x = np.ones((2, 3), np.float32)
    bad_mode = _cast_model(x, {"to": TensorProto.FLOAT8E8M0, "round_mode": "even"})
    om.refused(bad_mode, "round_mode 'even'")
    quantize = om.one_node_model(
        "QuantizeLinear",
        ["x", "s"],
        {"x": x},
        {"s": np.float32(1.0)},
        {"output_dtype": TensorProto.FLOAT8E8M0},
        ["y"],
        opset=25,
    )
    om.refused(quantize, "QuantizeLinear of float8_e8m0fnu")
    q = np.ones((2, 3), ml_dtypes.float8_e8m0fnu)
    dequantize = om.one_node_model(
        "DequantizeLinear", ["q", "s"], {"q": q}, {"s": np.float32(1.0)}, {}, ["y"], opset=25
    )
    om.refused(dequantize, "DequantizeLinear of float8_e8m0fnu")
