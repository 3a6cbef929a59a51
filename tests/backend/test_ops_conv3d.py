"""conv3d and conv_transpose3d (NCDHW) against tap-by-tap references written here (every tap gathers the
input at ``out * stride - pad + tap * dilation`` with index checks for the padding; the transposed one
keeps the taps whose position divides by the stride) and ONNX's reference evaluator: strides, asymmetric
pads, dilations, groups, bias, auto_pad, output_padding, the residual and relu of conv3d, 16-bit types,
empty batches, hostile attributes refused at load. Each numeric case runs on every device: on CUDA the
geometries of video and volumetric models (r3d_18, r2plus1d_18, 3-D U-Nets) must run cuDNN; the others may
run the staged reference where cuDNN declines. The last part checks the cuDNN and cuBLASLt binds of the 3-d
operators without a GPU, through the recording stand-ins of tests/unit.
"""

from __future__ import annotations

import importlib.util
import itertools
import types

import numpy as np
import pytest

from pipelink.descriptor import KernelContext, VariantDeclined
from pipelink.errors import InvalidArgumentError, OutOfMemoryError, ShapeMismatchError
from pipelink.ops.conv.cuda import (
    CUBLASLT_VARIANT,
    PointwiseGemm,
    bind_conv,
    bind_conv_gemm,
    bind_conv_transpose,
    pointwise_gemm,
)
from pipelink.ops.cudnn_graph import CUDNN_VARIANT, CuDNNKernel

from .ops_helpers import FLOAT_NAMES, as64, check_close, infer_float_shapes, make_registry, rand, run_op


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _full(attrs: dict, rank: int = 3) -> dict:
    """The attributes with their defaults filled in."""
    base = {
        "strides": [1] * rank,
        "pads": [0] * (2 * rank),
        "dilations": [1] * rank,
        "output_padding": [0] * rank,
        "group": 1,
    }
    return {**base, **attrs}


def _out_sizes(x_shape, w_shape, attrs) -> tuple[int, ...]:
    """ONNX's output size of a convolution with explicit pads."""
    a, rank = _full(attrs), len(x_shape) - 2
    return tuple(
        (x_shape[2 + i] + a["pads"][i] + a["pads"][i + rank] - (w_shape[2 + i] - 1) * a["dilations"][i] - 1)
        // a["strides"][i]
        + 1
        for i in range(rank)
    )


def conv_ref(x, w, b, attrs, out_sizes):
    """Tap by tap: y[n, m, o] += w[m, c, t] * x[n, g * Cg + c, o * s - p + t * d], zero outside x."""
    a = _full(attrs, x.ndim - 2)
    x, w = as64(x), as64(w)
    n, c, *sizes = x.shape
    m, cg, *kernel = w.shape
    group = a["group"]
    mg = m // group
    y = np.zeros((n, m, *out_sizes))
    for tap in itertools.product(*(range(k) for k in kernel)):
        index, inside = [], []
        for axis, size in enumerate(sizes):
            pos = (
                np.arange(out_sizes[axis]) * a["strides"][axis]
                - a["pads"][axis]
                + tap[axis] * a["dilations"][axis]
            )
            inside.append((pos >= 0) & (pos < size))
            index.append(np.clip(pos, 0, size - 1))
        mask = np.ones(out_sizes)
        for axis, ok in enumerate(inside):
            mask = mask * ok.reshape([-1 if i == axis else 1 for i in range(len(sizes))])
        taken = x[np.ix_(range(n), range(c), *index)] * mask  # [N, C, *out], 0 in the padding
        for g in range(group):
            tap_w = w[(slice(g * mg, (g + 1) * mg), slice(None), *tap)]  # [Mg, Cg]
            y[:, g * mg : (g + 1) * mg] += np.einsum(
                "nc...,mc->nm...", taken[:, g * cg : (g + 1) * cg], tap_w
            )
    if b is not None:
        y += as64(b).reshape((m,) + (1,) * len(sizes))
    return y


