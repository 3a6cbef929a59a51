"""deform_conv2d against onnx's ReferenceEvaluator (DeformConv-19) on every device: pads, strides,
dilations, groups, offset groups, the mask and the bias, the float dtypes, offsets that push samples
past the image; zero offsets are conv2d; non-finite offsets give NaN, far ones read zeros; every refusal,
at load and at import; the reference's columns bounded before anything is allocated."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import pipelink as pl  # noqa: E402
from pipelink.errors import (  # noqa: E402
    DTypeMismatchError,
    InvalidArgumentError,
    OutOfMemoryError,
    ShapeMismatchError,
)

from .onnx_models import refused, run_pipeline, stage_names  # noqa: E402
from .onnx_oracle import run_onnx  # noqa: E402
from .ops_helpers import TOL, make_registry, rand, run_op  # noqa: E402

DTYPES = ("float32", "float16", "float64", "bfloat16")
F = np.float32


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _wide(a: np.ndarray | None) -> np.ndarray | None:
    """onnx's reference computes in the input's own dtype: give it float32 (float64 for float64)."""
    return None if a is None else a.astype(np.float64 if a.dtype == np.float64 else np.float32)


def _close(y: np.ndarray, ref: np.ndarray, dtype: str) -> None:
    assert not np.isnan(y.astype(np.float64)).any(), "an element was not written (still NaN)"
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(y.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)


def _out(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    return (size + pad - dil * (k - 1) - 1) // stride + 1


def _inputs(rng, dtype, x_shape, m, kernel, attrs, *, bias, mask, reach, quantized=True):
    """x, w, offset, b, mask for one stage: offsets in [-reach, reach] (multiples of 1/64 when
    ``quantized``: every position is then exact in float32, where onnx's reference rounds it), masks in
    [0, 1.5], x and w in [-1, 1]."""
    n, c, h, w = x_shape
    (kh, kw), group, og = kernel, attrs["group"], attrs["offset_group"]
    pads, strides, dil = attrs["pads"], attrs["strides"], attrs["dilations"]
    oh = _out(h, kh, strides[0], pads[0] + pads[2], dil[0])
    ow = _out(w, kw, strides[1], pads[1] + pads[3], dil[1])
    off = rng.uniform(-reach, reach, (n, og * 2 * kh * kw, oh, ow))
    off = np.round(off * 64) / 64 if quantized else off
    arrays = [
        rand(rng, x_shape, dtype, -1, 1),
        rand(rng, (m, c // group, kh, kw), dtype, -1, 1),
        off.astype(rand(rng, (1,), dtype).dtype),
        rand(rng, (m,), dtype) if bias else None,
        rand(rng, (n, og * kh * kw, oh, ow), dtype, 0, 1.5) if mask else None,
    ]
    return arrays


def _attrs(pads=(0, 0, 0, 0), strides=(1, 1), dil=(1, 1), group=1, og=1) -> dict:
    return {
        "pads": list(pads),
        "strides": list(strides),
        "dilations": list(dil),
        "group": group,
        "offset_group": og,
    }


def _reference(arrays: list, attrs: dict, kernel: tuple) -> np.ndarray:
    (ref,) = run_onnx(
        "DeformConv", [_wide(a) for a in arrays], {**attrs, "kernel_shape": list(kernel)}, opset=19
    )
    return ref


# (x shape, M, kernel, attrs, bias, mask, reach): reach 1.5 stays mostly inside, 9 pushes most samples out
CASES = [
    ((1, 2, 5, 6), 3, (3, 3), _attrs(), False, False, 1.5),
    ((2, 3, 6, 5), 4, (2, 3), _attrs(pads=(1, 0, 2, 1)), True, False, 1.5),
    ((1, 4, 7, 8), 2, (3, 2), _attrs(strides=(2, 3), dil=(2, 1)), False, True, 1.5),
    ((2, 4, 6, 6), 6, (3, 3), _attrs(pads=(1, 1, 1, 1), group=2), True, True, 1.5),
    ((1, 6, 5, 7), 4, (2, 2), _attrs(og=3, pads=(0, 1, 1, 0)), True, True, 1.5),
    (
        (2, 4, 8, 6),
        4,
        (3, 3),
        _attrs(pads=(2, 1, 0, 2), strides=(2, 1), dil=(1, 2), group=2, og=4),
        True,
        True,
        2.5,
    ),
    ((1, 2, 4, 5), 2, (3, 3), _attrs(pads=(1, 1, 1, 1)), True, True, 9.0),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("x_shape", "m", "kernel", "attrs", "bias", "mask", "reach"), CASES)
def test_deform_conv2d_matches_onnx(reg, device, rng, x_shape, m, kernel, attrs, bias, mask, reach, dtype):
    arrays = _inputs(rng, dtype, x_shape, m, kernel, attrs, bias=bias, mask=mask, reach=reach)
    (y,) = run_op(reg, "deform_conv2d", arrays, attrs, device=device)
    ref = _reference(arrays, attrs, kernel)
    assert y.shape == ref.shape and y.dtype == arrays[0].dtype
    _close(y, ref, dtype)
    if device != "cpu":  # the same corners on both sides: the variants agree to the product's rounding
        (cpu,) = run_op(reg, "deform_conv2d", arrays, attrs)
        _close(y, cpu, dtype)


def test_continuous_offsets_match_onnx(reg, device, rng):
    """Offsets of every float32 value (not multiples of 1/64): the position is added in onnx's order."""
    attrs = _attrs(pads=(1, 2, 0, 1), strides=(1, 2), og=2)
    arrays = _inputs(
        rng, "float32", (2, 4, 7, 9), 3, (3, 3), attrs, bias=True, mask=True, reach=3, quantized=False
    )
    (y,) = run_op(reg, "deform_conv2d", arrays, attrs, device=device)
    _close(y, _reference(arrays, attrs, (3, 3)), "float32")


def test_zero_offsets_are_conv2d(reg, device, rng):
    """With offsets 0 and no mask every tap lands on its grid point: conv2d's result, also for an image of
    one row (where onnx's reference divides by zero in GridSample's normalised coordinates)."""
    for x_shape, attrs in (
        ((2, 4, 6, 7), _attrs(pads=(1, 0, 1, 2), strides=(2, 1), group=2)),
        ((1, 2, 1, 9), _attrs()),
    ):
        arrays = _inputs(rng, "float32", x_shape, 4, (1, 3), attrs, bias=True, mask=False, reach=0)
        (y,) = run_op(reg, "deform_conv2d", arrays, attrs, device=device)
        conv = {k: attrs[k] for k in ("pads", "strides", "dilations", "group")}
        (ref,) = run_op(reg, "conv2d", [arrays[0], arrays[1], arrays[3]], conv)
        _close(y, ref, "float32")


def test_far_and_non_finite_offsets(reg, device, rng):
    """Samples far past the image read zeros (the output is the bias); a NaN or infinite offset makes
    the outputs that use it NaN, and no other."""
    attrs = _attrs(og=2)
    x, w, off, b, mask = _inputs(
        rng, "float32", (1, 4, 5, 5), 2, (3, 3), attrs, bias=True, mask=True, reach=1
    )
    far = np.full_like(off, 1e30)
    far[:, 1::2] = -3e38  # the columns: huge and negative
    (y,) = run_op(reg, "deform_conv2d", [x, w, far, b, mask], attrs, device=device)
    np.testing.assert_array_equal(y, np.broadcast_to(b.reshape(1, 2, 1, 1), y.shape))
    bad = off.copy()
    bad[0, 0, 1, 2] = np.nan  # offset group 0, tap 0's dy at output pixel (1, 2)
    bad[0, 2 * 9 + 5, 0, 0] = np.inf  # offset group 1, tap 2's dx at (0, 0)
    (y,) = run_op(reg, "deform_conv2d", [x, w, bad, b, mask], attrs, device=device)
    nan = np.zeros(y.shape, bool)
    nan[0, :, 1, 2] = nan[0, :, 0, 0] = True  # group 1: every output channel reads every input channel
    np.testing.assert_array_equal(np.isnan(y), nan)


def test_empty_batch(reg, device):
    x, w = np.zeros((0, 2, 4, 4), F), np.ones((3, 2, 3, 3), F)
    (y,) = run_op(reg, "deform_conv2d", [x, w, np.zeros((0, 18, 2, 2), F)], {}, device=device)
    assert y.shape == (0, 3, 2, 2)


def _stage(x_shape=(1, 4, 5, 5), w_shape=(2, 4, 3, 3), off_shape=(1, 18, 3, 3), b=None, mask=None, **attrs):
    arrays = [np.zeros(s, F) if s is not None else None for s in (x_shape, w_shape, off_shape, b, mask)]
    return arrays, attrs


@pytest.mark.parametrize(
    ("stage", "error", "match"),
    [
        (_stage(off_shape=(1, 16, 3, 3)), ShapeMismatchError, "'offset' has shape"),
        (_stage(off_shape=(1, 18, 3, 4)), ShapeMismatchError, r"\[1, 18, 3, 3\]"),
        (_stage(mask=(1, 18, 3, 3)), ShapeMismatchError, "'mask' has shape"),
        (_stage(b=(3,)), ShapeMismatchError, "dimension M is 3"),
        (_stage(w_shape=(2, 3, 3, 3)), ShapeMismatchError, "expects 3 per group"),
        (
            _stage(w_shape=(3, 2, 3, 3), group=2),
            ShapeMismatchError,
            r"3 output channels .* cannot be split into group=2",
        ),
        (_stage(off_shape=(1, 54, 3, 3), offset_group=3), ShapeMismatchError, "4 input channels cannot"),
        (_stage(offset_group=0), InvalidArgumentError, "'offset_group' must be >= 1"),
        (_stage(group=0), InvalidArgumentError, "'group' must be >= 1"),
        (_stage(w_shape=(2, 4, 6, 3)), ShapeMismatchError, "does not fit"),
        (_stage(pads=[1, 1]), InvalidArgumentError, "'pads' must have 4"),
        (_stage(strides=[0, 1]), InvalidArgumentError, ">= 1"),
    ],
)
def test_refusals(reg, stage, error, match):
    arrays, attrs = stage
    with pytest.raises(error, match=match):
        run_op(reg, "deform_conv2d", arrays, attrs)


def test_integer_inputs_are_refused(reg):
    arrays, _ = _stage()
    with pytest.raises(DTypeMismatchError):
        run_op(reg, "deform_conv2d", [a.astype(np.int32) for a in arrays[:3]])


def test_columns_are_bounded_before_anything_is_allocated(reg):
    """65,536 channels sampled at 1024 x 1024 output pixels (inputs of a few MiB): the reference's columns
    would take 256 GiB; refused with the numbers, not attempted."""
    x, w = np.ones((1, 65536, 1, 1), F), np.ones((1, 65536, 1, 1), F)
    off = np.zeros((1, 2, 1024, 1024), F)
    with pytest.raises(OutOfMemoryError, match="sampled columns allocation needs"):
        run_op(reg, "deform_conv2d", [x, w, off], {"pads": [511, 511, 512, 512]})


# -- ONNX import ---------------------------------------------------------------------------------------
def _model(arrays: list, names: tuple = ("x", "w", "offset", "b", "mask"), *, weights=True, **attrs):
    """A one-node DeformConv-19 model; w (and b) initializers when ``weights``."""
    arrays = list(arrays) + [None] * (len(names) - len(arrays))
    node = helper.make_node(
        "DeformConv", [n if a is not None else "" for n, a in zip(names, arrays, strict=True)], ["y"], **attrs
    )
    while node.input and not node.input[-1]:
        node.input.pop()
    bound = {"w", "b"} if weights else set()
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in zip(names, arrays, strict=True)
        if a is not None and n not in bound
    ]
    inits = [
        numpy_helper.from_array(a, n)
        for n, a in zip(names, arrays, strict=True)
        if a is not None and n in bound
    ]
    out = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(arrays[0].dtype), None)
    graph = helper.make_graph([node], "deform", inputs, [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _feeds(arrays: list, names=("x", "w", "offset", "b", "mask"), *, weights=True) -> dict:
    skip = {"w", "b"} if weights else set()
    arrays = list(arrays) + [None] * (len(names) - len(arrays))
    return {n: a for n, a in zip(names, arrays, strict=True) if a is not None and n not in skip}


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("bias", [False, True])
def test_import_with_a_mask(device, rng, bias, dtype):
    """DeformConv with its mask, with and without a bias, as the columns and their product by w."""
    attrs = _attrs(pads=(1, 1, 0, 1), strides=(1, 2), og=2)
    arrays = _inputs(rng, dtype, (2, 4, 6, 7), 3, (3, 3), attrs, bias=bias, mask=True, reach=2)
    model = _model(arrays, kernel_shape=[3, 3], **attrs)
    (y,) = run_pipeline(model, _feeds(arrays), device)
    _close(y, _reference(arrays, attrs, (3, 3)), dtype)


def test_import_with_graph_input_weights(device, rng):
    attrs = _attrs(group=2)
    arrays = _inputs(rng, "float32", (1, 4, 5, 5), 2, (2, 2), attrs, bias=True, mask=False, reach=1)
    model = _model(arrays, weights=False, **attrs)
    feeds = _feeds(arrays, weights=False)
    (y,) = run_pipeline(model, feeds, device)
    (ref,) = onnx.reference.ReferenceEvaluator(model).run(None, feeds)
    _close(y, ref, "float32")


def test_import_refusals():
    x, w, off = np.zeros((1, 2, 5, 5), F), np.zeros((2, 2, 3, 3), F), np.zeros((1, 18, 3, 3), F)
    refused(_model([x, w, off], kernel_shape=[3, 2]), r"kernel_shape=\[3, 2\] must be the weight's")
    x3, w3 = np.zeros((1, 2, 5, 5, 5), F), np.zeros((2, 2, 3, 3, 3), F)
    refused(_model([x3, w3, np.zeros((1, 81, 3, 3, 3), F)]), "rank 5; PipeLink's deform_conv2d is 2-d")
    # a mask without a bias when w's shape is unknown at import: no zero bias can be made
    node = helper.make_node("DeformConv", ["x", "w", "offset", "", "mask"], ["y"])
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5]),
        helper.make_tensor_value_info("w", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("offset", TensorProto.FLOAT, [1, 18, 3, 3]),
        helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 9, 3, 3]),
    ]
    graph = helper.make_graph(
        [node], "d", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    )
    refused(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), "mask without a bias needs"
    )


