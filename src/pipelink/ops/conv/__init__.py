"""Convolution over 2 or 3 spatial axes (ONNX Conv, ConvTranspose; NCHW and NCDHW): descriptors and shape
rules of conv2d, conv3d, conv_transpose2d and conv_transpose3d; the deformable and col2im operators.

The four share one shape rule per kind, one NumPy reference (``reference.py``) and one CUDA bind
(``cuda.py``), each reading the rank from x's shape. On CUDA all four run cuDNN, except a pointwise conv2d
or conv3d (kernel of ones, strides 1, no pads, group 1), which runs cuBLASLt as a batched GEMM (variant
``cuda:cublaslt``, ranked first; it declines every other stage); where cuDNN is missing or declines a
stage (and for float64 outside the GEMM form), the reference runs on staged host copies and the load
report says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ...descriptor import Attr, OperatorDescriptor, Port
from ...errors import InvalidArgumentError, ShapeMismatchError
from ...shapes import unify
from .._common import FLOATS, builtin_operator
from .._dims import derived, is_known
from ..cudnn_graph import CUDNN_VARIANT
from ..kernel import cuda_variant
from . import col2im, cuda, deform, deform_im2col
from .reference import bind_conv, bind_conv_transpose, conv_name, conv_transpose_name
from .window import PADS_ORDER, SPATIAL_AXES, transpose_geometry, window_attrs, window_nd

__all__ = ["descriptors", "infer_conv", "infer_conv_transpose", "transpose_geometry"]


def _kernel_axes(rank: int) -> list[str]:
    """``kH, kW`` / ``kD, kH, kW``: the names of w's kernel axes."""
    return [f"k{axis}" for axis in SPATIAL_AXES[rank]]


def _out_layout(rank: int) -> str:
    """``[N, M, H_out, W_out]`` / ``[N, M, D_out, H_out, W_out]``."""
    return f"[N, M, {', '.join(f'{axis}_out' for axis in SPATIAL_AXES[rank])}]"


def _check_groups(op: str, channels, group: int, per_group, out_channels, *, w_layout: str):
    """``group >= 1``, ``channels == per_group * group`` and ``group`` divides the output channels."""
    if group < 1:
        raise InvalidArgumentError(
            f"{op}: attribute 'group' must be >= 1 (got {group})", attr="group", got=group
        )
    if is_known(channels, per_group) and channels != per_group * group:
        raise ShapeMismatchError(
            f"{op}: input 'x' has {channels} channels, but weight 'w' {w_layout} expects {per_group} per "
            f"group x {group} groups = {per_group * group}",
            port="w",
            symbol="C",
            expected=channels,
            got=per_group * group,
        )
    if is_known(out_channels) and out_channels % group:
        raise ShapeMismatchError(
            f"{op}: {out_channels} output channels cannot be split into {group} groups",
            port="w",
            symbol="M",
            expected=f"a multiple of {group}",
            got=out_channels,
        )


def _check_bias(op: str, bias_shape, out_channels) -> None:
    if bias_shape is not None and unify(tuple(bias_shape)[0], out_channels) is None:
        raise ShapeMismatchError(
            f"{op}: bias 'b' has {tuple(bias_shape)[0]} entries, but the output has {out_channels} channels",
            port="b",
            symbol="M",
            expected=out_channels,
            got=tuple(bias_shape)[0],
        )


def _check_residual(op: str, shape: tuple, out: tuple) -> None:
    """A convolution's ``residual`` has the output's shape exactly (it is added before the activation)."""
    same = len(shape) == len(out) and all(unify(a, b) is not None for a, b in zip(shape, out, strict=True))
    if not same:
        raise ShapeMismatchError(
            f"{op}: input 'residual' has shape {list(shape)}, but the output is {list(out)}; the residual "
            "is added to the output element by element, so give it the output's shape",
            port="residual",
            expected=list(out),
            got=list(shape),
        )


