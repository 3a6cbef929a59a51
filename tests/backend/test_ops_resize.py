"""resize (nearest, linear, cubic) and pixel_shuffle against element-by-element references (every output
value computed from its own source coordinate, linear as a sum over the 2^k corners, cubic over 4^k
neighbours) and ONNX's reference
evaluator: every coordinate_transformation_mode and nearest_mode, scales and sizes, down- and up-sampling
(antialias and half_pixel_symmetric against ONNX's reference: test_ops_resize_antialias.py).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import pipelink as pl
from pipelink.errors import DTypeMismatchError, InvalidArgumentError, ShapeMismatchError

from .ops_helpers import FLOAT_NAMES, check_close, make_registry, rand, run_op


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _coord(o, n_in, n_out, scale, mode):
    length = n_in * scale  # ONNX: the resized length before rounding down
    if mode == "half_pixel_symmetric":  # half_pixel, shifted so the rounding down trims both ends alike
        return n_in / 2 * (1 - n_out / length) + (o + 0.5) / scale - 0.5
    if mode == "asymmetric":
        return o / scale
    if mode == "align_corners":
        return 0.0 if length == 1 else o * (n_in - 1) / (length - 1)
    if mode == "pytorch_half_pixel" and length <= 1:
        return 0.0
    return (o + 0.5) / scale - 0.5


def _round(c, mode):
    if mode == "floor":
        return math.floor(c)
    if mode == "ceil":
        return math.ceil(c)
    if c - math.floor(c) == 0.5:
        return math.floor(c) if mode == "round_prefer_floor" else math.ceil(c)
    return round(c)  # not a tie: nearest integer


def _resize_ref(x, out_shape, scales, mode, coord_mode, nearest_mode):
    x64 = x.astype(np.float64)
    y = np.empty(out_shape)
    for pos in itertools.product(*(range(d) for d in out_shape)):
        coords = [
            _coord(o, n, m, s, coord_mode) for o, n, m, s in zip(pos, x.shape, out_shape, scales, strict=True)
        ]
        if mode == "nearest":
            src = tuple(
                min(max(_round(c, nearest_mode), 0), n - 1) for c, n in zip(coords, x.shape, strict=True)
            )
            y[pos] = x64[src]
            continue
        total = 0.0
        corners = []
        for c, n in zip(coords, x.shape, strict=True):
            c = min(max(c, 0.0), n - 1.0)
            lo = math.floor(c)
            corners.append(((lo, 1.0 - (c - lo)), (min(lo + 1, n - 1), c - lo)))
        for combo in itertools.product(*corners):
            weight = math.prod(w for _, w in combo)
            total += weight * x64[tuple(i for i, _ in combo)]
        y[pos] = total
    return y


COORDS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "asymmetric", "align_corners")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
SCALES = [(1.0, 1.0, 2.0, 2.0), (1.0, 1.0, 0.5, 1.5), (1.0, 1.0, 1.7, 0.6), (1.0, 2.0, 3.0, 1.0)]


@pytest.mark.parametrize("scales", SCALES)
@pytest.mark.parametrize("coord_mode", COORDS)
@pytest.mark.parametrize("nearest_mode", NEAREST)
def test_nearest_against_per_element(reg, device, scales, coord_mode, nearest_mode):
    x = rand(np.random.default_rng(51), (1, 2, 4, 5), "int8")  # nearest copies values: any dtype
    (y,) = run_op(
        reg,
        "resize",
        [x],
        {"scales": list(scales), "coordinate_transformation_mode": coord_mode, "nearest_mode": nearest_mode},
        device=device,
    )
    out = tuple(math.floor(d * s) for d, s in zip(x.shape, scales, strict=True))
    assert y.shape == out
    assert np.array_equal(y, _resize_ref(x, out, scales, "nearest", coord_mode, nearest_mode))


@pytest.mark.parametrize("scales", SCALES)
@pytest.mark.parametrize("coord_mode", COORDS)
@pytest.mark.parametrize("dtype", FLOAT_NAMES)
def test_linear_against_corner_sums(reg, device, scales, coord_mode, dtype):
    x = rand(np.random.default_rng(52), (1, 2, 4, 5), dtype)
    (y,) = run_op(
        reg,
        "resize",
        [x],
        {"mode": "linear", "scales": list(scales), "coordinate_transformation_mode": coord_mode},
        device=device,
    )
    out = tuple(math.floor(d * s) for d, s in zip(x.shape, scales, strict=True))
    check_close(y, _resize_ref(x, out, scales, "linear", coord_mode, ""), dtype)


@pytest.mark.parametrize("sizes", [(1, 2, 8, 3), (1, 2, 1, 1), (1, 2, 4, 5), (2, 2, 6, 10)])
def test_sizes_give_the_shape_and_out_over_in_scales(reg, device, sizes):
    x = rand(np.random.default_rng(53), (1, 2, 4, 5), "float32")
    (y,) = run_op(reg, "resize", [x], {"mode": "linear", "sizes": list(sizes)}, device=device)
    scales = [o / i for o, i in zip(sizes, x.shape, strict=True)]
    assert y.shape == sizes
    check_close(y, _resize_ref(x, sizes, scales, "linear", "half_pixel", ""))


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_sizes_and_scales_both_give_the_shape_and_the_sampling(reg, device, mode):
    """ONNX's keep_aspect_ratio_policy: the output [2, 3] of [4, 5] sampled at one scale 0.55 on both axes
    (2 / 4 and 3 / 5 are not it)."""
    x = rand(np.random.default_rng(54), (1, 2, 4, 5), "float32")
    scales = [1.0, 1.0, 0.55, 0.55]
    attrs = {"mode": mode, "sizes": [1, 2, 2, 3], "scales": scales}
    (y,) = run_op(reg, "resize", [x], attrs, device=device)
    assert y.shape == (1, 2, 2, 3)
    check_close(y, _resize_ref(x, (1, 2, 2, 3), scales, mode, "half_pixel", "round_prefer_floor"))


@pytest.mark.parametrize(
    ("attrs", "error", "match"),
    [
        ({}, InvalidArgumentError, "give 'scales' or 'sizes'"),
        (
            {"scales": [1.0, 2.0], "sizes": [1, 2, 3]},
            InvalidArgumentError,
            "'sizes' needs one value per axis",
        ),
        ({"scales": [2.0, 2.0, 2.0]}, InvalidArgumentError, "one value per axis"),
        ({"scales": [1.0, 0.0]}, InvalidArgumentError, "> 0"),
        ({"scales": [1.0, float("inf")]}, InvalidArgumentError, "finite and > 0"),
        ({"sizes": [2, -1]}, InvalidArgumentError, ">= 0"),
        ({"scales": [1.0, 2.0], "mode": "bicubic"}, InvalidArgumentError, "must be one of"),
    ],
)
def test_resize_errors(reg, attrs, error, match):
    with pytest.raises(error, match=match):
        run_op(reg, "resize", [np.zeros((2, 3), np.float32)], attrs)
    with pytest.raises(DTypeMismatchError, match="mode 'linear' needs a float input"):
        run_op(reg, "resize", [np.zeros((2, 3), np.int8)], {"mode": "linear", "scales": [1.0, 2.0]})
    with pytest.raises(ShapeMismatchError, match="empty axis"):
        run_op(reg, "resize", [np.zeros((0, 3), np.float32)], {"sizes": [2, 3]})


@pytest.mark.parametrize("mode", ["CRD", "DCR"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "uint8"])
def test_pixel_shuffle_against_index_formula(reg, device, mode, dtype):
    b, n, c, h, w = 2, 2, 12, 3, 4
    x = rand(np.random.default_rng(54), (n, c, h, w), dtype)
    (y,) = run_op(reg, "pixel_shuffle", [x], {"blocksize": b, "mode": mode}, device=device)
    co = c // (b * b)
    assert y.shape == (n, co, h * b, w * b)
    for ni, ci, yi, xi in itertools.product(range(n), range(co), range(h * b), range(w * b)):
        i, j = yi % b, xi % b
        src_c = ci * b * b + i * b + j if mode == "CRD" else (i * b + j) * co + ci
        assert y[ni, ci, yi, xi] == x[ni, src_c, yi // b, xi // b]


def test_pixel_shuffle_errors(reg):
    with pytest.raises(ShapeMismatchError, match="not a multiple of blocksize\\^2 = 4"):
        run_op(reg, "pixel_shuffle", [np.zeros((1, 6, 2, 2), np.float32)], {"blocksize": 2})
    with pytest.raises(InvalidArgumentError, match="'blocksize' must be >= 1"):
        run_op(reg, "pixel_shuffle", [np.zeros((1, 6, 2, 2), np.float32)], {"blocksize": 0})


@pytest.mark.parametrize("scales", SCALES)
@pytest.mark.parametrize(
    ("mode", "coord_mode", "nearest_mode"),
    [
        ("nearest", "half_pixel", "round_prefer_floor"),
        ("nearest", "asymmetric", "floor"),
        ("nearest", "align_corners", "round_prefer_ceil"),
        ("linear", "half_pixel", "round_prefer_floor"),
        ("linear", "align_corners", "round_prefer_floor"),
        ("linear", "asymmetric", "round_prefer_floor"),
        ("linear", "pytorch_half_pixel", "round_prefer_floor"),
    ],
)
def test_resize_matches_onnx(reg, device, scales, mode, coord_mode, nearest_mode):
    pytest.importorskip("onnx")
    from .onnx_oracle import run_onnx

    x = rand(np.random.default_rng(55), (1, 2, 4, 5), "float32")
    attrs = {"mode": mode, "coordinate_transformation_mode": coord_mode, "nearest_mode": nearest_mode}
    (y,) = run_op(reg, "resize", [x], {"scales": list(scales), **attrs}, device=device)
    (ref,) = run_onnx("Resize", [x, None, np.array(scales, np.float32)], attrs, opset=19)
    check_close(y, ref.astype(np.float64))


@pytest.mark.parametrize("mode", ["CRD", "DCR"])
def test_pixel_shuffle_matches_onnx_depth_to_space(reg, device, mode):
    pytest.importorskip("onnx")
    from .onnx_oracle import run_onnx

    x = rand(np.random.default_rng(56), (2, 18, 2, 3), "float32")
    (y,) = run_op(reg, "pixel_shuffle", [x], {"blocksize": 3, "mode": mode}, device=device)
    (ref,) = run_onnx("DepthToSpace", [x], {"blocksize": 3, "mode": mode})
    assert np.array_equal(y, ref)


def test_pipeline_upsampler_plans_and_runs():
    config = {
        "inputs": {"x": {"shape": [1, 8, 5, 5], "dtype": "float32"}},
        "pipeline": [
            {"name": "pixel_shuffle", "inputs": ["x"], "outputs": ["p"], "attrs": {"blocksize": 2}},
            {
                "name": "resize",
                "inputs": ["p"],
                "outputs": ["y"],
                "attrs": {
                    "mode": "linear",
                    "sizes": [1, 2, 15, 20],
                    "coordinate_transformation_mode": "align_corners",
                },
            },
        ],
    }
    x = rand(np.random.default_rng(57), (1, 8, 5, 5), "float32")
    with pl.load(config, device="cpu") as pipe:
        assert 0 < pipe.memory_plan.peak_bytes <= pipe.memory_plan.naive_bytes
        y = np.asarray(pipe.run(x=x)["y"])
    p = x.reshape(1, 2, 2, 2, 5, 5).transpose(0, 1, 4, 2, 5, 3).reshape(1, 2, 10, 10)
    scales = [1.0, 1.0, 1.5, 2.0]
    check_close(y, _resize_ref(p, (1, 2, 15, 20), scales, "linear", "align_corners", ""))


# -- cubic --------------------------------------------------------------------------------------------
def _keys(d: float, a: float) -> float:
    """Keys' cubic convolution kernel at distance d."""
    d = abs(d)
    if d <= 1:
        return (a + 2) * d**3 - (a + 3) * d**2 + 1
    if d < 2:
        return a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a
    return 0.0


