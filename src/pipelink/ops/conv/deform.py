"""deform_conv2d (ONNX DeformConv-19/22, DCNv1 and DCNv2 with its mask): the descriptor, the NumPy
reference and the CUDA plan.

Each output pixel ``(oh, ow)`` of a convolution with kernel ``kh x kw`` reads its taps not on the regular
grid but at ``(oh * stride_h - pad_top + i * dilation_h + dy, ow * stride_w - pad_left + j * dilation_w +
dx)``, with ``(dy, dx)`` the tap's offset for that pixel (``offset [N, G * 2 * kh * kw, oH, oW]``, per
offset group, per tap: dy then dx), sampled bilinearly (each corner outside the image reads 0, as onnx's
reference through GridSample with zeros padding), times the tap's ``mask`` (``[N, G * kh * kw, oH, oW]``,
1 when absent); the offset group of input channel ``c`` is ``c // (C / G)``. The rest is conv2d's:
``group`` splits the channels, ``b`` is added per output channel.

The sampling (positions, corners, the columns) is ``deform_sampling.py``'s, shared with
deform_im2col.

- The reference builds, one batch element at a time, the sampled columns ``[C * kh * kw, oH * oW]`` by
  bilinear gathers from x padded by one zero pixel (:class:`ColumnSampler`; each corner index clamped
  into the border), then the grouped product with w ``[group, M / group, C / group * kh * kw]``; the
  temporaries are sized and checked (``check_fits``) at bind.
- The CUDA kernel (``deform.cu``) is direct, correct first: one thread per output element sums its
  ``C / group * kh * kw`` samples times weights, in the accumulation type (no scratch, no atomics). It
  resamples each tap once per output channel; the ONNX import runs DeformConv as ``deform_im2col``
  (the columns, ``deform_im2col.py``) and ``matmul`` instead where the sizes are known at import, and
  this operator where they are not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import Attr, KernelContext, OperatorDescriptor, Port
from ...errors import ShapeMismatchError
from ...limits import shape_nbytes
from .._common import FLOATS, builtin_operator, compute_dtype
from .._dims import is_known
from ..kernel import (
    DEFAULT_SM_COUNT,
    ArgSpec,
    LaunchPlan,
    PlanLaunch,
    cuda_variant,
    flat_grid,
    kernel_dtype,
    make_plan,
    pointer,
    sm_count_of,
    tuned_of,
    tuned_values,
)
from .deform_sampling import (
    KERNELS,
    ColumnSampler,
    DeformGeometry,
    check_columns,
    check_divides,
    check_port,
    check_sampling,
    deform_geometry,
)

__all__ = ["descriptors", "infer_deform_conv2d", "plan_deform_conv2d"]

_OP = "deform_conv2d"
_SCALARS = ("n", "C", "H", "W", "M", "Cg", "Mg", "G", "kh", "kw", "oh", "ow", "sh", "sw", "pt", "pl")


def _given(in_shapes: tuple, port: int) -> bool:
    """Whether the optional input ``port`` (3: b, 4: mask) is given."""
    return len(in_shapes) > port and in_shapes[port] is not None


def infer_deform_conv2d(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of deform_conv2d: ``[N, M, H_out, W_out]`` with conv2d's window arithmetic; offset,
    b and mask must have the shapes that implies.

    Raises
    ------
    InvalidArgumentError
        group or offset_group below 1; bad strides, pads or dilations.
    ShapeMismatchError
        Channels that the groups do not divide, a window that does not fit, an offset, bias or mask of
        another shape.
    """
    (n, c, _, _), (m, cg, kh, kw) = tuple(in_shapes[0]), tuple(in_shapes[1])
    group = int(attrs["group"])
    check_divides(_OP, "output channels (w's first dim)", m, group, "group", "w")
    if is_known(c, cg) and c != cg * group:
        raise ShapeMismatchError(
            f"{_OP}: input 'x' has {c} channels, but weight 'w' [M, C/group, kH, kW] expects {cg} per group "
            f"x {group} groups = {cg * group}",
            port="w",
            symbol="C",
            expected=c,
            got=cg * group,
        )
    if _given(in_shapes, 3):
        check_port(_OP, "b", tuple(in_shapes[3]), (m,), "[M]")
    mask = tuple(in_shapes[4]) if _given(in_shapes, 4) else None
    out_hw = check_sampling(_OP, tuple(in_shapes[0]), (kh, kw), tuple(in_shapes[2]), mask, attrs)
    return ((n, m, *out_hw),), (in_dtypes[0],)


def _conv_geometry(ctx: KernelContext) -> DeformGeometry:
    w_shape = tuple(ctx.in_shapes[1])
    return deform_geometry(ctx.in_shapes[0], w_shape[2:], ctx.attrs, m=w_shape[0])


