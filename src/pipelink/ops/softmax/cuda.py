"""The softmax family on CUDA: softmax over the last axis (``softmax.cu``); another axis is moved last by
the transpose family's kernel, softmaxed, and moved back. Pure Python + NumPy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...descriptor import KernelContext
from ...dtypes import get_dtype
from ..kernel import (
    DEFAULT_SM_COUNT,
    ROW_TUNABLES,
    ArgSpec,
    KernelSource,
    LaunchPlan,
    PlanLaunch,
    float_dtype,
    make_plan,
    pointer,
    row_geometry,
    sm_count_of,
    tuned_of,
)
from ..transpose.cuda import plan_transpose
from .reference import normalize_axis

__all__ = ["KERNELS", "TUNED_AS", "plan_softmax", "softmax_bind"]

KERNELS: dict[str, KernelSource] = {
    "softmax": KernelSource(
        "softmax", Path(__file__).resolve().parent / "softmax.cu", "pl_softmax", {}, dict(ROW_TUNABLES)
    ),
}
TUNED_AS: dict[str, str] = {}


def plan_softmax(
    dtype: Any,
    shape: Any,
    *,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan softmax over the last dim.

    Kernel ``pl_softmax[_big](const T* x, T* y, long long rows, int C)``.
    """
    source = KERNELS["softmax"]
    dt = float_dtype(dtype, source.op)
    macros, suffix, grid, block, rows, c, params = row_geometry(source, dt, shape, tuned, alignment, sm_count)
    a = int(macros["PL_VEC"]) * dt.itemsize
    specs = [pointer("x", a), pointer("y", a), ArgSpec("rows", "i64"), ArgSpec("C", "i32")]
    return make_plan(
        source, "pl_softmax" + suffix, macros, grid, block, specs, {"rows": rows, "C": c}, params
    )


def softmax_bind(ctx: KernelContext):
    backend, dtype, shape = ctx.backend, ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
    axis = normalize_axis(int(ctx.attrs["axis"]), len(shape))
    tuned, sms = tuned_of(ctx, KERNELS["softmax"]), sm_count_of(ctx)
    io = {"x": ("in", 0), "y": ("out", 0)}
    if axis == len(shape) - 1:
        return PlanLaunch(
            backend,
            lambda a: plan_softmax(dtype, shape, alignment=a, tuned=tuned, sm_count=sms),
            io,
            ctx.stage,
        )
    # Another axis: move it last, softmax the rows, move it back (scratch allocated here, not per run).
    perm = tuple(i for i in range(len(shape)) if i != axis) + (axis,)
    inverse = tuple(int(i) for i in np.argsort(perm))
    moved = tuple(shape[p] for p in perm)
    scratch = [backend.empty(moved, get_dtype(dtype)), backend.empty(moved, get_dtype(dtype))]
    to_last = PlanLaunch(backend, lambda a: plan_transpose(dtype, shape, perm, sm_count=sms), io, ctx.stage)
    rows = PlanLaunch(
        backend, lambda a: plan_softmax(dtype, moved, alignment=a, tuned=tuned, sm_count=sms), io, ctx.stage
    )
    back = PlanLaunch(backend, lambda a: plan_transpose(dtype, moved, inverse, sm_count=sms), io, ctx.stage)

    def kernel(ins, outs, stream):
        to_last(ins, [scratch[0]], stream)
        rows([scratch[0]], [scratch[1]], stream)
        back([scratch[1]], outs, stream)

    return kernel
