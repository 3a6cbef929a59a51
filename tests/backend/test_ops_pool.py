"""max_pool2d, avg_pool2d and global_average_pool against tap-by-tap loop references and ONNX's reference
evaluator: strides, pads, dilations, ceil_mode, count_include_pad, auto_pad, 16-bit types, errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import pipelink as pl
from pipelink.errors import InvalidArgumentError, ShapeMismatchError

from .ops_helpers import FLOAT_NAMES, check_close, make_registry, rand, run_op


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _out_size(size, k, s, d, pb, pe, ceil_mode):
    span = size + pb + pe - (k - 1) * d - 1
    n = (math.ceil(span / s) if ceil_mode else span // s) + 1
    if ceil_mode and (n - 1) * s >= size + pb:
        n -= 1
    return n


def _pool_ref(x, kind, kernel, strides, pads, dilations, ceil_mode, include_pad):
    x = x.astype(np.float64)
    n, c, h, w = x.shape
    size = (h, w)
    outs = [
        _out_size(size[a], kernel[a], strides[a], dilations[a], pads[a], pads[a + 2], ceil_mode)
        for a in range(2)
    ]
    y = np.empty((n, c, *outs))
    for oh in range(outs[0]):
        for ow in range(outs[1]):
            taps, counted = [], 0
            for i in range(kernel[0]):
                for j in range(kernel[1]):
                    ih = oh * strides[0] - pads[0] + i * dilations[0]
                    iw = ow * strides[1] - pads[1] + j * dilations[1]
                    inside = 0 <= ih < h and 0 <= iw < w
                    on_pads = -pads[0] <= ih < h + pads[2] and -pads[1] <= iw < w + pads[3]
                    if inside:
                        taps.append(x[:, :, ih, iw])
                    counted += inside or (include_pad and on_pads)
            stack = np.stack(taps)
            y[:, :, oh, ow] = stack.max(axis=0) if kind == "max" else stack.sum(axis=0) / counted
    return y


CASES = [
    ((2, 3, 8, 9), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 7, 6), {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 2, 1], "ceil_mode": True}),
    ((1, 2, 9, 9), {"kernel_shape": [2, 3], "dilations": [2, 2], "strides": [1, 2]}),
    ((1, 1, 6, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": True}),
    ((1, 1, 5, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": True}),
    ((2, 8, 17, 19), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # many blocks of threads
]


@pytest.mark.parametrize(("shape", "attrs"), CASES)
@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize(("kind", "include_pad"), [("max", False), ("avg", False), ("avg", True)])
def test_pools_against_loops(reg, device, shape, attrs, dtype, kind, include_pad):
    x = rand(np.random.default_rng(41), shape, dtype)
    call = dict(attrs, count_include_pad=include_pad) if kind == "avg" else attrs
    (y,) = run_op(reg, f"{kind}_pool2d", [x], call, device=device)
    full = {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "ceil_mode": False, **attrs}
    ref = _pool_ref(
        x,
        kind,
        full["kernel_shape"],
        full["strides"],
        full["pads"],
        full["dilations"],
        full["ceil_mode"],
        include_pad,
    )
    check_close(y, ref, dtype)


def test_max_pool_propagates_nan_and_padding_never_wins(reg, device):
    x = -np.abs(rand(np.random.default_rng(42), (1, 1, 4, 4), "float32")) - 1  # all below the zero pad
    x[0, 0, 0, 0] = np.nan
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    (y,) = run_op(reg, "max_pool2d", [x], attrs, device=device)
    assert np.isnan(y[0, 0, 0, 0]) and np.all(y[0, 0].ravel()[1:] < 0)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_auto_pad_matches_explicit_pads(reg, device, auto_pad):
    x = rand(np.random.default_rng(43), (1, 2, 8, 7), "float32")
    attrs = {"kernel_shape": [3, 2], "strides": [2, 2]}
    (y,) = run_op(reg, "avg_pool2d", [x], dict(attrs, auto_pad=auto_pad), device=device)
    pads = {"SAME_UPPER": [0, 0, 1, 1], "SAME_LOWER": [1, 1, 0, 0], "VALID": [0, 0, 0, 0]}[auto_pad]
    (z,) = run_op(reg, "avg_pool2d", [x], dict(attrs, pads=pads), device=device)
    assert y.shape == z.shape and np.array_equal(y, z)


@pytest.mark.parametrize("shape", [(2, 3, 5, 6), (2, 3, 7), (1, 4, 2, 3, 2), (2, 3)])
@pytest.mark.parametrize("dtype", FLOAT_NAMES)
def test_global_average_pool(reg, device, shape, dtype):
    x = rand(np.random.default_rng(44), shape, dtype)
    (y,) = run_op(reg, "global_average_pool", [x], device=device)
    assert y.shape == shape[:2] + (1,) * (len(shape) - 2)
    flat = x.astype(np.float64).reshape(shape[0], shape[1], -1)
    ref = np.array([[math.fsum(r) / len(r) for r in row] for row in flat]).reshape(y.shape)
    check_close(y, ref, dtype)


@pytest.mark.parametrize(
    ("shape", "attrs", "error", "match"),
    [
        ((1, 1, 4, 4), {"kernel_shape": [2, 2], "pads": [2, 0, 0, 0]}, InvalidArgumentError, "smaller than"),
        ((1, 1, 2, 2), {"kernel_shape": [3, 3]}, ShapeMismatchError, "does not fit"),
        ((1, 1, 4, 4), {"kernel_shape": [2]}, InvalidArgumentError, "'kernel_shape' must have 2 values"),
        ((1, 1, 4, 4), {"kernel_shape": [2, 2], "dilations": [0, 1]}, InvalidArgumentError, "dilations"),
    ],
)
def test_pool_errors(reg, shape, attrs, error, match):
    with pytest.raises(error, match=match):
        run_op(reg, "max_pool2d", [np.zeros(shape, np.float32)], attrs)
    with pytest.raises(ShapeMismatchError, match="expects 4 dimensions"):
        run_op(reg, "avg_pool2d", [np.zeros((1, 4, 4), np.float32)], {"kernel_shape": [2, 2]})


@pytest.mark.parametrize(("shape", "attrs"), CASES)
@pytest.mark.parametrize(("kind", "include_pad"), [("max", 0), ("avg", 0), ("avg", 1)])
def test_pools_match_onnx(reg, device, shape, attrs, kind, include_pad):
    pytest.importorskip("onnx")
    from .onnx_oracle import run_onnx

    x = rand(np.random.default_rng(45), shape, "float32")
    ours = dict(attrs, count_include_pad=bool(include_pad)) if kind == "avg" else attrs
    (y,) = run_op(reg, f"{kind}_pool2d", [x], ours, device=device)
    theirs = {k: int(v) if isinstance(v, bool) else v for k, v in attrs.items()}
    if kind == "avg":
        theirs["count_include_pad"] = include_pad
    (ref,) = run_onnx("MaxPool" if kind == "max" else "AveragePool", [x], theirs, n_outputs=1)
    check_close(y, ref.astype(np.float64))


def test_pipeline_pool_head_plans_and_runs():
    config = {
        "inputs": {"x": {"shape": [2, 4, 9, 9], "dtype": "float16"}},
        "pipeline": [
            {
                "name": "max_pool2d",
                "inputs": ["x"],
                "outputs": ["p"],
                "attrs": {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": True},
            },
            {
                "name": "avg_pool2d",
                "inputs": ["p"],
                "outputs": ["q"],
                "attrs": {"kernel_shape": [2, 2], "pads": [1, 1, 0, 0], "count_include_pad": True},
            },
            {"name": "global_average_pool", "inputs": ["q"], "outputs": ["y"]},
        ],
    }
    x = rand(np.random.default_rng(46), (2, 4, 9, 9), "float16")
    with pl.load(config, device="cpu") as pipe:
        assert 0 < pipe.memory_plan.peak_bytes <= pipe.memory_plan.naive_bytes
        y = np.asarray(pipe.run(x=x)["y"])
    p = _pool_ref(x, "max", [3, 3], [2, 2], [0] * 4, [1, 1], True, False)
    q = _pool_ref(p, "avg", [2, 2], [1, 1], [1, 1, 0, 0], [1, 1], False, True)
    check_close(y, q.mean(axis=(2, 3), keepdims=True), "float16")


def test_empty_batches_and_empty_spatial_axes(reg, device):
    for name, attrs in (
        ("max_pool2d", {"kernel_shape": [2, 2]}),
        ("avg_pool2d", {"kernel_shape": [2, 2]}),
        ("global_average_pool", {}),
    ):
        (y,) = run_op(reg, name, [np.zeros((0, 2, 4, 4), np.float32)], attrs, device=device)
        assert y.shape[:2] == (0, 2)
    (y,) = run_op(reg, "global_average_pool", [np.ones((1, 2, 0, 4), np.float32)], device=device)
    assert y.shape == (1, 2, 1, 1) and np.isnan(y).all(), "the mean of no elements is NaN"


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_max_pool_on_8_bit_integers_is_exact(reg, device, dtype):
    x = rand(np.random.default_rng(47), (2, 3, 7, 6), dtype)
    attrs = {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 1, 1, 0], "ceil_mode": True}
    (y,) = run_op(reg, "max_pool2d", [x], attrs, device=device)
    ref = _pool_ref(x, "max", [3, 2], [2, 2], [1, 1, 1, 0], [1, 1], True, False)
    assert y.dtype == x.dtype and np.array_equal(y.astype(np.float64), ref)
