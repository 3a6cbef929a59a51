"""The reductions on CUDA: one strided row-reduction kernel (``reduce.cu``) for reduce_sum, reduce_mean,
reduce_max and reduce_prod over any axes, one for argmax / argmin / hardmax over one axis (the same walk,
a (value, index) pair per thread; hardmax writes the line's one-hot), and the cumulative sum and product
along one axis (``scan.cu``); their tunables, launch plans and binds (top_k's: ``topk_cuda.py``).
Pure Python + NumPy.

The kept axes and the reduced axes are each merged where they walk memory contiguously, so a reduction
over trailing axes (the common case) is a row reduction over one contiguous run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...descriptor import KernelContext
from ...dtypes import DType
from ...errors import InvalidArgumentError
from .._common import FLOATS, NUMERIC
from .._dims import normalize_axis
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
    flat_grid,
    kernel_dtype,
    make_plan,
    pointer,
    prod,
    shape_of,
    sm_count_of,
    tuned_of,
    tuned_values,
)
from .axes import reduced_axes
from .reference import SCAN_KINDS, arg_axis
from .topk_cuda import KERNEL as TOP_K_KERNEL

__all__ = [
    "KERNELS",
    "TUNED_AS",
    "KINDS",
    "DTYPES",
    "ARG_KINDS",
    "ARG_DTYPES",
    "plan_reduce",
    "plan_arg_reduce",
    "plan_hardmax",
    "plan_scan",
    "reduce_bind",
    "arg_reduce_bind",
    "hardmax_bind",
    "scan_bind",
    "integer_lowest",
    "integer_highest",
]

_SOURCE = Path(__file__).resolve().parent / "reduce.cu"
_SCAN_SOURCE = Path(__file__).resolve().parent / "scan.cu"
KINDS = {
    "sum": "PL_RED_SUM",
    "mean": "PL_RED_MEAN",
    "max": "PL_RED_MAX",
    "min": "PL_RED_MIN",
    "prod": "PL_RED_PROD",
}
DTYPES = {
    "sum": tuple(sorted(NUMERIC)),
    "mean": tuple(sorted(FLOATS)),
    "max": tuple(sorted(NUMERIC | {"bool"})),
    "min": tuple(sorted(NUMERIC | {"bool"})),
    "prod": tuple(sorted(NUMERIC)),
}
ARG_KINDS = {"max": "PL_ARG_MAX", "min": "PL_ARG_MIN"}
ARG_DTYPES = tuple(sorted(NUMERIC))
_WARP_COUNT = 1024  # reductions up to this long get a warp per output; longer ones the whole block
_TUNABLES = {"block": (256, BLOCKS), "max_blocks_per_sm": (8, (1, 2, 4, 8, 16, 32))}

KERNELS: dict[str, KernelSource] = {
    f"reduce_{kind}": KernelSource(
        f"reduce_{kind}", _SOURCE, "pl_reduce", {"PL_REDUCE": code}, dict(_TUNABLES), dtypes=DTYPES[kind]
    )
    for kind, code in KINDS.items()
}
KERNELS.update(
    {
        f"arg{kind}": KernelSource(
            f"arg{kind}", _SOURCE, "pl_arg_reduce", {"PL_ARG": code}, dict(_TUNABLES), dtypes=ARG_DTYPES
        )
        for kind, code in ARG_KINDS.items()
    }
)
KERNELS["hardmax"] = KernelSource(
    "hardmax",
    _SOURCE,
    "pl_arg_reduce",
    {"PL_ARG": "PL_ARG_MAX", "PL_ONE_HOT": "1"},
    dict(_TUNABLES),
    dtypes=tuple(sorted(FLOATS)),
)
_SCAN_OPS = {"sum": "PL_SCAN_SUM", "prod": "PL_SCAN_PROD"}
KERNELS.update(
    {
        f"cum{kind}": KernelSource(
            f"cum{kind}",
            _SCAN_SOURCE,
            "pl_scan",
            {"PL_SCAN": _SCAN_OPS[kind]},
            dict(_TUNABLES),
            dtypes=tuple(sorted(NUMERIC)),
        )
        for kind in SCAN_KINDS
    }
)
KERNELS["top_k"] = TOP_K_KERNEL
TUNED_AS: dict[str, str] = {}


def integer_lowest(dtype: np.dtype) -> str:
    """The lowest value of an integer type (or bool: 0) as a C literal (INT64_MIN has no literal of its
    own)."""
    if np.dtype(dtype) == np.bool_:
        return "0LL"
    low = int(np.iinfo(dtype).min)
    return f"({low + 1}LL - 1)" if low else "0LL"


def integer_highest(dtype: np.dtype) -> str:
    """The highest value of an integer type (or bool: 1) as a C literal (unsigned for uint64, whose
    maximum a long long does not hold)."""
    if np.dtype(dtype) == np.bool_:
        return "1LL"
    high = int(np.iinfo(dtype).max)
    return f"{high}ULL" if high > 2**63 - 1 else f"{high}LL"


def _checked_dtype(source: KernelSource, dtype: Any) -> DType:
    """The DType of ``dtype``, which ``source``'s kernel must take (else InvalidArgumentError)."""
    return kernel_dtype(dtype, source.op, source.dtypes)


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
    dt = _checked_dtype(source, dtype)
    shp = shape_of(shape, op)
    macros: dict[str, Any] = {"PL_REDUCE": KINDS[kind]}
    if not dt.is_floating:
        macros["PL_LOWEST"] = integer_lowest(dt.numpy)
        macros["PL_HIGHEST"] = integer_highest(dt.numpy)
    return _row_plan(source, "pl_reduce", dt, shp, axes, macros, tuned=tuned, sm_count=sm_count)