def infer_conv(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of conv2d and conv3d: ``[N, M, *out]`` with ONNX's window arithmetic per spatial axis.

    Raises
    ------
    InvalidArgumentError, ShapeMismatchError
        Groups that do not divide the channels, bad window attributes, a kernel larger than the padded
        input, a residual of another shape.
    """
    x_shape, w_shape = tuple(in_shapes[0]), tuple(in_shapes[1])
    rank = len(x_shape) - 2
    op = conv_name(rank)
    (n, c, *sizes), (m, cg, *kernel) = x_shape, w_shape
    layout = f"[M, C/group, {', '.join(_kernel_axes(rank))}]"
    _check_groups(op, c, int(attrs["group"]), cg, m, w_layout=layout)
    if not is_known(*kernel):
        out = (n, m, *(derived(op, size) for size in sizes))
    else:
        out = (n, m) + window_nd(tuple(sizes), tuple(kernel), attrs, op=op).out
    if len(in_shapes) > 3 and in_shapes[3] is not None:
        _check_residual(op, tuple(in_shapes[3]), out)
    return (out,), (in_dtypes[0],)


def infer_conv_transpose(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of conv_transpose2d and conv_transpose3d: ``[N, M, *out]``, ``M = w.shape[1] * group``
    (:func:`~pipelink.ops.conv.window.transpose_geometry` per spatial axis).

    Raises
    ------
    InvalidArgumentError, ShapeMismatchError
        w's channels other than x's, a group that does not divide them, a bias of another length, bad
        attributes, pads that crop the whole output.
    """
    x_shape, w_shape = tuple(in_shapes[0]), tuple(in_shapes[1])
    rank = len(x_shape) - 2
    op = conv_transpose_name(rank)
    (n, c, *sizes), (cw, mg, *kernel) = x_shape, w_shape
    group = int(attrs["group"])
    m = mg * group if is_known(mg) else derived(op, mg, group)
    if unify(c, cw) is None:
        raise ShapeMismatchError(
            f"{op}: input 'x' has {c} channels, but weight 'w' [C, M/group, {', '.join(_kernel_axes(rank))}] "
            f"has {cw}",
            port="w",
            symbol="C",
            expected=c,
            got=cw,
        )
    if group < 1 or (is_known(c) and c % group):
        raise InvalidArgumentError(
            f"{op}: attribute 'group' must be >= 1 and divide the {c} input channels (got {group})",
            attr="group",
            got=group,
        )
    _check_bias(op, in_shapes[2], m)
    out, _ = transpose_geometry(tuple(sizes), tuple(kernel), attrs, op=op)
    return ((n, m) + out,), (in_dtypes[0],)


def _with_gemm_variant(desc: OperatorDescriptor) -> OperatorDescriptor:
    """A convolution's pointwise GEMM variant, tried before cuDNN (priority 1); it declines the other
    stages."""
    gemm = cuda_variant(cuda.bind_conv_gemm, cuda.GEMM_DTYPES, name=cuda.CUBLASLT_VARIANT)
    desc.variants.append(dataclasses.replace(gemm, priority=1))
    return desc


_GROUP = "channel groups (C and M both split into group parts)"


def _conv(rank: int) -> OperatorDescriptor:
    """conv2d (NCHW) or conv3d (NCDHW)."""
    axes, kernel = list(SPATIAL_AXES[rank]), _kernel_axes(rank)
    layout, out = "NC" + "".join(axes), _out_layout(rank)
    return _with_gemm_variant(
        builtin_operator(
            conv_name(rank),
            doc=f"{rank}-d convolution (cross-correlation) of {layout} x with weights w: "
            "y = activation(conv(x, w) + b + residual).",
            inputs=[
                Port("x", shape=["N", "C", *axes], dtype="T"),
                Port("w", shape=["M", "Cg", *kernel], dtype="T", doc=f"[M, C/group, {', '.join(kernel)}]"),
                Port("b", shape=["M"], dtype="T", optional=True, doc="per output channel"),
                Port(
                    "residual",
                    dtype="T",
                    optional=True,
                    doc=f"{out}, added before the activation (ResNet's shortcut)",
                ),
            ],
            outputs=[Port("y", dtype="T", doc=out)],
            attrs=window_attrs(rank=rank)
            + [
                Attr("group", "int", 1, doc=_GROUP),
                Attr(
                    "activation",
                    "str",
                    "none",
                    choices=cuda.CONV_ACTIVATIONS,
                    doc="applied after the bias and the residual (the import fuses a Relu that reads "
                    "a Conv, or a Conv's Add)",
                ),
            ],
            dtype_vars={"T": FLOATS},
            variant_dtypes=FLOATS,
            infer=infer_conv,
            bind=bind_conv,
            cuda=cuda_variant(cuda.bind_conv, cuda.CONV_DTYPES, name=CUDNN_VARIANT),
            staged_fallback=True,
            onnx="Conv",
        )
    )


def _conv_transpose(rank: int) -> OperatorDescriptor:
    """conv_transpose2d (NCHW) or conv_transpose3d (NCDHW)."""
    axes, kernel = list(SPATIAL_AXES[rank]), _kernel_axes(rank)
    layout = "NC" + "".join(axes)
    return builtin_operator(
        conv_transpose_name(rank),
        doc=f"{rank}-d transposed convolution (the gradient of {conv_name(rank)}) of {layout} x.",
        inputs=[
            Port("x", shape=["N", "C", *axes], dtype="T"),
            Port("w", shape=["Cw", "Mg", *kernel], dtype="T", doc=f"[C, M/group, {', '.join(kernel)}]"),
            Port("b", shape=["M"], dtype="T", optional=True, doc="per output channel"),
        ],
        outputs=[Port("y", dtype="T", doc=_out_layout(rank))],
        attrs=[
            Attr("strides", "ints", (1,) * rank, doc="input position spacing in the output"),
            Attr("pads", "ints", (0,) * (2 * rank), doc=f"{PADS_ORDER[rank]} cropped off"),
            Attr(
                "output_padding",
                "ints",
                (0,) * rank,
                doc="extra output positions at the end of each spatial axis",
            ),
            Attr("dilations", "ints", (1,) * rank, doc="spacing of the kernel's taps"),
            Attr("group", "int", 1, doc=_GROUP),
        ],
        dtype_vars={"T": FLOATS},
        variant_dtypes=FLOATS,
        infer=infer_conv_transpose,
        bind=bind_conv_transpose,
        cuda=cuda_variant(cuda.bind_conv_transpose, cuda.CONV_DTYPES, name=CUDNN_VARIANT),
        staged_fallback=True,
        onnx="ConvTranspose",
    )


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of conv2d, conv3d, conv_transpose2d, conv_transpose3d and the deformable and col2im
    operators (one set per registry)."""
    return [
        _conv(2),
        _conv(3),
        _conv_transpose(2),
        _conv_transpose(3),
        *col2im.descriptors(),
        *deform.descriptors(),
        *deform_im2col.descriptors(),
    ]
