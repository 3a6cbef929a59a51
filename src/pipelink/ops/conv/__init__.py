"""2-d convolution (ONNX Conv, ConvTranspose; NCHW): descriptors and NumPy reference kernels.

Half types are computed in float32 and rounded once on the store; padded input and accumulator buffers
are allocated in ``bind``, not per run. On CUDA both run cuDNN (``cuda.py``), except a pointwise conv2d
(kernel 1x1, strides 1, no pads, group 1), which runs cuBLASLt as a batched GEMM (variant
``cuda:cublaslt``, ranked first; it declines every other stage); where cuDNN is missing or declines a stage
(and for float64 outside the GEMM form), the reference runs on staged host copies and the load report
says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...descriptor import Attr, KernelContext, OperatorDescriptor, Port
from ...errors import InvalidArgumentError, ShapeMismatchError
from ...shapes import unify
from .._common import FLOATS, builtin_operator, compute_dtype
from .._dims import check_ints, derived, is_known
from ..cudnn_graph import CUDNN_VARIANT
from ..kernel import cuda_variant
from . import col2im, cuda, deform, deform_im2col
from .window import window_2d, window_attrs

__all__ = ["descriptors", "infer_conv2d", "infer_conv_transpose2d", "transpose_geometry"]


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


def infer_conv2d(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of conv2d: ``[N, M, H_out, W_out]`` with ONNX's window arithmetic."""
    (n, c, h, w), (m, cg, kh, kw) = tuple(in_shapes[0]), tuple(in_shapes[1])
    _check_groups("conv2d", c, int(attrs["group"]), cg, m, w_layout="[M, C/group, kH, kW]")
    if not is_known(kh, kw):
        out = (n, m, derived("conv2d", h), derived("conv2d", w))
    else:
        out = (n, m) + window_2d((h, w), (kh, kw), attrs, op="conv2d").out
    if len(in_shapes) > 3 and in_shapes[3] is not None:
        _check_residual(tuple(in_shapes[3]), out)
    return (out,), (in_dtypes[0],)


def _check_residual(shape: tuple, out: tuple) -> None:
    """conv2d's ``residual`` has the output's shape exactly (it is added before the activation)."""
    same = len(shape) == len(out) and all(unify(a, b) is not None for a, b in zip(shape, out, strict=True))
    if not same:
        raise ShapeMismatchError(
            f"conv2d: input 'residual' has shape {list(shape)}, but the output is {list(out)}; the residual "
            "is added to the output element by element, so give it the output's shape",
            port="residual",
            expected=list(out),
            got=list(shape),
        )


def transpose_geometry(in_hw: tuple, kernel: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """conv_transpose2d: the output size per axis and the full (uncropped) size the taps scatter into.

    ``out = stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - pad_begin - pad_end``.

    Raises
    ------
    InvalidArgumentError
        Bad attribute lengths or values; output_padding not smaller than the stride or the dilation.
    ShapeMismatchError
        The pads crop the whole output away.
    """
    op = "conv_transpose2d"
    strides, dilations = tuple(attrs["strides"]), tuple(attrs["dilations"])
    pads, extra = tuple(attrs["pads"]), tuple(attrs["output_padding"])
    check_ints(strides, 2, op=op, attr="strides", minimum=1)
    check_ints(dilations, 2, op=op, attr="dilations", minimum=1)
    check_ints(pads, 4, op=op, attr="pads", minimum=0)
    check_ints(extra, 2, op=op, attr="output_padding", minimum=0)
    out, full = [], []
    for axis in range(2):
        s, d, p = strides[axis], dilations[axis], extra[axis]
        if p >= s and p >= d:
            raise InvalidArgumentError(
                f"{op}: output_padding {list(extra)} must be smaller than the stride {list(strides)} or the "
                f"dilation {list(dilations)} on each axis",
                attr="output_padding",
                got=list(extra),
            )
        size = in_hw[axis]
        if not is_known(size):
            out.append(derived(op, size))
            full.append(None)
            continue
        whole = s * (size - 1) + p + (kernel[axis] - 1) * d + 1
        cropped = whole - pads[axis] - pads[axis + 2]
        if cropped < 0:
            raise ShapeMismatchError(
                f"{op}: pads {list(pads)} remove more than the {whole} output positions of spatial axis "
                f"{axis}",
                port="x",
                attr="pads",
                expected=f"<= {whole}",
                got=pads[axis] + pads[axis + 2],
            )
        out.append(cropped)
        full.append(whole)
    return tuple(out), tuple(full)


def infer_conv_transpose2d(
    in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]
) -> tuple[tuple, tuple]:
    """Output rule of conv_transpose2d: ``[N, M, H_out, W_out]``, ``M = w.shape[1] * group``."""
    (n, c, h, w), (cw, mg, kh, kw) = tuple(in_shapes[0]), tuple(in_shapes[1])
    group = int(attrs["group"])
    m = mg * group if is_known(mg) else derived("conv_transpose2d", mg, group)
    if unify(c, cw) is None:
        raise ShapeMismatchError(
            f"conv_transpose2d: input 'x' has {c} channels, but weight 'w' [C, M/group, kH, kW] has {cw}",
            port="w",
            symbol="C",
            expected=c,
            got=cw,
        )
    if group < 1 or (is_known(c) and c % group):
        raise InvalidArgumentError(
            f"conv_transpose2d: attribute 'group' must be >= 1 and divide the {c} input channels "
            f"(got {group})",
            attr="group",
            got=group,
        )
    _check_bias("conv_transpose2d", in_shapes[2], m)
    out, _ = transpose_geometry((h, w), (kh, kw), attrs)
    return ((n, m) + out,), (in_dtypes[0],)


