"""The float8 conversions of ops/fp8.cuh (quantize.cu's and the cast kernel's), checked on the CPU: they
are __host__ __device__, so nvcc builds them into a small host program here, and every result must equal
ml_dtypes' bit for bit (NaN: NaN of the same sign), for every float8 value, every midpoint between
neighbours and its two float32 neighbours (the round-half-to-even cases), the overflow boundaries, random
floats of every magnitude, and float64 inputs rounded once; e8m0's ONNX rounding modes must equal onnx's
reference (``onnx.numpy_helper.to_float8e8m0``) for every class of float32 bit pattern.
"""

from __future__ import annotations

import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest

from pipelink.ops.kernel import include_dir

FORMATS = (
    ml_dtypes.float8_e4m3fn,
    ml_dtypes.float8_e5m2,
    ml_dtypes.float8_e4m3fnuz,
    ml_dtypes.float8_e5m2fnuz,
    ml_dtypes.float8_e8m0fnu,
)
ROUND_MODES = ("up", "down", "nearest")  # PL_E8M0_UP, PL_E8M0_DOWN, PL_E8M0_NEAREST: 0, 1, 2
_HOST = r"""
#include "quantize/quantize.cu"
#include <cstdio>
#include <cstring>
#define PL_EACH_FORMAT(F) F(PL_Q_E4M3FN) F(PL_Q_E5M2) F(PL_Q_E4M3FNUZ) F(PL_Q_E5M2FNUZ) F(PL_Q_E8M0)
#define PL_OUT(Q) {unsigned char o[2] = {pl_double_to_fp8<Q>(d, true), pl_double_to_fp8<Q>(d, false)}; \
                   fwrite(o, 1, 2, stdout);}
#define PL_OUT_F(Q) {unsigned char o[2] = {pl_float_to_fp8<Q>(f, true), pl_float_to_fp8<Q>(f, false)}; \
                     fwrite(o, 1, 2, stdout);}
#define PL_BACK(Q) {float d = pl_fp8_to_float<Q>(b); fwrite(&d, 4, 1, stdout);}
int main(int argc, char** argv) {
    if (argc > 1 && !strcmp(argv[1], "double")) {  // float64 in; each format, saturated and not, out
        double d;
        while (fread(&d, 8, 1, stdin) == 1) {
            PL_EACH_FORMAT(PL_OUT)
        }
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "int64")) {  // int64 in, then the same bits as uint64: e8m0 out
        long long v;
        while (fread(&v, 8, 1, stdin) == 1) {
            unsigned char o[2] = {pl_i64_to_e8m0(v), pl_u64_to_e8m0((unsigned long long)v)};
            fwrite(o, 1, 2, stdout);
        }
        return 0;
    }
    float f;
    while (fread(&f, 4, 1, stdin) == 1) {  // each format, saturated and not; then e8m0 as ONNX's Cast
        PL_EACH_FORMAT(PL_OUT_F)
        for (int round = 0; round < 3; ++round) {
            unsigned char o[2] = {pl_float_to_e8m0(f, true, round), pl_float_to_e8m0(f, false, round)};
            fwrite(o, 1, 2, stdout);
        }
    }
    for (int v = 0; v < 256; ++v) {
        const unsigned char b = (unsigned char)v;
        PL_EACH_FORMAT(PL_BACK)
    }
    return 0;
}
"""


