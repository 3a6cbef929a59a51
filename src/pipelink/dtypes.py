"""The dtype table: PipeLink name <-> NumPy dtype <-> DLPack (code, bits) <-> C enum value.

One row per supported dtype; every other module converts through here and never hard-codes a dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .errors import InvalidArgumentError

__all__ = [
    "DType",
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "int8",
    "int32",
    "int64",
    "uint8",
    "bool_",
    "int16",
    "uint16",
    "uint32",
    "uint64",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "int4",
    "uint4",
    "int2",
    "uint2",
    "float4_e2m1fn",
    "FLOAT8_DTYPES",
    "SUB_BYTE_DTYPES",
    "DTYPES",
    "FLOAT_DTYPES",
    "get_dtype",
    "sub_byte_refusal",
    "TOLERANCES",
    "tolerance",
]

# DLPack type codes (dlpack.h: DLDataTypeCode).
DL_INT, DL_UINT, DL_FLOAT, DL_BFLOAT, DL_BOOL = 0, 1, 2, 4, 6
DL_FLOAT8_E4M3FN, DL_FLOAT8_E4M3FNUZ, DL_FLOAT8_E5M2, DL_FLOAT8_E5M2FNUZ = 10, 11, 12, 13
DL_FLOAT8_E8M0FNU, DL_FLOAT4_E2M1FN = 14, 17
_DL_FLOAT8 = (DL_FLOAT8_E4M3FN, DL_FLOAT8_E4M3FNUZ, DL_FLOAT8_E5M2, DL_FLOAT8_E5M2FNUZ, DL_FLOAT8_E8M0FNU)
# PipeLink's own type codes (DLPack's end at 17) for the sub-byte types, which PipeLink holds one value per
# byte, as ml_dtypes' arrays do: DLPack's int4, uint4, float4_e2m1fn (bits 4), int2 and uint2 (bits 2) are
# packed, several values to a byte, so no DLPack code describes these tensors. A capsule never carries
# them (dlpack.to_capsule refuses them, from_dlpack_code does not find them); they keep each row's
# (code, bits) distinct, from int8's and uint8's above all, wherever a tensor is told by it (the native
# hot path's signatures, pipelink.h's pipelink_dtype_id).
DL_UNPACKED_INT4, DL_UNPACKED_UINT4, DL_UNPACKED_INT2, DL_UNPACKED_UINT2 = 128, 129, 130, 131
DL_UNPACKED_FLOAT4_E2M1FN = 132


@dataclass(frozen=True)
class DType:
    """A supported element type.

    ``c_enum`` is the value of ``PIPELINK_DTYPE_*`` in ``pipelink.h``; ``cuda_type`` the CUDA C type name
    used by the built-in kernels. ``bits`` is the width of an element's storage (its item size, in bits);
    ``value_bits`` the width of its value, narrower for the sub-byte types (4 or 2, held one per byte);
    left at 0 it is ``bits``.
    """

    name: str
    numpy: np.dtype
    dl_code: int
    bits: int
    c_enum: int
    cuda_type: str
    value_bits: int = 0

    def __post_init__(self) -> None:
        if not self.value_bits:
            object.__setattr__(self, "value_bits", self.bits)  # frozen: set once, here

    @property
    def itemsize(self) -> int:
        return self.bits // 8

    @property
    def is_floating(self) -> bool:
        return self.dl_code in (DL_FLOAT, DL_BFLOAT, DL_UNPACKED_FLOAT4_E2M1FN, *_DL_FLOAT8)

    @property
    def is_sub_byte(self) -> bool:
        """Whether the value is narrower than its byte (int4, uint4, int2, uint2, float4_e2m1fn)."""
        return self.value_bits < self.bits

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"pl.{self.name}"


float32 = DType("float32", np.dtype(np.float32), DL_FLOAT, 32, 0, "float")
float16 = DType("float16", np.dtype(np.float16), DL_FLOAT, 16, 1, "__half")
bfloat16 = DType("bfloat16", np.dtype(ml_dtypes.bfloat16), DL_BFLOAT, 16, 2, "__nv_bfloat16")
float64 = DType("float64", np.dtype(np.float64), DL_FLOAT, 64, 3, "double")
int8 = DType("int8", np.dtype(np.int8), DL_INT, 8, 4, "signed char")
int32 = DType("int32", np.dtype(np.int32), DL_INT, 32, 5, "int")
int64 = DType("int64", np.dtype(np.int64), DL_INT, 64, 6, "long long")
uint8 = DType("uint8", np.dtype(np.uint8), DL_UINT, 8, 7, "unsigned char")
bool_ = DType("bool", np.dtype(np.bool_), DL_BOOL, 8, 8, "bool")
# Hopper's 8-bit floats (OCP FP8): storage for quantize_linear/dequantize_linear, not compute dtypes.
float8_e4m3fn = DType(
    "float8_e4m3fn", np.dtype(ml_dtypes.float8_e4m3fn), DL_FLOAT8_E4M3FN, 8, 9, "__nv_fp8_e4m3"
)
float8_e5m2 = DType("float8_e5m2", np.dtype(ml_dtypes.float8_e5m2), DL_FLOAT8_E5M2, 8, 10, "__nv_fp8_e5m2")
# The remaining integer widths of ONNX (elem types 5, 4, 12, 13): appended, so earlier enum values stay.
int16 = DType("int16", np.dtype(np.int16), DL_INT, 16, 11, "short")
uint16 = DType("uint16", np.dtype(np.uint16), DL_UINT, 16, 12, "unsigned short")
uint32 = DType("uint32", np.dtype(np.uint32), DL_UINT, 32, 13, "unsigned int")
uint64 = DType("uint64", np.dtype(np.uint64), DL_UINT, 64, 14, "unsigned long long")
# The other 8-bit floats of ONNX (elem types 18, 20, 24), storage as the two above: the fnuz formats have
# no infinity and no negative zero (0x80 is their NaN) and a bias one larger; e8m0 is an exponent alone,
# 2^(e - 127), 0xff NaN (no sign, no zero). No CUDA type: the kernels take their bytes (fp8.cuh converts).
float8_e4m3fnuz = DType(
    "float8_e4m3fnuz", np.dtype(ml_dtypes.float8_e4m3fnuz), DL_FLOAT8_E4M3FNUZ, 8, 15, "unsigned char"
)
float8_e5m2fnuz = DType(
    "float8_e5m2fnuz", np.dtype(ml_dtypes.float8_e5m2fnuz), DL_FLOAT8_E5M2FNUZ, 8, 16, "unsigned char"
)
float8_e8m0fnu = DType(
    "float8_e8m0fnu", np.dtype(ml_dtypes.float8_e8m0fnu), DL_FLOAT8_E8M0FNU, 8, 17, "unsigned char"
)
# The sub-byte types of ONNX (elem types 22, 21, 26, 25, 23): storage for cast and (de)quantization, one
# value per byte as ml_dtypes holds them, in the byte's low bits (two's complement for int4 and int2: -1 is
# 0x0f, 0x03) with the high bits zero; a reader takes the low bits alone, as ml_dtypes does. float4_e2m1fn:
# sign, 2 exponent bits (bias 1), 1 mantissa bit; +-0, 0.5 ... 6, no infinity, no NaN. The kernels take
# their bytes (fp8.cuh converts).
int4 = DType("int4", np.dtype(ml_dtypes.int4), DL_UNPACKED_INT4, 8, 18, "unsigned char", value_bits=4)
uint4 = DType("uint4", np.dtype(ml_dtypes.uint4), DL_UNPACKED_UINT4, 8, 19, "unsigned char", value_bits=4)
int2 = DType("int2", np.dtype(ml_dtypes.int2), DL_UNPACKED_INT2, 8, 20, "unsigned char", value_bits=2)
uint2 = DType("uint2", np.dtype(ml_dtypes.uint2), DL_UNPACKED_UINT2, 8, 21, "unsigned char", value_bits=2)
float4_e2m1fn = DType(
    "float4_e2m1fn",
    np.dtype(ml_dtypes.float4_e2m1fn),
    DL_UNPACKED_FLOAT4_E2M1FN,
    8,
    22,
    "unsigned char",
    value_bits=4,
)

DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        float32,
        float16,
        bfloat16,
        float64,
        int8,
        int32,
        int64,
        uint8,
        bool_,
        float8_e4m3fn,
        float8_e5m2,
        int16,
        uint16,
        uint32,
        uint64,
        float8_e4m3fnuz,
        float8_e5m2fnuz,
        float8_e8m0fnu,
        int4,
        uint4,
        int2,
        uint2,
        float4_e2m1fn,
    )
}
FLOAT_DTYPES = frozenset({"float32", "float16", "bfloat16", "float64"})
#: The 8-bit floats: storage dtypes (cast, quantize_linear, dequantize_linear), not compute dtypes.
FLOAT8_DTYPES = frozenset(d.name for d in DTYPES.values() if d.dl_code in _DL_FLOAT8)
#: The sub-byte types, held one value per byte: storage dtypes as the float8s, not compute dtypes.
SUB_BYTE_DTYPES = frozenset(d.name for d in DTYPES.values() if d.is_sub_byte)

#: (rtol, atol) per dtype for comparing a computed float result with its float64 reference: the one table
#: of the tests (``assert_allclose``), the tuner's correctness check and the benchmarks (which compare the
#: relative norm error with rtol). bfloat16's atol is wider: its 8-bit significand leaves values that
#: cancel to near zero (normalisation, residual sums) with absolute errors of ~1e-2.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-5, 1e-5),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1e-2, 2e-2),
    "float64": (1e-10, 1e-10),
}


def tolerance(dtype: object) -> tuple[float, float]:
    """``(rtol, atol)`` of a float dtype's results (see :data:`TOLERANCES`); integers and bool: exact.

    Raises
    ------
    InvalidArgumentError
        For an unknown dtype.
    """
    return TOLERANCES.get(get_dtype(dtype).name, (0.0, 0.0))


_ALIASES = {
    "fp32": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp64": "float64",
    "double": "float64",
    "float": "float32",
    "bool_": "bool",
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "short": "int16",  # C's (and NumPy's) names; "uint"/"ulong" are left out, their widths vary
    "ushort": "uint16",
}
# The dtypes PyTorch tensors cross in (``getattr(torch, name)`` is the torch.dtype; not imported here).
# uint16, uint32 and uint64 are left out: before torch 2.3 there is no such attribute (the lookup would
# fail for every dtype), and since then they are "shell" dtypes (empty and copy work, almost no operator
# does, DLPack export depends on the version), so a pipeline taking them is fed NumPy arrays or DLPack
# capsules (``from_dlpack_code`` reads DL_UINT 16/32/64), not torch tensors.
TORCH_DTYPE_NAMES = (
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
)
_BY_NUMPY = {d.numpy: d for d in DTYPES.values()}
_BY_DLPACK = {(d.dl_code, d.bits): d for d in DTYPES.values() if not d.is_sub_byte}
# DLPack's (packed) descriptions of the sub-byte types: named in the refusal of a capsule of one
_PACKED_DLPACK = {
    (DL_INT, 4): int4,
    (DL_UINT, 4): uint4,
    (DL_INT, 2): int2,
    (DL_UINT, 2): uint2,
    (DL_FLOAT4_E2M1FN, 4): float4_e2m1fn,
}
_BY_ENUM = {d.c_enum: d for d in DTYPES.values()}
_FAST: dict = {
    **{d: d for d in DTYPES.values()},
    **DTYPES,
    **_BY_NUMPY,
    **{alias: DTYPES[name] for alias, name in _ALIASES.items()},
}


def get_dtype(value: object) -> DType:
    """Resolve a dtype given as a :class:`DType`, a name (``"bf16"`` too), a NumPy dtype or a C enum.

    Raises
    ------
    InvalidArgumentError
        When the value names no supported dtype.
    """
    try:
        return _FAST[value]  # the hot path: a name, a NumPy dtype or a DType seen before
    except (KeyError, TypeError):
        pass
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        name = _ALIASES.get(value, value)
        if name in DTYPES:
            return DTYPES[name]
    elif isinstance(value, int) and not isinstance(value, bool):
        if value in _BY_ENUM:
            return _BY_ENUM[value]
    else:
        try:
            found = _BY_NUMPY.get(np.dtype(value))  # type: ignore[arg-type]
        except TypeError:
            found = None
        if found is not None:
            return found
    raise InvalidArgumentError(
        f"unsupported dtype {value!r}; supported: {', '.join(DTYPES)}", dtype=repr(value)
    )


def sub_byte_refusal(dtype: DType) -> str:
    """Why a tensor of a sub-byte dtype crosses no DLPack boundary, and what to do instead."""
    return (
        f"{dtype.name} tensors are held one value per byte; view them as int8/uint8 to exchange them "
        f"(DLPack's {dtype.name} is packed, {8 // dtype.value_bits} values to a byte)"
    )


def from_dlpack_code(code: int, bits: int, lanes: int = 1) -> DType:
    """The dtype of a DLPack ``DLDataType``.

    Raises
    ------
    InvalidArgumentError
        For a type PipeLink lacks, a vector type (lanes > 1), and DLPack's packed sub-byte types (PipeLink
        holds them one value per byte: :func:`sub_byte_refusal`).
    """
    packed = _PACKED_DLPACK.get((code, bits))
    if packed is not None:
        raise InvalidArgumentError(sub_byte_refusal(packed), dtype=packed.name)
    found = _BY_DLPACK.get((code, bits))
    if found is None or lanes != 1:
        raise InvalidArgumentError(
            f"unsupported DLPack dtype (code={code}, bits={bits}, lanes={lanes}); "
            f"supported: {', '.join(DTYPES)}"
        )
    return found
