"""pipelink.h agrees with the Python side: struct layouts, status codes, dtype codes; it builds alone."""

from __future__ import annotations

import ctypes
import re

from pipelink.dtypes import DTYPES
from pipelink.errors import ErrorCode
from pipelink.modules.build import build_module, include_dir
from pipelink.modules.native import load_library
from pipelink.modules.services import PipeLinkAttr, PipeLinkServices, PipeLinkTensor

HEADER = (include_dir() / "pipelink.h").read_text()


def test_ctypes_mirrors_have_the_c_layout(libs, reg):
    # A wrong offset here would make every native call read garbage shapes or attrs.
    module = load_library(libs["good"], registry=reg)
    facts = (ctypes.c_int64 * 11)()
    module.library.good_layout(facts)
    expected = [
        ctypes.sizeof(PipeLinkTensor),
        PipeLinkTensor.ndim.offset,
        PipeLinkTensor.dtype.offset,
        PipeLinkTensor.shape.offset,
        PipeLinkTensor.strides.offset,
        PipeLinkTensor.byte_offset.offset,
        ctypes.sizeof(PipeLinkAttr),
        PipeLinkAttr.value.offset,
        ctypes.sizeof(PipeLinkServices),
        PipeLinkServices.user.offset,
        PipeLinkServices.workspace.offset,
    ]
    assert list(facts) == expected
    assert expected[0] == 48  # DLTensor on LP64


def test_status_codes_equal_error_codes():
    found = dict(re.findall(r"(PIPELINK_(?:SUCCESS|ERR_\w+)) = (\d+)", HEADER))
    assert {k: int(v) for k, v in found.items()} == {e.name: e.value for e in ErrorCode}


def test_dtype_enum_equals_dtype_table():
    found = {k.lower(): int(v) for k, v in re.findall(r"PIPELINK_DTYPE_(\w+) = (-?\d+)", HEADER)}
    for name, dtype in DTYPES.items():
        assert found[name] == dtype.c_enum, name


def test_header_builds_a_cxx_module_with_the_seed_descriptor(tmp_path):
    # C++ with -Wall -Werror, including a seed-style descriptor (HardwareFeature) and the manifest macro.
    src = tmp_path / "mod.cpp"
    src.write_text(
        "#include <pipelink.h>\n"
        'struct D { static constexpr const char* name = "cxx_op"; static constexpr int32_t version = 1;\n'
        "  static constexpr HardwareFeature required_features[] = {{HW_FEATURE_TENSOR_CORE, 8}}; };\n"
        "PIPELINK_COMPUTE(cxx_op_compute) { return D::required_features[0].minimum == 8 ? 0 : 1; }\n"
        "PIPELINK_VERSION(cxx_op, 1, 0, 0)\n"
        'PIPELINK_MANIFEST({"name": "cxx_op", "version": "1.0.0", "entry": "cxx_op_compute",\n'
        '  "inputs": [], "outputs": [{"name": "y", "shape": [1], "dtype": "float32"}]})\n'
    )
    lib = build_module(src, tmp_path / "libcxx.so", extra_flags=["-Wall", "-Werror"])
    module = load_library(lib)
    try:
        assert [d.key for d in module.operators] == ["cxx_op@1.0.0"]
        assert module.library.cxx_op_compute(None, 0, None, 0, None, 0, None, None) == 0
    finally:
        module.unload()


def test_dtype_id_of_every_dlpack_type_is_its_table_row(tmp_path):
    """pipelink_dtype_id (the header's helper a module calls on a tensor) names each row's (code, bits),
    int16/uint16/uint32/uint64 and the sub-byte types (PipeLink's own codes) included; another width of a
    known code is UNKNOWN (-1)."""
    src = tmp_path / "ids.c"
    src.write_text(
        "#include <pipelink.h>\n"
        "int32_t dtype_id_of(uint8_t code, uint8_t bits) {\n"
        "    PipeLinkTensor t = {0};\n"
        "    t.dtype.code = code, t.dtype.bits = bits, t.dtype.lanes = 1;\n"
        "    return (int32_t)pipelink_dtype_id(&t);\n"
        "}\n"
    )
    lib = ctypes.CDLL(str(build_module(src, tmp_path / "libids.so", extra_flags=["-Wall", "-Werror"])))
    lib.dtype_id_of.restype = ctypes.c_int32
    lib.dtype_id_of.argtypes = [ctypes.c_uint8, ctypes.c_uint8]
    for name, dtype in DTYPES.items():
        assert lib.dtype_id_of(dtype.dl_code, dtype.bits) == dtype.c_enum, name
    for code, bits in ((0, 128), (1, 128), (2, 8), (4, 32)):  # int128, uint128, float8 of DL_FLOAT, bf32
        assert lib.dtype_id_of(code, bits) == -1, (code, bits)
    # DLPack's packed int4, uint4, float4_e2m1fn, int2, uint2 are no PipeLink tensor (one value per byte is
    # PipeLink's own code, 128 on, with bits 8); nor is PipeLink's code with any other width
    for code, bits in ((0, 4), (1, 4), (17, 4), (0, 2), (1, 2), (128, 4), (132, 16)):
        assert lib.dtype_id_of(code, bits) == -1, (code, bits)
