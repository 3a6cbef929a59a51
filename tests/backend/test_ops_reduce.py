"""reduce_mean / reduce_sum / reduce_max / reduce_prod against a row-by-row reference (reduced axes moved
last, each row folded with math.fsum / max / a float64 product) and ONNX's reference evaluator; ONNX's edge
cases: negative axes, keepdims, noop_with_empty_axes, empty reductions, 16-bit types, integer wrap-around.
argmax / argmin against an index reference, ties both ways, NaN, refusals, and one-node ONNX ArgMax /
ArgMin models. cumsum / cumprod against a running sum / product walked in Python, and one-node ONNX
CumSum / CumProd models.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import pipelink as pl
from pipelink.dtypes import get_dtype
from pipelink.errors import DTypeMismatchError, ErrorCode, InvalidArgumentError, ShapeMismatchError

from .ops_helpers import TOL, make_registry, rand, run_op

FLOAT_TYPES = ("float32", "float16", "bfloat16", "float64")
KINDS = ("mean", "sum", "max", "min")
INT_TYPES = ("int8", "int32", "int64", "uint8", "int16", "uint16", "uint32", "uint64")


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
        elif kind == "prod":
            out.append(math.prod(vals))
        elif kind == "mean":
            out.append(math.fsum(vals) / len(vals) if vals else math.nan)
        else:
            pick, empty = (max, -math.inf) if kind == "max" else (min, math.inf)
            out.append(
                pick(vals) if vals and not any(math.isnan(v) for v in vals) else (math.nan if vals else empty)
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


@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("dtype", INT_TYPES)
def test_integer_sum_wraps_and_max_is_exact(reg, device, kind, dtype):
    """Sums and products wrap in the type; max and min are exact at both ends of the range (uint64's
    values past 2**63 too, which a signed comparison would order below 0)."""
    rng = np.random.default_rng(22)
    x = _odd(rand(rng, (4, 50), dtype)) if kind == "prod" else rand(rng, (4, 50), dtype)
    info = np.iinfo(x.dtype)
    x[1, 7], x[2, 9], x[3, 3] = info.max, info.min, info.max // 2 + 1  # the top bit alone, for unsigned
    (y,) = run_op(reg, f"reduce_{kind}", [x], {"axes": [1], "keepdims": False}, device=device)
    for i in range(4):
        vals = [int(v) for v in x[i]]
        want = {"sum": sum, "max": max, "min": min, "prod": math.prod}[kind](vals)
        want = (want - info.min) % (info.max - info.min + 1) + info.min  # two's-complement wrap
        assert int(y[i]) == want


def test_empty_max_is_the_lowest_value(reg, device):
    (y,) = run_op(
        reg, "reduce_max", [np.zeros((3, 0), np.int8)], {"axes": [1], "keepdims": False}, device=device
    )
    assert y.tolist() == [-128] * 3
    (y,) = run_op(reg, "reduce_max", [np.zeros((0, 2), np.float16)], {"axes": [0]}, device=device)
    assert np.all(np.isneginf(y))


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int64", "uint64", "float16", "bool"])
def test_empty_min_is_the_highest_value(reg, device, dtype):
    npd = get_dtype(dtype).numpy
    (y,) = run_op(reg, "reduce_min", [np.zeros((3, 0), npd)], {"axes": [1], "keepdims": False}, device=device)
    if dtype == "float16":
        assert np.all(np.isposinf(y))
    else:
        high = True if dtype == "bool" else int(np.iinfo(npd).max)
        assert y.dtype == npd and y.tolist() == [high] * 3


@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize(("shape", "axes"), [((5, 7), [1]), ((4, 3000), [1]), ((3, 4, 5), [0, 2])])
def test_max_and_min_of_bool_are_any_and_all(reg, device, rng, kind, shape, axes):
    """ONNX ReduceMax / ReduceMin of bool (opset 20): any and all over the axes."""
    x = rng.random(shape) < (0.1 if kind == "max" else 0.9)  # rows of both answers
    x[0] = kind == "min"  # a row all True for min, all False for max
    (y,) = run_op(reg, f"reduce_{kind}", [x], {"axes": axes, "keepdims": False}, device=device)
    want = np.any(x, axis=tuple(axes)) if kind == "max" else np.all(x, axis=tuple(axes))
    assert y.dtype == np.bool_ and np.array_equal(y, want)
    assert y.reshape(-1).view(np.uint8).max() <= 1, "a bool is 0 or 1"


def test_min_is_not_the_negated_max_of_the_negation(reg, device):
    """A real minimum: -max(-x) is wrong at int8's -128 (its negation wraps to itself) and for every
    unsigned x with a 0 in it; NaN propagates as through max."""
    (y,) = run_op(reg, "reduce_min", [np.array([[-128, 0, 5]], np.int8)], {"axes": [1]}, device=device)
    assert y.tolist() == [[-128]]
    (y,) = run_op(reg, "reduce_min", [np.array([[9, 0, 5]], np.uint32)], {"axes": [1]}, device=device)
    assert y.tolist() == [[0]]
    x = np.array([[1.0, np.nan, -3.0], [4.0, -5.0, 6.0]], np.float32)
    (y,) = run_op(reg, "reduce_min", [x], {"axes": [1], "keepdims": False}, device=device)
    assert np.isnan(y[0]) and y[1] == -5.0


def test_noop_with_empty_axes_copies(reg, device):
    x = rand(np.random.default_rng(23), (3, 4), "bfloat16")
    for kind in KINDS:
        (y,) = run_op(reg, f"reduce_{kind}", [x], {"noop_with_empty_axes": True}, device=device)
        assert y.shape == x.shape and np.array_equal(y, x)


def test_nan_propagates_through_max(reg, device):
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], np.float32)
    (y,) = run_op(reg, "reduce_max", [x], {"axes": [1], "keepdims": False}, device=device)
    assert np.isnan(y[0]) and y[1] == 6.0


def _odd(x: np.ndarray) -> np.ndarray:
    """Odd integers (of x's type): their products never reach 0 modulo 2^bits, so a wrapped product
    still tests every bit."""
    return (x | 1).astype(x.dtype)


def _near_one(rng, shape, dtype: str) -> np.ndarray:
    """Floats of magnitude exp(+-0.05) with random signs: products of thousands stay in range (the log
    of the magnitude walks randomly about 0)."""
    mag = np.exp(rng.uniform(-0.05, 0.05, size=shape))
    return (np.where(rng.random(shape) < 0.5, -mag, mag)).astype(get_dtype(dtype).numpy)


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
@pytest.mark.parametrize(("shape", "axes", "keepdims"), CASES)
def test_reduce_prod_on_floats(reg, device, rng, dtype, shape, axes, keepdims):
    """Products (in float32 for the half types) against a float64 product: the bound grows with the
    count (one rounding per factor); an empty product is 1."""
    x = _near_one(rng, shape, dtype)
    (y,) = run_op(reg, "reduce_prod", [x], {"axes": axes, "keepdims": keepdims}, device=device)
    ref = _ref(x, "prod", axes, keepdims, False)
    assert y.shape == ref.shape and y.dtype == x.dtype
    rtol, atol = TOL[dtype]
    count = x.size // max(1, ref.size) if x.size else 0
    eps = np.finfo(np.float64 if dtype == "float64" else np.float32).eps
    got = y.astype(np.float64)
    assert not np.isnan(got).any(), "an output was not written"
    np.testing.assert_allclose(got, ref, rtol=rtol + count * eps, atol=atol)


def test_reduce_prod_edge_cases(reg, device):
    """An empty product is 1 (every type); a 0 or a NaN factor decides the product; noop_with_empty_axes
    copies."""
    (y,) = run_op(
        reg, "reduce_prod", [np.zeros((3, 0), np.int8)], {"axes": [1], "keepdims": False}, device=device
    )
    assert y.tolist() == [1, 1, 1]
    (y,) = run_op(
        reg, "reduce_prod", [np.zeros((0, 2), get_dtype("bfloat16").numpy)], {"axes": [0]}, device=device
    )
    assert y.tolist() == [[1.0, 1.0]]
    x = np.array([[2.0, 0.0, 3.0], [4.0, np.nan, 0.5], [np.inf, 0.0, 1.0]], np.float32)
    (y,) = run_op(reg, "reduce_prod", [x], {"axes": [1], "keepdims": False}, device=device)
    assert y[0] == 0.0 and np.isnan(y[1]) and np.isnan(y[2])  # inf * 0 is NaN
    (y,) = run_op(reg, "reduce_prod", [x], {"noop_with_empty_axes": True}, device=device)
    assert np.array_equal(y, x, equal_nan=True)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32", "int64"])
@pytest.mark.parametrize(("axes", "keepdims", "noop"), [([1], 1, 0), ([-1, 0], 0, 0), ([], 1, 0), ([], 0, 1)])
def test_reduce_prod_matches_onnx(reg, device, dtype, axes, keepdims, noop):
    """ReduceProd (opset 18, axes an input) against onnx's reference; the reference multiplies float16 in
    float16, PipeLink in float32: equal to float16's tolerance."""
    pytest.importorskip("onnx")
    from .onnx_oracle import run_onnx

    rng = np.random.default_rng(30)
    x = _near_one(rng, (3, 4, 5), dtype) if dtype.startswith("float") else _odd(rand(rng, (3, 4, 5), dtype))
    attrs = {"axes": axes, "keepdims": bool(keepdims), "noop_with_empty_axes": bool(noop)}
    (y,) = run_op(reg, "reduce_prod", [x], attrs, device=device)
    onnx_in = [x, np.array(axes, np.int64)] if axes else [x]
    (ref,) = run_onnx("ReduceProd", onnx_in, {"keepdims": keepdims, "noop_with_empty_axes": noop}, opset=18)
    assert y.shape == ref.shape and y.dtype == ref.dtype
    if dtype.startswith("float"):
        rtol, atol = TOL[dtype]
        np.testing.assert_allclose(y.astype(np.float64), ref.astype(np.float64), rtol=4 * rtol, atol=atol)
    else:
        np.testing.assert_array_equal(y, ref)  # both wrap


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


# -- argmax / argmin ----------------------------------------------------------------------------------
ARG_DTYPES = FLOAT_TYPES + INT_TYPES


def _arg_ref(x: np.ndarray, kind: str, axis: int, keepdims: bool, last: bool) -> np.ndarray:
    """The index of the extreme along ``axis``, found without np.argmax: each row's candidates are its
    NaNs when it has one (NaN is the extreme, as np.argmax says), else the elements equal to its max (min);
    the first candidate, or the last with ``last``."""
    is_float = x.dtype.name in FLOAT_TYPES  # bfloat16's kind is "V"
    v = np.moveaxis(x.astype(np.float64) if is_float else x, axis, -1)  # ints stay exact
    if v.shape[-1] == 0:
        raise AssertionError("no reference for an empty axis")
    nan = np.isnan(v) if is_float else np.zeros(v.shape, bool)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN row: its candidates are its NaNs
        extreme = np.nanmax(v, axis=-1, keepdims=True) if kind == "max" else np.nanmin(v, -1, keepdims=True)
    cand = np.where(nan.any(axis=-1, keepdims=True), nan, v == extreme)
    n = v.shape[-1]
    pos = np.where(cand, np.arange(n), -1 if last else n)
    idx = pos.max(axis=-1) if last else pos.min(axis=-1)
    assert np.all((idx >= 0) & (idx < n))
    return np.expand_dims(idx, axis) if keepdims else idx


def _check_arg(y: np.ndarray, want: np.ndarray) -> None:
    assert y.dtype == np.int64 and y.shape == want.shape, (y.dtype, y.shape, want.shape)
    np.testing.assert_array_equal(y, want)  # the 0xCD poison would show as a huge index


ARG_CASES = [
    ((3, 4, 5), 1, True),
    ((3, 4, 5), -1, False),
    ((3, 4, 5), 0, True),
    ((3, 4, 5), -3, False),
    ((7,), 0, False),  # to a 0-d output
    ((1,), 0, True),
    ((6, 1, 5), 1, False),  # an axis of size 1: every index is 0
    ((4, 0, 3), 2, True),  # a 0-size other axis: an empty output
    ((2, 1000), -1, False),  # a warp per output, 31-32 elements per lane
    ((3, 1031), 1, True),  # past 1024: the whole block per output
    ((3, 1500, 4), 1, True),  # a long strided axis (inner 4)
    ((20000, 3), 1, False),  # more outputs than the grid covers at once on CUDA: the grid-stride loop
    ((1100, 1030), 1, False),  # ...and with a block per output
]


@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("dtype", ARG_DTYPES)
@pytest.mark.parametrize(("shape", "axis", "keepdims"), ARG_CASES)
def test_arg_reductions_every_dtype(reg, device, rng, kind, dtype, shape, axis, keepdims, last):
    """Random values (8-bit and 16-bit types repeat values in long rows: ties on both sides of a lane's
    share), every axis form; a wrong index, an unwritten output or the wrong tie rule fails."""
    x = rand(rng, shape, dtype)
    attrs = {"axis": axis, "keepdims": keepdims, "select_last_index": last}
    (y,) = run_op(reg, f"arg{kind}", [x], attrs, device=device)
    _check_arg(y, _arg_ref(x, kind, axis, keepdims, last))
    if not last and x.size:  # NumPy's own answer, where it has one
        find = np.argmax if kind == "max" else np.argmin
        np.testing.assert_array_equal(
            y, find(x.astype(np.float64) if dtype in FLOAT_TYPES else x, axis, keepdims=keepdims)
        )


@pytest.mark.parametrize("dtype", ARG_DTYPES)
def test_arg_ties_go_first_or_last(reg, device, dtype):
    """Equal extremes in one row, far apart (other lanes, other warps of a block on CUDA): the first index,
    or the last with select_last_index; a row of one value gives 0 or n - 1."""
    npd = get_dtype(dtype).numpy
    n = 2000
    x = np.zeros((4, n), npd)
    x[0, [5, 37, 1500]] = 9  # ties of the maximum
    x[1, [3, 64, 1999]] = 9
    x[1, [0, 700]] = 1 if npd.kind == "u" else -7  # ... and of the minimum (unsigned: 0 is the minimum)
    x[2] = 4  # one value
    x[3, [n - 2, n - 1]] = 9  # at the very end
    for last in (False, True):
        attrs = {"axis": 1, "keepdims": False, "select_last_index": last}
        (mx,) = run_op(reg, "argmax", [x], attrs, device=device)
        (mn,) = run_op(reg, "argmin", [x], attrs, device=device)
        assert mx.tolist() == ([1500, 1999, n - 1, n - 1] if last else [5, 3, 0, n - 2])
        assert mn[2] == (n - 1 if last else 0)
        _check_arg(mn, _arg_ref(x, "min", 1, False, last))
    if dtype in FLOAT_TYPES:  # -0.0 and +0.0 are equal: a tie
        z = np.array([[-0.0, 0.0, -0.0]], npd)
        for last, want in ((False, 0), (True, 2)):
            for kind in ("max", "min"):
                attrs = {"axis": -1, "select_last_index": last}
                (y,) = run_op(reg, f"arg{kind}", [z], attrs, device=device)
                assert y.tolist() == [[want]]


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
def test_arg_nan_is_the_extreme(reg, device, dtype):
    """A NaN beats every number, +-inf too, as in np.argmax / np.argmin: the first NaN, the last with
    select_last_index (onnx's ReferenceEvaluator gives the same: test_arg_onnx_match_the_reference)."""
    npd = get_dtype(dtype).numpy
    n = 1500
    x = np.ones((4, n), npd)
    x[:, 10] = np.inf
    x[:, 11] = -np.inf
    x[0, [400, 1200]] = np.nan
    x[1] = np.nan  # all NaN
    x[2, 0] = np.nan
    x[3, n - 1] = np.nan
    for kind, find in (("max", np.argmax), ("min", np.argmin)):
        (y,) = run_op(reg, f"arg{kind}", [x], {"axis": 1, "keepdims": False}, device=device)
        assert y.tolist() == [400, 0, 0, n - 1] == find(x.astype(np.float64), axis=1).tolist()
        attrs = {"axis": -1, "keepdims": False, "select_last_index": True}
        (y,) = run_op(reg, f"arg{kind}", [x], attrs, device=device)
        assert y.tolist() == [1200, n - 1, 0, n - 1]
    # along the first axis (strided reads): NaNs in some columns only
    t = np.ascontiguousarray(x[:, :16].T)
    (y,) = run_op(reg, "argmin", [t], {"axis": 0, "keepdims": True}, device=device)
    _check_arg(y, _arg_ref(t, "min", 0, True, False))


def test_arg_extremes_of_the_integer_types(reg, device):
    """The lowest and highest value of each integer type (int64's beyond float64's exact range)."""
    for dtype in ("int8", "int32", "int64", "uint8"):
        info = np.iinfo(get_dtype(dtype).numpy)
        x = np.array([[info.max - 1, info.min, info.max, info.min + 1, info.max]], get_dtype(dtype).numpy)
        for last, (imax, imin) in ((False, (2, 1)), (True, (4, 1))):
            attrs = {"axis": 1, "keepdims": False, "select_last_index": last}
            assert run_op(reg, "argmax", [x], attrs, device=device)[0].tolist() == [imax], dtype
            assert run_op(reg, "argmin", [x], attrs, device=device)[0].tolist() == [imin], dtype


def test_arg_refusals(reg, device):
    """An axis outside [-rank, rank) (a 0-d input has none) is PIPELINK_ERR_INVALID_ARGUMENT; a reduced
    axis of size 0 is PIPELINK_ERR_SHAPE_MISMATCH, at load, and when a symbolic size is bound to 0."""
    x = np.zeros((2, 3, 4), np.float32)
    for op, axis in (("argmax", 3), ("argmin", -4)):
        with pytest.raises(InvalidArgumentError, match=r"attribute 'axis' must be in \[-3, 3\)") as e:
            run_op(reg, op, [x], {"axis": axis}, device=device)
        assert e.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    with pytest.raises(InvalidArgumentError, match=r"must be in \[-0, 0\)") as e:
        run_op(reg, "argmax", [np.float32(1.0).reshape(())], {}, device=device)
    assert e.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    for op in ("argmax", "argmin"):
        with pytest.raises(ShapeMismatchError, match=f"{op}: axis -2 of input 'x' .* has size 0") as e:
            run_op(reg, op, [np.zeros((3, 0, 2), np.int8)], {"axis": -2}, device=device)
        assert e.value.code == ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH
    with pytest.raises(DTypeMismatchError, match="not supported"):
        run_op(reg, "argmax", [np.zeros((2, 3), np.bool_)], {"axis": 1}, device=device)

    config = {
        "inputs": {"x": {"shape": ["N", 0, 4], "dtype": "float16"}},
        "outputs": ["y"],
        "pipeline": [{"name": "argmin", "inputs": ["x"], "outputs": ["y"], "attrs": {"axis": 1}}],
    }
    (problem,) = pl.validate(config, device=device)
    assert problem.code == ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH and "has size 0" in problem.message
    with pytest.raises(ShapeMismatchError, match="has size 0"):
        pl.load(config, device=device)
    config["inputs"]["x"]["shape"] = ["N", "K", 4]  # known only when it runs
    with pl.load(config, device=device) as pipe:
        x = rand(np.random.default_rng(26), (2, 5, 4), "float16")
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), np.argmin(x, axis=1, keepdims=True))
        with pytest.raises(ShapeMismatchError, match="has size 0") as e:
            pipe.run(x=np.zeros((2, 0, 4), np.float16))
        assert e.value.code == ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH


