"""The reductions on CUDA: one strided row-reduction kernel (``reduce.cu``) for reduce_sum, reduce_mean and
reduce_max over any axes, its tunable, launch plan and bind. Pure Python + NumPy.

The kept axes and the reduced axes are each merged where they walk memory contiguously, so a reduction
over trailing axes (the common case) is a row reduction over one contiguous run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...descriptor import KernelContext
from ...dtypes import get_dtype
from ...errors import InvalidArgumentError
from .._common import FLOATS, NUMERIC
from ..kernel import (
    BLOCKS,
    DEFAULT_SM_COUNT,
    I32_LIMIT,
    MAX_NDIM,
    ArgSpec,
    KernelSource,
    LaunchPlan,
    PlanLaunch,
    collapse,
    contiguous_strides,
    make_plan,
    pointer,
    prod,
    shape_of,
    sm_count_of,
    tuned_of,
    tuned_values,
)
from .axes import reduced_axes

__all__ = ["KERNELS", "TUNED_AS", "KINDS", "DTYPES", "plan_reduce", "reduce_bind", "integer_lowest"]

_SOURCE = Path(__file__).resolve().parent / "reduce.cu"
KINDS = {"sum": "PL_RED_SUM", "mean": "PL_RED_MEAN", "max": "PL_RED_MAX"}
DTYPES = {"sum": tuple(sorted(NUMERIC)), "mean": tuple(sorted(FLOATS)), "max": tuple(sorted(NUMERIC))}
_WARP_COUNT = 1024  # reductions up to this long get a warp per output; longer ones the whole block
_TUNABLES = {"block": (256, BLOCKS), "max_blocks_per_sm": (8, (1, 2, 4, 8, 16, 32))}

KERNELS: dict[str, KernelSource] = {
    f"reduce_{kind}": KernelSource(
        f"reduce_{kind}", _SOURCE, "pl_reduce", {"PL_REDUCE": code}, dict(_TUNABLES), dtypes=DTYPES[kind]
    )
    for kind, code in KINDS.items()
}
TUNED_AS: dict[str, str] = {}


def integer_lowest(dtype: np.dtype) -> str:
    """The lowest value of an integer type as a C literal (INT64_MIN has no literal of its own)."""
    low = int(np.iinfo(dtype).min)
    return f"({low + 1}LL - 1)" if low else "0LL"


def _merged(shape: tuple[int, ...], strides: tuple[int, ...], axes) -> tuple[list[int], list[int]]:
    dims, (st,) = collapse([shape[a] for a in axes] or [1], [[strides[a] for a in axes] or [0]])
    return dims, st


def plan_reduce(
    kind: str,
    dtype: Any,
    shape: Any,
    axes: Any,
    *,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = reduce_<kind>(x, axes)`` for a contiguous x into a contiguous y (the kept axes in order;
    keepdims does not change the layout). ``axes`` are normalised (0 <= a < ndim); empty reduces nothing
    (a copy through the kernel: noop_with_empty_axes).

    Raises
    ------
    InvalidArgumentError
        An unknown kind, a dtype the kind does not take, more than 8 dims on either side after merging,
        a bad tunable.
    """
    if kind not in KINDS:
        raise InvalidArgumentError(f"unknown reduction {kind!r}; known: {', '.join(KINDS)}", op=kind)
    source = KERNELS[f"reduce_{kind}"]
    op = source.op
    dt = get_dtype(dtype)
    if dt.name not in source.dtypes:
        raise InvalidArgumentError(
            f"{op}: dtype must be one of {', '.join(source.dtypes)} (got {dt.name})", op=op, dtype=dt.name
        )
    shp = shape_of(shape, op)
    reduced = tuple(sorted({int(a) for a in axes}))
    kept = tuple(a for a in range(len(shp)) if a not in reduced)
    strides = contiguous_strides(shp)
    dk, sk = _merged(shp, strides, kept)
    dr, sr = _merged(shp, strides, reduced)
    if max(len(dk), len(dr)) > MAX_NDIM:
        raise InvalidArgumentError(
            f"{op}: more than {MAX_NDIM} kept or reduced dims remain after merging (kept {dk}, reduced {dr})",
            op=op,
        )
    rows, count = prod(dk), prod(dr)
    t = tuned_values(source, tuned)
    block = t["block"]
    group = 32 if count <= _WARP_COUNT or block == 32 else block
    is_int = int(not dt.is_floating)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_REDUCE": KINDS[kind],
        "PL_IS_INT": is_int,
        "PL_BLOCK": block,
        "PL_GROUP": group,
        "PL_NDIM_K": len(dk),
        "PL_NDIM_R": len(dr),
        "PL_INDEX64": int(prod(shp) >= I32_LIMIT),
    }
    if is_int:
        macros["PL_LOWEST"] = integer_lowest(dt.numpy)
    rows_per_block = block // group
    grid = (max(1, min(-(-rows // rows_per_block), sm_count * t["max_blocks_per_sm"])), 1, 1)
    specs = [
        pointer("x"),
        pointer("y"),
        ArgSpec("rows", "i64"),
        ArgSpec("count", "i64"),
        *[ArgSpec(f"{p}{k}", "i64") for p in ("dk", "sk", "dr", "sr") for k in range(MAX_NDIM)],
    ]
    scalars = {"rows": rows, "count": count}
    for prefix, values, pad in (("dk", dk, 1), ("sk", sk, 0), ("dr", dr, 1), ("sr", sr, 0)):
        scalars.update({f"{prefix}{k}": values[k] if k < len(values) else pad for k in range(MAX_NDIM)})
    return make_plan(
        source,
        "pl_reduce",
        macros,
        grid,
        block,
        specs,
        scalars,
        dict(t, group=group, index64=int(macros["PL_INDEX64"])),
    )


def reduce_bind(kind: str):
    """The CUDA bind of ``reduce_<kind>``."""

    def bind(ctx: KernelContext):
        dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
        axes = reduced_axes(len(shape), ctx.attrs, op=f"reduce_{kind}")
        tuned, sms = tuned_of(ctx, KERNELS[f"reduce_{kind}"]), sm_count_of(ctx)
        return PlanLaunch(
            ctx.backend,
            lambda a: plan_reduce(kind, dtype, shape, axes, tuned=tuned, sm_count=sms),
            {"x": ("in", 0), "y": ("out", 0)},
            ctx.stage,
        )

    return bind
