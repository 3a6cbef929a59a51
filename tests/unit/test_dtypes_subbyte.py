"""The sub-byte rows of the dtype table (int4, uint4, int2, uint2, float4_e2m1fn): held one value per byte as
ml_dtypes' arrays hold them, so an item is one byte (``bits`` 8) and the value narrower (``value_bits``);
PipeLink's own type codes (DLPack's int4 and friends are packed), so no DLPack capsule carries them either
way; C enum 18..22; ONNX's element types 22, 21, 26, 25, 23; and a pipeline taking and returning them."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import pipelink as pl
from pipelink import dlpack
from pipelink.dtypes import (
    DL_FLOAT4_E2M1FN,
    DL_INT,
    DL_UINT,
    DTYPES,
    FLOAT_DTYPES,
    SUB_BYTE_DTYPES,
    from_dlpack_code,
    get_dtype,
    tolerance,
)
from pipelink.errors import InvalidArgumentError
from pipelink.tensor import Tensor

ROWS = [  # name, NumPy type, value bits, C enum, DLPack's (packed) code, ONNX element type
    ("int4", ml_dtypes.int4, 4, 18, DL_INT, 22),
    ("uint4", ml_dtypes.uint4, 4, 19, DL_UINT, 21),
    ("int2", ml_dtypes.int2, 2, 20, DL_INT, 26),
    ("uint2", ml_dtypes.uint2, 2, 21, DL_UINT, 25),
    ("float4_e2m1fn", ml_dtypes.float4_e2m1fn, 4, 22, DL_FLOAT4_E2M1FN, 23),
]


@pytest.mark.parametrize(("name", "numpy", "value_bits", "c_enum", "dl_code", "elem_type"), ROWS)
def test_the_sub_byte_rows(name, numpy, value_bits, c_enum, dl_code, elem_type):
    dt = DTYPES[name]
    assert get_dtype(name) is get_dtype(np.dtype(numpy)) is get_dtype(numpy) is get_dtype(c_enum) is dt
    assert dt.bits == 8 and dt.itemsize == 1 == np.dtype(numpy).itemsize, "one value per byte"
    assert dt.value_bits == value_bits and dt.is_sub_byte and name in SUB_BYTE_DTYPES
    assert dt.is_floating == (name == "float4_e2m1fn") and dt.cuda_type == "unsigned char"
    assert name not in FLOAT_DTYPES, "storage types for cast and (de)quantization, not compute dtypes"
    assert tolerance(name) == (0.0, 0.0)
    assert dt.dl_code >= 128, "PipeLink's own code: no DLPack code describes one value per byte"


def test_the_other_rows_are_as_wide_as_their_storage():
    assert {"int4", "uint4", "int2", "uint2", "float4_e2m1fn"} == SUB_BYTE_DTYPES
    for dt in DTYPES.values():
        assert dt.itemsize >= 1, dt.name
        if dt.name not in SUB_BYTE_DTYPES:
            assert dt.value_bits == dt.bits and not dt.is_sub_byte, dt.name


def test_the_byte_layout_is_ml_dtypes():
    """int4 -1 is 0x0f, int2 -1 0x03, float4 -6 0x0f: the value in the low bits, the high bits zero."""
    assert np.array([-1, -8, 7], ml_dtypes.int4).view(np.uint8).tolist() == [0x0F, 0x08, 0x07]
    assert np.array([-1, -2, 1], ml_dtypes.int2).view(np.uint8).tolist() == [0x03, 0x02, 0x01]
    assert np.array([-6.0, 0.5], np.float32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8).tolist() == [
        15,
        1,
    ]


@pytest.mark.parametrize(("name", "numpy", "value_bits", "c_enum", "dl_code", "elem_type"), ROWS)
def test_dlpacks_packed_types_are_refused_with_what_to_do(
    name, numpy, value_bits, c_enum, dl_code, elem_type
):
    """DLPack's int4 (bits 4) is two values to a byte: a capsule of it is refused, naming the exchange
    that works (the bytes as int8/uint8); PipeLink's own codes are no DLPack type either."""
    with pytest.raises(
        InvalidArgumentError, match=f"{name} tensors are held one value per byte; view them as"
    ):
        from_dlpack_code(dl_code, value_bits)
    with pytest.raises(InvalidArgumentError, match="unsupported DLPack dtype"):
        from_dlpack_code(DTYPES[name].dl_code, 8)