def _cubic_ref(x, out_shape, scales, coord_mode, a, exclude):
    """Every output value on its own: the 4^k neighbours of its source coordinate on the resized axes,
    weighted by products of Keys' kernel (clamped to the edge; with exclude, outside ones dropped and
    each axis's weights renormalised)."""
    resized = [k for k in range(x.ndim) if not (x.shape[k] == out_shape[k] and scales[k] == 1)]
    out = np.zeros(out_shape)
    for o in np.ndindex(*out_shape):
        per_axis = []
        for k in resized:
            c = _coord(o[k], x.shape[k], out_shape[k], scales[k], coord_mode)
            f = math.floor(c)
            taps = [(f + q, _keys(f + q - c, a)) for q in (-1, 0, 1, 2)]
            if exclude:
                taps = [(i, w) for i, w in taps if 0 <= i < x.shape[k]]
                total = sum(w for _, w in taps)
                taps = [(i, w / total) for i, w in taps]
            per_axis.append([(min(max(i, 0), x.shape[k] - 1), w) for i, w in taps])
        value = 0.0
        for combo in itertools.product(*per_axis):
            idx, weight = list(o), 1.0
            for k, (i, w) in zip(resized, combo, strict=True):
                idx[k] = i
                weight *= w
            value += weight * float(x[tuple(idx)])
        out[o] = value
    return out


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize(
    ("scales", "coord_mode", "a", "exclude"),
    [
        ((1, 1, 2.0, 1.5), "half_pixel", -0.75, False),
        ((1, 1, 0.5, 0.8), "half_pixel", -0.75, True),  # downsampling, outside neighbours dropped
        ((1, 1, 1.7, 3.0), "align_corners", -0.5, False),  # TensorFlow's coefficient
        ((1, 1, 2.0, 2.0), "pytorch_half_pixel", -0.75, False),  # PyTorch's bicubic
        ((1, 1, 3.0, 1.0), "asymmetric", -0.75, True),  # one axis resized
        ((1, 2.0, 2.0, 0.5), "half_pixel", -0.75, False),  # three axes: 64 neighbours
    ],
)
def test_cubic_against_per_element(reg, device, dtype, scales, coord_mode, a, exclude):
    x = rand(np.random.default_rng(56), (1, 2, 4, 5), dtype)
    attrs = {
        "mode": "cubic",
        "scales": list(scales),
        "coordinate_transformation_mode": coord_mode,
        "cubic_coeff_a": a,
        "exclude_outside": exclude,
    }
    (y,) = run_op(reg, "resize", [x], attrs, device=device)
    out_shape = tuple(math.floor(d * s) for d, s in zip(x.shape, scales, strict=True))
    check_close(y, _cubic_ref(x, out_shape, scales, coord_mode, a, exclude), dtype)


