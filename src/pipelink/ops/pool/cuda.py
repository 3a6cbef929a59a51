"""Pooling on CUDA: max_pool2d, avg_pool2d, max_pool3d and avg_pool3d run ``pool.cu`` (one thread per
output element, one window walk for both ranks, the window resolved on the host by ``conv/window.py`` as
for the CPU reference); global_average_pool is a mean over the spatial axes and runs the reduce family's
kernel. Pure Python + NumPy.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ...descriptor import KernelContext
from ...errors import InvalidArgumentError
from ..conv.window import Window
from ..kernel import (
    BLOCKS,
    DEFAULT_SM_COUNT,
    FLOATS,
    ArgSpec,
    KernelSource,
    LaunchPlan,
    PlanLaunch,
    flat_grid,
    kernel_dtype,
    make_plan,
    pointer,
    shape_of,
    sm_count_of,
    tuned_of,
    tuned_values,
)
from ..reduce.cuda import KERNELS as REDUCE_KERNELS
from ..reduce.cuda import integer_lowest, plan_reduce

__all__ = ["KERNELS", "TUNED_AS", "plan_pool", "pool_bind", "global_average_pool_bind"]

_SOURCE = Path(__file__).resolve().parent / "pool.cu"
_TUNABLES = {"block": (256, BLOCKS), "max_blocks_per_sm": (8, (1, 2, 4, 8, 16, 32))}


def _source(op: str, rank: int, pool: str, dtypes: tuple[str, ...] = FLOATS) -> KernelSource:
    macros = {"PL_POOL": pool, "PL_NDIM": str(rank)}
    return KernelSource(op, _SOURCE, f"pl_pool{rank}d", macros, dict(_TUNABLES), dtypes=dtypes)


KERNELS: dict[str, KernelSource] = {
    f"{kind}_pool{rank}d": _source(f"{kind}_pool{rank}d", rank, pool, dtypes)
    for rank in (2, 3)
    for kind, pool, dtypes in (
        ("max", "PL_POOL_MAX", FLOATS + ("int8", "uint8")),
        ("avg", "PL_POOL_AVG", FLOATS),
    )
}
TUNED_AS: dict[str, str] = {}
#: The spatial sizes and window arguments of the kernel of each rank, in its argument order (3-d pads:
#: front, top, left, then back ``pk``, bottom, right).
_SIZES = {2: ("H", "W"), 3: ("D", "H", "W")}
_WINDOW_ARGS = {
    2: ("kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl", "pb", "pr"),
    3: ("kd", "kh", "kw", "sd", "sh", "sw", "dd", "dh", "dw", "pf", "pt", "pl", "pk", "pb", "pr"),
}
_I32_MAX = 2**31 - 1


def plan_pool(
    op: str,
    dtype: Any,
    shape: Any,
    win: Window,
    *,
    count_include_pad: bool = False,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``max_pool2d`` / ``avg_pool2d`` of a contiguous NCHW x, or ``max_pool3d`` / ``avg_pool3d`` of a
    contiguous NCDHW x, with the resolved window ``win``:
    ``pl_pool2d(x, y, n, H, W, OH, OW, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr)`` or
    ``pl_pool3d(x, y, n, D, H, W, OD, OH, OW, kd, kh, kw, sd, sh, sw, dd, dh, dw, pf, pt, pl, pk, pb, pr)``.

    Raises
    ------
    InvalidArgumentError
        An unknown op, a dtype its kernel does not take, a shape or window of another rank, a window
        value past the kernel's 32-bit arguments, a bad tunable.
    """
    if op not in KERNELS:
        raise InvalidArgumentError(f"unknown pooling {op!r}; known: {', '.join(KERNELS)}", op=op)
    source = KERNELS[op]
    rank = int(source.macros["PL_NDIM"])
    dt = kernel_dtype(dtype, op, source.dtypes)
    shp = shape_of(shape, op)
    if len(shp) != 2 + rank or win.rank != rank:
        axes = ", ".join(("N", "C") + _SIZES[rank])
        raise InvalidArgumentError(
            f"{op}: x must be [{axes}] with a {rank}-d window (got x {list(shp)}, a {win.rank}-d window)",
            op=op,
        )
    values = (*win.kernel, *win.strides, *win.dilations, *win.pads_begin, *win.pads_end)
    if max(values) > _I32_MAX:
        raise InvalidArgumentError(
            f"{op}: every kernel size, stride, dilation and pad must be below 2**31 for the CUDA kernel "
            f"(got kernel {list(win.kernel)}, strides {list(win.strides)}, dilations "
            f"{list(win.dilations)}, pads {list(win.pads_begin + win.pads_end)})",
            op=op,
        )
    out = tuple(int(d) for d in win.out)
    n = shp[0] * shp[1] * math.prod(out)
    t = tuned_values(source, tuned)
    is_int = int(not dt.is_floating)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_NDIM": rank,
        "PL_POOL": source.macros["PL_POOL"],
        "PL_IS_INT": is_int,
        "PL_COUNT_PAD": int(bool(count_include_pad)),
        "PL_BLOCK": t["block"],
    }
    if is_int:
        macros["PL_LOWEST"] = integer_lowest(dt.numpy)
    sizes = _SIZES[rank]
    outs = tuple(f"O{s}" for s in sizes)
    specs = [
        pointer("x"),
        pointer("y"),
        *[ArgSpec(k, "i64") for k in ("n", *sizes, *outs)],
        *[ArgSpec(k, "i32") for k in _WINDOW_ARGS[rank]],
    ]
    scalars = {
        "n": n,
        **dict(zip(sizes, shp[2:], strict=True)),
        **{k: max(o, 1) for k, o in zip(outs, out, strict=True)},  # divisors in the kernel's index split
        **dict(zip(_WINDOW_ARGS[rank], values, strict=True)),
    }
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(source, source.kernel, macros, grid, t["block"], specs, scalars, dict(t))


def pool_bind(op: str, window):
    """The CUDA bind of ``op`` (max_pool2d, avg_pool2d, max_pool3d, avg_pool3d); ``window(shape, attrs,
    op)`` resolves the window exactly as the CPU reference does."""

    def bind(ctx: KernelContext):
        dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
        win = window(shape, ctx.attrs, op)
        count_pad = op.startswith("avg_") and bool(ctx.attrs["count_include_pad"])
        tuned, sms = tuned_of(ctx, KERNELS[op]), sm_count_of(ctx)
        return PlanLaunch(
            ctx.backend,
            lambda a: plan_pool(
                op, dtype, shape, win, count_include_pad=count_pad, tuned=tuned, sm_count=sms
            ),
            {"x": ("in", 0), "y": ("out", 0)},
            ctx.stage,
        )

    return bind


def global_average_pool_bind(ctx: KernelContext):
    """global_average_pool: the mean over every axis after N and C (the reduce family's kernel)."""
    dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
    axes = tuple(range(2, len(shape)))
    tuned, sms = tuned_of(ctx, REDUCE_KERNELS["reduce_mean"]), sm_count_of(ctx)
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_reduce("mean", dtype, shape, axes, tuned=tuned, sm_count=sms),
        {"x": ("in", 0), "y": ("out", 0)},
        ctx.stage,
    )
