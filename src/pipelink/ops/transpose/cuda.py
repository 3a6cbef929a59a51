"""The transpose family on CUDA: a tiled transpose of the last two dims and a general permute of up to 8
dims (``transpose.cu``), their tunables, launch plan and bind. Pure Python + NumPy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...descriptor import KernelContext
from ...dtypes import get_dtype
from ...errors import InvalidArgumentError
from ..kernel import (
    BLOCKS,
    DEFAULT_SM_COUNT,
    GRID_YZ_MAX,
    I32_LIMIT,
    MAX_NDIM,
    ArgSpec,
    KernelSource,
    LaunchPlan,
    PlanLaunch,
    collapse,
    contiguous_strides,
    flat_grid,
    make_plan,
    pointer,
    prod,
    shape_of,
    sm_count_of,
    strided_scalars,
    strided_specs,
    tuned_of,
    tuned_values,
)
from .reference import resolve_perm

__all__ = ["KERNELS", "TUNED_AS", "plan_transpose", "transpose_bind"]

_ALL = ("float32", "float16", "bfloat16", "float64", "int8", "int32", "int64", "uint8", "bool")
KERNELS: dict[str, KernelSource] = {
    "transpose": KernelSource(
        "transpose",
        Path(__file__).resolve().parent / "transpose.cu",
        "pl_transpose",
        {},
        {
            "tile": (64, (16, 32, 64)),  # 64 x 8 was fastest on an H200 for 2- and 4-byte types
            "tile_rows": (8, (4, 8, 16)),
            "block": (256, BLOCKS),
            "max_blocks_per_sm": (8, (1, 2, 4, 8, 16, 32)),
        },
        dtypes=_ALL,
    ),
}
TUNED_AS: dict[str, str] = {}


def plan_transpose(
    dtype: Any,
    shape: Any,
    perm: Any = None,
    *,
    in_strides: Any = None,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = x.transpose(perm)`` into a contiguous y (perm default: swap the last two dims).

    After dropping size-1 dims and merging dims that stay adjacent, a swap of the last two dims
    (with at most one batch dim in front) uses ``pl_transpose(const T* x, T* y, long long batch,
    long long R, long long C)``; anything else ``pl_permute(x, y, long long n, d0..d7, s0..s7)``
    with d the output shape and s the input strides (elements) of each output dim.
    ``in_strides`` (elements, >= 0) describes a non-contiguous x (then the permute kernel is used).

    Raises
    ------
    InvalidArgumentError
        ``perm`` is not a permutation, more than 8 dims remain after merging, or a bad tunable.
    """
    source = KERNELS["transpose"]
    op = source.op
    dt = get_dtype(dtype)
    shp = shape_of(shape, op)
    nd = len(shp)
    p = tuple(range(nd - 2)) + (nd - 1, nd - 2) if perm is None and nd >= 2 else tuple(perm or range(nd))
    p = tuple(int(i) % nd if nd else 0 for i in p)
    if sorted(p) != list(range(nd)):
        raise InvalidArgumentError(f"transpose: perm {tuple(perm)} is not a permutation of {nd} dims", op=op)
    t = tuned_values(source, tuned)
    n = prod(shp)
    if in_strides is None:
        # drop size-1 dims, then merge runs of output dims that come from consecutive input dims
        kept = [k for k in range(nd) if shp[k] != 1]
        rank = {k: i for i, k in enumerate(kept)}
        q = [rank[k] for k in p if shp[k] != 1]
        runs: list[list[int]] = []
        for k in q:
            if runs and runs[-1][-1] == k - 1:
                runs[-1].append(k)
            else:
                runs.append([k])
        order = sorted(range(len(runs)), key=lambda g: runs[g][0])  # merged dims in input order
        in_dims = [prod([shp[kept[j]] for j in runs[g]]) for g in order]
        new_perm = [order.index(g) for g in range(len(runs))]
        in_st = contiguous_strides(tuple(in_dims))
        out_dims = [in_dims[i] for i in new_perm]
        out_st = [in_st[i] for i in new_perm]
        if new_perm in ([1, 0], [0, 2, 1]):
            batch = 1 if len(in_dims) == 2 else in_dims[0]
            r, c = in_dims[-2], in_dims[-1]
            tile, rows = t["tile"], t["tile_rows"]
            grid = (min(-(-c // tile), 2**31 - 1), min(-(-r // tile), GRID_YZ_MAX), min(batch, GRID_YZ_MAX))
            macros = {
                "PL_T": dt.cuda_type,
                "PL_TILE": tile,
                "PL_TILE_ROWS": rows,
                "PL_TILE_PAD": 1,
                "PL_BLOCK": t["block"],
            }
            specs = [
                pointer("x"),
                pointer("y"),
                ArgSpec("batch", "i64"),
                ArgSpec("R", "i64"),
                ArgSpec("C", "i64"),
            ]
            return make_plan(
                source,
                "pl_transpose",
                macros,
                grid,
                (tile, rows, 1),
                specs,
                {"batch": batch, "R": r, "C": c},
                dict(t),
            )
        dims, strides = out_dims or [1], out_st or [1]
    else:
        st = tuple(int(s) for s in in_strides)
        dims, strides = [shp[k] for k in p] or [1], [st[k] for k in p] or [1]
        dims, (strides,) = collapse(dims, [strides])
    if len(dims) > MAX_NDIM:
        raise InvalidArgumentError(f"transpose: {len(dims)} dims after merging (max {MAX_NDIM})", op=op)
    span = 1 + sum((d - 1) * s for d, s in zip(dims, strides, strict=True))
    index64 = int(n >= I32_LIMIT or span >= I32_LIMIT)
    macros = {"PL_T": dt.cuda_type, "PL_BLOCK": t["block"], "PL_NDIM": len(dims), "PL_INDEX64": index64}
    specs = [pointer("x"), pointer("y"), ArgSpec("n", "i64"), *strided_specs(("s",))]
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(
        source,
        "pl_permute",
        macros,
        grid,
        t["block"],
        specs,
        {"n": n, **strided_scalars(dims, {"s": strides})},
        dict(t, ndim=len(dims), index64=index64),
    )


def transpose_bind(ctx: KernelContext):
    dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
    perm = resolve_perm(ctx.attrs["perm"], len(shape))
    tuned, sms = tuned_of(ctx, KERNELS["transpose"]), sm_count_of(ctx)
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_transpose(dtype, shape, perm, tuned=tuned, sm_count=sms),
        {"x": ("in", 0), "y": ("out", 0)},
        ctx.stage,
    )
