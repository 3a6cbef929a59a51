"""conv2d and conv_transpose2d against direct-summation loop references (every output pixel summed tap
by tap from the definition, padding by index checks) and ONNX's reference evaluator: strides, pads,
dilations, groups, bias, auto_pad, output_padding, 16-bit types, empty batches, errors at load. Each
numeric case runs on every device: on CUDA the geometries real models use (symmetric pads) must run cuDNN;
the others may run the staged reference where cuDNN declines them (asymmetric pads), as the runtime does.
float64 has no cuDNN engine and is skipped there.
"""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from pipelink.errors import InvalidArgumentError, ShapeMismatchError

from .ops_helpers import FLOAT_NAMES, as64, check_close, infer_float_shapes, make_registry, rand, run_op


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _conv_ref(x, w, b, strides, pads, dilations, group, out_hw):
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    mg = m // group
    y = np.zeros((n, m) + tuple(out_hw))
    for oh in range(out_hw[0]):
        for ow in range(out_hw[1]):
            for i in range(kh):
                for j in range(kw):
                    ih = oh * strides[0] - pads[0] + i * dilations[0]
                    iw = ow * strides[1] - pads[1] + j * dilations[1]
                    if not (0 <= ih < h and 0 <= iw < wd):
                        continue  # a zero of the padding
                    for g in range(group):
                        y[:, g * mg : (g + 1) * mg, oh, ow] += (
                            x[:, g * cg : (g + 1) * cg, ih, iw] @ w[g * mg : (g + 1) * mg, :, i, j].T
                        )
    if b is not None:
        y += b.astype(np.float64)[None, :, None, None]
    return y