def _conv2d_bind(ctx: KernelContext):
    x_shape, w_shape = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    n, c, h, w = x_shape
    m, cg = w_shape[0], w_shape[1]
    group = int(ctx.attrs["group"])
    mg = m // group
    relu = ctx.attrs["activation"] == "relu"
    win = window_2d((h, w), w_shape[2:], ctx.attrs, op="conv2d")
    (pt, pl), (pb, pr) = win.pads_begin, win.pads_end
    cdt = compute_dtype(ctx.in_dtypes[0])
    padded = np.zeros((n, c, h + pt + pb, w + pl + pr), cdt)  # the border stays 0 across runs
    inner = padded[:, :, pt : pt + h, pl : pl + w]
    acc = np.empty(ctx.out_shapes[0], cdt)
    (sh, sw), (dh, dw) = win.strides, win.dilations
    windows = sliding_window_view(padded, win.extent, axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]

    def kernel(inputs, outputs, stream):
        x, weight, bias, residual = inputs
        np.copyto(inner, x, casting="unsafe")
        wt = weight.astype(cdt, copy=False)
        for g in range(group):
            part = np.tensordot(
                windows[:, g * cg : (g + 1) * cg], wt[g * mg : (g + 1) * mg], axes=([1, 4, 5], [1, 2, 3])
            )  # [N, Ho, Wo, Mg]
            acc[:, g * mg : (g + 1) * mg] = part.transpose(0, 3, 1, 2)
        if bias is not None:
            np.add(acc, bias.astype(cdt, copy=False).reshape(m, 1, 1), out=acc)
        if residual is not None:
            np.add(acc, residual.astype(cdt, copy=False), out=acc)
        if relu:
            np.maximum(acc, 0, out=acc)  # NaN stays NaN, as the relu operator
        np.copyto(outputs[0], acc, casting="unsafe")

    return kernel


def _conv_transpose2d_bind(ctx: KernelContext):
    x_shape, w_shape = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    n, c, h, w = x_shape
    mg, kh, kw = w_shape[1], w_shape[2], w_shape[3]
    group = int(ctx.attrs["group"])
    cg, m = c // group, mg * group
    out_hw, full_hw = transpose_geometry((h, w), (kh, kw), ctx.attrs)
    (sh, sw), (dh, dw) = tuple(ctx.attrs["strides"]), tuple(ctx.attrs["dilations"])
    pt, pl = ctx.attrs["pads"][0], ctx.attrs["pads"][1]
    cdt = compute_dtype(ctx.in_dtypes[0])
    full = np.empty((n, m) + full_hw, cdt)
    crop = full[:, :, pt : pt + out_hw[0], pl : pl + out_hw[1]]

    def kernel(inputs, outputs, stream):
        x, weight, bias = inputs
        xc, wt = x.astype(cdt, copy=False), weight.astype(cdt, copy=False)
        full.fill(0)
        # Each input pixel scatters its kernel into the output: tap (i, j) lands at stride * pos + d * (i, j).
        for g in range(group):
            xs, ws = xc[:, g * cg : (g + 1) * cg], wt[g * cg : (g + 1) * cg]
            for i in range(kh):
                for j in range(kw):
                    tap = np.tensordot(xs, ws[:, :, i, j], axes=([1], [0])).transpose(0, 3, 1, 2)
                    full[
                        :,
                        g * mg : (g + 1) * mg,
                        i * dh : i * dh + sh * (h - 1) + 1 : sh,
                        j * dw : j * dw + sw * (w - 1) + 1 : sw,
                    ] += tap
        if bias is not None:
            np.add(crop, bias.astype(cdt, copy=False).reshape(m, 1, 1), out=crop)
        np.copyto(outputs[0], crop, casting="unsafe")

    return kernel


