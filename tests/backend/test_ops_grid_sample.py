"""grid_sample and affine_grid against onnx's ReferenceEvaluator: every mode, padding mode and
align_corners, the float dtypes, 2-d and volumetric, on random grids reaching past [-1, 1]; nearest's
ties rounded to even; GridSample (opsets 16, 20, 22) and AffineGrid models imported and run; and every
refusal, at load and at import."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import pipelink as pl  # noqa: E402
from pipelink.errors import DTypeMismatchError, InvalidArgumentError, ShapeMismatchError  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402

from .onnx_models import run_pipeline  # noqa: E402
from .onnx_oracle import run_onnx  # noqa: E402
from .ops_helpers import TOL, check_close, make_registry, rand, run_op  # noqa: E402

MODES = ("linear", "nearest", "cubic")
PADDINGS = ("zeros", "border", "reflection")
DTYPES = ("float32", "float16", "float64", "bfloat16")


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _grid(rng, shape, dtype="float32"):
    """Points in [-1.6, 1.6]: inside x, and outside it by up to 0.6 of its extent (padding decides)."""
    return rand(rng, shape, dtype, low=-1.6, high=1.6)


def _keys(d, a=-0.75):
    d = abs(d)
    return ((a + 2) * d - (a + 3)) * d * d + 1 if d <= 1 else (((a * d - 5 * a) * d + 8 * a) * d - 4 * a)


def _cubic_border(x, grid, align):
    """Cubic with border padding point by point, as PyTorch and onnxruntime: the 4 x 4 taps around each
    point, each tap's index clamped into x (onnx's reference clamps the point instead, when it lies
    beyond the sampled extent, which jumps at that extent: the tests hold PipeLink to onnxruntime here)."""
    x64, (n, c, h, w) = x.astype(np.float64), x.shape
    y = np.zeros((n, c, *grid.shape[1:3]))
    for b, i, j in np.ndindex(n, *grid.shape[1:3]):
        gx, gy = (float(v) for v in grid[b, i, j])
        px, py = (
            ((gx + 1) / 2 * (w - 1), (gy + 1) / 2 * (h - 1))
            if align
            else (
                ((gx + 1) * w - 1) / 2,
                ((gy + 1) * h - 1) / 2,
            )
        )
        fx, fy = int(np.floor(px)), int(np.floor(py))
        for dy, dx in itertools.product(range(-1, 3), repeat=2):
            weight = _keys(fy + dy - py) * _keys(fx + dx - px)
            y[b, :, i, j] += weight * x64[b, :, min(max(fy + dy, 0), h - 1), min(max(fx + dx, 0), w - 1)]
    return y


def _oracle(x, grid, mode, padding, align):
    """onnx's reference on the float32 (float64 for float64) values of x and grid: it computes in x's own
    dtype, so on half inputs it would itself round at every step. Cubic with border padding: PyTorch's
    and onnxruntime's rule (:func:`_cubic_border`)."""
    if mode == "cubic" and padding == "border":
        return _cubic_border(x, grid, align)
    wide = np.float64 if x.dtype == np.float64 else np.float32
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": int(align)}
    (ref,) = run_onnx("GridSample", [x.astype(wide), grid.astype(wide)], attrs, opset=22)
    return ref.astype(np.float64)


def _close(y, ref, dtype):
    # float64: onnx's reference maps the grid to pixels in float32, so it agrees to float32's precision.
    rtol, atol = TOL["float32"] if dtype == "float64" else TOL[dtype]
    assert y.dtype == np.dtype(y.dtype) and not np.isnan(y.astype(np.float64)).any()
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", MODES)
def test_grid_sample_2d_matches_onnx(reg, device, rng, mode, padding, align, dtype):
    x = rand(rng, (2, 3, 5, 4), dtype)
    grid = _grid(rng, (2, 3, 6, 2), dtype)
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    (y,) = run_op(reg, "grid_sample", [x, grid], attrs, device=device)
    assert y.shape == (2, 3, 3, 6) and y.dtype == x.dtype
    _close(y, _oracle(x, grid, mode, padding, align), dtype)


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_volumetric_matches_onnx(reg, device, rng, mode, padding, align):
    x = rand(rng, (2, 2, 3, 4, 5), "float32")
    grid = _grid(rng, (2, 2, 3, 4, 3))
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    (y,) = run_op(reg, "grid_sample", [x, grid], attrs, device=device)
    assert y.shape == (2, 2, 2, 3, 4)
    _close(y, _oracle(x, grid, mode, padding, align), "float32")


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_1d_matches_onnx(reg, device, rng, mode):
    """One spatial axis: x [N, C, W], grid [N, W_out, 1]."""
    x, grid = rand(rng, (2, 3, 6), "float32"), _grid(rng, (2, 7, 1))
    (y,) = run_op(reg, "grid_sample", [x, grid], {"mode": mode, "padding_mode": "reflection"}, device=device)
    _close(y, _oracle(x, grid, mode, "reflection", False), "float32")


