"""fp8.cuh's conversions of float4_e2m1fn and of the sub-byte integers (int4, uint4, int2, uint2: one value
per byte), checked on the CPU as test_fp8_conversion.py checks the float8s: nvcc builds them
(``__host__ __device__``) into a small host program, and every result must equal ml_dtypes' bit for bit,
for every float4 code, every midpoint between neighbours and the floats next to it (the round-half-to-even
cases), the overflow past 6, NaN and the infinities, random floats of every magnitude and float64 inputs
rounded once; every byte read as each sub-byte type (its high bits unread), every integer wrapped into one
and every float truncated into one (0 outside the range). The cast kernel's plans of every pair with a
sub-byte type compile with NVRTC to the argument list they pass.
"""

from __future__ import annotations

import subprocess
import zlib

import ml_dtypes
import numpy as np
import pytest

from pipelink.dtypes import DTYPES, SUB_BYTE_DTYPES
from pipelink.ops.elementwise.cuda import plan_cast_any
from tests.unit.test_cuda_sources import _check_ptx, _nvrtc, _nvrtc_compile
from tests.unit.test_fp8_conversion import build_host_program

FP4 = ml_dtypes.float4_e2m1fn
SUB_INTS = (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2)  # fp8.cuh's kinds 8 to 11
_HOST = r"""
#include "fp8.cuh"
#include <cstdio>
#include <cstring>
#define PL_EACH_SUBINT(F) F(PL_Q_INT4) F(PL_Q_UINT4) F(PL_Q_INT2) F(PL_Q_UINT2)
#define PL_FROM_DOUBLE(Q) {unsigned char o = pl_subint_from_double<Q>(d); fwrite(&o, 1, 1, stdout);}
#define PL_WRAP(Q) {unsigned char o = pl_subint_wrap<Q>((unsigned long long)v); fwrite(&o, 1, 1, stdout);}
#define PL_VALUE(Q) {int o = pl_subint_value<Q>(b); fwrite(&o, 4, 1, stdout);}
int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "float")) {  // float32 in: float4, saturated and not
        float f;
        while (fread(&f, 4, 1, stdin) == 1) {
            unsigned char o[2] = {pl_float_to_fp8<PL_Q_E2M1>(f, true), pl_float_to_fp8<PL_Q_E2M1>(f, false)};
            fwrite(o, 1, 2, stdout);
        }
    } else if (!strcmp(mode, "double")) {  // float64 in: float4, then each sub-byte integer
        double d;
        while (fread(&d, 8, 1, stdin) == 1) {
            unsigned char o = pl_double_to_fp8<PL_Q_E2M1>(d, false);
            fwrite(&o, 1, 1, stdout);
            PL_EACH_SUBINT(PL_FROM_DOUBLE)
        }
    } else if (!strcmp(mode, "int64")) {  // int64 in: its low bits in each sub-byte integer
        long long v;
        while (fread(&v, 8, 1, stdin) == 1) {
            PL_EACH_SUBINT(PL_WRAP)
        }
    } else {  // every byte: its float4 value, then its value as each sub-byte integer
        for (int k = 0; k < 256; ++k) {
            const unsigned char b = (unsigned char)k;
            float f = pl_fp8_to_float<PL_Q_E2M1>(b);
            fwrite(&f, 4, 1, stdout);
            PL_EACH_SUBINT(PL_VALUE)
        }
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def converter(tmp_path_factory):
    return build_host_program(tmp_path_factory, _HOST, "fp4", "fp8.cuh's sub-byte conversions")


@pytest.fixture
def rng(request) -> np.random.Generator:
    """Fresh random numbers from a seed fixed by the test's id (the same in every run)."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def _run(converter, mode: str, x: np.ndarray) -> bytes:
    return subprocess.run([str(converter), mode], input=x.tobytes(), capture_output=True, check=True).stdout