def _row_plan(
    source: KernelSource,
    kernel: str,
    dt: DType,
    shp: tuple[int, ...],
    axes: Any,
    kernel_macros: dict[str, Any],
    *,
    tuned: dict[str, int] | None,
    sm_count: int,
) -> LaunchPlan:
    """The launch of one of ``reduce.cu``'s strided row reductions (pl_reduce, pl_arg_reduce: the same
    arguments) of a contiguous x over ``axes``: kept and reduced dims merged, a warp per output up to
    ``_WARP_COUNT`` reduced elements (else the whole block), a grid-stride loop over the outputs.
    ``kernel_macros`` are the kernel's own (its kind); the geometry's are added here."""
    op = source.op
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
    macros = {
        "PL_T": dt.cuda_type,
        **kernel_macros,
        "PL_IS_INT": int(not dt.is_floating),
        "PL_BLOCK": block,
        "PL_GROUP": group,
        "PL_NDIM_K": len(dk),
        "PL_NDIM_R": len(dr),
        "PL_INDEX64": int(prod(shp) >= I32_LIMIT),
    }
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
        kernel,
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


def plan_arg_reduce(
    kind: str,
    dtype: Any,
    shape: Any,
    axis: int,
    *,
    select_last_index: bool = False,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = arg<kind>(x, axis)`` for a contiguous x into a contiguous int64 y (the kept axes in
    order; keepdims does not change the layout): the index along ``axis`` (normalised, 0 <= axis < ndim)
    of the first extreme, or of the last with ``select_last_index``; a NaN is the extreme.

    Raises
    ------
    InvalidArgumentError
        An unknown kind, a dtype the kernel does not take, an axis out of range or of size 0, more than
        8 kept dims after merging, a bad tunable.
    """
    if kind not in ARG_KINDS:
        raise InvalidArgumentError(
            f"unknown index reduction {kind!r}; known: {', '.join(ARG_KINDS)}", op=kind
        )
    source = KERNELS[f"arg{kind}"]
    op = source.op
    dt = _checked_dtype(source, dtype)
    shp = shape_of(shape, op)
    if not 0 <= int(axis) < len(shp) or shp[int(axis)] == 0:
        raise InvalidArgumentError(
            f"{op}: the axis must be one of the {len(shp)} axes of shape {list(shp)}, of size >= 1 "
            f"(got {axis})",
            op=op,
            axis=axis,
        )
    macros = {"PL_ARG": ARG_KINDS[kind], "PL_LAST": int(bool(select_last_index))}
    return _row_plan(source, "pl_arg_reduce", dt, shp, (int(axis),), macros, tuned=tuned, sm_count=sm_count)


def arg_reduce_bind(kind: str):
    """The CUDA bind of ``arg<kind>`` (argmax, argmin)."""

    def bind(ctx: KernelContext):
        dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
        axis = arg_axis(shape, ctx.attrs, op=f"arg{kind}")  # a size 0 bound at run is refused here
        last = bool(ctx.attrs["select_last_index"])
        tuned, sms = tuned_of(ctx, KERNELS[f"arg{kind}"]), sm_count_of(ctx)
        return PlanLaunch(
            ctx.backend,
            lambda a: plan_arg_reduce(
                kind, dtype, shape, axis, select_last_index=last, tuned=tuned, sm_count=sms
            ),
            {"x": ("in", 0), "y": ("out", 0)},
            ctx.stage,
        )

    return bind


def plan_hardmax(
    dtype: Any,
    shape: Any,
    axis: int,
    *,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = hardmax(x, axis)`` for a contiguous x into a contiguous y of its shape: argmax's walk
    (``pl_arg_reduce`` with ``PL_ONE_HOT``), each group then writing its line, 1 at the first maximum (a
    NaN the largest) and 0 elsewhere. An axis of size 0 writes nothing (y is empty).

    Raises
    ------
    InvalidArgumentError
        A dtype the kernel does not take (floats only), an axis out of range, more than 8 kept dims after
        merging, a bad tunable.
    """
    source = KERNELS["hardmax"]
    op = source.op
    dt = _checked_dtype(source, dtype)
    shp = shape_of(shape, op)
    if not 0 <= int(axis) < len(shp):
        raise InvalidArgumentError(
            f"{op}: the axis must be one of the {len(shp)} axes of shape {list(shp)} (got {axis})",
            op=op,
            axis=axis,
        )
    macros = {"PL_ARG": "PL_ARG_MAX", "PL_LAST": 0, "PL_ONE_HOT": 1}
    return _row_plan(source, "pl_arg_reduce", dt, shp, (int(axis),), macros, tuned=tuned, sm_count=sm_count)


def hardmax_bind(ctx: KernelContext):
    """The CUDA bind of ``hardmax``."""
    dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
    axis = normalize_axis(int(ctx.attrs["axis"]), len(shape), op="hardmax")
    tuned, sms = tuned_of(ctx, KERNELS["hardmax"]), sm_count_of(ctx)
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_hardmax(dtype, shape, axis, tuned=tuned, sm_count=sms),
        {"x": ("in", 0), "y": ("out", 0)},
        ctx.stage,
    )