def test_import_stages():
    """With w's shape and the output's size known: the columns, the product by w (grouped: a view of the
    columns per group first), the view back to NCHW and the bias add; else one deform_conv2d stage."""
    x, w, off, mask = np.zeros((1, 2, 5, 5), F), np.zeros((2, 2, 3, 3), F), np.zeros((1, 18, 3, 3), F), None
    product = ["deform_im2col", "matmul", "reshape"]
    assert stage_names(_model([x, w, off])) == product
    b, mask = np.zeros(2, F), np.zeros((1, 9, 3, 3), F)
    assert stage_names(_model([x, w, off, None, mask])) == product
    assert stage_names(_model([x, w, off, b, mask])) == [*product, "add"]
    grouped = _model([x, np.zeros((2, 1, 3, 3), F), off, b], group=2)
    assert stage_names(grouped) == ["deform_im2col", "reshape", "matmul", "reshape", "add"]
    assert stage_names(_dynamic_model(bias=False)) == ["deform_conv2d"]


def _dynamic_model(*, bias: bool):
    """DeformConv of x [N, 4, H, W] (H, W known only at run time) with a mask: one deform_conv2d stage; a
    zero bias constant when there is none."""
    rng = np.random.default_rng(7)
    w = rng.uniform(-1, 1, (3, 4, 3, 3)).astype(F)
    inits = [numpy_helper.from_array(w, "w")] + (
        [numpy_helper.from_array(np.ones(3, F), "b")] if bias else []
    )
    node = helper.make_node(
        "DeformConv", ["x", "w", "offset", "b" if bias else "", "mask"], ["y"], pads=[1] * 4
    )
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, "H", "W"]),
        helper.make_tensor_value_info("offset", TensorProto.FLOAT, ["N", 18, "H", "W"]),
        helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["N", 9, "H", "W"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    graph = helper.make_graph([node], "dynamic", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("bias", [False, True])
def test_import_of_run_time_sizes_runs_the_direct_stage(device, rng, bias):
    model = _dynamic_model(bias=bias)
    feeds = {
        "x": rand(rng, (2, 4, 6, 5), "float32", -1, 1),
        "offset": rand(rng, (2, 18, 6, 5), "float32", -2, 2),
        "mask": rand(rng, (2, 9, 6, 5), "float32", 0, 1),
    }
    (y,) = run_pipeline(model, feeds, device)
    (ref,) = onnx.reference.ReferenceEvaluator(model).run(None, feeds)
    _close(y, ref, "float32")


# -- deform_im2col -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", [False, True])
def test_deform_im2col_times_w_is_the_convolution(reg, device, rng, mask, dtype):
    """The columns [N, C * kH * kW, H_out * W_out] weighted by w (in float64 here) give onnx's DeformConv;
    on CUDA they are the CPU's columns."""
    attrs = _attrs(pads=(1, 0, 2, 1), strides=(2, 1), dil=(1, 2), og=2)
    x, w, off, _, mk = _inputs(rng, dtype, (2, 4, 7, 6), 3, (3, 2), attrs, bias=False, mask=mask, reach=2)
    columns = {k: v for k, v in attrs.items() if k != "group"}
    (cols,) = run_op(reg, "deform_im2col", [x, off, mk], {**columns, "kernel_shape": [3, 2]}, device=device)
    ref = _reference([x, w, off, None, mk], attrs, (3, 2))
    assert cols.shape == (2, 4 * 6, ref.shape[2] * ref.shape[3]) and cols.dtype == x.dtype
    conv = np.matmul(w.astype(np.float64).reshape(3, -1), cols.astype(np.float64)).reshape(ref.shape)
    _close(conv, ref, dtype)
    if device != "cpu":
        (cpu,) = run_op(reg, "deform_im2col", [x, off, mk], {**columns, "kernel_shape": [3, 2]})
        _close(cols, cpu, dtype)


def test_deform_im2col_refusals(reg):
    x, off = np.zeros((1, 2, 5, 5), F), np.zeros((1, 18, 3, 3), F)
    with pytest.raises(InvalidArgumentError, match="'kernel_shape' must have 2"):
        run_op(reg, "deform_im2col", [x, off], {"kernel_shape": [3]})
    with pytest.raises(ShapeMismatchError, match="'offset' has shape"):
        run_op(reg, "deform_im2col", [x, off], {"kernel_shape": [2, 2]})
    with pytest.raises(pl.PipeLinkError, match="needs attribute 'kernel_shape'"):
        run_op(reg, "deform_im2col", [x, off], {})


def test_imported_columns_are_bounded_before_anything_is_allocated():
    """The import's columns of 65,536 channels at 1024 x 1024 output pixels (256 GiB, from inputs of a few
    MiB): refused with the sizes (PIPELINK_ERR_OUT_OF_MEMORY), not attempted."""
    x, w, off = np.ones((1, 65536, 1, 1), F), np.ones((1, 65536, 1, 1), F), np.zeros((1, 2, 1024, 1024), F)
    model = _model([x, w, off], pads=[511, 511, 512, 512])
    with pytest.raises(pl.PipeLinkError, match="needs") as info:
        run_pipeline(model, _feeds([x, w, off]), "cpu")
    assert info.value.code.name == "PIPELINK_ERR_OUT_OF_MEMORY"