class _PackedInt4:
    """A DLPack producer of DLPack's int4 (code 0, bits 4: two values to a byte), as a framework's is."""

    def __init__(self):
        self.data = np.zeros(4, np.uint8)

    def __dlpack_device__(self):
        return (dlpack.DEVICE_CPU, 0)

    def __dlpack__(self, stream=None):
        return dlpack.to_capsule(self, self.data.ctypes.data, (8,), (1,), DL_INT, 4, dlpack.DEVICE_CPU, 0)


def test_a_packed_capsule_is_refused_on_import():
    with pytest.raises(InvalidArgumentError, match="int4 tensors are held one value per byte"):
        Tensor.from_dlpack(_PackedInt4())


@pytest.mark.parametrize("name", sorted(SUB_BYTE_DTYPES))
def test_dlpack_export_is_refused_and_the_byte_view_works(name):
    x = np.arange(4, dtype=np.uint8).view(get_dtype(name).numpy)
    t = pl.asarray(x)
    assert t.dtype.name == name and t.nbytes == 4
    np.testing.assert_array_equal(t.numpy().view(np.uint8), x.view(np.uint8))
    with pytest.raises(InvalidArgumentError, match=f"{name} tensors are held one value per byte; view"):
        np.from_dlpack(t)
    back = np.from_dlpack(pl.asarray(x.view(np.uint8)))  # the exchange the message names
    assert back.view(get_dtype(name).numpy).tolist() == x.tolist()


@pytest.mark.parametrize(("name", "numpy", "value_bits", "c_enum", "dl_code", "elem_type"), ROWS)
def test_onnx_element_types_map_to_the_rows(name, numpy, value_bits, c_enum, dl_code, elem_type):
    pytest.importorskip("onnx")
    from pipelink.onnx.graph import onnx_dtype

    assert onnx_dtype(elem_type) == name


def test_sub_byte_tensors_cross_a_pipeline_boundary():
    """An int4 input dequantized per axis, requantized into uint2, and cast into float4_e2m1fn: the config
    names the dtypes (the schema's enum has them), the outputs are ml_dtypes arrays."""
    cfg = {
        "inputs": {"q": {"shape": [2, 3], "dtype": "int4"}, "s": {"shape": [2], "dtype": "float32"}},
        "pipeline": [
            {"name": "dequantize_linear", "inputs": ["q", "s"], "outputs": ["y"], "attrs": {"axis": 0}},
            {
                "name": "quantize_linear",
                "inputs": ["y", "s"],
                "outputs": ["u"],
                "attrs": {"axis": 0, "output_dtype": "uint2"},
            },
            {"name": "cast", "inputs": ["y"], "outputs": ["f"], "attrs": {"dtype": "float4_e2m1fn"}},
        ],
        "outputs": ["y", "u", "f"],
    }
    q = np.array([[-8, -1, 7], [3, 0, -2]], ml_dtypes.int4)
    s = np.array([0.5, 2.0], np.float32)
    with pl.load(cfg, device="cpu") as pipe:
        out = pipe.run(q=q, s=s)
        y, u, f = (np.asarray(out[k]) for k in ("y", "u", "f"))
    assert y.tolist() == [[-4.0, -0.5, 3.5], [6.0, 0.0, -4.0]]
    assert u.dtype == np.dtype(ml_dtypes.uint2) and u.astype(int).tolist() == [[0, 0, 3], [3, 0, 0]]
    assert f.dtype == np.dtype(ml_dtypes.float4_e2m1fn)
    assert f.astype(np.float32).tolist() == [[-4.0, -0.5, 4.0], [6.0, 0.0, -4.0]]
