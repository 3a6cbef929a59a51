"""roi_align and col2im against onnx's ReferenceEvaluator (and onnxruntime for roi_align): both modes and
coordinate modes, adaptive and fixed sampling grids, rois reaching past the image, reversed and far
outside, the float dtypes; col2im over 1 to 3 spatial axes with pads, strides and dilations; what a roi
PipeLink cannot compute gives (NaN); every refusal, at load and at import; hostile sizes bounded."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import pipelink as pl  # noqa: E402
from pipelink.errors import DTypeMismatchError, InvalidArgumentError, ShapeMismatchError  # noqa: E402
from pipelink.ops import roi as roi_family  # noqa: E402
from pipelink.ops.roi import MAX_SAMPLING_GRID  # noqa: E402

from . import ops_helpers  # noqa: E402
from .onnx_models import refused, run_pipeline  # noqa: E402
from .onnx_oracle import run_onnx  # noqa: E402
from .ops_helpers import TOL, make_registry, rand, run_op  # noqa: E402

DTYPES = ("float32", "float16", "float64", "bfloat16")
MODES = ("avg", "max")
COORDS = ("half_pixel", "output_half_pixel")


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _wide(a: np.ndarray) -> np.ndarray:
    """onnx's reference computes in the input's own dtype: give it float32 (float64 for float64)."""
    return a.astype(np.float64 if a.dtype == np.float64 else np.float32)


def _close(y: np.ndarray, ref: np.ndarray, dtype: str) -> None:
    assert not np.isnan(y.astype(np.float64)).any(), "an element was not written (still NaN)"
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(y.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)


def _rois(rng, count: int, h: int, w: int, dtype: str) -> np.ndarray:
    """[x1, y1, x2, y2] from 3 pixels before the image to 3 past it, sizes -2..9: partly outside, some
    reversed (a negative size: no points in half_pixel, 1 x 1 in output_half_pixel)."""
    start = rng.uniform(-3, max(h, w) + 3, (count, 2))
    end = start + rng.uniform(-2, 9, (count, 2))
    return np.concatenate([start, end], axis=1).astype(rand(rng, (1,), dtype).dtype)


def _roi_attrs(mode, coord, ratio, oh=3, ow=4, scale=0.5):
    return {
        "mode": mode,
        "output_height": oh,
        "output_width": ow,
        "sampling_ratio": ratio,
        "spatial_scale": scale,
        "coordinate_transformation_mode": coord,
    }


# -- roi_align -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ratio", [0, 2])
@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("mode", MODES)
def test_roi_align_matches_onnx(reg, device, rng, mode, coord, ratio, dtype):
    x = rand(rng, (2, 3, 9, 11), dtype)
    rois = _rois(rng, 7, 18, 22, dtype)  # scale 0.5: in x's pixels, -1.5 .. 12.5
    batch = rng.integers(0, 2, 7).astype(np.int64)
    attrs = _roi_attrs(mode, coord, ratio)
    (y,) = run_op(reg, "roi_align", [x, rois, batch], attrs, device=device)
    assert y.shape == (7, 3, 3, 4) and y.dtype == x.dtype
    (ref,) = run_onnx("RoiAlign", [_wide(x), _wide(rois), batch], attrs, opset=16)
    _close(y, ref, dtype)


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("mode", MODES)
def test_roi_align_matches_onnxruntime(reg, device, rng, mode, coord):
    """onnxruntime agrees with onnx's reference here, max mode's weighted maximum included."""
    ort = pytest.importorskip("onnxruntime")
    x, rois = rand(rng, (2, 4, 10, 8), "float32"), _rois(rng, 9, 10, 8, "float32")
    batch = rng.integers(0, 2, 9).astype(np.int64)
    attrs = _roi_attrs(mode, coord, 0, oh=2, ow=5, scale=1.0)
    model = _roi_model(attrs, x, rois, batch, opset=16)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = session.run(None, {"x": x, "rois": rois, "batch": batch})
    (y,) = run_op(reg, "roi_align", [x, rois, batch], attrs, device=device)
    _close(y, ref, "float32")


def test_roi_align_max_propagates_nan_as_onnx(reg, device, rng):
    """NaN pixels in max mode: a bin is NaN where onnx's fold meets the NaN first, else it passes over it
    (Python's max keeps the first value unless a later one is larger)."""
    x = rand(rng, (1, 2, 6, 6), "float32")
    x[0, 0, 2, 3] = x[0, 1, 0, 0] = np.nan  # pixel 0 is also what a point off the image reads (weight 0)
    rois = _rois(rng, 12, 6, 6, "float32")
    batch = np.zeros(12, np.int64)
    for mode in MODES:
        attrs = _roi_attrs(mode, "half_pixel", 2, scale=1.0)
        (y,) = run_op(reg, "roi_align", [x, rois, batch], attrs, device=device)
        (ref,) = run_onnx("RoiAlign", [x, rois, batch], attrs, opset=16)
        assert np.isnan(ref).any() and not np.isnan(ref).all()
        np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
        np.testing.assert_allclose(y[~np.isnan(y)], ref[~np.isnan(ref)], rtol=1e-5, atol=1e-5)


def test_rois_pipelink_cannot_compute_give_nan_and_leave_the_others(reg, device, rng, monkeypatch):
    """A batch index outside [0, N) (no read outside x), a coordinate that is not finite, an adaptive grid
    over MAX_SAMPLING_GRID points per axis: NaN over that roi only; a grid of exactly the cap computes.
    The outputs are poisoned with zeros here, so the NaN seen is NaN written."""
    monkeypatch.setattr(ops_helpers, "poison", lambda shape, dtype: np.zeros(shape, np.dtype(dtype)))
    x = rand(rng, (2, 2, 5, 8), "float32")
    good = np.array([[0.5, 0.5, 4.0, 3.5], [1.0, 0.0, 7.0, 4.0]], np.float32)
    cap = float(MAX_SAMPLING_GRID)
    rois = np.array(
        [good[0], good[1], good[0], [0, 0, np.inf, 2], [np.nan, 0, 2, 2], [0, 0, cap + 1, 1], [0, 0, cap, 1]],
        np.float32,
    )
    batch = np.array([0, 1, 2, 0, 1, 0, 1], np.int64)
    batch_neg = batch.copy()
    batch_neg[2] = -1
    for b in (batch, batch_neg):
        attrs = _roi_attrs("avg", "output_half_pixel", 0, oh=1, ow=1, scale=1.0)
        (y,) = run_op(reg, "roi_align", [x, rois, b], attrs, device=device)
        assert np.isnan(y[2:6]).all(), "rois 2..5 cannot be computed: NaN"
        keep = [0, 1, 6]
        (ref,) = run_onnx("RoiAlign", [x, rois[keep], b[keep]], attrs, opset=16)
        _close(y[keep], ref, "float32")


def test_empty_grids_give_zero(reg, device, rng):
    """A reversed roi in half_pixel with an adaptive grid has no sample point: 0 in both modes, as onnx."""
    x = rand(rng, (1, 3, 6, 6), "float32")
    rois = np.array([[4.0, 4.0, 1.0, 1.0], [4.0, 1.0, 1.0, 5.0]], np.float32)
    batch = np.zeros(2, np.int64)
    for mode in MODES:
        attrs = _roi_attrs(mode, "half_pixel", 0, scale=1.0)
        (y,) = run_op(reg, "roi_align", [x, rois, batch], attrs, device=device)
        (ref,) = run_onnx("RoiAlign", [x, rois, batch], attrs, opset=16)
        assert np.all(ref == 0)
        _close(y, ref, "float32")


def test_reference_chunks_wide_grids_the_same(reg, rng, monkeypatch):
    """The NumPy reference walks a wide grid in chunks of columns (bounded temporaries): any chunking
    gives onnx's result."""
    x, rois = rand(rng, (1, 2, 7, 9), "float32"), _rois(rng, 5, 7, 9, "float32")
    batch = np.zeros(5, np.int64)
    monkeypatch.setattr(roi_family, "_CHUNK_ELEMENTS", 5)
    for mode in MODES:
        attrs = _roi_attrs(mode, "half_pixel", 3, scale=1.0)
        (y,) = run_op(reg, "roi_align", [x, rois, batch], attrs)
        (ref,) = run_onnx("RoiAlign", [x, rois, batch], attrs, opset=16)
        _close(y, ref, "float32")


F = np.float32


@pytest.mark.parametrize(
    ("shapes", "attrs", "error", "match"),
    [
        (((1, 1, 4, 4), (2, 4), (2,)), {"output_height": 0}, InvalidArgumentError, "'output_height' must be"),
        (((1, 1, 4, 4), (2, 4), (2,)), {"output_width": -1}, InvalidArgumentError, "'output_width' must be"),
        (((1, 1, 4, 4), (2, 4), (2,)), {"sampling_ratio": -1}, InvalidArgumentError, "'sampling_ratio'"),
        (((1, 1, 4, 4), (2, 4), (2,)), {"sampling_ratio": 1025}, InvalidArgumentError, r"\[0, 1024\]"),
        (((1, 1, 4, 4), (2, 4), (2,)), {"spatial_scale": float("inf")}, InvalidArgumentError, "finite"),
        (((1, 1, 4, 4), (2, 4), (2,)), {"mode": "sum"}, InvalidArgumentError, "must be one of"),
        (
            ((1, 1, 4, 4), (2, 4), (2,)),
            {"coordinate_transformation_mode": "asymmetric"},
            InvalidArgumentError,
            "one of",
        ),
        (((1, 1, 0, 4), (2, 4), (2,)), {}, ShapeMismatchError, "empty spatial axis"),
        (((1, 1, 4, 4), (2, 5), (2,)), {}, ShapeMismatchError, "rois"),
        (((1, 1, 4, 4), (2, 4), (3,)), {}, ShapeMismatchError, "batch_indices"),
        (((1, 4, 4), (2, 4), (2,)), {}, ShapeMismatchError, "x"),
    ],
)
def test_roi_align_refusals(reg, shapes, attrs, error, match):
    x, rois, batch = np.zeros(shapes[0], F), np.zeros(shapes[1], F), np.zeros(shapes[2], np.int64)
    with pytest.raises(error, match=match):
        run_op(reg, "roi_align", [x, rois, batch], attrs)


def test_roi_align_dtype_refusals(reg):
    x, rois, batch = np.zeros((1, 1, 4, 4), F), np.zeros((2, 4), F), np.zeros(2, np.int64)
    with pytest.raises(DTypeMismatchError):  # batch_indices are int64, as ONNX's
        run_op(reg, "roi_align", [x, rois, batch.astype(np.int32)])
    with pytest.raises(DTypeMismatchError):  # rois of x's dtype
        run_op(reg, "roi_align", [x, rois.astype(np.float16), batch])
    with pytest.raises(DTypeMismatchError):
        run_op(reg, "roi_align", [x.astype(np.int32), rois.astype(np.int32), batch])


# -- col2im --------------------------------------------------------------------------------------------
def _blocks(image, block, dil, pads, strides):
    d = len(image)
    return [
        (image[a] + pads[a] + pads[a + d] - dil[a] * (block[a] - 1) - 1) // strides[a] + 1 for a in range(d)
    ]


COL2IM_CASES = [
    ([5, 5], [2, 2], [1, 1], [0, 0, 0, 0], [1, 1]),
    ([5, 6], [3, 2], [1, 1], [1, 0, 2, 1], [1, 1]),
    ([9, 7], [2, 3], [1, 1], [0, 0, 0, 0], [2, 3]),
    ([8, 7], [2, 2], [3, 2], [0, 0, 0, 0], [1, 1]),
    ([9, 8], [3, 2], [2, 1], [2, 1, 1, 2], [2, 3]),
    ([11], [3], [2], [1, 2], [2]),
    ([4, 5, 3], [2, 3, 1], [1, 1, 2], [1, 0, 1, 0, 1, 0], [2, 1, 1]),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("image", "block", "dil", "pads", "strides"), COL2IM_CASES)
def test_col2im_matches_onnx(reg, device, rng, image, block, dil, pads, strides, dtype):
    taps, count = int(np.prod(block)), int(np.prod(_blocks(image, block, dil, pads, strides)))
    x = rand(rng, (2, 3 * taps, count), dtype)
    attrs = {"image_shape": image, "block_shape": block, "dilations": dil, "pads": pads, "strides": strides}
    (y,) = run_op(reg, "col2im", [x], attrs, device=device)
    assert y.shape == (2, 3, *image) and y.dtype == x.dtype
    shapes = [np.array(image, np.int64), np.array(block, np.int64)]
    (ref,) = run_onnx(
        "Col2Im", [_wide(x), *shapes], {"dilations": dil, "pads": pads, "strides": strides}, opset=18
    )
    _close(y, ref, dtype)
    # both variants add a pixel's taps in the same order: the same values, bit for bit
    (cpu,) = run_op(reg, "col2im", [x], attrs)
    np.testing.assert_array_equal(y, cpu)


def test_col2im_defaults_and_empty_batches(reg, device, rng):
    """Empty dilations, pads and strides are 1, 0 and 1; an empty batch or empty channels give empty
    outputs (their taps are never walked, however many block_shape names)."""
    x = rand(rng, (1, 8, 6), "float32")
    (y,) = run_op(reg, "col2im", [x], {"image_shape": [4, 5], "block_shape": [2, 4]}, device=device)
    (ref,) = run_onnx("Col2Im", [x, np.array([4, 5], np.int64), np.array([2, 4], np.int64)], opset=18)
    _close(y, ref, "float32")
    (y,) = run_op(reg, "col2im", [np.zeros((0, 8, 6), F)], {"image_shape": [4, 5], "block_shape": [2, 4]})
    assert y.shape == (0, 1, 4, 5)
    big = {"image_shape": [2**20, 2**20], "block_shape": [2**20, 2**20]}
    (y,) = run_op(reg, "col2im", [np.zeros((1, 0, 1), F)], big, device=device)
    assert y.shape == (1, 0, 2**20, 2**20)


@pytest.mark.parametrize(
    ("shape", "attrs", "error", "match"),
    [
        ((1, 7, 16), {}, ShapeMismatchError, "not a multiple of prod"),
        ((1, 8, 15), {}, ShapeMismatchError, "16 sliding blocks"),
        ((1, 8, 16), {"block_shape": [6, 2]}, ShapeMismatchError, "does not fit"),
        ((1, 8, 16), {"image_shape": [5] * 7, "block_shape": [1] * 7}, InvalidArgumentError, "1 to 6"),
        ((1, 8, 16), {"block_shape": [2, 2, 2]}, InvalidArgumentError, "'block_shape' must have 2"),
        ((1, 8, 16), {"pads": [1, 1]}, InvalidArgumentError, "'pads' must have 4"),
        ((1, 8, 16), {"pads": [0, 0, -1, 0]}, InvalidArgumentError, ">= 0"),
        ((1, 8, 16), {"strides": [0, 1]}, InvalidArgumentError, ">= 1"),
        ((1, 8, 16), {"dilations": [1, 0]}, InvalidArgumentError, ">= 1"),
        ((8, 16), {}, ShapeMismatchError, "x"),
    ],
)
def test_col2im_refusals(reg, shape, attrs, error, match):
    with pytest.raises(error, match=match):
        run_op(reg, "col2im", [np.zeros(shape, F)], {"image_shape": [5, 5], "block_shape": [2, 2], **attrs})
    with pytest.raises(DTypeMismatchError):
        run_op(
            reg, "col2im", [np.zeros((1, 8, 16), np.int32)], {"image_shape": [5, 5], "block_shape": [2, 2]}
        )


# -- ONNX import ---------------------------------------------------------------------------------------
def _roi_model(attrs, x, rois, batch, *, opset):
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], **attrs)
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in (("x", x), ("rois", rois), ("batch", batch))
    ]
    graph = helper.make_graph(
        [node], "roi", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("opset", [10, 16])
def test_roialign_import(device, rng, opset):
    """RoiAlign-10 (no coordinate mode: its rois map as output_half_pixel's) and -16 (half_pixel by
    default), imported and run against onnx's reference."""
    x, rois = rand(rng, (2, 3, 8, 10), "float32"), _rois(rng, 6, 16, 20, "float32")
    batch = rng.integers(0, 2, 6).astype(np.int64)
    attrs = {"mode": "max", "output_height": 2, "output_width": 3, "spatial_scale": 0.5}
    model = _roi_model(attrs, x, rois, batch, opset=opset)
    feeds = {"x": x, "rois": rois, "batch": batch}
    (y,) = run_pipeline(model, feeds, device)
    coord = "half_pixel" if opset >= 16 else "output_half_pixel"
    (ref,) = run_onnx(
        "RoiAlign", [x, rois, batch], {**attrs, "coordinate_transformation_mode": coord}, opset=16
    )
    _close(y, ref, "float32")


def _col2im_model(x, image, block, *, as_inputs=False, **attrs):
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)
    shapes = {"image": np.array(image, np.int64), "block": np.array(block, np.int64)}
    feeds = {"x": x, **(shapes if as_inputs else {})}
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in feeds.items()
    ]
    inits = [] if as_inputs else [numpy_helper.from_array(a, n) for n, a in shapes.items()]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    graph = helper.make_graph([node], "col2im", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_col2im_import(device, rng):
    x = rand(rng, (1, 2 * 6, 12), "float32")
    model = _col2im_model(x, [5, 6], [2, 3], dilations=[2, 1], pads=[0, 1, 1, 0], strides=[1, 2])
    (y,) = run_pipeline(model, {"x": x}, device)
    (ref,) = onnx.reference.ReferenceEvaluator(model).run(None, {"x": x})
    _close(y, ref, "float32")


def test_import_refusals():
    x, rois, batch = np.zeros((1, 1, 4, 4), F), np.zeros((2, 4), F), np.zeros(2, np.int64)
    refused(_roi_model({"mode": "min"}, x, rois, batch, opset=16), "'mode' must be one of")
    refused(
        _roi_model({"sampling_ratio": 5000}, x, rois, batch, opset=16),
        r"'sampling_ratio' must be in \[0, 1024\]",
    )
    refused(_roi_model({"output_height": 0}, x, rois, batch, opset=16), "'output_height' must be >= 1")
    cols = np.zeros((1, 4, 16), F)
    entries = refused(
        _col2im_model(cols, [5, 5], [2, 2], as_inputs=True), r"input 1 \(image_shape, 'image'\)"
    )
    assert entries[0]["graph_input"] == "image"
    refused(_col2im_model(cols, [5, 5], [6, 2]), "does not fit")
    refused(_col2im_model(cols, [5, 5], [2, 2], pads=[1, 1]), "'pads' must have 4")


def test_hostile_sizes_are_refused_before_anything_is_allocated():
    """An image of 2**40 pixels from a 1-element x, roi bins of 2**51 elements: refused with the sizes
    (PIPELINK_ERR_OUT_OF_MEMORY), not attempted."""
    x = np.ones((1, 1, 1), F)
    with pytest.raises(pl.PipeLinkError, match="allocation needs") as info:
        run_pipeline(_col2im_model(x, [2**40], [1], strides=[2**40]), {"x": x}, "cpu")
    assert info.value.code.name == "PIPELINK_ERR_OUT_OF_MEMORY"
    x, rois, batch = np.ones((1, 1, 4, 4), F), np.zeros((1, 4), F), np.zeros(1, np.int64)
    model = _roi_model({"output_height": 2**31, "output_width": 2**20}, x, rois, batch, opset=16)
    with pytest.raises(pl.PipeLinkError, match="allocation needs") as info:
        run_pipeline(model, {"x": x, "rois": rois, "batch": batch}, "cpu")
    assert info.value.code.name == "PIPELINK_ERR_OUT_OF_MEMORY"


def test_an_empty_image_known_only_at_run_is_refused(device):
    """x's spatial dims symbolic at import and 0 at run: the shape rule refuses the run (no read of an
    empty x); the same pipeline runs a non-empty x."""
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], output_height=2, output_width=2)
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, "H", "W"]),
        helper.make_tensor_value_info("rois", TensorProto.FLOAT, ["R", 4]),
        helper.make_tensor_value_info("batch", TensorProto.INT64, ["R"]),
    ]
    graph = helper.make_graph(
        [node], "roi", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    rois, batch = np.array([[0.5, 0.5, 2.5, 1.5]], F), np.zeros(1, np.int64)
    with pl.from_onnx(model, device=device) as pipe:
        y = pipe.run({"x": np.ones((1, 2, 3, 4), F), "rois": rois, "batch": batch})["y"].numpy()
        np.testing.assert_allclose(np.asarray(y), np.ones((1, 2, 2, 2)), rtol=1e-6)
        with pytest.raises(ShapeMismatchError, match="empty spatial axis"):
            pipe.run({"x": np.ones((1, 2, 0, 4), F), "rois": rois, "batch": batch})
