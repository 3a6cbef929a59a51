"""ONNX's sub-byte types (INT4, UINT4, INT2, UINT2, FLOAT4E2M1) and 16-bit quantization through PipeLink's
import, against ONNX's ReferenceEvaluator bit for bit: Cast and CastLike into and out of them, graph inputs
fed ml_dtypes arrays, initializers packed two (or four) to a byte in the protobuf and unpacked by the
import, QuantizeLinear / DequantizeLinear per tensor, per axis and in blocks (an LLM's int4 weights with
uint4 zero points) both ways, int16 and uint16; and what the import refuses.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import numpy_helper  # noqa: E402

from pipelink.dtypes import get_dtype  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402
from tests.backend import onnx_models as om  # noqa: E402
from tests.backend.ops_helpers import assert_same_bytes  # noqa: E402

TensorProto = onnx.TensorProto
SUB_BYTE = {
    TensorProto.INT4: ml_dtypes.int4,
    TensorProto.UINT4: ml_dtypes.uint4,
    TensorProto.INT2: ml_dtypes.int2,
    TensorProto.UINT2: ml_dtypes.uint2,
    TensorProto.FLOAT4E2M1: ml_dtypes.float4_e2m1fn,
}
INTS = (TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2, TensorProto.UINT2)


def _values(rng, dtype, into=None) -> np.ndarray:
    """Random values over and past the sub-byte ranges (their halves: float4's ties), zeros, infinities
    and NaN; integers of every size for an integer dtype. Floats ``into`` a sub-byte integer type stay in
    its range, NaN and inf left out: the spec leaves those undefined, and ml_dtypes' versions (onnx's
    reference) differ there (0 in 0.7, wrapped before; test_ops_quantize_subbyte.py holds PipeLink's)."""
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -300), min(info.max, 300), 500, endpoint=True).astype(dtype)
    parts = [rng.uniform(-20, 20, 500), np.arange(-40, 41) / 2, [0.0, -0.0, np.inf, -np.inf, np.nan, 1e6]]
    with np.errstate(over="ignore"):
        x = np.concatenate([np.asarray(p, np.float64) for p in parts])
    if into is not None and into in INTS:
        info = ml_dtypes.iinfo(SUB_BYTE[into])
        with np.errstate(invalid="ignore"):
            x = x[np.isfinite(x) & (np.trunc(x) >= info.min) & (np.trunc(x) <= info.max)]
    return x.astype(dtype)


def _cast(x: np.ndarray, to: int, **attrs):
    return om.one_node_model("Cast", ["x"], {"x": x}, {}, {"to": to, **attrs}, ["y"], opset=25, name="cast")


@pytest.mark.parametrize("to", list(SUB_BYTE))
@pytest.mark.parametrize("src", [np.float32, np.float16, np.float64, np.int32, np.int8, np.uint8])
def test_cast_into_sub_byte_types_matches_the_reference(rng, device, to, src):
    """Integers keep their low bits, floats truncate (0 outside the range), float4 rounds to nearest even
    and saturates (NaN: a zero of the opposite sign), as onnx's reference (ml_dtypes) casts."""
    x = _values(rng, src, into=to)
    model = _cast(x, to)
    (got,) = om.run_pipeline(model, {"x": x}, device)
    (want,) = om.reference_evaluator(model, {"x": x})
    assert_same_bytes(got, want, f"Cast {np.dtype(src)} -> {np.dtype(SUB_BYTE[to]).name}")


@pytest.mark.parametrize("to", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT8, TensorProto.INT64])
@pytest.mark.parametrize("src", list(SUB_BYTE))
def test_cast_out_of_sub_byte_graph_inputs_is_exact(device, src, to):
    """A graph input of a sub-byte type is fed an ml_dtypes array (what onnx's node tests feed): every
    value of the type converts exactly."""
    dtype = SUB_BYTE[src]
    x = np.arange(2 ** get_dtype(dtype).value_bits, dtype=np.uint8).view(dtype)  # every value
    model = _cast(x, to)
    (got,) = om.run_pipeline(model, {"x": x}, device)
    (want,) = om.reference_evaluator(model, {"x": x})
    assert_same_bytes(got, want, f"Cast {np.dtype(dtype).name} -> {to}")


@pytest.mark.parametrize("like", list(SUB_BYTE))
def test_castlike_takes_the_sub_byte_type_of_its_target(rng, device, like):
    x = _values(rng, np.float32, into=like)
    target = np.zeros(0, SUB_BYTE[like])
    model = om.one_node_model("CastLike", ["x", "t"], {"x": x}, {"t": target}, {}, ["y"], opset=25)
    (got,) = om.run_pipeline(model, {"x": x}, device)
    (want,) = om.reference_evaluator(model, {"x": x})
    assert_same_bytes(got, want, f"CastLike {np.dtype(SUB_BYTE[like]).name}")


def test_initializers_are_unpacked_at_import():
    """An int4 initializer is packed two to a byte in the protobuf (onnx.numpy_helper); the import holds
    it one value per byte, the same values."""
    w = np.array([[-8, -1, 0, 7, 3], [1, 2, -3, -4, 5]], ml_dtypes.int4)
    packed = numpy_helper.from_array(w, "w")
    assert len(packed.raw_data) == 5 and packed.data_type == TensorProto.INT4  # 10 values in 5 bytes

    model = om.one_node_model(
        "DequantizeLinear", ["w", "s"], {}, {"w": w, "s": np.float32(0.5)}, {}, ["y"], opset=25
    )
    config, weights = import_model(model)
    held = next(v for v in weights.values() if np.asarray(v).dtype == np.dtype(ml_dtypes.int4))
    np.testing.assert_array_equal(np.asarray(held).view(np.uint8), w.view(np.uint8))