def test_arg_pipeline_gives_int64(device):
    """argmax after a reduction in a pipeline: the output is declared int64, planned and returned."""
    config = {
        "inputs": {"x": {"shape": ["B", 6, 8], "dtype": "bfloat16"}},
        "outputs": ["s", "i", "j"],
        "pipeline": [
            {"name": "reduce_sum", "inputs": ["x"], "outputs": ["s"], "attrs": {"axes": [-1]}},
            {"name": "argmax", "inputs": ["s"], "outputs": ["i"], "attrs": {"axis": 1, "keepdims": False}},
            {"name": "argmin", "inputs": ["x"], "outputs": ["j"], "attrs": {"axis": -1}},
        ],
    }
    x = rand(np.random.default_rng(27), (3, 6, 8), "bfloat16")
    with pl.load(config, device=device) as pipe:
        out = pipe.run(x=x)
        s, i, j = out["s"].numpy(), out["i"].numpy(), out["j"].numpy()
    assert i.dtype == np.int64 and i.shape == (3, 1) and j.shape == (3, 6, 1)
    np.testing.assert_array_equal(j, _arg_ref(x, "min", -1, True, False))
    np.testing.assert_array_equal(i, _arg_ref(s, "max", 1, False, False))  # of the sums the pipeline made


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int8", "int32", "int64", "uint8"])
@pytest.mark.parametrize(("axis", "keepdims", "last"), [(0, 1, 0), (-1, 0, 1), (1, 1, 1), (-2, 0, 0)])
def test_arg_onnx_match_the_reference(device, op, dtype, axis, keepdims, last):
    """A one-node ArgMax / ArgMin model imported and run, against onnx's ReferenceEvaluator; the float
    inputs hold NaNs and ties, so the two agree on both (the descriptor's NaN rule)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    from .onnx_models import make_model

    npd = get_dtype(dtype).numpy
    x = rand(np.random.default_rng(28), (3, 40, 5), dtype)
    if dtype.startswith("float"):
        x = np.round(x).astype(npd)  # ties
        x[1, 3, 2] = x[2, 7, 0] = x[2, 30, 0] = x[0, 0, 4] = np.nan
    attrs = {"axis": axis, "keepdims": keepdims, "select_last_index": last}
    node = helper.make_node(op, ["x"], ["y"], name="the_arg", **attrs)
    model = make_model([node], [("x", list(x.shape))], [("y", None)], {}, op.lower(), opset=13)
    model.graph.input[0].type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(x.dtype)
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    assert got.dtype == ref.dtype == np.int64 and got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)


# -- cumsum, cumprod -----------------------------------------------------------------------------------
def _cumsum_ref(x: np.ndarray, axis: int, exclusive: bool, reverse: bool, kind: str = "sum") -> np.ndarray:
    """A running sum (or product) walked in Python along each line: in float64 for floats, in Python ints
    wrapped to the type for integers."""
    is_float = x.dtype.name in FLOAT_TYPES
    v = np.moveaxis(x.astype(np.float64) if is_float else x, axis, -1)
    n = v.shape[-1]
    out = np.zeros(v.shape, np.float64 if is_float else x.dtype)
    bits = 8 * x.dtype.itemsize
    signed = not is_float and np.issubdtype(x.dtype, np.signedinteger)
    order = list(range(n))[::-1] if reverse else list(range(n))
    identity = 0 if kind == "sum" else 1
    for idx in np.ndindex(v.shape[:-1]):
        total = float(identity) if is_float else identity
        for k in order:
            value = float(v[idx + (k,)]) if is_float else int(v[idx + (k,)])
            if not exclusive:
                total = total + value if kind == "sum" else total * value
            if is_float:
                out[idx + (k,)] = total
            else:
                total %= 1 << bits  # the low bits are all a wrapped sum or product keeps
                out[idx + (k,)] = total - (1 << bits) if signed and total >= 1 << (bits - 1) else total
            if exclusive:
                total = total + value if kind == "sum" else total * value
    return np.moveaxis(out, -1, axis)


def _check_cumsum(y: np.ndarray, x: np.ndarray, want: np.ndarray, axis: int, kind: str = "sum") -> None:
    assert y.dtype == x.dtype and y.shape == x.shape, (y.dtype, y.shape)
    if x.dtype.name not in FLOAT_TYPES:
        np.testing.assert_array_equal(y, want)
        return
    rtol, atol = TOL[x.dtype.name]
    got = y.astype(np.float64)
    assert not np.isnan(got).any(), "an output was not written"
    if kind == "prod":  # one rounding per factor: the bound grows with the line
        eps = np.finfo(np.float64 if x.dtype == np.float64 else np.float32).eps
        bound = atol + (rtol + x.shape[axis] * eps) * np.abs(want)
        assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) - bound)
        return
    # a prefix may cancel to near 0 and the kernels' orders of summation differ: the bound is relative
    # to the line's sum of magnitudes, with one rounding of the output on top
    scale = np.abs(x.astype(np.float64)).sum(axis=axis, keepdims=True) if x.size else 0.0
    assert np.all(np.abs(got - want) <= atol + rtol * np.maximum(np.abs(want), scale / 8)), np.max(
        np.abs(got - want)
    )


CUMSUM_CASES = [
    ((3, 4, 5), 1),
    ((3, 4, 5), -1),  # the innermost axis: a warp per line on CUDA
    ((3, 4, 5), 0),
    ((7,), 0),
    ((1,), 0),
    ((2, 0, 3), 1),  # an empty axis: an empty output
    ((4, 0), 0),  # an empty other axis
    ((3, 100), 1),  # several tiles of 32 per line, the last partial
    ((2, 1500, 3), 1),  # a long strided axis (inner 3)
    ((2, 3000), 1),  # a long contiguous line: many tiles and their carries
    ((5000, 7), -1),  # more lines than the grid covers at once: the grid-stride loop
]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("dtype", ARG_DTYPES)
@pytest.mark.parametrize(("shape", "axis"), CUMSUM_CASES)
def test_cumsum_every_dtype(reg, device, rng, dtype, shape, axis, exclusive, reverse):
    """Random values on every axis form, exclusive and reverse, against a running sum walked in Python
    (integers wrap in their type: int8 and uint8 lines of hundreds of values do)."""
    x = rand(rng, shape, dtype)
    attrs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    (y,) = run_op(reg, "cumsum", [x], attrs, device=device)
    _check_cumsum(y, x, _cumsum_ref(x, axis % len(shape), exclusive, reverse), axis)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("dtype", ARG_DTYPES)
@pytest.mark.parametrize(("shape", "axis"), CUMSUM_CASES)
def test_cumprod_every_dtype(reg, device, rng, dtype, shape, axis, exclusive, reverse):
    """cumprod through the same scan: floats near 1 in magnitude with random signs (products of
    thousands stay in range), odd integers (a wrapped product never collapses to 0), against a running
    product walked in Python; exclusive starts from 1."""
    x = _near_one(rng, shape, dtype) if dtype in FLOAT_TYPES else _odd(rand(rng, shape, dtype))
    attrs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    (y,) = run_op(reg, "cumprod", [x], attrs, device=device)
    _check_cumsum(y, x, _cumsum_ref(x, axis % len(shape), exclusive, reverse, "prod"), axis, "prod")


def test_cumsum_integer_wraps_and_refusals(reg, device):
    """int64 past 2^63 wraps as NumPy's (sum and product); an axis outside [-rank, rank) and a 0-d input
    are refused."""
    big = np.iinfo(np.int64).max
    x = np.array([big, 1, 1], np.int64)
    (y,) = run_op(reg, "cumsum", [x], {"axis": 0}, device=device)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(y, np.cumsum(x))
    x = np.array([3**39, 3, 3, -(3**30)], np.int64)
    (y,) = run_op(reg, "cumprod", [x], {"axis": 0}, device=device)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(y, np.cumprod(x))
    for op in ("cumsum", "cumprod"):
        for axis in (2, -3):
            with pytest.raises(
                InvalidArgumentError, match=rf"{op}: attribute 'axis' must be in \[-2, 2\)"
            ) as e:
                run_op(reg, op, [np.zeros((2, 3), np.float32)], {"axis": axis}, device=device)
            assert e.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
        with pytest.raises(InvalidArgumentError, match=r"must be in \[-0, 0\)"):
            run_op(reg, op, [np.float32(1.0).reshape(())], {}, device=device)
        with pytest.raises(DTypeMismatchError, match="not supported"):
            run_op(reg, op, [np.zeros((2, 3), np.bool_)], {"axis": 1}, device=device)


@pytest.mark.parametrize(("op", "opset"), [("CumSum", 14), ("CumProd", 26)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32", "int64"])
@pytest.mark.parametrize(("axis", "exclusive", "reverse"), [(0, 0, 0), (-1, 1, 0), (1, 0, 1), (-2, 1, 1)])
def test_cumsum_onnx_matches_the_reference(device, op, opset, dtype, axis, exclusive, reverse):
    """A one-node CumSum / CumProd model (its axis a constant input, int32 or int64) imported and run,
    against onnx's ReferenceEvaluator (which multiplies float16 in float16: within float16's bound)."""
    pytest.importorskip("onnx")
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from .onnx_models import make_model

    rng = np.random.default_rng(29)
    kind = "sum" if op == "CumSum" else "prod"
    if kind == "sum":
        x = rand(rng, (3, 40, 5), dtype)
    else:
        x = (
            _near_one(rng, (3, 40, 5), dtype)
            if dtype.startswith("float")
            else _odd(rand(rng, (3, 40, 5), dtype))
        )
    axis_t = np.array(axis, np.int32 if axis % 2 else np.int64)
    node = helper.make_node(op, ["x", "axis"], ["y"], name="the_scan", exclusive=exclusive, reverse=reverse)
    model = make_model([node], [("x", list(x.shape))], [("y", None)], {}, op.lower(), opset=opset)
    model.graph.initializer.append(numpy_helper.from_array(axis_t, "axis"))
    for info in (model.graph.input[0], model.graph.output[0]):
        info.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(x.dtype)
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    assert got.dtype == ref.dtype and got.shape == ref.shape
    _check_cumsum(got, x, np.asarray(ref, np.float64) if dtype.startswith("float") else ref, axis, kind)


@pytest.mark.parametrize(("op", "opset"), [("CumSum", 14), ("CumProd", 26)])
def test_cumsum_onnx_axis_must_be_constant(op, opset):
    """A computed axis is refused at import with the node named."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from .onnx_models import make_model

    node = helper.make_node(op, ["x", "axis"], ["y"], name="moving_axis")
    model = make_model([node], [("x", [2, 3])], [("y", None)], {}, op.lower(), opset=opset)
    model.graph.input.append(helper.make_tensor_value_info("axis", TensorProto.INT64, []))
    with pytest.raises(pl.PipeLinkError, match=rf"{op} node 'moving_axis'.*must be a constant") as e:
        pl.from_onnx(model)
    assert e.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
