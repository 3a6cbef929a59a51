"""resize's tf_crop_and_resize (the roi window of each axis; outputs sampled outside x take
extrapolation_value) against ONNX's reference evaluator on one-node models (nearest, linear, cubic; antialias
and exclude_outside; scales and sizes; windows inside x, past its edges and flipped), on the CPU and CUDA, the
CUDA kernel against the CPU reference, the import (a constant roi, axes, a roi known only at run time), and
every refusal of a hostile roi or extrapolation value.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import pipelink as pl
from pipelink.errors import InvalidArgumentError
from pipelink.ops.resize import resize_plan
from pipelink.ops.resize.cuda import plan_resize

from .ops_helpers import check_close, make_registry, rand, run_op

TF = "tf_crop_and_resize"


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _f32(values):
    """Values as the float32 numbers an ONNX Resize carries (so both sides sample the same window)."""
    return [float(np.float32(v)) for v in values]


def _onnx_resize(x, roi, attrs, scales=None, sizes=None):
    """ONNX's reference evaluator on one Resize-19 node in tf_crop_and_resize with this roi."""
    pytest.importorskip("onnx")
    from .onnx_oracle import run_onnx

    given = [np.array(scales, np.float32), None] if scales else [None, np.array(sizes, np.int64)]
    attrs = {**attrs, "coordinate_transformation_mode": TF}
    (ref,) = run_onnx("Resize", [x, np.array(roi, np.float32), *given], attrs, opset=19)
    return ref


def _ours(mode, roi, scales, sizes, fill=0.0, **extra):
    attrs = {
        "mode": mode,
        "coordinate_transformation_mode": TF,
        "roi": _f32(roi),
        "extrapolation_value": fill,
    }
    attrs.update({"scales": _f32(scales)} if scales else {"sizes": list(sizes)})
    return {**attrs, **extra}


CASES = [
    # (x's shape, roi [starts, ends], scales, sizes)
    ((1, 2, 6, 7), (0, 0, 0.15, 0.2, 1, 1, 0.8, 0.9), None, (1, 2, 5, 4)),  # a window inside x
    ((1, 1, 5, 8), (0, 0, -0.3, 0.1, 1, 1, 1.35, 0.7), None, (1, 1, 7, 6)),  # past the top and bottom
    ((2, 3, 6, 5), (0, 0, 0.9, 0.1, 1, 1, 0.2, 0.85), (1, 1, 1.5, 0.8), None),  # flipped rows; scales
    ((1, 2, 9, 11), (0, 0, 0.05, 0.6, 1, 1, 0.7, 1.9), None, (1, 2, 3, 5)),  # downsampled; right edge out
    ((3, 7), (0.1, 0.2, 0.95, 0.65), None, (1, 6)),  # a one-output axis samples its window's middle
    ((2, 5, 6), (0.3, 0, 0, 0.3, 1, 1), None, (2, 5, 6)),  # same sizes: the cropped axis still resampled
]


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize(("shape", "roi", "scales", "sizes"), CASES)
def test_tf_crop_and_resize_matches_onnx(reg, device, mode, shape, roi, scales, sizes):
    """Each output samples its axis's window (a window of the whole axis, or half_pixel's coordinates,
    give other values) and outputs sampled outside x are the extrapolation value (not the edge's)."""
    x = rand(np.random.default_rng(62), shape, "float32")
    ref = _onnx_resize(x, roi, {"mode": mode, "extrapolation_value": -7.5}, scales, sizes)
    (y,) = run_op(reg, "resize", [x], _ours(mode, roi, scales, sizes, -7.5), device=device)
    check_close(y, ref.astype(np.float64))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(("mode", "exclude", "a"), [("linear", False, -0.75), ("cubic", True, -0.5)])