def _fp4_inputs(rng) -> np.ndarray:
    """Every float4 value and its negation, each midpoint between neighbours and the floats just off it,
    the overflow past 6 (6.5, 7: the midpoint to the next binade, past it), zeros, infinities, NaNs of
    both signs, tiny values, random floats of every magnitude and every float16 value."""
    values = np.arange(16, dtype=np.uint8).view(FP4).astype(np.float32)
    grid = np.unique(np.concatenate([values, -values]))
    mids = ((grid[1:].astype(np.float64) + grid[:-1]) / 2).astype(np.float32)
    up, down = np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))
    edges = [6.5, 7.0, 7.0000005, 8.0, 1e30, np.inf, 0.0, 1e-45, 2.0**-126, np.nan]
    edges = np.array(edges + [-e for e in edges], np.float32)
    nans = np.array([0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFC00000], np.uint32).view(np.float32)
    wide = (rng.standard_normal(50_000) * 10.0 ** rng.integers(-8, 8, 50_000)).astype(np.float32)
    halves = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float32)
    return np.concatenate([grid, mids, up, down, edges, nans, wide, halves])


def _same_fp4(mine: np.ndarray, x: np.ndarray, what: str) -> None:
    with np.errstate(all="ignore"):
        ref = x.astype(FP4).view(np.uint8)
    bad = np.flatnonzero(mine != ref)
    assert bad.size == 0, (what, x[bad[:6]], ref[bad[:6]], mine[bad[:6]])


def test_float_to_fp4_matches_ml_dtypes_bit_for_bit(converter, rng):
    """Round to nearest even, every magnitude past 6 (inf too) saturated whatever saturate says, a value
    rounding to zero keeps its sign, NaN gives a zero of the opposite sign (all as ml_dtypes)."""
    x = _fp4_inputs(rng)
    got = np.frombuffer(_run(converter, "float", x), np.uint8).reshape(-1, 2)
    assert got.max() <= 0x0F, "the high bits of every byte written are zero"
    for col, saturate in enumerate((True, False)):
        _same_fp4(got[:, col], x, f"saturate={saturate}")


def test_double_to_fp4_rounds_once(converter, rng):
    """float64 inputs (the any-dtype cast's): the midpoints and the doubles next to them, which a rounding
    through float32 would round twice, and values beyond float32's range and under it."""
    grid = np.unique(np.arange(16, dtype=np.uint8).view(FP4).astype(np.float64))
    mids = (grid[1:] + grid[:-1]) / 2
    parts = [
        _fp4_inputs(rng).astype(np.float64),
        mids,
        np.nextafter(mids, np.inf),
        np.nextafter(mids, -np.inf),
        np.array([1e300, -1e300, 1e-300, -1e-300, 5e-324, 2.0**128, -np.nan]),
    ]
    x = np.concatenate(parts)
    got = np.frombuffer(_run(converter, "double", x), np.uint8).reshape(-1, 1 + len(SUB_INTS))
    _same_fp4(got[:, 0], x, "float64")


def test_fp4_and_sub_byte_values_of_every_byte(converter):
    """Every byte read as float4_e2m1fn (exactly) and as each sub-byte integer (sign-extended): its low bits
    alone, as ml_dtypes reads a byte whose high bits are set."""
    out = _run(converter, "codes", np.zeros(0, np.uint8))
    rows = np.frombuffer(out, np.dtype([("f", "<f4"), ("i", "<i4", len(SUB_INTS))]))
    codes = np.arange(256, dtype=np.uint8)
    want = codes.view(FP4).astype(np.float32)
    np.testing.assert_array_equal(rows["f"].view(np.uint32), want.view(np.uint32))  # -0.0 is not 0.0
    for col, dtype in enumerate(SUB_INTS):
        np.testing.assert_array_equal(
            rows["i"][:, col], codes.view(dtype).astype(np.int32), np.dtype(dtype).name
        )