def conv_transpose_ref(x, w, b, attrs):
    """Gather form: y[n, g * Mg + m, o] += x[n, g * Cg + c, i] * w[g * Cg + c, m, t] wherever
    ``o + pad_begin - t * d == i * s`` for an input position i."""
    a = _full(attrs, x.ndim - 2)
    x, w = as64(x), as64(w)
    n, c, *sizes = x.shape
    _, mg, *kernel = w.shape
    rank, group = len(sizes), a["group"]
    cg = c // group
    s, p, d, extra = a["strides"], a["pads"], a["dilations"], a["output_padding"]
    out = [
        s[i] * (sizes[i] - 1) + extra[i] + (kernel[i] - 1) * d[i] + 1 - p[i] - p[i + rank]
        for i in range(rank)
    ]
    y = np.zeros((n, mg * group, *out))
    for tap in itertools.product(*(range(k) for k in kernel)):
        index, mask = [], np.ones(out)
        for axis in range(rank):
            th = np.arange(out[axis]) + p[axis] - tap[axis] * d[axis]
            ok = (th % s[axis] == 0) & (th >= 0) & (th // s[axis] < sizes[axis])
            index.append(np.clip(th // s[axis], 0, sizes[axis] - 1))
            mask = mask * ok.reshape([-1 if i == axis else 1 for i in range(rank)])
        taken = x[np.ix_(range(n), range(c), *index)] * mask
        for g in range(group):
            tap_w = w[(slice(g * cg, (g + 1) * cg), slice(None), *tap)]  # [Cg, Mg]
            y[:, g * mg : (g + 1) * mg] += np.einsum(
                "nc...,cm->nm...", taken[:, g * cg : (g + 1) * cg], tap_w
            )
    if b is not None:
        y += as64(b).reshape((mg * group,) + (1,) * rank)
    return y


CONV3D_CASES = [
    # x shape, w shape, attrs
    ((2, 3, 5, 6, 7), (4, 3, 3, 3, 3), {}),
    ((1, 4, 7, 6, 9), (6, 2, 3, 2, 3), {"strides": [2, 1, 3], "pads": [1, 0, 2, 0, 1, 1], "group": 2}),
    ((2, 3, 6, 8, 7), (5, 3, 2, 3, 3), {"dilations": [2, 1, 3], "pads": [1, 1, 3, 1, 1, 3]}),
    ((1, 6, 5, 8, 8), (6, 1, 3, 3, 3), {"group": 6, "strides": [1, 2, 2], "pads": [1] * 6}),  # depthwise
    ((2, 5, 4, 5, 6), (3, 5, 1, 1, 1), {}),  # pointwise
    ((3, 4, 5, 5, 5), (2, 4, 1, 1, 1), {"strides": [2, 3, 1]}),  # 1x1x1 with strides (r3d's shortcut)
    ((0, 2, 4, 4, 4), (3, 2, 3, 3, 3), {}),  # empty batch
    ((2, 4, 4, 9, 9), (8, 4, 1, 3, 3), {"pads": [0, 1, 1, 0, 1, 1]}),  # r2plus1d's spatial (1, 3, 3)
    ((2, 8, 7, 5, 5), (4, 8, 3, 1, 1), {"pads": [1, 0, 0, 1, 0, 0], "strides": [2, 1, 1]}),  # its temporal
]


@pytest.mark.parametrize(("xs", "ws", "attrs"), CONV3D_CASES)
@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv3d_against_the_tap_by_tap_sum(reg, device, rng, xs, ws, attrs, dtype, with_bias):
    x, w = rand(rng, xs, dtype, -1, 1), rand(rng, ws, dtype, -1, 1)
    b = rand(rng, (ws[0],), dtype) if with_bias else None
    (y,) = run_op(reg, "conv3d", [x, w, b], attrs, device=device, staged_ok=True)
    assert y.shape == (xs[0], ws[0]) + _out_sizes(xs, ws, attrs)
    check_close(y, conv_ref(x, w, b, attrs, y.shape[2:]), dtype)


CONV_TRANSPOSE3D_CASES = [
    ((2, 3, 3, 4, 3), (3, 2, 3, 3, 3), {}),
    (
        (1, 4, 3, 3, 2),
        (4, 3, 3, 2, 3),
        {"strides": [2, 3, 1], "pads": [1, 0, 0, 0, 1, 1], "output_padding": [1, 2, 0]},
    ),
    ((1, 4, 3, 4, 3), (4, 1, 2, 3, 2), {"group": 2, "dilations": [2, 1, 3], "strides": [2, 2, 1]}),
    ((2, 6, 3, 3, 3), (6, 2, 2, 2, 2), {"group": 3, "strides": [2, 2, 2]}),
    ((2, 8, 4, 3, 5), (8, 4, 1, 1, 1), {}),  # 1x1x1
    ((0, 2, 3, 3, 3), (2, 2, 2, 2, 2), {"strides": [2, 2, 2]}),  # empty batch
]


@pytest.mark.parametrize(("xs", "ws", "attrs"), CONV_TRANSPOSE3D_CASES)
@pytest.mark.parametrize("dtype", FLOAT_NAMES)
def test_conv_transpose3d_against_the_gather_sum(reg, device, rng, xs, ws, attrs, dtype):
    x, w = rand(rng, xs, dtype, -1, 1), rand(rng, ws, dtype, -1, 1)
    b = rand(rng, (ws[1] * attrs.get("group", 1),), dtype)
    for _ in range(2):  # the uncropped accumulator kept by bind must be cleared between runs
        (y,) = run_op(reg, "conv_transpose3d", [x, w, b], attrs, device=device, staged_ok=True)
    check_close(y, conv_transpose_ref(x, w, b, attrs), dtype)


# Geometries of video and volumetric models: cuDNN must serve them on CUDA (run_op fails on a decline).
MODEL_CASES = [
    (
        "conv3d",
        (2, 3, 4, 28, 28),
        (16, 3, 3, 7, 7),
        {"strides": [1, 2, 2], "pads": [1, 3, 3, 1, 3, 3]},
    ),  # r3d
    ("conv3d", (2, 16, 4, 14, 14), (16, 16, 3, 3, 3), {"pads": [1] * 6}),
    ("conv3d", (2, 16, 4, 14, 14), (32, 16, 1, 1, 1), {"strides": [2, 2, 2]}),  # r3d's downsample
    ("conv3d", (2, 8, 4, 14, 14), (12, 8, 1, 3, 3), {"pads": [0, 1, 1, 0, 1, 1]}),  # r2plus1d spatial
    ("conv3d", (2, 12, 4, 14, 14), (8, 12, 3, 1, 1), {"pads": [1, 0, 0, 1, 0, 0]}),  # r2plus1d temporal
    ("conv3d", (1, 16, 6, 10, 10), (16, 4, 3, 3, 3), {"pads": [1] * 6, "group": 4}),
    ("conv_transpose3d", (2, 16, 4, 6, 6), (16, 8, 2, 2, 2), {"strides": [2, 2, 2]}),  # 3-D U-Net's up
    ("conv_transpose3d", (1, 8, 3, 5, 5), (8, 4, 4, 4, 4), {"strides": [2, 2, 2], "pads": [1] * 6}),
    ("conv_transpose3d", (1, 8, 3, 4, 4), (8, 4, 3, 3, 3), {"strides": [2, 2, 2], "output_padding": [1] * 3}),
]


@pytest.mark.parametrize(("op", "xs", "ws", "attrs"), MODEL_CASES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_model_geometries_run_cudnn_on_cuda(reg, device, rng, op, xs, ws, attrs, dtype):
    x, w = rand(rng, xs, dtype, -1, 1), rand(rng, ws, dtype, -1, 1)
    group = attrs.get("group", 1)
    b = rand(rng, (ws[0] if op == "conv3d" else ws[1] * group,), dtype)
    (y,) = run_op(reg, op, [x, w, b], attrs, device=device)
    ref = conv_ref(x, w, b, attrs, y.shape[2:]) if op == "conv3d" else conv_transpose_ref(x, w, b, attrs)
    # Sums of up to 432 products accumulated in float32: the float32 tolerance grows with the reduction.
    k = (ws[1] if op == "conv3d" else ws[0] // group) * ws[2] * ws[3] * ws[4]
    if dtype == "float32":
        np.testing.assert_allclose(as64(y), ref, rtol=1e-5, atol=1e-6 * k)
    else:
        check_close(y, ref, dtype)


@pytest.mark.parametrize(
    ("xs", "ws", "attrs"),
    [
        ((2, 8, 4, 6, 6), (8, 8, 3, 3, 3), {"pads": [1] * 6}),  # r3d's second conv of a block
        ((2, 8, 3, 4, 5), (6, 8, 1, 1, 1), {}),  # pointwise: the GEMM form on CUDA
        ((1, 6, 4, 6, 6), (6, 1, 3, 3, 3), {"group": 6, "strides": [1, 2, 2], "pads": [1] * 6}),
    ],
)
@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize(("with_residual", "activation"), [(False, "relu"), (True, "relu"), (True, "none")])
def test_conv3d_residual_and_relu_follow_the_bias_in_order(
    reg, device, rng, xs, ws, attrs, dtype, with_bias, with_residual, activation
):
    # wrong if the residual were added after the relu, or the relu before the bias
    x, w = rand(rng, xs, dtype, -1, 1), rand(rng, ws, dtype, -1, 1)
    b = rand(rng, (ws[0],), dtype) if with_bias else None
    out = (xs[0], ws[0]) + _out_sizes(xs, ws, attrs)
    r = rand(rng, out, dtype, -1, 1) if with_residual else None
    call = {**attrs, "activation": activation}
    (y,) = run_op(reg, "conv3d", [x, w, b, r], call, device=device, staged_ok=True)
    ref = conv_ref(x, w, b, attrs, out[2:]) + (0.0 if r is None else as64(r))
    check_close(y, np.maximum(ref, 0.0) if activation == "relu" else ref, dtype)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize(("strides", "dilations"), [([2, 1, 3], [1, 1, 1]), ([1, 2, 2], [2, 1, 2])])
def test_conv3d_auto_pad_is_the_explicit_pads_onnx_implies(reg, device, rng, auto_pad, strides, dilations):
    xs, ws = (1, 2, 7, 8, 6), (3, 2, 3, 2, 3)
    x, w = rand(rng, xs, "float32"), rand(rng, ws, "float32")
    attrs = {"auto_pad": auto_pad, "strides": strides, "dilations": dilations}
    (y,) = run_op(reg, "conv3d", [x, w], attrs, device=device, staged_ok=True)
    pads_begin, pads_end = [], []
    for axis in range(3):
        size, s, extent = xs[2 + axis], strides[axis], (ws[2 + axis] - 1) * dilations[axis] + 1
        total = 0 if auto_pad == "VALID" else max(0, (-(-size // s) - 1) * s + extent - size)
        small, large = total // 2, total - total // 2
        begin, end = (small, large) if auto_pad != "SAME_LOWER" else (large, small)
        pads_begin.append(begin)
        pads_end.append(end)
        if auto_pad != "VALID":
            assert y.shape[2 + axis] == -(-size // s)  # SAME: out = ceil(in / stride)
    explicit = {"strides": strides, "dilations": dilations, "pads": pads_begin + pads_end}
    check_close(y, conv_ref(x, w, None, explicit, y.shape[2:]))


def test_conv3d_of_unit_depth_is_conv2d(reg, device, rng):
    # the 3-d operator over D = 1 with a kernel of depth 1 must be the 2-d one: wrong if an axis were mixed up
    x, w, b = (
        rand(rng, (2, 4, 1, 9, 7), "float32"),
        rand(rng, (6, 2, 1, 3, 2), "float32"),
        rand(rng, (6,), "float32"),
    )
    three = {"strides": [1, 2, 1], "pads": [0, 1, 0, 0, 2, 1], "dilations": [1, 1, 2], "group": 2}
    two = {"strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2], "group": 2}
    (y3,) = run_op(reg, "conv3d", [x, w, b], three, device=device, staged_ok=True)
    (y2,) = run_op(reg, "conv2d", [x[:, :, 0], w[:, :, 0], b], two, device=device, staged_ok=True)
    check_close(y3[:, :, 0], as64(y2))
    xt, wt = rand(rng, (1, 4, 1, 3, 4), "float32"), rand(rng, (4, 3, 1, 3, 2), "float32")
    three_t = {"strides": [1, 2, 3], "pads": [0, 1, 0, 0, 0, 1], "output_padding": [0, 1, 2]}
    two_t = {"strides": [2, 3], "pads": [1, 0, 0, 1], "output_padding": [1, 2]}
    (z3,) = run_op(reg, "conv_transpose3d", [xt, wt], three_t, device=device, staged_ok=True)
    (z2,) = run_op(reg, "conv_transpose2d", [xt[:, :, 0], wt[:, :, 0]], two_t, device=device, staged_ok=True)
    check_close(z3[:, :, 0], as64(z2))


@pytest.mark.parametrize(
    ("op", "xs", "ws", "attrs"),
    [
        (
            "conv3d",
            (1, 4, 7, 6, 9),
            (6, 2, 3, 2, 3),
            {"strides": [2, 1, 3], "pads": [1, 0, 2, 0, 1, 1], "group": 2},
        ),
        ("conv3d", (2, 3, 6, 8, 7), (4, 3, 2, 3, 3), {"dilations": [2, 1, 3], "auto_pad": "SAME_UPPER"}),
        ("conv3d", (2, 3, 7, 8, 6), (4, 3, 3, 3, 2), {"auto_pad": "SAME_LOWER", "strides": [2, 3, 2]}),
        ("conv3d", (1, 2, 5, 6, 7), (3, 2, 3, 3, 3), {"auto_pad": "VALID", "strides": [1, 2, 3]}),
        (
            "conv_transpose3d",
            (2, 3, 3, 4, 3),
            (3, 2, 3, 3, 3),
            {"strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1]},
        ),
        (
            "conv_transpose3d",
            (1, 4, 3, 3, 2),
            (4, 3, 3, 2, 3),
            {"strides": [2, 3, 2], "output_padding": [1, 2, 1], "dilations": [1, 1, 2]},
        ),
    ],
)
def test_3d_convolutions_match_onnx(reg, device, rng, op, xs, ws, attrs):
    pytest.importorskip("onnx")
    from .onnx_oracle import run_onnx

    x, w = rand(rng, xs, "float32"), rand(rng, ws, "float32")
    b = rand(rng, (ws[0] if op == "conv3d" else ws[1],), "float32")
    (y,) = run_op(reg, op, [x, w, b], attrs, device=device, staged_ok=True)
    (ref,) = run_onnx("Conv" if op == "conv3d" else "ConvTranspose", [x, w, b], attrs)
    np.testing.assert_allclose(as64(y), ref.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_symbolic_dims_pass_through(reg):
    (shape,) = infer_float_shapes(reg, "conv3d", [("N", 3, "D", 8, 8), (4, 3, 3, 3, 3)], {"pads": [1] * 6})
    assert shape[:2] == ("N", 4) and shape[3:] == (8, 8) and isinstance(shape[2], str)
    shapes = [("N", 4, 3, 3, 3), (4, 2, 2, 2, 2)]
    (shape,) = infer_float_shapes(reg, "conv_transpose3d", shapes, {"strides": [2] * 3})
    assert shape == ("N", 2, 6, 6, 6)


@pytest.mark.gpu
@pytest.mark.skipif(
    importlib.util.find_spec("nvmath") is None,
    reason="cuBLASLt runs through nvmath-python ('pipelink[cuda]')",
)
@pytest.mark.parametrize("xs", [(1, 3, 2, 7, 5), (3, 13, 4, 9, 11), (2, 64, 4, 14, 14)])
@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_pointwise_conv3d_runs_cublaslt_on_cuda(reg, rng, xs, dtype, with_bias):
    # batch 1, odd D*H*W, channels that are not a multiple of 8: the GEMM form of a 1x1x1 convolution
    x, w = rand(rng, xs, dtype, -1, 1), rand(rng, (21, xs[1], 1, 1, 1), dtype, -1, 1)
    b = rand(rng, (21,), dtype) if with_bias else None
    (y,) = run_op(reg, "conv3d", [x, w, b], {}, device="cuda", variant_name=CUBLASLT_VARIANT)
    check_close(y, conv_ref(x, w, b, {}, xs[2:]), dtype)


# -- refusals at load ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("shapes", "attrs", "error", "match"),
    [
        (
            [(1, 4, 5, 5, 5), (2, 3, 3, 3, 3)],
            {},
            ShapeMismatchError,
            r"4 channels, but weight 'w' \[M, C/group, kD",
        ),
        (
            [(1, 4, 5, 5, 5), (3, 2, 3, 3, 3)],
            {"group": 2},
            ShapeMismatchError,
            "cannot be split into 2 groups",
        ),
        ([(1, 4, 5, 5, 5), (4, 1, 3, 3, 3)], {"group": 3}, ShapeMismatchError, "4 channels"),
        ([(1, 4, 5, 5, 5), (4, 4, 3, 3, 3)], {"group": 0}, InvalidArgumentError, "'group' must be >= 1"),
        ([(1, 2, 2, 5, 5), (1, 2, 3, 3, 3)], {}, ShapeMismatchError, "does not fit in spatial axis 0"),
        ([(1, 2, 4, 4, 4), (1, 2, 3, 3, 3)], {"dilations": [1, 1, 2]}, ShapeMismatchError, "does not fit"),
        (
            [(1, 2, 5, 5, 5), (1, 2, 3, 3, 3)],
            {"pads": [1, 1, 1, 1]},
            InvalidArgumentError,
            "'pads' must have 6",
        ),
        (
            [(1, 2, 5, 5, 5), (1, 2, 3, 3, 3)],
            {"strides": [1, 0, 1]},
            InvalidArgumentError,
            "'strides' must be >= 1",
        ),
        (
            [(1, 2, 5, 5, 5), (1, 2, 3, 3, 3)],
            {"strides": [1, -2, 1]},
            InvalidArgumentError,
            "'strides' must be >= 1",
        ),
        (
            [(1, 2, 5, 5, 5), (1, 2, 3, 3, 3)],
            {"strides": [1, 1]},
            InvalidArgumentError,
            "'strides' must have 3",
        ),
        ([(1, 2, 5, 5, 5), (1, 2, 3, 3, 3)], {"dilations": [0, 1, 1]}, InvalidArgumentError, "'dilations'"),
        ([(1, 2, 5, 5, 5), (1, 2, 3, 3, 3)], {"pads": [-1, 0, 0, 0, 0, 0]}, InvalidArgumentError, "'pads'"),
        (
            [(1, 2, 5, 5, 5), (1, 2, 3, 3, 3)],
            {"pads": [1] * 6, "auto_pad": "SAME_UPPER"},
            InvalidArgumentError,
            "cannot be combined",
        ),
        ([(1, 2, 5, 5, 5), (3, 2, 3, 3, 3), (4,)], {}, ShapeMismatchError, "input 'b'.*dimension M is 4"),
        ([(1, 2, 5, 5, 5), (3, 2, 3, 3, 3), None, (1, 3, 3, 3, 4)], {}, ShapeMismatchError, "residual"),
        ([(1, 2, 5, 5), (3, 2, 3, 3, 3)], {}, ShapeMismatchError, "expects 5 dimensions"),
        ([(1, 2, 5, 5, 5), (3, 2, 3, 3)], {}, ShapeMismatchError, "expects 5 dimensions"),
    ],
)
def test_conv3d_refusals(reg, shapes, attrs, error, match):
    with pytest.raises(error, match=match):
        infer_float_shapes(reg, "conv3d", shapes, attrs)


@pytest.mark.parametrize(
    ("shapes", "attrs", "error", "match"),
    [
        (
            [(1, 2, 3, 3, 3), (2, 1, 3, 3, 3)],
            {"output_padding": [0, 1, 0]},
            InvalidArgumentError,
            "output_padding",
        ),
        (
            [(1, 2, 3, 3, 3), (3, 1, 3, 3, 3)],
            {},
            ShapeMismatchError,
            r"weight 'w' \[C, M/group, kD, kH, kW\]",
        ),
        (
            [(1, 3, 3, 3, 3), (3, 1, 3, 3, 3)],
            {"group": 2},
            InvalidArgumentError,
            "divide the 3 input channels",
        ),
        (
            [(1, 2, 3, 3, 3), (2, 1, 3, 3, 3), (3,)],
            {"group": 2},
            ShapeMismatchError,
            "bias 'b' has 3 entries",
        ),
        ([(1, 2, 1, 1, 1), (2, 1, 1, 1, 1)], {"pads": [0, 0, 1, 0, 0, 1]}, ShapeMismatchError, "remove more"),
        ([(1, 2, 3, 3, 3), (2, 1, 3, 3, 3)], {"strides": [0, 1, 1]}, InvalidArgumentError, "'strides'"),
        ([(1, 2, 3, 3, 3), (2, 1, 3, 3, 3)], {"pads": [0] * 4}, InvalidArgumentError, "'pads' must have 6"),
        ([(1, 2, 3, 3, 3), (2, 1, 3, 3, 3)], {"output_padding": [0, 0]}, InvalidArgumentError, "must have 3"),
        ([(1, 2, 3, 3, 3), (2, 1, 0, 3, 3)], {}, InvalidArgumentError, "'kernel_shape' must be >= 1"),
    ],
)
def test_conv_transpose3d_refusals(reg, shapes, attrs, error, match):
    with pytest.raises(error, match=match):
        infer_float_shapes(reg, "conv_transpose3d", shapes, attrs)


def test_hostile_sizes_are_refused_before_allocating(reg):
    # a dilation of 2**40 and a pad to match fit a depth of 2: the padded input would take 4 TiB
    x, w = np.zeros((1, 1, 2, 2, 2), np.float32), np.zeros((1, 1, 2, 1, 1), np.float32)
    attrs = {"dilations": [2**40, 1, 1], "pads": [2**40 - 1, 0, 0, 0, 0, 0]}
    with pytest.raises(OutOfMemoryError, match="conv3d's padded input"):
        run_op(reg, "conv3d", [x, w], attrs)
    # the transposed one scatters into 2**40 + 1 positions before its pads crop them to one
    attrs = {"dilations": [2**40, 1, 1], "pads": [2**40, 0, 0, 0, 0, 0]}
    with pytest.raises(OutOfMemoryError, match="conv_transpose3d's uncropped output"):
        run_op(reg, "conv_transpose3d", [x[:, :, :1], w], attrs)


@pytest.mark.parametrize(
    ("op", "attrs"), [("conv3d", {"pads": [2**40] * 6}), ("conv_transpose3d", {"strides": [2**40, 1, 1]})]
)
def test_a_huge_output_is_refused_at_load_before_allocating(op, attrs):
    import pipelink as pl

    config = {
        "inputs": {
            "x": {"shape": [1, 2, 3, 3, 3], "dtype": "float32"},
            "w": {"shape": [2, 2, 2, 2, 2], "dtype": "float32"},
        },
        "pipeline": [{"name": op, "inputs": ["x", "w"], "outputs": ["y"], "attrs": attrs}],
    }
    with pytest.raises(OutOfMemoryError, match="the output 'y' allocation needs"):
        pl.load(config, device="cpu")


def test_unknown_activation_is_refused(reg):
    with pytest.raises(InvalidArgumentError, match="activation"):
        reg.get("conv3d").resolve_attrs({"activation": "gelu"}, where="t")


def test_3d_operators_rank_cublaslt_then_cudnn_like_the_2d_ones(reg):
    for op in ("conv2d", "conv3d"):
        cuda = [(v.name, v.priority) for v in reg.get(op).variants if v.device == "cuda"]
        assert sorted(cuda, key=lambda v: -v[1])[0][0] == CUBLASLT_VARIANT and (CUDNN_VARIANT, 0) in cuda
    transposed = [v.name for v in reg.get("conv_transpose3d").variants if v.device == "cuda"]
    assert transposed == [CUDNN_VARIANT]


# -- the CUDA binds without a GPU (cuDNN and cuBLASLt stand-ins of tests/unit) -------------------------
@pytest.fixture
def cudnn(monkeypatch):
    from tests.unit.test_cudnn_glue import fake_cudnn

    fake = fake_cudnn()
    monkeypatch.setitem(__import__("sys").modules, "cudnn", fake)
    return fake


def _ctx(in_shapes, out_shape, attrs, dtype="float16", backend=None):
    from tests.unit.test_cudnn_glue import FakeBackend

    return KernelContext(
        stage="s",
        attrs=attrs,
        in_shapes=tuple(in_shapes),
        in_dtypes=tuple(None if s is None else dtype for s in in_shapes),
        out_shapes=(out_shape,),
        out_dtypes=(dtype,),
        backend=backend or FakeBackend(),
    )


CONV3D_ATTRS = {
    "strides": [1, 2, 2],
    "pads": [0] * 6,
    "dilations": [2, 1, 1],
    "auto_pad": "SAME_UPPER",
    "group": 1,
    "activation": "relu",
}


def test_conv3d_describes_5d_tensors_and_3_axis_geometry_to_cudnn(cudnn):
    shapes = [(2, 4, 5, 8, 9), (6, 4, 3, 3, 3), (6,), (2, 6, 5, 4, 5)]
    kernel = bind_conv(_ctx(shapes, (2, 6, 5, 4, 5), CONV3D_ATTRS))
    assert isinstance(kernel, CuDNNKernel) and not kernel.post  # bias, residual and relu fused
    (graph,) = cudnn.graphs
    (conv, geometry, _), (_, bias, _), (_, residual, _), (relu, _, y) = graph.nodes
    assert (conv, relu) == ("conv_fprop", "relu")
    # SAME_UPPER: D 5, dilation 2 (extent 5), stride 1 -> 4 pads (2 + 2); H 8 stride 2 -> 1 (at the end);
    # W 9 stride 2 -> 5 needs 2 (1 + 1)
    assert geometry["pre_padding"] == [2, 0, 1] and geometry["post_padding"] == [2, 1, 1]
    assert geometry["stride"] == [1, 2, 2] and geometry["dilation"] == [2, 1, 1]
    assert geometry["image"].dim == [2, 4, 5, 8, 9] and geometry["image"].stride == [1440, 360, 72, 9, 1]
    assert geometry["weight"].dim == [6, 4, 3, 3, 3]
    assert bias["b"].dim == [1, 6, 1, 1, 1] and residual["b"].dim == [2, 6, 5, 4, 5]
    assert y.output and y.dim == [2, 6, 5, 4, 5] and y.stride == [600, 100, 20, 5, 1]


def test_a_bias_cudnn_cannot_fuse_is_added_per_channel_over_5_dims(monkeypatch):
    from tests.unit.test_conv_gemm_route import FakeBackend
    from tests.unit.test_cudnn_glue import fake_cudnn

    monkeypatch.setitem(__import__("sys").modules, "cudnn", fake_cudnn(refuse_fusion=True))
    ctx = _ctx([(2, 4, 5, 8, 9), (6, 4, 3, 3, 3), (6,)], (2, 6, 5, 4, 5), CONV3D_ATTRS, backend=FakeBackend())
    bias, relu = bind_conv(ctx).post
    # the add reads b [M] as [M, 1, 1, 1] against y [N, M, D, H, W] (collapsed to [N, M, D*H*W]): one
    # value per channel; wrong if b were read along W or D
    assert bias._slots == {"a": ("out", 0), "b": ("in", 2), "y": ("out", 0)}
    dims = [bias.plan.scalars[f"d{k}"] for k in range(3)]
    b_strides = [bias.plan.scalars[f"sb{k}"] for k in range(3)]
    assert bias.plan.kernel == "pl_binary_bcast" and dims == [2, 6, 100] and b_strides == [0, 1, 0]
    assert relu._slots == {"x": ("out", 0), "y": ("out", 0)} and relu.plan.scalars["n"] == 1200


def test_conv_transpose3d_is_the_data_gradient_with_3_axis_pads(cudnn):
    attrs = {
        "strides": [2, 1, 3],
        "pads": [1, 0, 2, 0, 1, 1],
        "output_padding": [1, 0, 2],
        "dilations": [1, 2, 1],
    }
    kernel = bind_conv_transpose(
        _ctx([(1, 4, 3, 3, 3), (4, 3, 3, 2, 3), None], (1, 3, 6, 4, 9), {**attrs, "group": 1})
    )
    ((op, geometry, y),) = cudnn.graphs[0].nodes
    assert (
        op == "conv_dgrad"
        and geometry["loss"].dim == [1, 4, 3, 3, 3]
        and geometry["filter"].dim == [4, 3, 3, 2, 3]
    )
    assert geometry["pre_padding"] == [1, 0, 2] and geometry["post_padding"] == [0, 1, 1]
    assert geometry["stride"] == [2, 1, 3] and geometry["dilation"] == [1, 2, 1]
    assert y.dim == [1, 3, 6, 4, 9] and not kernel.post


def test_pointwise_conv3d_is_one_batched_gemm_and_others_decline():
    base = {"strides": (1, 1, 1), "pads": (0,) * 6, "dilations": (1, 1, 1), "group": 1, "auto_pad": "NOTSET"}
    assert pointwise_gemm((2, 8, 3, 4, 5), (6, 8, 1, 1, 1), base) == PointwiseGemm(2, 6, 8, 60)
    for w_shape, attrs, why in [
        ((6, 8, 1, 3, 3), base, "kernel 1x3x3"),
        ((6, 8, 1, 1, 1), {**base, "strides": (1, 2, 2)}, r"strides \[1, 2, 2\]"),
        ((6, 8, 1, 1, 1), {**base, "pads": (0, 0, 1, 0, 0, 1)}, r"pads \[0, 0, 1, 0, 0, 1\]"),
    ]:
        with pytest.raises(VariantDeclined, match=f"\\({why}\\); the GEMM form needs kernel 1x1x1"):
            pointwise_gemm((2, 8, 3, 4, 5), w_shape, attrs)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("with_bias", "with_residual"), [(False, False), (True, False), (True, True)])
def test_the_cublaslt_call_computes_a_pointwise_conv3d(monkeypatch, dtype, with_bias, with_residual):
    from tests.unit import test_conv_gemm_route as route

    lt = route.FakeLt()
    bindings = types.ModuleType("nvmath.bindings")
    bindings.cublasLt = lt
    nvmath = types.ModuleType("nvmath")
    nvmath.bindings = bindings
    for name, module in (("nvmath", nvmath), ("nvmath.bindings", bindings), ("nvmath.bindings.cublasLt", lt)):
        monkeypatch.setitem(__import__("sys").modules, name, module)
    rng = np.random.default_rng(7)
    n, c, d, h, w, m = 2, 5, 3, 2, 4, 3
    x, wt = (
        rng.standard_normal((n, c, d, h, w)).astype(dtype),
        rng.standard_normal((m, c, 1, 1, 1)).astype(dtype),
    )
    bias = rng.standard_normal(m).astype(dtype) if with_bias else None
    res = rng.standard_normal((n, m, d, h, w)).astype(dtype) if with_residual else None
    attrs = {"strides": (1, 1, 1), "pads": (0,) * 6, "dilations": (1, 1, 1), "group": 1}
    ctx = KernelContext(
        stage="pw",
        attrs={**attrs, "auto_pad": "NOTSET", "activation": "relu"},
        in_shapes=(
            x.shape,
            wt.shape,
            None if bias is None else bias.shape,
            None if res is None else res.shape,
        ),
        in_dtypes=(dtype, dtype, None if bias is None else dtype, None if res is None else dtype),
        out_shapes=((n, m, d, h, w),),
        out_dtypes=(dtype,),
        backend=route.FakeBackend(),
    )
    kernel = bind_conv_gemm(ctx)
    kernel.pre = [route._replayed(p) for p in kernel.pre]
    y = np.full((n, m, d, h, w), np.nan, dtype)
    ins = [route._Tensor(x), route._Tensor(wt)] + [
        None if t is None else route._Tensor(t) for t in (bias, res)
    ]
    kernel(ins, [route._Tensor(y)], route.FakeBackend._Stream())
    assert lt.calls == 1, "one strided-batched call for the whole batch"
    want = np.einsum("mc,ncdhw->nmdhw", as64(wt[:, :, 0, 0, 0]), as64(x))
    if bias is not None:
        want += as64(bias)[None, :, None, None, None]
    if res is not None:
        want += as64(res)
    check_close(y, np.maximum(want, 0.0), dtype)