@pytest.mark.parametrize("exclude", [0, 1])
@pytest.mark.parametrize("coord_mode", ["half_pixel", "align_corners", "pytorch_half_pixel", "asymmetric"])
def test_cubic_matches_onnx(reg, device, coord_mode, exclude):
    """One ONNX Resize in cubic mode (coefficient -0.5) imported and run, against onnx's
    ReferenceEvaluator."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    x = rand(np.random.default_rng(57), (1, 2, 4, 5), "float32")
    scales = np.array([1, 1, 2.0, 1.6], np.float32)
    attrs = {"mode": "cubic", "coordinate_transformation_mode": coord_mode, "exclude_outside": exclude}
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], cubic_coeff_a=-0.5, **attrs)
    graph = helper.make_graph(
        [node],
        "cubic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(scales, "scales")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        check_close(pipe.run(x=x)["y"].numpy(), ref.astype(np.float64))


def test_cubic_refusals(reg):
    """cubic needs floats and at most three resized axes."""
    x = np.zeros((2, 2, 2, 2), np.int32)
    with pytest.raises(DTypeMismatchError, match="mode 'cubic' needs a float input") as e:
        run_op(reg, "resize", [x], {"mode": "cubic", "scales": [1, 1, 2.0, 2.0]})
    assert e.value.code == pl.ErrorCode.PIPELINK_ERR_DTYPE_MISMATCH
    with pytest.raises(InvalidArgumentError, match="at most 3 axes") as e:
        run_op(reg, "resize", [x.astype(np.float32)], {"mode": "cubic", "scales": [2.0, 2.0, 2.0, 2.0]})
    assert e.value.code == pl.ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
