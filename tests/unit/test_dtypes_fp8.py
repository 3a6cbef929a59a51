"""The 8-bit float dtypes: one row each in the dtype table (NumPy via ml_dtypes, DLPack codes, C enum)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import pipelink as pl
from pipelink.dtypes import DTYPES, FLOAT_DTYPES, from_dlpack_code, get_dtype
from pipelink.errors import InvalidArgumentError


@pytest.mark.parametrize(
    ("name", "alias", "numpy", "dl_code", "c_enum"),
    [
        ("float8_e4m3fn", "fp8_e4m3", ml_dtypes.float8_e4m3fn, 10, 9),
        ("float8_e5m2", "fp8_e5m2", ml_dtypes.float8_e5m2, 12, 10),
    ],
)
def test_float8_rows(name, alias, numpy, dl_code, c_enum):
    dt = DTYPES[name]
    assert get_dtype(name) is get_dtype(alias) is get_dtype(np.dtype(numpy)) is get_dtype(c_enum) is dt
    assert from_dlpack_code(dl_code, 8) is dt and dt.itemsize == 1 and dt.is_floating
    assert name not in FLOAT_DTYPES, "storage types for (de)quantization, not compute dtypes"


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