CONV_CASES = [
    # x shape, w shape, attrs
    ((2, 3, 7, 8), (4, 3, 3, 3), {}),
    ((1, 4, 9, 9), (6, 2, 3, 2), {"strides": [2, 1], "pads": [1, 0, 2, 1], "group": 2}),
    ((2, 3, 10, 7), (5, 3, 3, 3), {"dilations": [2, 1], "pads": [2, 1, 2, 1]}),
    ((1, 6, 8, 8), (6, 1, 3, 3), {"group": 6, "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # depthwise
    ((1, 2, 5, 5), (3, 2, 1, 1), {"strides": [3, 2]}),
    ((0, 2, 5, 5), (3, 2, 3, 3), {}),  # empty batch
    ((32, 16, 12, 12), (16, 16, 1, 1), {}),  # 1x1, batch 32
    ((2, 16, 11, 13), (32, 4, 3, 3), {"group": 4, "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((3, 8, 15, 9), (8, 8, 5, 3), {"strides": [2, 2], "pads": [0, 2, 1, 0]}),  # asymmetric pads
]


@pytest.mark.parametrize(("xs", "ws", "attrs"), CONV_CASES)
@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv2d_against_direct_sum(reg, device, xs, ws, attrs, dtype, with_bias):
    rng = np.random.default_rng(31)
    x, w = rand(rng, xs, dtype, -1, 1), rand(rng, ws, dtype, -1, 1)
    b = rand(rng, (ws[0],), dtype) if with_bias else None
    (y,) = run_op(reg, "conv2d", [x, w, b], attrs, device=device, staged_ok=True)
    full = {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "group": 1, **attrs}
    ref = _conv_ref(x, w, b, full["strides"], full["pads"], full["dilations"], full["group"], y.shape[2:])
    pads, k, d, s = full["pads"], ws[2:], full["dilations"], full["strides"]
    expect_hw = tuple(
        (xs[2 + a] + pads[a] + pads[a + 2] - (k[a] - 1) * d[a] - 1) // s[a] + 1 for a in range(2)
    )
    assert y.shape == (xs[0], ws[0]) + expect_hw
    check_close(y, ref, dtype)


# Geometries of real models (ResNet, MobileNet, ESPCN, decoders): cuDNN must serve them on CUDA.
MODEL_CASES = [
    ("conv2d", (32, 64, 14, 14), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("conv2d", (2, 3, 32, 32), (16, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}),
    ("conv2d", (4, 64, 9, 9), (128, 64, 1, 1), {"strides": [2, 2]}),
    ("conv2d", (2, 32, 10, 10), (32, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 32}),
    ("conv2d", (1, 16, 12, 12), (32, 4, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2], "group": 4}),
    ("conv2d", (1, 1, 17, 19), (8, 1, 5, 5), {"pads": [2, 2, 2, 2]}),
    ("conv_transpose2d", (4, 32, 7, 7), (32, 16, 4, 4), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ("conv_transpose2d", (2, 8, 5, 5), (8, 8, 3, 3), {"strides": [2, 2], "output_padding": [1, 1]}),
    ("conv_transpose2d", (1, 8, 6, 6), (8, 2, 2, 2), {"strides": [2, 2], "group": 4}),
]


@pytest.mark.parametrize(("op", "xs", "ws", "attrs"), MODEL_CASES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_model_geometries_run_cudnn_on_cuda(reg, device, rng, op, xs, ws, attrs, dtype):
    # run_op fails when cuDNN declines on CUDA: wrong if these fell back to the slow staged reference.
    x, w = rand(rng, xs, dtype, -1, 1), rand(rng, ws, dtype, -1, 1)
    group = attrs.get("group", 1)
    b = rand(rng, (ws[0] if op == "conv2d" else ws[1] * group,), dtype)
    (y,) = run_op(reg, op, [x, w, b], attrs, device=device)
    full = {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "output_padding": [0, 0], **attrs}
    if op == "conv2d":
        ref = _conv_ref(x, w, b, full["strides"], full["pads"], full["dilations"], group, y.shape[2:])
    else:
        ref = _conv_transpose_ref(
            x, w, b, full["strides"], full["pads"], full["output_padding"], full["dilations"], group
        )
    # Sums of up to 576 products accumulated in float32: the float32 tolerance grows with the reduction.
    k = (ws[1] if op == "conv2d" else ws[0] // group) * ws[2] * ws[3]
    if dtype == "float32":
        np.testing.assert_allclose(as64(y), ref, rtol=1e-5, atol=1e-6 * k)
    else:
        check_close(y, ref, dtype)


@pytest.mark.parametrize(
    ("auto_pad", "size", "stride", "expected_pads"),
    [
        ("SAME_UPPER", 7, 2, (1, 1)),
        ("SAME_UPPER", 8, 2, (0, 1)),
        ("SAME_LOWER", 8, 2, (1, 0)),
        ("VALID", 8, 2, (0, 0)),
        ("SAME_UPPER", 5, 1, (1, 1)),
    ],
)
def test_conv2d_auto_pad(reg, device, auto_pad, size, stride, expected_pads):
    rng = np.random.default_rng(32)
    x, w = rand(rng, (1, 2, size, size), "float32"), rand(rng, (3, 2, 3, 3), "float32")
    attrs = {"auto_pad": auto_pad, "strides": [stride, stride]}
    (y,) = run_op(reg, "conv2d", [x, w], attrs, device=device, staged_ok=True)
    pb, pe = expected_pads
    out = -(-size // stride) if auto_pad != "VALID" else (size - 3) // stride + 1
    assert y.shape == (1, 3, out, out)
    ref = _conv_ref(x, w, None, [stride] * 2, [pb, pb, pe, pe], [1, 1], 1, (out, out))
    check_close(y, ref)


@pytest.mark.parametrize(
    ("shapes", "attrs", "error", "match"),
    [
        ([(1, 4, 5, 5), (2, 3, 3, 3)], {}, ShapeMismatchError, "4 channels, but weight 'w'"),
        ([(1, 4, 5, 5), (3, 2, 3, 3)], {"group": 2}, ShapeMismatchError, "cannot be split into 2 groups"),
        ([(1, 2, 2, 2), (1, 2, 3, 3)], {}, ShapeMismatchError, "does not fit"),
        ([(1, 2, 5, 5), (1, 2, 3, 3)], {"pads": [1, 1]}, InvalidArgumentError, "'pads' must have 4 values"),
        ([(1, 2, 5, 5), (1, 2, 3, 3)], {"strides": [0, 1]}, InvalidArgumentError, "'strides' must be >= 1"),
        (
            [(1, 2, 5, 5), (1, 2, 3, 3)],
            {"pads": [1, 1, 1, 1], "auto_pad": "SAME_UPPER"},
            InvalidArgumentError,
            "cannot be combined",
        ),
        ([(1, 2, 5, 5), (3, 2, 3, 3), (4,)], {}, ShapeMismatchError, "input 'b'.*dimension M is 4"),
    ],
)
def test_conv2d_errors(reg, shapes, attrs, error, match):
    with pytest.raises(error, match=match):
        infer_float_shapes(reg, "conv2d", shapes, attrs)


def test_conv2d_symbolic_batch_passes_through(reg):
    (shape,) = infer_float_shapes(reg, "conv2d", [("N", 3, 8, 8), (4, 3, 3, 3)], {"pads": [1, 1, 1, 1]})
    assert shape == ("N", 4, 8, 8)


def _conv_transpose_ref(x, w, b, strides, pads, out_pad, dilations, group):
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    _, mg, kh, kw = w.shape
    cg = c // group
    out = [
        strides[a] * ((h, wd)[a] - 1)
        + out_pad[a]
        + ((kh, kw)[a] - 1) * dilations[a]
        + 1
        - pads[a]
        - pads[a + 2]
        for a in range(2)
    ]
    y = np.zeros((n, mg * group) + tuple(out))
    for oh in range(out[0]):
        for ow in range(out[1]):
            for i in range(kh):
                for j in range(kw):
                    th, tw = oh + pads[0] - i * dilations[0], ow + pads[1] - j * dilations[1]
                    if th % strides[0] or tw % strides[1]:
                        continue
                    ih, iw = th // strides[0], tw // strides[1]
                    if not (0 <= ih < h and 0 <= iw < wd):
                        continue
                    for g in range(group):
                        y[:, g * mg : (g + 1) * mg, oh, ow] += (
                            x[:, g * cg : (g + 1) * cg, ih, iw] @ w[g * cg : (g + 1) * cg, :, i, j]
                        )
    if b is not None:
        y += b.astype(np.float64)[None, :, None, None]
    return y


TRANSPOSE_CASES = [
    ((2, 3, 4, 5), (3, 2, 3, 3), {}),
    ((1, 4, 3, 3), (4, 3, 3, 2), {"strides": [2, 3], "pads": [1, 0, 0, 1], "output_padding": [1, 2]}),
    ((1, 4, 4, 3), (4, 1, 2, 3), {"group": 2, "dilations": [2, 1], "strides": [2, 2]}),
    ((32, 16, 7, 7), (16, 8, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # the 2x upsampler, batch 32
    ((2, 8, 5, 6), (8, 4, 1, 1), {}),  # 1x1
]


@pytest.mark.parametrize(("xs", "ws", "attrs"), TRANSPOSE_CASES)
@pytest.mark.parametrize("dtype", FLOAT_NAMES)
def test_conv_transpose2d_against_gather_loop(reg, device, xs, ws, attrs, dtype):
    rng = np.random.default_rng(33)
    x, w, b = rand(rng, xs, dtype, -1, 1), rand(rng, ws, dtype, -1, 1), None
    group = attrs.get("group", 1)
    b = rand(rng, (ws[1] * group,), dtype)
    for _ in range(2):  # the accumulator kept by bind must be cleared between runs
        (y,) = run_op(reg, "conv_transpose2d", [x, w, b], attrs, device=device, staged_ok=True)
    full = {"strides": [1, 1], "pads": [0, 0, 0, 0], "output_padding": [0, 0], "dilations": [1, 1], **attrs}
    ref = _conv_transpose_ref(
        x, w, b, full["strides"], full["pads"], full["output_padding"], full["dilations"], group
    )
    check_close(y, ref, dtype)


def test_conv_transpose2d_errors(reg):
    with pytest.raises(InvalidArgumentError, match="output_padding"):
        infer_float_shapes(reg, "conv_transpose2d", [(1, 2, 3, 3), (2, 1, 3, 3)], {"output_padding": [1, 1]})
    with pytest.raises(ShapeMismatchError, match="weight 'w'"):
        infer_float_shapes(reg, "conv_transpose2d", [(1, 2, 3, 3), (3, 1, 3, 3)], {})
    with pytest.raises(InvalidArgumentError, match="divide the 3 input channels"):
        infer_float_shapes(reg, "conv_transpose2d", [(1, 3, 3, 3), (3, 1, 3, 3)], {"group": 2})
    with pytest.raises(ShapeMismatchError, match="bias 'b' has 3 entries, but the output has 2 channels"):
        infer_float_shapes(reg, "conv_transpose2d", [(1, 2, 3, 3), (2, 1, 3, 3), (3,)], {"group": 2})
    with pytest.raises(ShapeMismatchError, match="remove more than"):
        infer_float_shapes(reg, "conv_transpose2d", [(1, 2, 1, 1), (2, 1, 1, 1)], {"pads": [1, 0, 1, 0]})


@pytest.mark.parametrize(
    ("xs", "ws", "attrs"),
    [
        (
            (1, 4, 9, 8),
            (6, 2, 3, 2),
            {"strides": [2, 1], "pads": [1, 0, 2, 1], "group": 2, "dilations": [1, 2]},
        ),
        ((2, 3, 7, 8), (4, 3, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
        ((2, 3, 7, 8), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 3]}),
    ],
)
def test_conv2d_matches_onnx(reg, xs, ws, attrs):
    pytest.importorskip("onnx")
    from .onnx_oracle import run_onnx

    rng = np.random.default_rng(34)
    x, w, b = rand(rng, xs, "float32"), rand(rng, ws, "float32"), rand(rng, (ws[0],), "float32")
    (y,) = run_op(reg, "conv2d", [x, w, b], attrs)
    (ref,) = run_onnx("Conv", [x, w, b], attrs)
    check_close(y, ref.astype(np.float64))


# ONNX's reference ConvTranspose fails on group > 1 (a reshape error inside onnx 1.23): the loop reference
# above covers groups.
@pytest.mark.parametrize(("xs", "ws", "attrs"), [c for c in TRANSPOSE_CASES if "group" not in c[2]])
def test_conv_transpose2d_matches_onnx(reg, xs, ws, attrs):
    pytest.importorskip("onnx")
    from .onnx_oracle import run_onnx

    rng = np.random.default_rng(35)
    x, w = rand(rng, xs, "float32"), rand(rng, ws, "float32")
    (y,) = run_op(reg, "conv_transpose2d", [x, w], attrs)
    (ref,) = run_onnx("ConvTranspose", [x, w], attrs)
    check_close(y, ref.astype(np.float64))


def test_pipeline_conv_block_plans_and_runs():
    config = {
        "inputs": {
            "x": {"shape": [2, 3, 16, 16], "dtype": "float32"},
            "w1": {"shape": [8, 3, 3, 3], "dtype": "float32"},
            "w2": {"shape": [8, 4, 2, 2], "dtype": "float32"},
        },
        "pipeline": [
            {
                "name": "conv2d",
                "id": "down",
                "inputs": ["x", "w1"],
                "outputs": ["h"],
                "attrs": {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
            },
            {"name": "relu", "inputs": ["h"], "outputs": ["r"]},
            {
                "name": "conv_transpose2d",
                "id": "up",
                "inputs": ["r", "w2"],
                "outputs": ["y"],
                "attrs": {"strides": [2, 2], "group": 2},
            },
        ],
    }
    rng = np.random.default_rng(36)
    x, w1, w2 = (
        rand(rng, (2, 3, 16, 16), "float32"),
        rand(rng, (8, 3, 3, 3), "float32"),
        rand(rng, (8, 4, 2, 2), "float32"),
    )
    with pl.load(config, device="cpu") as pipe:
        assert 0 < pipe.memory_plan.peak_bytes <= pipe.memory_plan.naive_bytes
        y = np.asarray(pipe.run(x=x, w1=w1, w2=w2)["y"])
    h = np.maximum(_conv_ref(x, w1, None, [2, 2], [0, 0, 1, 1], [1, 1], 1, (8, 8)), 0)
    check_close(y, _conv_transpose_ref(h, w2, None, [2, 2], [0] * 4, [0, 0], [1, 1], 2))


@pytest.mark.parametrize(
    ("xs", "ws", "attrs"),
    [
        ((2, 8, 9, 9), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # cuDNN's conv + bias + relu graph
        ((4, 16, 6, 6), (8, 16, 1, 1), {}),  # pointwise: cuBLASLt with the RELU epilogue
        ((1, 6, 8, 8), (6, 1, 3, 3), {"group": 6, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ],
)
@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv2d_relu_activation(reg, device, xs, ws, attrs, dtype, with_bias):
    # activation 'relu' is relu(conv + bias), as the Conv -> Relu pair the import fuses into it
    rng = np.random.default_rng(37)
    x, w = rand(rng, xs, dtype, -1, 1), rand(rng, ws, dtype, -1, 1)
    b = rand(rng, (ws[0],), dtype) if with_bias else None
    (y,) = run_op(reg, "conv2d", [x, w, b], {**attrs, "activation": "relu"}, device=device, staged_ok=True)
    full = {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "group": 1, **attrs}
    ref = _conv_ref(x, w, b, full["strides"], full["pads"], full["dilations"], full["group"], y.shape[2:])
    check_close(y, np.maximum(ref, 0.0), dtype)
    assert (as64(y) >= 0).all()


def test_conv2d_refuses_an_unknown_activation(reg):
    with pytest.raises(pl.PipeLinkError, match="activation"):
        reg.get("conv2d").resolve_attrs({"activation": "gelu"}, where="t")


@pytest.mark.parametrize(
    ("xs", "ws", "attrs"),
    [
        ((2, 8, 9, 9), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # ResNet's second conv of a block
        ((4, 16, 6, 6), (8, 16, 1, 1), {}),  # pointwise: the residual is put in y before the product
        ((1, 6, 8, 8), (6, 1, 3, 3), {"group": 6, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ],
)
@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("activation", ["relu", "none"])
def test_conv2d_residual_is_added_before_the_activation(
    reg, device, xs, ws, attrs, dtype, with_bias, activation
):
    rng = np.random.default_rng(41)
    x, w = rand(rng, xs, dtype, -1, 1), rand(rng, ws, dtype, -1, 1)
    b = rand(rng, (ws[0],), dtype) if with_bias else None
    full = {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "group": 1, **attrs}
    ho = (xs[2] + full["pads"][0] + full["pads"][2] - ws[2]) // full["strides"][0] + 1
    wo = (xs[3] + full["pads"][1] + full["pads"][3] - ws[3]) // full["strides"][1] + 1
    r = rand(rng, (xs[0], ws[0], ho, wo), dtype, -1, 1)
    (y,) = run_op(
        reg, "conv2d", [x, w, b, r], {**attrs, "activation": activation}, device=device, staged_ok=True
    )
    ref = _conv_ref(x, w, b, full["strides"], full["pads"], full["dilations"], full["group"], y.shape[2:])
    ref = ref + as64(r)
    check_close(y, np.maximum(ref, 0.0) if activation == "relu" else ref, dtype)


def test_conv2d_refuses_a_residual_of_another_shape(reg):
    x, w = np.zeros((1, 2, 5, 5), np.float32), np.zeros((3, 2, 3, 3), np.float32)
    r = np.zeros((1, 3, 5, 5), np.float32)  # the output is [1, 3, 3, 3]
    with pytest.raises(ShapeMismatchError, match="residual.*output.s shape"):
        run_op(reg, "conv2d", [x, w, None, r], {})