def test_grid_sample_mixed_dtypes_and_integer_nearest(reg, device, rng):
    """A float16 x sampled at a float32 grid; an int32 x copied exactly by nearest (0 outside)."""
    grid = _grid(rng, (1, 4, 5, 2))
    x = rand(rng, (1, 2, 3, 4), "float16")
    (y,) = run_op(reg, "grid_sample", [x, grid], {"mode": "linear"}, device=device)
    assert y.dtype == np.float16
    _close(y, _oracle(x, grid.astype(np.float16), "linear", "zeros", False), "float16")
    ints = rng.integers(-(2**30), 2**30, (1, 2, 3, 4)).astype(np.int32)  # beyond float32's 24 bits
    (y,) = run_op(reg, "grid_sample", [ints, grid], {"mode": "nearest"}, device=device)
    (ref,) = run_onnx("GridSample", [ints, grid], {"mode": "nearest"}, opset=22)
    assert y.dtype == np.int32 and np.array_equal(y, ref)


@pytest.mark.parametrize("align", [False, True])
def test_nearest_rounds_halves_to_even(reg, device, align):
    """Grid points that land exactly halfway between two pixels take the even one (np.rint), as onnx's
    reference: with round-half-up, x = 0.5, 1.5, 2.5 would pick 1, 2, 3 instead of 0, 2, 2."""
    width = 5
    x = np.arange(width, dtype=np.float32).reshape(1, 1, 1, width) * 10 + 1
    pixels = np.array([0.5, 1.5, 2.5, 3.5])
    # The normalised point of each pixel coordinate (exact in binary for these sizes).
    points = pixels * 2 / (width - 1) - 1 if align else (2 * pixels + 1) / width - 1
    grid = np.zeros((1, 1, len(pixels), 2), np.float32)
    grid[..., 0] = points
    (y,) = run_op(reg, "grid_sample", [x, grid], {"mode": "nearest", "align_corners": align}, device=device)
    assert y.reshape(-1).tolist() == [1.0, 21.0, 21.0, 41.0]
    assert np.array_equal(y, _oracle(x, grid, "nearest", "zeros", align).astype(np.float32))


def test_reflection_folds_far_outside_points_back(reg, device):
    """A point several extents outside x reflects back and forth (not just once): against onnx."""
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 2, 4) ** 2
    grid = np.zeros((1, 1, 6, 2), np.float32)
    grid[..., 0] = [-7.3, -3.1, -1.2, 1.2, 3.7, 9.9]
    grid[..., 1] = [5.1, -2.6, 0.3, -0.9, 1.7, -6.2]
    for align in (False, True):
        attrs = {"padding_mode": "reflection", "align_corners": align}
        (y,) = run_op(reg, "grid_sample", [x, grid], attrs, device=device)
        _close(y, _oracle(x, grid, "linear", "reflection", align), "float32")


@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", MODES)
def test_grid_sample_matches_onnxruntime(reg, device, rng, mode, padding):
    """Every mode and padding against onnxruntime too, cubic with border included (where onnx's reference
    differs: it clamps a point just beyond the extent before taking its taps)."""
    ort = pytest.importorskip("onnxruntime")
    x, grid = rand(rng, (2, 3, 5, 4), "float32"), _grid(rng, (2, 3, 6, 2))
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding)
    model = _model([node], {"x": x, "grid": grid}.items())
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT
    model.ir_version = 10  # an IR version every onnxruntime the tests meet reads
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = session.run(None, {"x": x, "grid": grid})
    (y,) = run_op(reg, "grid_sample", [x, grid], {"mode": mode, "padding_mode": padding}, device=device)
    _close(y, ref.astype(np.float64), "float32")