@pytest.mark.parametrize("q", list(SUB_BYTE) + [TensorProto.INT16, TensorProto.UINT16])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_and_dequantize_match_the_reference(rng, device, q, per_axis):
    """QuantizeLinear into the type (saturating; float4: the quotient plus its zero point, rounded to
    nearest even) with the zero point fed as a graph input, and DequantizeLinear of the result with it as
    an initializer, per tensor and per axis."""
    dtype = SUB_BYTE.get(q) or {TensorProto.INT16: np.int16, TensorProto.UINT16: np.uint16}[q]
    x = rng.uniform(-40, 40, (3, 8)).astype(np.float32)
    if q in (TensorProto.INT16, TensorProto.UINT16):
        x *= 3000
    scale = rng.uniform(0.5, 3.0, 3 if per_axis else ()).astype(np.float32)
    if q == TensorProto.FLOAT4E2M1:
        zero = np.zeros(scale.shape, np.float32).astype(dtype)
    elif np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        zero = rng.integers(info.min // 4, info.max // 4, scale.shape, endpoint=True).astype(dtype)
    else:
        info = ml_dtypes.iinfo(dtype)
        zero = rng.integers(info.min, info.max, scale.shape, endpoint=True).astype(dtype)
    attrs = {"axis": 0}
    quant = om.one_node_model(
        "QuantizeLinear", ["x", "s", "z"], {"x": x, "s": scale, "z": zero}, {}, attrs, ["y"], opset=25
    )
    feeds = {"x": x, "s": scale, "z": zero}
    (got,) = om.run_pipeline(quant, feeds, device)
    (want,) = om.reference_evaluator(quant, feeds)
    assert_same_bytes(got, want, f"QuantizeLinear to {np.dtype(dtype).name}")
    dequant = om.one_node_model(
        "DequantizeLinear", ["q", "s", "z"], {"q": want}, {"s": scale, "z": zero}, attrs, ["y"], opset=25
    )
    (back,) = om.run_pipeline(dequant, {"q": want}, device)
    (ref,) = om.reference_evaluator(dequant, {"q": want})
    np.testing.assert_array_equal(back, ref)


@pytest.mark.parametrize("q", [TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2, TensorProto.FLOAT4E2M1])
def test_blocked_dequantize_of_weights_matches_the_reference(rng, device, q):
    """An LLM's int4 weights: blocked DequantizeLinear (block 16 along axis 0, a float16 scale per block and
    column, an int4/uint4 zero point per block where the type has one), all initializers."""
    dtype = SUB_BYTE[q]
    k, n, block = 40, 6, 16  # the last block is short
    values = np.arange(2 ** get_dtype(dtype).value_bits, dtype=np.uint8).view(dtype)
    w = rng.choice(values, (k, n))
    blocks = -(-k // block)
    scale = rng.uniform(0.01, 0.2, (blocks, n)).astype(np.float16)
    inits = {"w": w, "s": scale}
    inputs = ["w", "s"]
    if q != TensorProto.FLOAT4E2M1:
        inits["z"] = rng.choice(values, (blocks, n))
        inputs.append("z")
    model = om.one_node_model(
        "DequantizeLinear", inputs, {}, inits, {"axis": 0, "block_size": block}, ["y"], opset=25
    )
    (got,) = om.run_pipeline(model, {}, device)
    (want,) = om.reference_evaluator(model, {})
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)


def test_blocked_quantize_into_float4_matches_the_reference(rng, device):
    x = rng.uniform(-30, 30, (2, 12)).astype(np.float32)
    scale = rng.uniform(0.5, 4.0, (2, 3)).astype(np.float32)
    attrs = {"axis": 1, "block_size": 4, "output_dtype": TensorProto.FLOAT4E2M1}
    model = om.one_node_model("QuantizeLinear", ["x", "s"], {"x": x}, {"s": scale}, attrs, ["y"], opset=25)
    (got,) = om.run_pipeline(model, {"x": x}, device)
    (want,) = om.reference_evaluator(model, {"x": x})
    assert_same_bytes(got, want, "blocked QuantizeLinear to float4")


@pytest.mark.parametrize("q", INTS)
@pytest.mark.parametrize("with_zero", [False, True])
def test_blocked_quantize_into_sub_byte_integers_matches_the_reference(rng, device, q, with_zero):
    """x / scale per block, rounded, shifted by the block's zero point, saturated to the type's range."""
    x = rng.uniform(-12, 12, (2, 8)).astype(np.float32)
    inits = {"s": rng.uniform(0.5, 2.0, (2, 2)).astype(np.float32)}
    inputs = ["x", "s"]
    attrs = {"axis": 1, "block_size": 4, "output_dtype": q}
    if with_zero:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(q)
        info = ml_dtypes.iinfo(dtype)
        inits["z"] = rng.integers(info.min, info.max + 1, (2, 2)).astype(dtype)
        inputs.append("z")
        del attrs["output_dtype"]
    model = om.one_node_model("QuantizeLinear", inputs, {"x": x}, inits, attrs, ["y"], opset=25)
    (got,) = om.run_pipeline(model, {"x": x}, device)
    (want,) = om.reference_evaluator(model, {"x": x})
    assert_same_bytes(got, want, f"blocked QuantizeLinear to {q}")