@pytest.mark.parametrize(("shape", "roi", "scales", "sizes"), CASES[1:4])
def test_tf_crop_and_resize_with_antialias_matches_onnx(
    reg, device, dtype, mode, exclude, a, shape, roi, scales, sizes
):
    """antialias stretches the filter by 1 / scale (the axis's scale, not the crop's) around the window's
    coordinates; exclude_outside drops taps outside x; outputs outside x still take the value."""
    x = rand(np.random.default_rng(63), shape, dtype)
    attrs = {"mode": mode, "antialias": 1, "exclude_outside": int(exclude), "cubic_coeff_a": a}
    ref = _onnx_resize(x, roi, {**attrs, "extrapolation_value": 2.25}, scales, sizes)
    ours = _ours(mode, roi, scales, sizes, 2.25, antialias=True, exclude_outside=exclude, cubic_coeff_a=a)
    (y,) = run_op(reg, "resize", [x], ours, device=device)
    check_close(y, ref.astype(np.float64), dtype)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32"])
def test_nearest_integers_take_the_whole_extrapolation_value(reg, device, dtype):
    """nearest copies integers; the outputs outside x are the extrapolation value exactly (not the
    edge's value, not poison)."""
    x = rand(np.random.default_rng(64), (2, 3, 5, 6), dtype)
    roi, sizes = (0, 0, -0.4, 0.25, 1, 1, 0.75, 1.6), (2, 3, 6, 5)
    ref = _onnx_resize(x, roi, {"mode": "nearest", "extrapolation_value": 9.0}, None, sizes)
    (y,) = run_op(reg, "resize", [x], _ours("nearest", roi, None, sizes, 9.0), device=device)
    assert y.dtype == x.dtype and np.array_equal(y, ref)
    assert (y == 9).any()  # the window does reach outside x


def test_a_nan_extrapolation_value_marks_exactly_the_outside_outputs(reg, device):
    """A NaN fill is kept (a float y holds it): the NaN outputs are those whose coordinate leaves x on
    some axis, every other output is interpolated (checked against the reference with fill 0)."""
    x = rand(np.random.default_rng(65), (1, 2, 6, 5), "float32")
    roi, sizes = (0, 0, -0.2, 0.3, 1, 1, 0.7, 1.4), (1, 2, 5, 6)
    (y,) = run_op(reg, "resize", [x], _ours("linear", roi, None, sizes, math.nan), device=device)
    ref = _onnx_resize(x, roi, {"mode": "linear", "extrapolation_value": 0.0}, None, sizes)
    span_h, span_w = x.shape[2] - 1, x.shape[3] - 1
    h = _crop(sizes[2], span_h, roi[2], roi[6])
    w = _crop(sizes[3], span_w, roi[3], roi[7])
    outside = ((h < 0) | (h > span_h))[:, None] | ((w < 0) | (w > span_w))[None, :]
    assert outside.any() and not outside.all()
    assert np.array_equal(np.isnan(y), np.broadcast_to(outside, y.shape))
    np.testing.assert_allclose(y[..., ~outside], ref[..., ~outside], rtol=1e-5, atol=1e-6)


def _crop(out, span, start, end):
    """The spec's tf_crop_and_resize coordinate, written from its formula (float32 roi values)."""
    start, end = float(np.float32(start)), float(np.float32(end))
    if out == 1:
        return np.array([0.5 * (start + end) * span])
    return np.array([start * span + o * (end - start) * span / (out - 1) for o in range(out)])


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("mode", "dtype", "extra"),
    [
        ("nearest", "float32", {"nearest_mode": "round_prefer_ceil"}),
        ("nearest", "int64", {"nearest_mode": "floor"}),
        ("linear", "float32", {}),
        ("linear", "bfloat16", {"antialias": True}),
        ("cubic", "float64", {"exclude_outside": True}),
        ("cubic", "float16", {"antialias": True, "exclude_outside": True}),
    ],
)
def test_cuda_kernel_matches_the_cpu_reference(reg, mode, dtype, extra):
    """The kernel takes the windows and the fill as arguments and computes the reference's coordinates
    to the bit: the same outputs outside x, and the same values inside (nearest and integers exactly)."""
    rng = np.random.default_rng(66)
    x = rand(rng, (2, 3, 7, 9), dtype)
    starts, ends = rng.uniform(-0.4, 0.5, 4), rng.uniform(0.5, 1.4, 4)
    starts[:2], ends[:2] = 0.0, 1.0
    attrs = _ours(mode, [*starts, *ends], None, (2, 3, 6, 5), -3.0 if dtype != "int64" else -3, **extra)
    (cpu,) = run_op(reg, "resize", [x], attrs, device="cpu")
    (gpu,) = run_op(reg, "resize", [x], attrs, device="cuda")
    if mode == "nearest":
        assert np.array_equal(gpu, cpu)
    else:
        check_close(gpu, cpu.astype(np.float64), dtype)
    assert (cpu == -3).any()


