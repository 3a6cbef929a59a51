"""deform_im2col: the sampled columns of a deformable convolution (deform_conv2d's, ``deform.py``), for
the ONNX import's DeformConv as two stages: these columns, then the gemm family's ``matmul`` with w
(cuBLASLt on CUDA) and the bias ``add``.

``cols[n, c * kH * kW + k, oh * W_out + ow]`` is tap ``k`` of output pixel ``(oh, ow)`` sampled bilinearly
from x's channel ``c`` at its deformed position, times its mask: exactly what deform_conv2d weights by
w. The reference is :class:`~pipelink.ops.conv.deform_sampling.ColumnSampler`; the CUDA kernel is
``pl_deform_im2col`` of ``deform.cu`` (one thread per column element), which samples as the direct
kernel does. The columns are in x's dtype (a half-type sample is rounded once, before the product).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import REQUIRED, Attr, KernelContext, OperatorDescriptor, Port
from .._common import FLOATS, builtin_operator, compute_dtype
from .._dims import check_ints, derived, is_known
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
    check_sampling,
    deform_geometry,
)

__all__ = ["descriptors", "infer_deform_im2col", "plan_deform_im2col"]

_OP = "deform_im2col"
_SCALARS = ("n", "C", "H", "W", "G", "kh", "kw", "oh", "ow", "sh", "sw", "pt", "pl", "dh", "dw")


def _kernel(attrs: Mapping[str, Any]) -> tuple[int, int]:
    kernel = tuple(attrs["kernel_shape"])
    check_ints(kernel, 2, op=_OP, attr="kernel_shape", minimum=1)
    return kernel


def infer_deform_im2col(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of deform_im2col: x ``[N, C, H, W]`` gives ``[N, C * kH * kW, H_out * W_out]``.

    Raises
    ------
    InvalidArgumentError
        kernel_shape not 2 sizes of at least 1; as deform_conv2d's attributes.
    ShapeMismatchError
        As deform_conv2d's offset and mask.
    """
    x, kernel = tuple(in_shapes[0]), _kernel(attrs)
    mask = tuple(in_shapes[2]) if len(in_shapes) > 2 and in_shapes[2] is not None else None
    oh, ow = check_sampling(_OP, x, kernel, tuple(in_shapes[1]), mask, attrs)
    n, c = x[0], x[1]
    taps = kernel[0] * kernel[1]
    rows = c * taps if is_known(c) else derived(_OP, c, taps)
    pixels = oh * ow if is_known(oh, ow) else derived(_OP, oh, ow)
    return ((n, rows, pixels),), (in_dtypes[0],)


def _geometry(ctx: KernelContext) -> DeformGeometry:
    return deform_geometry(ctx.in_shapes[0], _kernel(ctx.attrs), ctx.attrs, op=_OP)


def _im2col_bind(ctx: KernelContext):
    geo = _geometry(ctx)
    cdt = compute_dtype(ctx.in_dtypes[0])
    check_columns(ctx, geo, cdt)
    sampler = ColumnSampler(geo, cdt)

    def kernel(inputs, outputs, stream):
        x, offset, mask = inputs
        for b in range(geo.n):
            columns = sampler.columns(x[b], offset[b], None if mask is None else mask[b])
            np.copyto(outputs[0][b], columns, casting="unsafe")

    return kernel


def plan_deform_im2col(
    dtype: Any,
    geo: DeformGeometry,
    *,
    mask: bool,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan deform_im2col of contiguous tensors with the resolved geometry ``geo``:
    ``pl_deform_im2col(x, offset, mask, cols, n, C, H, W, G, kh, kw, oh, ow, sh, sw, pt, pl, dh, dw)``.

    Raises
    ------
    InvalidArgumentError
        A dtype the kernel does not take, a bad tunable.
    """
    source = KERNELS[_OP]
    dt = kernel_dtype(dtype, _OP, source.dtypes)
    t = tuned_values(source, tuned)
    n = geo.n * geo.c * geo.taps * math.prod(geo.out_hw)
    macros = {"PL_T": dt.cuda_type, "PL_MASK": int(mask), "PL_BLOCK": t["block"]}
    values = (n, geo.c, geo.h, geo.w, geo.offset_group, *geo.kernel, *geo.out_hw, *geo.strides)
    scalars = dict(zip(_SCALARS, (*values, *geo.pads_begin, *geo.dilations), strict=True))
    specs = [
        pointer("x"),
        pointer("offset"),
        pointer("mask", optional=True),
        pointer("cols"),
        *[ArgSpec(k, "i64") for k in _SCALARS],
    ]
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(source, "pl_deform_im2col", macros, grid, t["block"], specs, scalars, dict(t))


def _im2col_cuda_bind(ctx: KernelContext):
    dtype, geo = ctx.in_dtypes[0], _geometry(ctx)
    mask = len(ctx.in_shapes) > 2 and ctx.in_shapes[2] is not None
    tuned, sms = tuned_of(ctx, KERNELS[_OP]), sm_count_of(ctx)
    slots = {"x": ("in", 0), "offset": ("in", 1), "cols": ("out", 0), **({"mask": ("in", 2)} if mask else {})}
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_deform_im2col(dtype, geo, mask=mask, tuned=tuned, sm_count=sms),
        slots,
        ctx.stage,
    )


def descriptors() -> list[OperatorDescriptor]:
    """A fresh descriptor of deform_im2col (one per registry)."""
    return [
        builtin_operator(
            _OP,
            doc="The sampled columns of a deformable 2-d convolution: each tap of each output pixel sampled "
            "bilinearly from NCHW x at its regular position plus its offset, times its mask (deform_conv2d "
            "is w times these columns).",
            inputs=[
                Port("x", shape=["N", "C", "H", "W"], dtype="T"),
                Port(
                    "offset",
                    dtype="T",
                    doc="[N, offset_group * 2 * kH * kW, H_out, W_out]: per offset group and tap, dy then dx",
                ),
                Port(
                    "mask",
                    dtype="T",
                    optional=True,
                    doc="[N, offset_group * kH * kW, H_out, W_out]: each sample's factor (1 when absent)",
                ),
            ],
            outputs=[
                Port("cols", dtype="T", doc="[N, C * kH * kW, H_out * W_out]: rows channel-major, then tap")
            ],
            attrs=[
                Attr("kernel_shape", "ints", REQUIRED, doc="[kH, kW], the taps of the window"),
                Attr("strides", "ints", (1, 1), doc="step of the window per spatial axis"),
                Attr("pads", "ints", (0, 0, 0, 0), doc="[top, left, bottom, right] zero padding"),
                Attr("dilations", "ints", (1, 1), doc="spacing of the kernel's taps"),
                Attr("offset_group", "int", 1, doc="input channel groups sharing one offset and mask set"),
            ],
            dtype_vars={"T": FLOATS},
            variant_dtypes=FLOATS,
            infer=infer_deform_im2col,
            bind=_im2col_bind,
            cuda=cuda_variant(_im2col_cuda_bind, FLOATS),
        )
    ]
