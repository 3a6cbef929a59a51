"""The softmax family on CUDA: softmax over the last axis of x, or of x * scale + bias with the bias read
in place through broadcast strides (``softmax.cu``); another axis is moved last by the transpose family's
kernel, softmaxed (the bias's strides permuted the same way), and moved back. Pure Python + NumPy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...descriptor import KernelContext
from ...dtypes import get_dtype
from ...errors import InvalidArgumentError
from ..kernel import (
    DEFAULT_SM_COUNT,
    I32_LIMIT,
    MAX_NDIM,
    ROW_TUNABLES,
    ArgSpec,
    KernelSource,
    LaunchPlan,
    PlanLaunch,
    acc_kind,
    broadcast_strides,
    collapse,
    float_dtype,
    make_plan,
    pointer,
    row_geometry,
    shape_of,
    sm_count_of,
    strided_scalars,
    strided_specs,
    tuned_of,
)
from ..transpose.cuda import plan_transpose
from .reference import has_bias, normalize_axis

__all__ = ["KERNELS", "TUNED_AS", "BIAS_MODES", "plan_softmax", "softmax_bind"]

KERNELS: dict[str, KernelSource] = {
    "softmax": KernelSource(
        "softmax", Path(__file__).resolve().parent / "softmax.cu", "pl_softmax", {}, dict(ROW_TUNABLES)
    ),
}
TUNED_AS: dict[str, str] = {}

#: PL_SOFTMAX_BIAS of the scaled kernels: how the bias is read along a row (softmax.cu).
BIAS_MODES = {"none": 0, "vector": 1, "per_row": 2, "strided": 3}


def plan_softmax(
    dtype: Any,
    shape: Any,
    *,
    scale: float = 1.0,
    bias_strides: Any = None,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan softmax over the last dim of ``x * scale + bias``.

    With ``scale`` 1 and no bias: ``pl_softmax[_big](const T* x, T* y, long long rows, int C)``, the plain
    kernel. Otherwise ``pl_softmax_scaled[_big](x, bias, y, rows, C, scale, bc, d0..d7, bs0..bs7)``:
    ``bias_strides`` (element strides of the bias for each dim of ``shape``, 0 on broadcast dims; None:
    no bias) gives the row's bias offset from the leading dims (merged where they allow) and ``bc`` the
    stride along the row, which picks how the kernel reads it (:data:`BIAS_MODES`).

    Raises
    ------
    InvalidArgumentError
        A non-float dtype, a 0-d shape, a last dim of 2^31 or more, bias strides of another rank, negative
        bias strides, more than 8 leading dims after merging, or a bad tunable.
    """
    source = KERNELS["softmax"]
    dt = float_dtype(dtype, source.op)
    macros, suffix, grid, block, rows, c, params = row_geometry(source, dt, shape, tuned, alignment, sm_count)
    vec = int(macros["PL_VEC"])
    a = vec * dt.itemsize
    if bias_strides is None and float(scale) == 1.0:
        specs = [pointer("x", a), pointer("y", a), ArgSpec("rows", "i64"), ArgSpec("C", "i32")]
        return make_plan(
            source, "pl_softmax" + suffix, macros, grid, block, specs, {"rows": rows, "C": c}, params
        )
    shp = shape_of(shape, source.op)
    if bias_strides is None:
        mode, bc, dims, strides = BIAS_MODES["none"], 0, [1], [0]
    else:
        st = [int(s) for s in bias_strides]
        if len(st) != len(shp) or any(s < 0 for s in st):
            raise InvalidArgumentError(
                f"softmax: bias strides must be one stride >= 0 per dim of x {list(shp)} (got {st})",
                op=source.op,
            )
        bc = st[-1] if shp[-1] > 1 else 0
        dims, (strides,) = collapse(list(shp[:-1]) or [1], [st[:-1] or [0]])
        if len(dims) > MAX_NDIM:
            raise InvalidArgumentError(
                f"softmax: the bias needs {len(dims)} leading dims after merging (max {MAX_NDIM})",
                op=source.op,
            )
        if bc == 0:
            mode = BIAS_MODES["per_row"]
        elif bc == 1 and all(s % vec == 0 for s in strides):
            mode = BIAS_MODES["vector"]
        else:
            mode = BIAS_MODES["strided"]
    span = 1 + sum((d - 1) * s for d, s in zip(dims, strides, strict=True)) + max(c - 1, 0) * bc
    index64 = int(rows >= I32_LIMIT or span >= I32_LIMIT)
    macros.update({"PL_SOFTMAX_BIAS": mode, "PL_BIAS_NDIM": len(dims), "PL_INDEX64": index64})
    bias_align = a if mode == BIAS_MODES["vector"] else dt.itemsize
    specs = [
        pointer("x", a),
        pointer("bias", bias_align, optional=mode == BIAS_MODES["none"]),
        pointer("y", a),
        ArgSpec("rows", "i64"),
        ArgSpec("C", "i32"),
        ArgSpec("scale", acc_kind(dt)),
        ArgSpec("bc", "i64"),
        *strided_specs(("bs",)),
    ]
    scalars = {
        "rows": rows,
        "C": c,
        "scale": float(scale),
        "bc": bc,
        **strided_scalars(dims, {"bs": strides}),
    }
    return make_plan(
        source,
        "pl_softmax_scaled" + suffix,
        macros,
        grid,
        block,
        specs,
        scalars,
        dict(params, bias=mode, index64=index64),
    )


def softmax_bind(ctx: KernelContext):
    backend, dtype, shape = ctx.backend, ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
    axis = normalize_axis(int(ctx.attrs["axis"]), len(shape))
    scale = float(ctx.attrs["scale"])
    tuned, sms = tuned_of(ctx, KERNELS["softmax"]), sm_count_of(ctx)
    bias = has_bias(ctx.in_shapes)
    # The bias is read in place: broadcast dims get stride 0 (computed once, here).
    bias_st = broadcast_strides(shape, tuple(ctx.in_shapes[1])) if bias else None
    io = {"x": ("in", 0), "y": ("out", 0), **({"bias": ("in", 1)} if bias else {})}
    if axis == len(shape) - 1:
        return PlanLaunch(
            backend,
            lambda a: plan_softmax(
                dtype, shape, scale=scale, bias_strides=bias_st, alignment=a, tuned=tuned, sm_count=sms
            ),
            io,
            ctx.stage,
        )
    # Another axis: move it last, softmax the rows, move it back (scratch allocated here, not per run).
    perm = tuple(i for i in range(len(shape)) if i != axis) + (axis,)
    inverse = tuple(int(i) for i in np.argsort(perm))
    moved = tuple(shape[p] for p in perm)
    moved_bias = [bias_st[p] for p in perm] if bias_st is not None else None
    scratch = [backend.empty(moved, get_dtype(dtype)), backend.empty(moved, get_dtype(dtype))]
    to_last = PlanLaunch(backend, lambda a: plan_transpose(dtype, shape, perm, sm_count=sms), io, ctx.stage)
    rows = PlanLaunch(
        backend,
        lambda a: plan_softmax(
            dtype, moved, scale=scale, bias_strides=moved_bias, alignment=a, tuned=tuned, sm_count=sms
        ),
        io,
        ctx.stage,
    )
    back = PlanLaunch(backend, lambda a: plan_transpose(dtype, moved, inverse, sm_count=sms), io, ctx.stage)

    def kernel(ins, outs, stream):
        to_last(ins, [scratch[0]], stream)
        rows([scratch[0], *ins[1:2]], [scratch[1]], stream)
        back([scratch[1]], outs, stream)

    return kernel