def _deform_bind(ctx: KernelContext):
    geo = _conv_geometry(ctx)
    cdt = compute_dtype(ctx.in_dtypes[0])
    g, pixels, span = geo.group, math.prod(geo.out_hw), geo.c * geo.taps
    check_columns(ctx, geo, cdt, extra=shape_nbytes((geo.n, geo.m, pixels), cdt.itemsize))  # + acc
    sampler = ColumnSampler(geo, cdt)
    acc = np.empty((geo.n, geo.m, pixels), cdt)

    def kernel(inputs, outputs, stream):
        x, weight, offset, bias, mask = inputs
        wt = weight.astype(cdt, copy=False).reshape(g, geo.m // g, span // g)
        for b in range(geo.n):
            columns = sampler.columns(x[b], offset[b], None if mask is None else mask[b])
            np.matmul(wt, columns.reshape(g, span // g, pixels), out=acc[b].reshape(g, geo.m // g, pixels))
        if bias is not None:
            np.add(acc, bias.astype(cdt, copy=False).reshape(geo.m, 1), out=acc)
        np.copyto(outputs[0], acc.reshape(outputs[0].shape), casting="unsafe")

    return kernel


def plan_deform_conv2d(
    dtype: Any,
    geo: DeformGeometry,
    *,
    bias: bool,
    mask: bool,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan deform_conv2d of contiguous tensors with the resolved geometry ``geo``:
    ``pl_deform_conv2d(x, w, offset, b, mask, y, n, C, H, W, M, Cg, Mg, G, kh, kw, oh, ow, sh, sw, pt, pl,
    dh, dw)``.

    Raises
    ------
    InvalidArgumentError
        A dtype the kernel does not take, a bad tunable.
    """
    source = KERNELS[_OP]
    dt = kernel_dtype(dtype, _OP, source.dtypes)
    t = tuned_values(source, tuned)
    n = geo.n * geo.m * math.prod(geo.out_hw)
    macros = {"PL_T": dt.cuda_type, "PL_BIAS": int(bias), "PL_MASK": int(mask), "PL_BLOCK": t["block"]}
    values = (
        n,
        geo.c,
        geo.h,
        geo.w,
        geo.m,
        geo.c // geo.group,
        geo.m // geo.group,
        geo.offset_group,
        *geo.kernel,
        *geo.out_hw,
        *geo.strides,
        *geo.pads_begin,
    )
    scalars: dict[str, Any] = dict(zip(_SCALARS, values, strict=True))
    scalars.update(dh=geo.dilations[0], dw=geo.dilations[1])
    specs = [
        pointer("x"),
        pointer("w"),
        pointer("offset"),
        pointer("b", optional=True),
        pointer("mask", optional=True),
        pointer("y"),
        *[ArgSpec(k, "i64") for k in (*_SCALARS, "dh", "dw")],
    ]
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(source, "pl_deform_conv2d", macros, grid, t["block"], specs, scalars, dict(t))


def _deform_cuda_bind(ctx: KernelContext):
    dtype = ctx.in_dtypes[0]
    geo = _conv_geometry(ctx)
    bias, mask = _given(ctx.in_shapes, 3), _given(ctx.in_shapes, 4)
    tuned, sms = tuned_of(ctx, KERNELS[_OP]), sm_count_of(ctx)
    slots = {"x": ("in", 0), "w": ("in", 1), "offset": ("in", 2), "y": ("out", 0)}
    slots.update({"b": ("in", 3)} if bias else {})
    slots.update({"mask": ("in", 4)} if mask else {})
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_deform_conv2d(dtype, geo, bias=bias, mask=mask, tuned=tuned, sm_count=sms),
        slots,
        ctx.stage,
    )


def descriptors() -> list[OperatorDescriptor]:
    """A fresh descriptor of deform_conv2d (one per registry)."""
    return [
        builtin_operator(
            _OP,
            doc="Deformable 2-d convolution of NCHW x (DCNv2): each tap of each output pixel is sampled "
            "bilinearly at its regular position plus its offset, times its mask, then weighted by w.",
            inputs=[
                Port("x", shape=["N", "C", "H", "W"], dtype="T"),
                Port("w", shape=["M", "Cg", "kH", "kW"], dtype="T", doc="[M, C/group, kH, kW]"),
                Port(
                    "offset",
                    dtype="T",
                    doc="[N, offset_group * 2 * kH * kW, H_out, W_out]: per offset group and tap, dy then dx",
                ),
                Port("b", shape=["M"], dtype="T", optional=True, doc="per output channel"),
                Port(
                    "mask",
                    dtype="T",
                    optional=True,
                    doc="[N, offset_group * kH * kW, H_out, W_out]: each sample's factor (1 when absent)",
                ),
            ],
            outputs=[Port("y", dtype="T", doc="[N, M, H_out, W_out]")],
            attrs=[
                Attr("strides", "ints", (1, 1), doc="step of the window per spatial axis"),
                Attr("pads", "ints", (0, 0, 0, 0), doc="[top, left, bottom, right] zero padding"),
                Attr("dilations", "ints", (1, 1), doc="spacing of the kernel's taps"),
                Attr("group", "int", 1, doc="channel groups (C and M both split into group parts)"),
                Attr("offset_group", "int", 1, doc="input channel groups sharing one offset and mask set"),
            ],
            dtype_vars={"T": FLOATS},
            variant_dtypes=FLOATS,
            infer=infer_deform_conv2d,
            bind=_deform_bind,
            cuda=cuda_variant(_deform_cuda_bind, FLOATS),
            onnx="DeformConv",
        )
    ]