# -- affine_grid --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 3, 4, 2)])
def test_affine_grid_matches_onnx(reg, device, rng, size, align, dtype):
    r = len(size) - 2
    theta = rand(rng, (2, r, r + 1), dtype, low=-1.5, high=1.5)
    (grid,) = run_op(reg, "affine_grid", [theta], {"size": list(size), "align_corners": align}, device=device)
    assert grid.shape == (2, *size[2:], r) and grid.dtype == theta.dtype
    # onnx's reference returns float32 whatever theta's dtype (the spec says theta's): compare values.
    wide = theta.astype(np.float64 if dtype == "float64" else np.float32)
    (ref,) = run_onnx("AffineGrid", [wide, np.array(size, np.int64)], {"align_corners": int(align)}, opset=20)
    _close(grid, ref.astype(np.float64), dtype)


def test_affine_grid_identity_reproduces_the_pixel_centres(reg, device):
    """The identity theta gives each pixel's own normalised centre, so grid_sample of it returns x (every
    size-1 axis at 0, where onnx's reference would divide by zero with align_corners)."""
    x = rand(np.random.default_rng(7), (1, 2, 1, 5), "float32")
    theta = np.array([[[1, 0, 0], [0, 1, 0]]], np.float32)
    for align in (False, True):
        attrs = {"size": [1, 2, 1, 5], "align_corners": align}
        (grid,) = run_op(reg, "affine_grid", [theta], attrs, device=device)
        assert np.all(grid[..., 1] == 0)
        (y,) = run_op(reg, "grid_sample", [x, grid], {"align_corners": align}, device=device)
        check_close(y, x.astype(np.float64))


# -- refusals at load ---------------------------------------------------------------------------------
F = np.float32


@pytest.mark.parametrize(
    ("x", "grid", "attrs", "error", "match"),
    [
        ((2, 3), (2, 3, 1), {}, ShapeMismatchError, "r >= 1"),
        ((1, 2, 3, 4), (1, 5, 2), {}, ShapeMismatchError, r"must be \[N, H1, ..., H2, 2\]"),
        ((1, 2, 3, 4), (1, 5, 6, 3), {}, ShapeMismatchError, r"must be \[N, H1, ..., H2, 2\]"),
        ((2, 2, 3, 4), (1, 5, 6, 2), {}, ShapeMismatchError, "batch 1, but 'x' has 2"),
        ((1, 2, 0, 4), (1, 5, 6, 2), {}, ShapeMismatchError, "empty spatial axis"),
        ((1, 2, 3, 4, 5), (1, 2, 2, 2, 3), {"mode": "cubic"}, InvalidArgumentError, "2 spatial axes"),
        ((1, 2, 3, 4), (1, 2, 2, 2), {"mode": "bilinear"}, InvalidArgumentError, "must be one of"),
        ((1, 2, 3, 4), (1, 2, 2, 2), {"padding_mode": "wrap"}, InvalidArgumentError, "must be one of"),
    ],
)
def test_grid_sample_refusals(reg, x, grid, attrs, error, match):
    with pytest.raises(error, match=match):
        run_op(reg, "grid_sample", [np.zeros(x, F), np.zeros(grid, F)], attrs)


def test_grid_sample_dtype_refusals(reg):
    grid = np.zeros((1, 2, 2, 2), F)
    with pytest.raises(DTypeMismatchError, match="mode 'linear' needs a float input 'x'"):
        run_op(reg, "grid_sample", [np.zeros((1, 1, 2, 2), np.int8), grid])
    with pytest.raises(DTypeMismatchError, match="not supported"):  # the grid holds floats
        run_op(reg, "grid_sample", [np.zeros((1, 1, 2, 2), F), grid.astype(np.int32)])


@pytest.mark.parametrize(
    ("theta", "size", "error", "match"),
    [
        ((1, 2, 3), [1, 1, 4], InvalidArgumentError, r"\[N, C, H, W\] or \[N, C, D, H, W\]"),
        ((1, 2, 3), [1, 1, 4, -2], InvalidArgumentError, "none negative"),
        ((1, 3, 4), [1, 1, 4, 4], ShapeMismatchError, r"must be \[N, 2, 3\]"),
        ((1, 2, 3), [1, 1, 2, 4, 4], ShapeMismatchError, r"must be \[N, 3, 4\]"),
        ((2, 2, 3), [1, 1, 4, 4], ShapeMismatchError, "batch 2, but 'size'"),
    ],
)
def test_affine_grid_refusals(reg, theta, size, error, match):
    with pytest.raises(error, match=match):
        run_op(reg, "affine_grid", [np.zeros(theta, F)], {"size": size})
    with pytest.raises(DTypeMismatchError):
        run_op(reg, "affine_grid", [np.zeros((1, 2, 3), np.int32)], {"size": [1, 1, 2, 2]})