def plan_scan(
    kind: str,
    dtype: Any,
    shape: Any,
    axis: int,
    *,
    exclusive: bool = False,
    reverse: bool = False,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = cum<kind>(x, axis)`` (cumsum, cumprod) for a contiguous x into a contiguous y of its
    shape: ``pl_scan(x, y, lines, len, inner)`` over x seen as ``[outer, len, inner]`` around ``axis``
    (normalised). A warp per line when the axis is the innermost (a contiguous line), else a thread per
    line.

    Raises
    ------
    InvalidArgumentError
        An unknown kind, a dtype the kernel does not take, an axis out of range, a bad tunable.
    """
    if kind not in SCAN_KINDS:
        raise InvalidArgumentError(f"unknown scan {kind!r}; known: {', '.join(SCAN_KINDS)}", op=kind)
    source = KERNELS[f"cum{kind}"]
    op = source.op
    dt = _checked_dtype(source, dtype)
    shp = shape_of(shape, op)
    if not 0 <= int(axis) < len(shp):
        raise InvalidArgumentError(
            f"{op}: the axis must be one of the {len(shp)} axes of shape {list(shp)} (got {axis})",
            op=op,
            axis=axis,
        )
    axis = int(axis)
    length, inner = shp[axis], prod(shp[axis + 1 :])
    lines = prod(shp[:axis]) * inner
    warp_scan = inner == 1
    t = tuned_values(source, tuned)
    block = t["block"]
    threads = lines * 32 if warp_scan else lines
    grid = flat_grid(threads, block, 1, t["max_blocks_per_sm"], sm_count)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_SCAN": _SCAN_OPS[kind],
        "PL_IS_INT": int(not dt.is_floating),
        "PL_EXCLUSIVE": int(bool(exclusive)),
        "PL_REVERSE": int(bool(reverse)),
        "PL_WARP_SCAN": int(warp_scan),
        "PL_BLOCK": block,
    }
    specs = [
        pointer("x"),
        pointer("y"),
        ArgSpec("lines", "i64"),
        ArgSpec("len", "i64"),
        ArgSpec("inner", "i64"),
    ]
    scalars = {"lines": lines, "len": length, "inner": inner}
    return make_plan(
        source, "pl_scan", macros, grid, block, specs, scalars, dict(t, warp_scan=int(warp_scan))
    )


def scan_bind(kind: str):
    """The CUDA bind of ``cum<kind>`` (cumsum, cumprod)."""

    def bind(ctx: KernelContext):
        dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
        axis = normalize_axis(int(ctx.attrs["axis"]), len(shape), op=f"cum{kind}")
        exclusive, reverse = bool(ctx.attrs["exclusive"]), bool(ctx.attrs["reverse"])
        tuned, sms = tuned_of(ctx, KERNELS[f"cum{kind}"]), sm_count_of(ctx)
        return PlanLaunch(
            ctx.backend,
            lambda a: plan_scan(
                kind, dtype, shape, axis, exclusive=exclusive, reverse=reverse, tuned=tuned, sm_count=sms
            ),
            {"x": ("in", 0), "y": ("out", 0)},
            ctx.stage,
        )

    return bind
