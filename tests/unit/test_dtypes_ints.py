"""The int16, uint16, uint32 and uint64 rows of the dtype table: NumPy, DLPack (code, bits), C enum and
CUDA type; NumPy's DLPack exchange of them both ways; ONNX's element types 5, 4, 12 and 13."""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from pipelink.dtypes import (
    DL_INT,
    DL_UINT,
    DTYPES,
    FLOAT_DTYPES,
    TORCH_DTYPE_NAMES,
    from_dlpack_code,
    get_dtype,
    tolerance,
)
from pipelink.errors import InvalidArgumentError
from pipelink.tensor import Tensor

ROWS = [
    ("int16", np.int16, DL_INT, 16, 11, "short"),
    ("uint16", np.uint16, DL_UINT, 16, 12, "unsigned short"),
    ("uint32", np.uint32, DL_UINT, 32, 13, "unsigned int"),
    ("uint64", np.uint64, DL_UINT, 64, 14, "unsigned long long"),
]


@pytest.mark.parametrize(("name", "numpy", "code", "bits", "c_enum", "cuda_type"), ROWS)
def test_the_integer_rows(name, numpy, code, bits, c_enum, cuda_type):
    dt = DTYPES[name]
    assert get_dtype(name) is get_dtype(np.dtype(numpy)) is get_dtype(numpy) is get_dtype(c_enum) is dt
    assert from_dlpack_code(code, bits) is dt and getattr(pl, name) is dt
    assert dt.itemsize == bits // 8 and not dt.is_floating and dt.cuda_type == cuda_type
    assert name not in FLOAT_DTYPES and tolerance(name) == (0.0, 0.0)  # integers compare exactly


def test_the_enum_values_are_dense_and_unique():
    """C enum values index plan.c's table: 0..N-1, one per row, none reused."""
    assert sorted(d.c_enum for d in DTYPES.values()) == list(range(len(DTYPES)))
    assert len({(d.dl_code, d.bits) for d in DTYPES.values()}) == len(DTYPES)


def test_aliases_and_what_stays_unknown():
    assert get_dtype("short") is pl.int16 and get_dtype("ushort") is pl.uint16
    for ambiguous in ("uint", "ulong"):  # their widths vary by platform: no alias
        with pytest.raises(InvalidArgumentError, match="unsupported dtype"):
            get_dtype(ambiguous)
    with pytest.raises(InvalidArgumentError, match="unsupported DLPack dtype"):
        from_dlpack_code(DL_UINT, 128)


def test_torch_names_hold_int16_but_not_the_shell_unsigned_types():
    """torch.int16 is a full dtype; torch's uint16/32/64 are absent before 2.3 and operator-less since."""
    assert "int16" in TORCH_DTYPE_NAMES
    assert not {"uint16", "uint32", "uint64"} & set(TORCH_DTYPE_NAMES)


@pytest.mark.parametrize("name", [r[0] for r in ROWS])
def test_numpy_exchanges_them_through_dlpack(name):
    info = np.iinfo(name)
    x = np.random.default_rng(4).integers(info.min, info.max, size=(4, 6), endpoint=True, dtype=name)
    t = Tensor.from_dlpack(x)  # NumPy produces, PipeLink consumes
    assert t.dtype.name == name and t.shape == (4, 6)
    np.testing.assert_array_equal(np.asarray(t), x)
    back = np.from_dlpack(pl.asarray(x[:, ::2]))  # PipeLink produces a strided view, NumPy consumes
    assert back.dtype == np.dtype(name)
    np.testing.assert_array_equal(back, x[:, ::2])


@pytest.mark.parametrize(("elem_type", "name"), [(5, "int16"), (4, "uint16"), (12, "uint32"), (13, "uint64")])
def test_onnx_element_types_map_to_the_rows(elem_type, name):
    pytest.importorskip("onnx")
    from pipelink.onnx.graph import onnx_dtype

    assert onnx_dtype(elem_type) == name