def build_host_program(tmp_path_factory, source: str, name: str, what: str):
    """``source`` (CUDA C++ including ``ops/fp8.cuh``) built for the host by nvcc: the executable's path;
    the test is skipped without nvcc (``what`` says what cannot be built then)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip(f"nvcc is not installed: {what} cannot be built for the host")
    folder = tmp_path_factory.mktemp(name)
    (folder / "host.cu").write_text(source)
    done = subprocess.run(
        [nvcc, "-std=c++17", f"-I{include_dir()}", "-o", str(folder / "host"), str(folder / "host.cu")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return folder / "host"


@pytest.fixture(scope="module")
def converter(tmp_path_factory):
    return build_host_program(tmp_path_factory, _HOST, "fp8", "the float8 conversions")


def _e8m0_classes() -> np.ndarray:
    """Every float32 exponent (both signs) with each fraction that decides a rounding of e8m0: zero, the
    lowest bit, around the quarter, the half (the ties) and three quarters, the top."""
    fractions = [0, 1, 0x1FFFFF, 0x200000, 0x3FFFFF, 0x400000, 0x400001, 0x5FFFFF, 0x600000, 0x600001]
    bits = [(s << 31) | (e << 23) | f for s in (0, 1) for e in range(256) for f in fractions + [0x7FFFFF]]
    return np.array(bits, np.uint32).view(np.float32)


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(0)
    parts = [
        (rng.standard_normal(100_000) * 10.0 ** rng.integers(-12, 7, 100_000)).astype(np.float32),
        (rng.random(20_000) * 2.0 ** rng.integers(-149, 128, 20_000)).astype(np.float32),
        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e30, 2.0**-140], np.float32),
        _e8m0_classes(),
    ]
    for fmt in FORMATS:
        values = np.arange(256, dtype=np.uint8).view(fmt).astype(np.float32)
        finite = np.sort(values[np.isfinite(values)])
        mids = ((finite[1:].astype(np.float64) + finite[:-1]) / 2).astype(np.float32)
        top = float(ml_dtypes.finfo(fmt).max)
        up, down = np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))
        overflow = np.array([top * 1.03, top * 1.0625, top * 1.07, -top * 1.0625], np.float32)
        parts += [finite, -finite, mids, up, down, overflow]
    with np.errstate(over="ignore"):
        return np.concatenate(parts).astype(np.float32)


def _check(mine: np.ndarray, x: np.ndarray, fmt, saturate: bool) -> None:
    """``mine`` (bits) equals ml_dtypes' cast of x, clipped to the finite range first with ``saturate``
    (the CPU reference's saturation); a NaN may be any NaN of the same sign."""
    info = ml_dtypes.finfo(fmt)
    with np.errstate(all="ignore"):
        src = np.clip(x, info.min, info.max) if saturate else x
        ref = src.astype(fmt).view(np.uint8)
    is_nan = np.isnan(ref.view(fmt).astype(np.float32))
    assert np.array_equal(np.isnan(mine.view(fmt).astype(np.float32)), is_nan), (fmt.__name__, saturate)
    assert np.array_equal(mine[is_nan] & 0x80, ref[is_nan] & 0x80), "NaN keeps its sign"
    bad = np.flatnonzero((mine != ref) & ~is_nan)
    assert bad.size == 0, (fmt.__name__, saturate, x[bad[:5]], ref[bad[:5]], mine[bad[:5]])


def test_float_to_fp8_matches_ml_dtypes_bit_for_bit(converter):
    x = _inputs()
    out = subprocess.run([str(converter)], input=x.tobytes(), capture_output=True, check=True).stdout
    got = np.frombuffer(out[: x.size * 16], np.uint8).reshape(-1, 16)
    for k, fmt in enumerate(FORMATS):
        for col, saturate in enumerate((True, False)):
            _check(got[:, 2 * k + col], x, fmt, saturate)


def test_float_to_e8m0_matches_onnx_cast_bit_for_bit(converter):
    """ONNX's Cast into e8m0 (round_mode up, down, nearest; saturate or not) reads the exponent field alone
    (a negative value as its magnitude, zero as 0x00): as onnx's reference computes it."""
    numpy_helper = pytest.importorskip("onnx.numpy_helper")
    x = _inputs()
    out = subprocess.run([str(converter)], input=x.tobytes(), capture_output=True, check=True).stdout
    got = np.frombuffer(out[: x.size * 16], np.uint8).reshape(-1, 16)
    for k, mode in enumerate(ROUND_MODES):
        for col, saturate in enumerate((True, False)):
            ref = numpy_helper.to_float8e8m0(x, saturate, mode).view(np.uint8)
            mine = got[:, 10 + 2 * k + col]
            bad = np.flatnonzero(mine != ref)
            assert bad.size == 0, (mode, saturate, x[bad[:5]], ref[bad[:5]], mine[bad[:5]])


def test_fp8_to_float_is_exact_for_every_code(converter):
    out = subprocess.run([str(converter)], input=b"", capture_output=True, check=True).stdout
    got = np.frombuffer(out, np.float32).reshape(256, len(FORMATS))
    for col, fmt in enumerate(FORMATS):
        ref = np.arange(256, dtype=np.uint8).view(fmt).astype(np.float32)
        nan = np.isnan(ref)
        assert np.array_equal(np.isnan(got[:, col]), nan)
        assert np.array_equal(got[~nan, col].view(np.uint32), ref[~nan].view(np.uint32)), fmt.__name__


def test_double_to_fp8_rounds_once_as_ml_dtypes(converter):
    """float64 inputs (the any-dtype cast's): every midpoint and the doubles just off it, which a rounding
    through float32 would round twice, and values beyond float32's range and under it."""
    with np.errstate(invalid="ignore"):  # the signalling NaNs of _e8m0_classes
        parts = [_inputs().astype(np.float64), np.array([1e300, -1e300, 1e-300, -1e-300, 5e-324, 2.0**128])]
    for fmt in FORMATS:
        with np.errstate(invalid="ignore"):
            values = np.arange(256, dtype=np.uint8).view(fmt).astype(np.float64)
        finite = np.sort(values[np.isfinite(values)])
        mids = (finite[1:] + finite[:-1]) / 2
        parts += [mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)]
    x = np.concatenate(parts)
    out = subprocess.run(
        [str(converter), "double"], input=x.tobytes(), capture_output=True, check=True
    ).stdout
    got = np.frombuffer(out, np.uint8).reshape(-1, 2 * len(FORMATS))
    for k, fmt in enumerate(FORMATS):
        for col, saturate in enumerate((True, False)):
            _check(got[:, 2 * k + col], x, fmt, saturate)


def test_int64_to_e8m0_rounds_once_as_ml_dtypes(converter):
    """A 64-bit integer into e8m0 (which holds every one of them) by its bits: through a double, one just
    under a midpoint past 2^53 would round up to it and then up again."""
    rng = np.random.default_rng(1)
    powers = np.array([1 << k for k in range(63)], np.int64)
    mids = powers[1:] + powers[:-1]  # 1.5 * 2^k
    parts = [powers, mids, mids - 1, mids + 1, -powers, rng.integers(-(2**63), 2**63 - 1, 10_000)]
    x = np.concatenate([*parts, np.array([0, 2**63 - 1, -(2**63)], np.int64)])
    out = subprocess.run([str(converter), "int64"], input=x.tobytes(), capture_output=True, check=True).stdout
    got = np.frombuffer(out, np.uint8).reshape(-1, 2)
    for col, values in enumerate((x, x.view(np.uint64))):
        ref = values.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
        bad = np.flatnonzero(got[:, col] != ref)
        assert bad.size == 0, (values.dtype, values[bad[:5]], ref[bad[:5]], got[bad[:5], col])