# -- ONNX import --------------------------------------------------------------------------------------
def _model(nodes, inputs, inits=(), opset=22):
    graph = helper.make_graph(
        nodes,
        "grid",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in inputs
        ],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
        [numpy_helper.from_array(a, n) for n, a in inits],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


OPSET_16_NAMES = {"linear": "bilinear", "nearest": "nearest", "cubic": "bicubic"}


@pytest.mark.parametrize(("mode", "padding", "align"), list(itertools.product(MODES, PADDINGS, [0, 1])))
def test_gridsample_16_and_20_import(device, rng, mode, padding, align):
    """GridSample-16 (mode names bilinear, bicubic) and -20 give what onnx's reference gives at 20
    (cubic with border: onnxruntime's rule, :func:`_cubic_border`)."""
    x, grid = rand(rng, (1, 2, 4, 5), "float32"), _grid(rng, (1, 3, 4, 2))
    feeds = {"x": x, "grid": grid}
    models = {}
    for opset, name in ((16, OPSET_16_NAMES[mode]), (20, mode)):
        node = helper.make_node(
            "GridSample", ["x", "grid"], ["y"], mode=name, padding_mode=padding, align_corners=align
        )
        models[opset] = _model([node], feeds.items(), opset=opset)
    if mode == "cubic" and padding == "border":
        ref = _cubic_border(x, grid, align)
    else:
        (ref,) = ReferenceEvaluator(models[20]).run(None, feeds)
    for model in models.values():
        (y,) = run_pipeline(model, feeds, device)
        _close(y, ref.astype(np.float64), "float32")


def test_volumetric_gridsample_22_import_float16(device, rng):
    x, grid = rand(rng, (1, 2, 3, 4, 3), "float16"), _grid(rng, (1, 2, 2, 3, 3), "float16")
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode="nearest", padding_mode="border")
    (y,) = run_pipeline(_model([node], {"x": x, "grid": grid}.items()), {"x": x, "grid": grid}, device)
    assert y.dtype == np.float16
    _close(y, _oracle(x, grid, "nearest", "border", False), "float16")


def test_spatial_transformer_import(device, rng):
    """AffineGrid (size an initializer) feeding GridSample, as a spatial transformer network exports."""
    x = rand(rng, (2, 3, 5, 6), "float32")
    theta = rand(rng, (2, 2, 3), "float32", low=-1.2, high=1.2)
    nodes = [
        helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=1),
        helper.make_node("GridSample", ["x", "grid"], ["y"], padding_mode="border", align_corners=1),
    ]
    size = np.array([2, 3, 4, 7], np.int64)
    model = _model(nodes, {"x": x, "theta": theta}.items(), [("size", size)], opset=20)
    feeds = {"x": x, "theta": theta}
    config, _ = import_model(model)
    assert [s["name"] for s in config["pipeline"]] == ["affine_grid", "grid_sample"]
    assert config["pipeline"][0]["attrs"] == {"size": [2, 3, 4, 7], "align_corners": True}
    (y,) = run_pipeline(model, feeds, device)
    (ref,) = ReferenceEvaluator(model).run(None, feeds)
    assert y.shape == (2, 3, 4, 7)
    _close(y, ref.astype(np.float64), "float32")


def _refused(model, match):
    with pytest.raises(pl.PipeLinkError, match=match) as info:
        import_model(model)
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"


def test_import_refusals():
    x, grid = np.zeros((1, 1, 2, 2), F), np.zeros((1, 2, 2, 2), F)
    feeds = {"x": x, "grid": grid}.items()
    for opset, mode in ((16, "linear"), (20, "bilinear"), (22, "bicubic")):
        node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode)
        _refused(_model([node], feeds, opset=opset), f"mode '{mode}' is not one of opset {opset}'s")
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], padding_mode="wrap")
    _refused(_model([node], feeds), "'padding_mode' must be one of")
    theta = np.zeros((1, 2, 3), F)
    size = np.array([1, 1, 2, 2], np.int64)
    node = helper.make_node("AffineGrid", ["theta", "size"], ["y"])
    # size a graph input: the grid's shape would depend on its values (import_model's constants= binds it).
    _refused(_model([node], {"theta": theta, "size": size}.items(), opset=20), r"input 1 \(size, 'size'\)")
    computed = [helper.make_node("Abs", ["s"], ["size"]), node]
    _refused(_model(computed, {"theta": theta, "s": size}.items(), opset=20), "size, 'size'.*computes it")