# -- refusals -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("attrs", "match"),
    [
        ({"roi": [0, 0, 0.2, 1, 1, 0.8]}, "needs 'roi' with a start and an end per axis"),
        ({"roi": []}, "needs 'roi' with a start and an end per axis"),
        ({"roi": [0, 0, math.nan, 0, 1, 1, 1, 1]}, "'roi' must be finite"),
        ({"roi": [0, 0, 0, -math.inf, 1, 1, 1, 1]}, "'roi' must be finite"),
        ({"extrapolation_value": 1e6, "dtype": "float16"}, "beyond float16's largest"),
        ({"extrapolation_value": 2.5, "dtype": "int8"}, "not a value of int8"),
        ({"extrapolation_value": 300.0, "dtype": "int8"}, "not a value of int8"),
        ({"extrapolation_value": -1.0, "dtype": "uint8"}, "not a value of uint8"),
        ({"extrapolation_value": math.nan, "dtype": "int32"}, "not a value of int32"),
        ({"coordinate_transformation_mode": "half_pixel"}, "apply to coordinate_transformation_mode"),
        (
            {"coordinate_transformation_mode": "align_corners", "roi": [], "extrapolation_value": 1.0},
            "apply to coordinate_transformation_mode",
        ),
    ],
)
def test_hostile_roi_and_extrapolation_values_are_refused(reg, attrs, match):
    """A roi of the wrong length, NaN or infinite (its coordinates would be no coordinates), a fill y
    cannot hold, and a roi or fill with a mode that would ignore them: refused with the rule, at load and
    by the CUDA plan alike, never run otherwise."""
    attrs = dict(attrs)
    dtype = attrs.pop("dtype", "float32")
    full = {
        "mode": "nearest",
        "coordinate_transformation_mode": TF,
        "roi": [0, 0, 0.1, 0.2, 1, 1, 0.9, 0.7],
        "sizes": [1, 2, 3, 3],
        **attrs,
    }
    x = rand(np.random.default_rng(67), (1, 2, 4, 4), dtype)
    with pytest.raises(InvalidArgumentError, match=match) as e:
        run_op(reg, "resize", [x], full)
    assert e.value.code == pl.ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    resolved = reg.get("resize").resolve_attrs(full, where="s")
    out, scales = resize_plan((1, 2, 4, 4), resolved)
    with pytest.raises(InvalidArgumentError, match=match):
        plan_resize(dtype, (1, 2, 4, 4), out, scales, resolved)


def test_huge_finite_windows_extrapolate_instead_of_reading_nan_coordinates(reg, device):
    """A finite roi whose span overflows (1e308 - -1e308 is inf) makes 0 * inf = NaN coordinates: such an
    output is outside x (the fill), never an index cast from NaN."""
    x = rand(np.random.default_rng(68), (2, 5), "float32")
    attrs = {
        "mode": "linear",
        "coordinate_transformation_mode": TF,
        "roi": [0.0, -1e308, 1.0, 1e308],
        "sizes": [2, 4],
        "extrapolation_value": 4.0,
    }
    (y,) = run_op(reg, "resize", [x], attrs, device=device)
    assert np.array_equal(y, np.full((2, 4), 4.0, np.float32))


def test_plan_passes_the_windows_and_resamples_a_cropped_axis_of_scale_one():
    attrs = {
        "mode": "linear",
        "sizes": (1, 3, 4),
        "scales": (),
        "coordinate_transformation_mode": TF,
        "nearest_mode": "floor",
        "roi": (0.0, 0.25, 0.0, 1.0, 0.75, 1.0),
        "extrapolation_value": 1.5,
    }
    out, scales = resize_plan((1, 3, 4), attrs)
    plan = plan_resize("float16", (1, 3, 4), out, scales, attrs)
    assert plan.scalars["resized"] == 0b010  # axis 1 keeps its size but samples [0.25, 0.75]
    assert (plan.scalars["rs1"], plan.scalars["re1"], plan.scalars["fill"]) == (0.25, 0.75, 1.5)
    assert (plan.scalars["rs5"], plan.scalars["re5"]) == (0.0, 1.0)  # past the rank: the whole axis
    assert plan.macros["PL_COORD"] == "PL_COORD_TF_CROP_AND_RESIZE"