def test_floats_truncate_into_the_sub_byte_integers(converter, rng):
    """A float into int4, uint4, int2, uint2: truncated toward zero, 0 outside the range (NaN and the
    infinities too), as ml_dtypes casts; the bytes hold the value in their low bits alone."""
    steps = np.arange(-20, 21, dtype=np.float64)
    bounds = np.array([-8.0, 7.0, 15.0, -2.0, 1.0, 3.0, 8.0, 16.0, 2.0, 4.0, -9.0, -3.0, 0.0])
    parts = [
        steps,
        steps + 0.5,
        steps + 0.99,
        steps - 0.99,
        np.nextafter(bounds, np.inf),
        np.nextafter(bounds, -np.inf),
        rng.uniform(-20, 20, 4000),
        np.array([np.nan, -np.nan, np.inf, -np.inf, 1e300, -1e300, 2.0**63, -(2.0**63), -0.0, 5e-324]),
    ]
    x = np.concatenate(parts)
    got = np.frombuffer(_run(converter, "double", x), np.uint8).reshape(-1, 1 + len(SUB_INTS))
    assert got[:, 1:].max() <= 0x0F
    for col, dtype in enumerate(SUB_INTS, start=1):
        with np.errstate(all="ignore"):
            ref = x.astype(dtype).view(np.uint8)
        bad = np.flatnonzero(got[:, col] != ref)
        assert bad.size == 0, (np.dtype(dtype).name, x[bad[:6]], ref[bad[:6]], got[bad[:6], col])


def test_integers_wrap_into_the_sub_byte_integers(converter, rng):
    """An integer into a sub-byte one keeps its low bits (two's complement): ONNX Cast's rule, as
    ml_dtypes casts (int64 and the same bits as uint64 alike)."""
    x = np.concatenate(
        [
            np.arange(-40, 41, dtype=np.int64),
            rng.integers(-(2**63), 2**63 - 1, 5000, dtype=np.int64),
            np.array([-(2**63), 2**63 - 1, 2**40 + 5, -(2**40) - 3], np.int64),
        ]
    )
    got = np.frombuffer(_run(converter, "int64", x), np.uint8).reshape(-1, len(SUB_INTS))
    for col, dtype in enumerate(SUB_INTS):
        for values in (x, x.view(np.uint64)):
            ref = values.astype(dtype).view(np.uint8)
            bad = np.flatnonzero(got[:, col] != ref)
            assert bad.size == 0, (np.dtype(dtype).name, values.dtype, values[bad[:6]], ref[bad[:6]])


def _cast_plans() -> list:
    """The any-dtype cast into and out of each sub-byte type from a dtype of every kind: the floats (16-bit
    ones through double), a float8 (e8m0: its own conversion), the 8- and 64-bit integers, bool, and the
    other sub-byte types."""
    partners = ("float32", "float64", "float16", "bfloat16", "float8_e4m3fn", "float8_e8m0fnu")
    partners += ("int8", "uint8", "int64", "uint64", "int32", "bool")
    pairs = {(s, p) for s in SUB_BYTE_DTYPES for p in partners} | {
        (p, s) for s in SUB_BYTE_DTYPES for p in partners
    }
    pairs |= {(a, b) for a in SUB_BYTE_DTYPES for b in SUB_BYTE_DTYPES if a != b}
    assert all(a in DTYPES and b in DTYPES for a, b in pairs)
    return [(f"cast_any-{a}-{b}", plan_cast_any(a, b, (1000,))) for a, b in sorted(pairs)]


def test_the_cast_plans_of_the_sub_byte_types_compile():
    """Every cast with a sub-byte type on either side compiles with NVRTC (no CUDA header) to the argument
    list its plan passes; none is a plain C cast of the byte (PL_DIRECT 0)."""
    _nvrtc()
    for name, plan in _cast_plans():
        assert str(plan.macros["PL_DIRECT"]) == "0", name
        ok, text = _nvrtc_compile(plan.source(), plan.file, plan.options(arch="sm_90"))
        assert ok, f"{name} {plan.macros}:\n{text}"
        _check_ptx(text, plan)
