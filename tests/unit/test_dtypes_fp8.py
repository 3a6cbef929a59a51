"""The 8-bit float dtypes: one row each in the dtype table (NumPy via ml_dtypes, DLPack codes, C enum)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import pipelink as pl
from pipelink.dtypes import DTYPES, FLOAT8_DTYPES, FLOAT_DTYPES, from_dlpack_code, get_dtype
from pipelink.errors import InvalidArgumentError


@pytest.mark.parametrize(
    ("name", "alias", "numpy", "dl_code", "c_enum"),
    [
        ("float8_e4m3fn", "fp8_e4m3", ml_dtypes.float8_e4m3fn, 10, 9),
        ("float8_e5m2", "fp8_e5m2", ml_dtypes.float8_e5m2, 12, 10),
        ("float8_e4m3fnuz", None, ml_dtypes.float8_e4m3fnuz, 11, 15),
        ("float8_e5m2fnuz", None, ml_dtypes.float8_e5m2fnuz, 13, 16),
        ("float8_e8m0fnu", None, ml_dtypes.float8_e8m0fnu, 14, 17),
    ],
)
def test_float8_rows(name, alias, numpy, dl_code, c_enum):
    dt = DTYPES[name]
    assert get_dtype(name) is get_dtype(np.dtype(numpy)) is get_dtype(numpy) is get_dtype(c_enum) is dt
    assert alias is None or get_dtype(alias) is dt
    assert from_dlpack_code(dl_code, 8) is dt and dt.itemsize == 1 and dt.is_floating
    assert name not in FLOAT_DTYPES, "storage types for (de)quantization, not compute dtypes"
    assert name in FLOAT8_DTYPES


def test_float8_dtypes_are_the_five_8_bit_floats():
    assert {"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"} == set(
        FLOAT8_DTYPES
    )
    assert all(get_dtype(n).bits == 8 for n in FLOAT8_DTYPES)


@pytest.mark.parametrize("bits", [16, 32])
@pytest.mark.parametrize("code", [11, 13, 14])
def test_the_new_float8_codes_are_8_bits_only(code, bits):
    with pytest.raises(InvalidArgumentError, match="unsupported DLPack dtype"):
        from_dlpack_code(code, bits)


def test_e8m0_and_fnuz_tensors_cross_a_pipeline_boundary():
    """An e8m0 tensor in (its powers of two times the scale out) and a fnuz one out (quantized)."""
    cfg = {
        "inputs": {"q": {"shape": [4], "dtype": "float8_e8m0fnu"}, "s": {"shape": [], "dtype": "float32"}},
        "pipeline": [
            {"name": "dequantize_linear", "inputs": ["q", "s"], "outputs": ["y"]},
            {
                "name": "quantize_linear",
                "inputs": ["y", "s"],
                "outputs": ["z"],
                "attrs": {"output_dtype": "float8_e4m3fnuz"},
            },
        ],
        "outputs": ["y", "z"],
    }
    q = np.array([127, 128, 120, 255], np.uint8).view(ml_dtypes.float8_e8m0fnu)  # 1, 2, 2^-7, NaN
    with pl.load(cfg, device="cpu") as pipe:
        out = pipe.run(q=q, s=np.float32(3.0))
        y, z = np.asarray(out["y"]), np.asarray(out["z"])
    assert y[:3].tolist() == [3.0, 6.0, 3.0 / 128] and np.isnan(y[3])
    assert z.dtype == np.dtype(ml_dtypes.float8_e4m3fnuz)
    assert z.view(np.uint8)[3] == 0x80 and z[:3].astype(np.float32).tolist() == [1.0, 2.0, 2.0**-7]


def test_float8_tensors_cross_a_pipeline_boundary():
    cfg = {
        "inputs": {"q": {"shape": [2, 3], "dtype": "float8_e5m2"}, "s": {"shape": [], "dtype": "float32"}},
        "pipeline": [{"name": "dequantize_linear", "inputs": ["q", "s"], "outputs": ["y"]}],
    }
    q = np.array([[0.5, -1.5, 3.0], [-0.25, 0.0, 96.0]], np.float32).astype(ml_dtypes.float8_e5m2)
    with pl.load(cfg, device="cpu") as pipe:
        y = np.asarray(pipe.run(q=q, s=np.float32(2.0))["y"])
    assert y.tolist() == [[1.0, -3.0, 6.0], [-0.5, 0.0, 192.0]]
    with pytest.raises(InvalidArgumentError, match="unsupported DLPack dtype"):
        from_dlpack_code(10, 16)  # code 10 is e4m3fn only with 8 bits
