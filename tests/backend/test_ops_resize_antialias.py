"""resize's antialias (linear and cubic: the filter stretched by 1 / scale when downsampling) and
half_pixel_symmetric coordinates against ONNX's reference evaluator on one-node models, op by op (cpu and
cuda, float32 and float16, scales and sizes, up and down) and imported; and what stays refused.
"""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from pipelink.errors import InvalidArgumentError
from pipelink.ops.resize import resize_plan
from pipelink.ops.resize.cuda import plan_resize

from .ops_helpers import check_close, make_registry, rand, run_op


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _f32(values):
    """Scales as the float32 values an ONNX Resize carries (so both sides resample at the same scale)."""
    return [float(np.float32(v)) for v in values]


def _onnx_resize(x, attrs, scales=None, sizes=None):
    """ONNX's reference evaluator on one Resize-19 node with constant scales or sizes."""
    pytest.importorskip("onnx")
    from .onnx_oracle import run_onnx

    given = [np.array(scales, np.float32), None] if scales else [None, np.array(sizes, np.int64)]
    (ref,) = run_onnx("Resize", [x, None, *given], attrs, opset=19)
    return ref.astype(np.float64)


ANTIALIAS_CASES = [
    # (x's shape, scales, sizes, coordinate_transformation_mode, exclude_outside)
    ((1, 2, 12, 10), (1, 1, 0.5, 0.3), None, "half_pixel", False),  # down on two axes
    ((1, 1, 9, 16), (1, 1, 1.45, 0.27), None, "half_pixel_symmetric", False),  # up on one, down on one
    ((2, 3, 7, 8), None, (2, 3, 3, 5), "pytorch_half_pixel", True),  # sizes; outside taps dropped
    ((1, 2, 6, 11), (1, 1, 0.6, 2.0), None, "align_corners", True),
    ((1, 1, 20, 6), None, (1, 1, 3, 6), "asymmetric", False),  # one axis: 16 linear taps per output
    ((3, 31), (1, 0.13), None, "half_pixel", True),  # wide: 16 linear, 30 cubic taps per output
    ((2, 4, 5, 6), (1, 0.5, 0.5, 0.7), None, "half_pixel_symmetric", False),  # three axes
    ((4, 6, 5, 7), (0.5, 0.5, 0.6, 0.4), None, "half_pixel", False),  # four axes: linear only
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize(("shape", "scales", "sizes", "coord_mode", "exclude"), ANTIALIAS_CASES)
def test_antialias_matches_onnx(reg, device, dtype, mode, shape, scales, sizes, coord_mode, exclude):
    """antialias=1: downsampling blends every input under the filter stretched by 1 / scale (an
    unstretched filter, or a wrong tap window or normalisation, gives other values); upsampling axes
    are the plain filter's."""
    x = rand(np.random.default_rng(58), shape, dtype)
    a = -0.5 if exclude else -0.75
    attrs = {"mode": mode, "coordinate_transformation_mode": coord_mode, "cubic_coeff_a": a}
    ours = {**attrs, "antialias": True, "exclude_outside": exclude}
    ours.update({"scales": _f32(scales)} if scales else {"sizes": list(sizes)})
    resized = sum(1 for k, d in enumerate(shape) if (sizes[k] != d if sizes else scales[k] != 1))
    if mode == "cubic" and resized > 3:
        with pytest.raises(InvalidArgumentError, match="at most 3 axes"):
            run_op(reg, "resize", [x], ours, device=device)
        return
    ref = _onnx_resize(x, {**attrs, "antialias": 1, "exclude_outside": int(exclude)}, scales, sizes)
    (y,) = run_op(reg, "resize", [x], ours, device=device)
    check_close(y, ref, dtype)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize(
    ("shape", "scales", "sizes"),
    [
        ((1, 2, 5, 7), (1, 1, 1.7, 0.45), None),  # 8.5 -> 8 and 3.15 -> 3: the offset is not 0
        ((1, 1, 6, 9), None, (1, 1, 4, 13)),  # sizes: out / in exactly, offset 0 (half_pixel's)
        ((2, 3, 4), (1, 2.5, 0.7), None),
    ],
)
def test_half_pixel_symmetric_matches_onnx(reg, device, mode, shape, scales, sizes):
    """half_pixel_symmetric: half_pixel's coordinates shifted by in / 2 * (1 - out / (in * scale)), so a
    length rounded down loses as much at each end (half_pixel's offset of 0 gives other values)."""
    x = rand(np.random.default_rng(59), shape, "float32")
    attrs = {"mode": mode, "coordinate_transformation_mode": "half_pixel_symmetric"}
    ref = _onnx_resize(x, attrs, scales, sizes)
    given = {"scales": _f32(scales)} if scales else {"sizes": list(sizes)}
    (y,) = run_op(reg, "resize", [x], {**attrs, **given}, device=device)
    check_close(y, ref)


def test_antialias_refusals(reg):
    """ONNX's antialias filters modes linear and cubic only (its reference and onnxruntime refuse it with
    nearest): refused on the CPU and by the CUDA plan, not ignored."""
    with pytest.raises(InvalidArgumentError, match="'antialias' filters modes 'linear' and 'cubic'") as e:
        run_op(reg, "resize", [np.zeros((2, 4), np.float32)], {"antialias": True, "scales": [1.0, 0.5]})
    assert e.value.code == pl.ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    attrs = {
        "mode": "nearest",
        "antialias": True,
        "scales": (1.0, 0.5),
        "sizes": (),
        "coordinate_transformation_mode": "half_pixel",
        "nearest_mode": "floor",
    }
    out, scales = resize_plan((2, 4), attrs)
    with pytest.raises(InvalidArgumentError, match="not 'nearest'"):
        plan_resize("float32", (2, 4), out, scales, attrs)


def test_antialias_to_an_empty_output_builds_no_tables(reg):
    """An empty x may declare any length: an axis of 2**40 resized to 1 would need 2**41 taps per output
    (tens of TiB of tables); an empty y builds nothing and writes nothing."""
    x = np.zeros((0, 2**40), np.float32)
    for mode in ("linear", "cubic"):
        (y,) = run_op(reg, "resize", [x], {"mode": mode, "antialias": True, "scales": [1.0, 2.0**-40]})
        assert y.shape == (0, 1)


def _resize_model(attrs, shape, scales):
    pytest.importorskip("onnx")
    from . import onnx_models as om

    node = om.helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize", **attrs)
    return om.make_model(
        [node], [("x", list(shape))], [("y", None)], {"scales": np.array(scales, np.float32)}, "r"
    )


@pytest.mark.parametrize(
    ("attrs", "expected"),
    [
        ({"mode": "linear", "antialias": 1}, {"antialias": True, "exclude_outside": False}),
        (
            {"mode": "linear", "antialias": 1, "exclude_outside": 1},
            {"antialias": True, "exclude_outside": True},
        ),
        (
            {"mode": "cubic", "antialias": 1, "cubic_coeff_a": -0.5},
            {"antialias": True, "cubic_coeff_a": -0.5},
        ),
        ({"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}, {}),
    ],
)
def test_import_passes_antialias_and_half_pixel_symmetric(device, attrs, expected):
    """The import hands antialias (with the exclude_outside it weighs) and half_pixel_symmetric to resize,
    and the imported model matches ONNX's reference (a dropped attribute gives unfiltered values)."""
    from pipelink.onnx import import_model

    from . import onnx_models as om

    x = rand(np.random.default_rng(60), (1, 2, 9, 12), "float32")
    model = _resize_model(attrs, x.shape, [1, 1, 0.45, 0.3])
    config, _ = import_model(model)
    got = config["pipeline"][0]["attrs"]
    assert {k: got[k] for k in expected} == expected
    assert got.get("coordinate_transformation_mode") == attrs.get(
        "coordinate_transformation_mode", "half_pixel"
    )
    (ours,) = om.run_pipeline(model, {"x": x}, device)
    check_close(ours, om.reference_evaluator(model, {"x": x})[0].astype(np.float64))


@pytest.mark.parametrize(
    ("attrs", "why"),
    [
        ({"mode": "nearest", "antialias": 1}, "antialias=1 filters modes linear and cubic only"),
        (
            {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"},
            "'tf_crop_and_resize' needs its roi input",
        ),
    ],
)
def test_import_refuses_what_resize_does_not_do(attrs, why):
    """antialias with nearest (refused by onnx's reference and onnxruntime alike) and tf_crop_and_resize
    without its roi (onnx's reference fails there: it has no window to sample) are refused with the
    reason, never run otherwise (tf_crop_and_resize with a roi: test_ops_resize_tf_crop.py)."""
    from . import onnx_models as om

    (entry,) = om.refused(_resize_model(attrs, (1, 1, 4, 4), [1, 1, 0.5, 0.5]), "Resize")
    assert why in entry["why"]


@pytest.mark.parametrize("antialias", [0, 1])
def test_a_coordinate_an_ulp_past_a_whole_one_matches_onnxruntime(device, antialias):
    """half_pixel_symmetric at 1.5 on 7 maps output 3 to 2.0000000000000004, an ulp past input 2. ONNX's
    reference evaluator picks the tap window from that coordinate plus its edge padding, rounded (to 4.0:
    a whole number), but weighs the taps for the unrounded one, so its cubic reads the window one input
    to the left. onnxruntime and PipeLink keep the coordinate's own window (a shifted window reads the
    wrong neighbours)."""
    pytest.importorskip("onnxruntime")
    from . import onnx_models as om

    attrs = {
        "mode": "cubic",
        "coordinate_transformation_mode": "half_pixel_symmetric",
        "antialias": antialias,
    }
    model = _resize_model(attrs, (1, 1, 7, 15), [1, 1, 1.5, 0.3])
    x = rand(np.random.default_rng(61), (1, 1, 7, 15), "float32")
    (ours,) = om.run_pipeline(model, {"x": x}, device)
    check_close(ours, om.run_reference(model, {"x": x})[0].astype(np.float64))
