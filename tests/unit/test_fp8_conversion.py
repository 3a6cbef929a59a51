"""The float8 conversions of ops/fp8.cuh (quantize.cu's and the cast kernel's), checked on the CPU: they
are __host__ __device__, so nvcc builds them into a small host program here, and every result must equal
ml_dtypes' bit for bit (NaN: NaN of the same sign), for every float8 value, every midpoint between
neighbours and its two float32 neighbours (the round-half-to-even cases), the overflow boundaries, random
floats of every magnitude, and float64 inputs rounded once.
"""

from __future__ import annotations

import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest

from pipelink.ops.kernel import include_dir

FORMATS = (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)
_HOST = r"""
#include "quantize/quantize.cu"
#include <cstdio>
#include <cstring>
int main(int argc, char** argv) {
    if (argc > 1 && !strcmp(argv[1], "double")) {  // float64 in, e4m3fn and e5m2 (no saturation) out
        double d;
        while (fread(&d, 8, 1, stdin) == 1) {
            unsigned char o[2] = {pl_double_to_fp8<PL_Q_E4M3FN>(d, false),
                                  pl_double_to_fp8<PL_Q_E5M2>(d, false)};
            fwrite(o, 1, 2, stdout);
        }
        return 0;
    }
    float f;
    while (fread(&f, 4, 1, stdin) == 1) {
        unsigned char o[4] = {pl_float_to_fp8<PL_Q_E4M3FN>(f, true), pl_float_to_fp8<PL_Q_E4M3FN>(f, false),
                              pl_float_to_fp8<PL_Q_E5M2>(f, true), pl_float_to_fp8<PL_Q_E5M2>(f, false)};
        fwrite(o, 1, 4, stdout);
    }
    for (int v = 0; v < 256; ++v) {
        const unsigned char b = (unsigned char)v;
        float d[2] = {pl_fp8_to_float<PL_Q_E4M3FN>(b), pl_fp8_to_float<PL_Q_E5M2>(b)};
        fwrite(d, 4, 2, stdout);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def converter(tmp_path_factory):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed: the float8 conversions cannot be built for the host")
    folder = tmp_path_factory.mktemp("fp8")
    (folder / "host.cu").write_text(_HOST)
    done = subprocess.run(
        [nvcc, "-std=c++17", f"-I{include_dir()}", "-o", str(folder / "host"), str(folder / "host.cu")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return folder / "host"


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(0)
    parts = [
        (rng.standard_normal(100_000) * 10.0 ** rng.integers(-12, 7, 100_000)).astype(np.float32),
        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e30, 2.0**-140], np.float32),
    ]
    for fmt in FORMATS:
        values = np.arange(256, dtype=np.uint8).view(fmt).astype(np.float32)
        finite = np.sort(values[np.isfinite(values)])
        mids = ((finite[1:].astype(np.float64) + finite[:-1]) / 2).astype(np.float32)
        top = float(ml_dtypes.finfo(fmt).max)
        up, down = np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))
        overflow = np.array([top * 1.03, top * 1.0625, top * 1.07, -top * 1.0625], np.float32)
        parts += [finite, mids, up, down, overflow]
    return np.concatenate(parts).astype(np.float32)


def test_float_to_fp8_matches_ml_dtypes_bit_for_bit(converter):
    x = _inputs()
    out = subprocess.run([str(converter)], input=x.tobytes(), capture_output=True, check=True).stdout
    got = np.frombuffer(out[: x.size * 4], np.uint8).reshape(-1, 4)
    for col, (fmt, saturate) in enumerate([(f, s) for f in FORMATS for s in (True, False)]):
        info = ml_dtypes.finfo(fmt)
        src = np.clip(x, info.min, info.max) if saturate else x  # the CPU reference's saturation
        with np.errstate(all="ignore"):
            ref = src.astype(fmt).view(np.uint8)
        mine = got[:, col]
        is_nan = np.isnan(ref.view(fmt).astype(np.float32))
        assert np.array_equal(np.isnan(mine.view(fmt).astype(np.float32)), is_nan), (fmt, saturate)
        assert np.array_equal(mine[is_nan] & 0x80, ref[is_nan] & 0x80), "NaN keeps its sign"
        bad = np.flatnonzero((mine != ref) & ~is_nan)
        assert bad.size == 0, (fmt.__name__, saturate, x[bad[:5]], ref[bad[:5]], mine[bad[:5]])


def test_fp8_to_float_is_exact_for_every_code(converter):
    out = subprocess.run([str(converter)], input=b"", capture_output=True, check=True).stdout
    got = np.frombuffer(out, np.float32).reshape(256, 2)
    for col, fmt in enumerate(FORMATS):
        ref = np.arange(256, dtype=np.uint8).view(fmt).astype(np.float32)
        nan = np.isnan(ref)
        assert np.array_equal(np.isnan(got[:, col]), nan)
        assert np.array_equal(got[~nan, col].view(np.uint32), ref[~nan].view(np.uint32)), fmt.__name__


def test_double_to_fp8_rounds_once_as_ml_dtypes(converter):
    """float64 inputs (the any-dtype cast's): every midpoint and the doubles just off it, which a rounding
    through float32 would round twice, and values beyond float32's range and under it."""
    parts = [_inputs().astype(np.float64), np.array([1e300, -1e300, 1e-300, -1e-300, 5e-324])]
    for fmt in FORMATS:
        values = np.arange(256, dtype=np.uint8).view(fmt).astype(np.float64)
        finite = np.sort(values[np.isfinite(values)])
        mids = (finite[1:] + finite[:-1]) / 2
        parts += [mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)]
    x = np.concatenate(parts)
    out = subprocess.run(
        [str(converter), "double"], input=x.tobytes(), capture_output=True, check=True
    ).stdout
    got = np.frombuffer(out, np.uint8).reshape(-1, 2)
    for col, fmt in enumerate(FORMATS):
        with np.errstate(all="ignore"):
            ref = x.astype(fmt).view(np.uint8)
        mine = got[:, col]
        is_nan = np.isnan(ref.view(fmt).astype(np.float32))
        assert np.array_equal(np.isnan(mine.view(fmt).astype(np.float32)), is_nan), fmt.__name__
        bad = np.flatnonzero((mine != ref) & ~is_nan)
        assert bad.size == 0, (fmt.__name__, x[bad[:5]], ref[bad[:5]], mine[bad[:5]])