def _with_gemm_variant(desc: OperatorDescriptor) -> OperatorDescriptor:
    """conv2d's pointwise GEMM variant, tried before cuDNN (priority 1); it declines the other stages."""
    gemm = cuda_variant(cuda.bind_conv2d_gemm, cuda.GEMM_DTYPES, name=cuda.CUBLASLT_VARIANT)
    desc.variants.append(dataclasses.replace(gemm, priority=1))
    return desc


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of conv2d and conv_transpose2d (one set per registry)."""
    floats = {"T": FLOATS}
    group = Attr("group", "int", 1, doc="channel groups (C and M both split into group parts)")
    return [
        _with_gemm_variant(
            builtin_operator(
                "conv2d",
                doc="2-d convolution (cross-correlation) of NCHW x with weights w: "
                "y = activation(conv(x, w) + b + residual).",
                inputs=[
                    Port("x", shape=["N", "C", "H", "W"], dtype="T"),
                    Port("w", shape=["M", "Cg", "kH", "kW"], dtype="T", doc="[M, C/group, kH, kW]"),
                    Port("b", shape=["M"], dtype="T", optional=True, doc="per output channel"),
                    Port(
                        "residual",
                        dtype="T",
                        optional=True,
                        doc="[N, M, H_out, W_out], added before the activation (ResNet's shortcut)",
                    ),
                ],
                outputs=[Port("y", dtype="T", doc="[N, M, H_out, W_out]")],
                attrs=window_attrs()
                + [
                    group,
                    Attr(
                        "activation",
                        "str",
                        "none",
                        choices=cuda.CONV_ACTIVATIONS,
                        doc="applied after the bias and the residual (the import fuses a Relu that reads "
                        "a Conv, or a Conv's Add)",
                    ),
                ],
                dtype_vars=floats,
                variant_dtypes=FLOATS,
                infer=infer_conv2d,
                bind=_conv2d_bind,
                cuda=cuda_variant(cuda.bind_conv2d, cuda.CONV_DTYPES, name=CUDNN_VARIANT),
                staged_fallback=True,
                onnx="Conv",
            )
        ),
        builtin_operator(
            "conv_transpose2d",
            doc="2-d transposed convolution (the gradient of conv2d) of NCHW x.",
            inputs=[
                Port("x", shape=["N", "C", "H", "W"], dtype="T"),
                Port("w", shape=["Cw", "Mg", "kH", "kW"], dtype="T", doc="[C, M/group, kH, kW]"),
                Port("b", shape=["M"], dtype="T", optional=True, doc="per output channel"),
            ],
            outputs=[Port("y", dtype="T", doc="[N, M, H_out, W_out]")],
            attrs=[
                Attr("strides", "ints", (1, 1), doc="input pixel spacing in the output"),
                Attr("pads", "ints", (0, 0, 0, 0), doc="[top, left, bottom, right] cropped off"),
                Attr("output_padding", "ints", (0, 0), doc="extra rows/columns at the bottom/right"),
                Attr("dilations", "ints", (1, 1), doc="spacing of the kernel's taps"),
                group,
            ],
            dtype_vars=floats,
            variant_dtypes=FLOATS,
            infer=infer_conv_transpose2d,
            bind=_conv_transpose2d_bind,
            cuda=cuda_variant(cuda.bind_conv_transpose2d, cuda.CONV_DTYPES, name=CUDNN_VARIANT),
            staged_fallback=True,
            onnx="ConvTranspose",
        ),
        *col2im.descriptors(),
        *deform.descriptors(),
        *deform_im2col.descriptors(),
    ]