# -- import ---------------------------------------------------------------------------------------------
def _model(roi, sizes, shape, *, roi_input=False, axes=None, **attrs):
    pytest.importorskip("onnx")
    from . import onnx_models as om

    extra = {"axes": axes} if axes is not None else {}
    node = om.helper.make_node(
        "Resize",
        ["x", "roi", "", "sizes"],
        ["y"],
        name="crop",
        coordinate_transformation_mode=TF,
        **extra,
        **attrs,
    )
    inits = {"sizes": np.array(sizes, np.int64)}
    inputs = [("x", list(shape))]
    if roi_input:
        inputs.append(("roi", [len(roi)]))
    else:
        inits["roi"] = np.array(roi, np.float32)
    return om.make_model([node], inputs, [("y", None)], inits, "crop")


@pytest.mark.parametrize(
    ("roi", "sizes", "axes"),
    [
        ((0, 0, 0.1, 0.3, 1, 1, 0.8, 1.2), (1, 2, 4, 5), None),
        ((0.2, 0.1, 1.1, 0.7), (5, 3), [3, 2]),  # axes: the roi in their order, the other axes whole
    ],
)
def test_import_reads_a_constant_roi_and_the_extrapolation_value(device, roi, sizes, axes):
    from pipelink.onnx import import_model

    from . import onnx_models as om

    model = _model(roi, sizes, (1, 2, 6, 7), axes=axes, mode="linear", extrapolation_value=3.5)
    config, _ = import_model(model)
    got = config["pipeline"][0]["attrs"]
    assert got["coordinate_transformation_mode"] == TF and got["extrapolation_value"] == 3.5
    # float32 values as their shortest decimals; with axes, the other axes whole
    assert got["roi"] == ([0.0, 0.0, 0.1, 0.2, 1.0, 1.0, 0.7, 1.1] if axes else [float(v) for v in roi])
    x = rand(np.random.default_rng(69), (1, 2, 6, 7), "float32")
    (ours,) = om.run_pipeline(model, {"x": x}, device)
    check_close(ours, om.reference_evaluator(model, {"x": x})[0].astype(np.float64))


def test_import_refuses_a_roi_known_only_at_run_time_and_names_it():
    """A roi that is a graph input is refused naming it (the ONNX backend then specialises the model on
    its value); one the graph computes is refused as computed; roi in integers is malformed."""
    from pipelink.onnx import import_model

    from . import onnx_models as om

    model = _model((0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9), (1, 2, 3, 3), (1, 2, 4, 4), roi_input=True)
    (entry,) = om.refused(model, "Resize")
    assert "roi" in entry["why"] and "graph input" in entry["why"]
    config, _ = import_model(model, constants={"roi": np.array([0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9], np.float32)})
    assert config["pipeline"][0]["attrs"]["roi"] == [0.0, 0.0, 0.1, 0.1, 1.0, 1.0, 0.9, 0.9]
    computed = _model((0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9), (1, 2, 3, 3), (1, 2, 4, 4), roi_input=True)
    neg = om.helper.make_node("Neg", ["roi"], ["roi_neg"], name="neg")
    computed.graph.node.insert(0, neg)
    computed.graph.node[1].input[1] = "roi_neg"
    (entry,) = om.refused(computed, "Resize")
    assert "roi" in entry["why"] and "computes" in entry["why"]
    ints = _model((0, 0, 0, 0, 1, 1, 1, 1), (1, 2, 3, 3), (1, 2, 4, 4))
    ints.graph.initializer[-1].CopyFrom(om.numpy_helper.from_array(np.array([0, 0, 0, 0, 1, 1, 1, 1]), "roi"))
    (entry,) = om.refused(ints, "Resize")
    assert "must be floats" in entry["why"]
