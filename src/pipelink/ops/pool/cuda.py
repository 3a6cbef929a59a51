"""2-d pooling on CUDA: max_pool2d and avg_pool2d run ``pool.cu`` (one thread per output element, the
window resolved on the host by ``conv/window.py`` as for the CPU reference); global_average_pool is a
mean over the spatial axes and runs the reduce family's kernel. Pure Python + NumPy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...descriptor import KernelContext
from ...dtypes import get_dtype
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
    make_plan,
    pointer,
    shape_of,
    sm_count_of,
    tuned_of,
    tuned_values,
)
from ..reduce.cuda import KERNELS as REDUCE_KERNELS
from ..reduce.cuda import integer_lowest, plan_reduce

__all__ = ["KERNELS", "TUNED_AS", "plan_pool2d", "pool2d_bind", "global_average_pool_bind"]

_SOURCE = Path(__file__).resolve().parent / "pool.cu"
_TUNABLES = {"block": (256, BLOCKS), "max_blocks_per_sm": (8, (1, 2, 4, 8, 16, 32))}
KERNELS: dict[str, KernelSource] = {
    "max_pool2d": KernelSource(
        "max_pool2d",
        _SOURCE,
        "pl_pool2d",
        {"PL_POOL": "PL_POOL_MAX"},
        dict(_TUNABLES),
        dtypes=FLOATS + ("int8", "uint8"),
    ),
    "avg_pool2d": KernelSource(
        "avg_pool2d", _SOURCE, "pl_pool2d", {"PL_POOL": "PL_POOL_AVG"}, dict(_TUNABLES)
    ),
}
TUNED_AS: dict[str, str] = {}
_WINDOW_ARGS = ("kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl", "pb", "pr")


def plan_pool2d(
    op: str,
    dtype: Any,
    shape: Any,
    win: Window,
    *,
    count_include_pad: bool = False,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``max_pool2d`` or ``avg_pool2d`` of a contiguous NCHW x with the resolved window ``win``:
    ``pl_pool2d(x, y, n, H, W, OH, OW, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr)``.

    Raises
    ------
    InvalidArgumentError
        An unknown op, a dtype its kernel does not take, a shape that is not 4-d, a bad tunable.
    """
    if op not in KERNELS:
        raise InvalidArgumentError(f"unknown pooling {op!r}; known: {', '.join(KERNELS)}", op=op)
    source = KERNELS[op]
    dt = get_dtype(dtype)
    if dt.name not in source.dtypes:
        raise InvalidArgumentError(
            f"{op}: dtype must be one of {', '.join(source.dtypes)} (got {dt.name})", op=op, dtype=dt.name
        )
    shp = shape_of(shape, op)
    if len(shp) != 4:
        raise InvalidArgumentError(f"{op}: x must be [N, C, H, W] (got {list(shp)})", op=op)
    (oh, ow), (h, w) = (int(d) for d in win.out), shp[2:]
    n = shp[0] * shp[1] * oh * ow
    t = tuned_values(source, tuned)
    is_int = int(not dt.is_floating)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_POOL": source.macros["PL_POOL"],
        "PL_IS_INT": is_int,
        "PL_COUNT_PAD": int(bool(count_include_pad)),
        "PL_BLOCK": t["block"],
    }
    if is_int:
        macros["PL_LOWEST"] = integer_lowest(dt.numpy)
    window = dict(
        zip(
            _WINDOW_ARGS,
            (*win.kernel, *win.strides, *win.dilations, *win.pads_begin, *win.pads_end),
            strict=True,
        )
    )
    specs = [
        pointer("x"),
        pointer("y"),
        *[ArgSpec(k, "i64") for k in ("n", "H", "W", "OH", "OW")],
        *[ArgSpec(k, "i32") for k in _WINDOW_ARGS],
    ]
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(
        source,
        "pl_pool2d",
        macros,
        grid,
        t["block"],
        specs,
        {"n": n, "H": h, "W": w, "OH": max(oh, 1), "OW": max(ow, 1), **window},
        dict(t),
    )


def pool2d_bind(op: str, window):
    """The CUDA bind of ``op`` (max_pool2d / avg_pool2d); ``window(shape, attrs, op)`` resolves the window
    exactly as the CPU reference does."""

    def bind(ctx: KernelContext):
        dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
        win = window(shape, ctx.attrs, op)
        count_pad = op == "avg_pool2d" and bool(ctx.attrs["count_include_pad"])
        tuned, sms = tuned_of(ctx, KERNELS[op]), sm_count_of(ctx)
        return PlanLaunch(
            ctx.backend,
            lambda a: plan_pool2d(
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
