"""reduce_mean / reduce_sum / reduce_max against a row-by-row reference (reduced axes moved last, each
row folded with math.fsum / max) and ONNX's reference evaluator; ONNX's edge cases: negative axes,
keepdims, noop_with_empty_axes, empty reductions, 16-bit types, integer wrap-around.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import pipelink as pl
from pipelink.errors import DTypeMismatchError, InvalidArgumentError

from .ops_helpers import TOL, make_registry, rand, run_op

FLOAT_TYPES = ("float32", "float16", "bfloat16", "float64")
KINDS = ("mean", "sum", "max")


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _ref(x: np.ndarray, kind: str, axes, keepdims: bool, noop: bool) -> np.ndarray:
    nd = x.ndim
    axes = sorted(a % nd for a in axes) if axes else ([] if noop else list(range(nd)))
    kept = [a for a in range(nd) if a not in axes]
    rows = np.moveaxis(x.astype(np.float64), axes, list(range(nd - len(axes), nd)))
    count = math.prod(x.shape[a] for a in axes)
    flat = rows.reshape(math.prod(x.shape[a] for a in kept), count)
    out = []
    for r in flat:
        vals = [float(v) for v in r]
        if kind == "sum":
            out.append(math.fsum(vals))
        elif kind == "mean":
            out.append(math.fsum(vals) / len(vals) if vals else math.nan)
        else:
            out.append(
                max(vals)
                if vals and not any(math.isnan(v) for v in vals)
                else (math.nan if vals else -math.inf)
            )
    res = np.array(out, np.float64).reshape(tuple(x.shape[a] for a in kept))
    if keepdims:
        res = res.reshape(tuple(1 if a in axes else x.shape[a] for a in range(nd)))
    return res


CASES = [
    ((3, 4, 5), [1], True),
    ((3, 4, 5), [-1, 0], False),
    ((3, 4, 5), [], True),
    ((3, 4, 5), [], False),
    ((7,), [0], False),
    ((2, 0, 3), [1], True),
    ((2, 0, 3), [0], False),
    ((2, 3000), [-1], False),  # longer than a warp's share on CUDA: a block per output
    ((33, 5, 40), [0, 2], True),
]  # reduced axes on both sides of a kept one


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOAT_TYPES)
@pytest.mark.parametrize(("shape", "axes", "keepdims"), CASES)
def test_reductions_on_floats(reg, device, kind, dtype, shape, axes, keepdims):
    x = rand(np.random.default_rng(21), shape, dtype)
    (y,) = run_op(reg, f"reduce_{kind}", [x], {"axes": axes, "keepdims": keepdims}, device=device)
    ref = _ref(x, kind, axes, keepdims, False)
    assert y.shape == ref.shape and y.dtype == x.dtype
    rtol, atol = TOL[dtype]
    # Empty means are NaN by definition; everything else was written (no NaN poison left).
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=rtol, atol=atol, equal_nan=True)
    assert np.array_equal(np.isnan(y.astype(np.float64)), np.isnan(ref))


@pytest.mark.parametrize("kind", ["sum", "max"])
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8"])
def test_integer_sum_wraps_and_max_is_exact(reg, device, kind, dtype):
    rng = np.random.default_rng(22)
    x = rand(rng, (4, 50), dtype)
    (y,) = run_op(reg, f"reduce_{kind}", [x], {"axes": [1], "keepdims": False}, device=device)
    info = np.iinfo(x.dtype)
    for i in range(4):
        vals = [int(v) for v in x[i]]
        want = sum(vals) if kind == "sum" else max(vals)
        want = (want - info.min) % (info.max - info.min + 1) + info.min  # two's-complement wrap
        assert int(y[i]) == want


def test_empty_max_is_the_lowest_value(reg, device):
    (y,) = run_op(
        reg, "reduce_max", [np.zeros((3, 0), np.int8)], {"axes": [1], "keepdims": False}, device=device
    )
    assert y.tolist() == [-128] * 3
    (y,) = run_op(reg, "reduce_max", [np.zeros((0, 2), np.float16)], {"axes": [0]}, device=device)
    assert np.all(np.isneginf(y))


def test_noop_with_empty_axes_copies(reg, device):
    x = rand(np.random.default_rng(23), (3, 4), "bfloat16")
    for kind in KINDS:
        (y,) = run_op(reg, f"reduce_{kind}", [x], {"noop_with_empty_axes": True}, device=device)
        assert y.shape == x.shape and np.array_equal(y, x)


def test_nan_propagates_through_max(reg, device):
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], np.float32)
    (y,) = run_op(reg, "reduce_max", [x], {"axes": [1], "keepdims": False}, device=device)
    assert np.isnan(y[0]) and y[1] == 6.0


def test_errors(reg):
    with pytest.raises(InvalidArgumentError, match=r"reduce_sum: attribute 'axes' must be in \[-2, 2\)"):
        run_op(reg, "reduce_sum", [np.zeros((2, 3), np.float32)], {"axes": [2]})
    with pytest.raises(InvalidArgumentError, match="names an axis twice"):
        run_op(reg, "reduce_mean", [np.zeros((2, 3), np.float32)], {"axes": [1, -1]})
    with pytest.raises(DTypeMismatchError, match="not supported"):
        run_op(reg, "reduce_mean", [np.zeros((2, 3), np.int32)], {"axes": [1]})


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(("axes", "keepdims", "noop"), [([1], 1, 0), ([-1, 0], 0, 0), ([], 1, 0), ([], 0, 1)])
def test_reductions_match_onnx(reg, device, kind, dtype, axes, keepdims, noop):
    pytest.importorskip("onnx")
    from .onnx_oracle import run_onnx

    x = rand(np.random.default_rng(24), (3, 4, 5), dtype)
    (y,) = run_op(
        reg,
        f"reduce_{kind}",
        [x],
        {"axes": axes, "keepdims": bool(keepdims), "noop_with_empty_axes": bool(noop)},
        device=device,
    )
    onnx_in = [x, np.array(axes, np.int64)] if axes else [x]
    (ref,) = run_onnx(
        f"Reduce{kind.capitalize()}", onnx_in, {"keepdims": keepdims, "noop_with_empty_axes": noop}, opset=18
    )
    rtol, atol = TOL[dtype]
    assert y.shape == ref.shape
    np.testing.assert_allclose(y.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)


def test_pipeline_reduces_and_plans():
    config = {
        "inputs": {"x": {"shape": [4, 6, 8], "dtype": "float32"}},
        "outputs": ["m", "s"],
        "pipeline": [
            {"name": "reduce_max", "inputs": ["x"], "outputs": ["mx"], "attrs": {"axes": [-1]}},
            {
                "name": "reduce_mean",
                "inputs": ["mx"],
                "outputs": ["m"],
                "attrs": {"axes": [1], "keepdims": False},
            },
            {"name": "reduce_sum", "inputs": ["x"], "outputs": ["s"], "attrs": {"keepdims": False}},
        ],
    }
    x = rand(np.random.default_rng(25), (4, 6, 8), "float32")
    with pl.load(config, device="cpu") as pipe:
        assert 0 < pipe.memory_plan.peak_bytes <= pipe.memory_plan.naive_bytes
        out = pipe.run(x=x)
        m, s = np.asarray(out["m"]), np.asarray(out["s"])
    assert m.shape == (4, 1) and s.shape == ()
    np.testing.assert_allclose(
        m, _ref(_ref(x, "max", [-1], True, False), "mean", [1], False, False), rtol=1e-5
    )
    np.testing.assert_allclose(s, math.fsum(float(v) for v in x.ravel()), rtol=1e-5)
