"""The indexing family on CUDA: gather_nd, scatter_elements, one_hot and eye_like by the kernels of
``indexing.cu``, for every dtype (elements move as raw words).

The index contract is the shape family's: gather_nd is gather (an out-of-range index gives zeros, or with
``check_indices`` the shape family's :class:`~pipelink.ops.shape.cuda.CheckedGather` round trip raises as
the CPU does); scatter_elements is scatter_nd (data copied into y by the shape family's prebuilt strided
copy, then the scatter; an out-of-range index writes nothing; the combining reductions decline, and the
runtime runs the NumPy reference on staged copies). Inputs are contiguous (the runtime relayouts any that
is not). Pure Python + NumPy: nothing here imports a CUDA package.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ...descriptor import KernelContext, VariantDeclined
from ...dtypes import DTYPES, get_dtype
from ...errors import InvalidArgumentError
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
from ..shape.cuda import (
    INDEX_TYPES,
    CheckedGather,
    _index_type,
    _Launches,
    _strided,
    _whole,
    decline_combining,
    elements_walk,
)
from ..shape.rules import index_out_of_range, trilu_diagonal

__all__ = [
    "KERNELS",
    "TUNED_AS",
    "ONE_HOT_INDEX_TYPES",
    "plan_gather_nd",
    "plan_scatter_elements",
    "plan_one_hot",
    "plan_eye_like",
    "gather_nd_bind",
    "scatter_elements_bind",
    "one_hot_bind",
    "eye_like_bind",
    "CheckedGatherND",
]

_SOURCE = Path(__file__).resolve().parent / "indexing.cu"
_ALL = tuple(sorted(DTYPES))
_TUNABLES = {"block": (256, BLOCKS), "max_blocks_per_sm": (8, (1, 2, 4, 8, 16, 32))}
ONE_HOT_INDEX_TYPES = {
    **INDEX_TYPES,
    **{n: get_dtype(n).cuda_type for n in ("int8", "int16", "uint8", "uint16", "uint32", "uint64")},
}
"""one_hot's index dtypes -> their C type in indexing.cu (gather's, and the 8-bit integers)."""


def _source(op: str, macro: str) -> KernelSource:
    return KernelSource(op, _SOURCE, f"pl_{op}", {macro: "1"}, dict(_TUNABLES), dtypes=_ALL)


KERNELS: dict[str, KernelSource] = {
    "gather_nd": _source("gather_nd", "PL_GATHER_ND"),
    "scatter_elements": _source("scatter_elements", "PL_SCATTER_ELEMENTS"),
    "one_hot": _source("one_hot", "PL_ONE_HOT"),
    "eye_like": _source("eye_like", "PL_EYE_LIKE"),
}
"""The kernels of this family."""

TUNED_AS: dict[str, str] = {}


# -- plans ------------------------------------------------------------------------------------------
def plan_gather_nd(
    dtype: Any,
    data_shape: Any,
    index_dtype: Any,
    index_shape: Any,
    batch_dims: int = 0,
    *,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ONNX GatherND, one thread per output element:
    ``pl_gather_nd(data, indices, y, n, slice, rows, batch_stride, bad, d0..d7, s0..s7)``.

    An index outside its dim yields zeros in its output slice (the kernel never reads out of bounds);
    the scalar ``bad`` (0 in the plan) is plan_gather's: when not 0, the device word it addresses is
    lowered to the first such index position in the flattened indices (:class:`CheckedGatherND`).

    Raises
    ------
    InvalidArgumentError
        An index dtype other than int32/int64, batch_dims or an index tuple length that does not fit
        data (or a length above 8), a bad tunable.
    """
    op = "gather_nd"
    source = KERNELS[op]
    dt, index_t = get_dtype(dtype), _index_type(index_dtype, op)
    data, ishape = shape_of(data_shape, op), shape_of(index_shape, op)
    b = int(batch_dims)
    k = ishape[-1] if ishape else 0
    if not (0 <= b < min(len(data), len(ishape)) and 1 <= k <= min(len(data) - b, MAX_NDIM)):
        raise InvalidArgumentError(
            f"{op}: indices {list(ishape)} with batch_dims {b} must hold tuples of 1..{MAX_NDIM} indices "
            f"into data {list(data)} after its batch dims",
            op=op,
        )
    batch, rows, width = prod(data[:b]), prod(ishape[b:-1]), prod(data[b + k :])
    n = batch * rows * width
    strides = contiguous_strides(data)
    t = tuned_values(source, tuned)
    index64 = int(n >= I32_LIMIT or prod(data) >= I32_LIMIT)
    macros = {
        "PL_GATHER_ND": 1,
        "PL_BYTES": dt.itemsize,
        "PL_INDEX_T": index_t,
        "PL_K": k,
        "PL_BLOCK": t["block"],
        "PL_INDEX64": index64,
    }
    specs = [pointer("data"), pointer("indices"), pointer("y")]
    specs += [ArgSpec(a, "i64") for a in ("n", "slice", "rows", "batch_stride", "bad")]
    specs += [ArgSpec(f"{p}{j}", "i64") for p in ("d", "s") for j in range(MAX_NDIM)]
    scalars = {"n": n, "slice": max(width, 1), "rows": max(rows, 1), "batch_stride": prod(data[b:]), "bad": 0}
    scalars.update({f"d{j}": data[b + j] if j < k else 1 for j in range(MAX_NDIM)})
    scalars.update({f"s{j}": strides[b + j] if j < k else 0 for j in range(MAX_NDIM)})
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(source, "pl_gather_nd", macros, grid, t["block"], specs, scalars, dict(t, k=k))


def plan_scatter_elements(
    dtype: Any,
    data_shape: Any,
    index_dtype: Any,
    index_shape: Any,
    axis: int,
    *,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan the scatter of ``scatter_elements`` (reduction none) into a y that already holds data, one
    thread per update: ``pl_scatter_elements(indices, updates, y, n, axis_n, axis_stride, d0..d7,
    sy0..sy7)`` over the collapsed dims of indices (gather_elements' walk, writing instead of reading).

    Raises
    ------
    InvalidArgumentError
        An index dtype other than int32/int64, an axis out of range, indices of another rank than data or
        larger off the axis, more than 8 dims after collapsing, a bad tunable.
    """
    op = "scatter_elements"
    source = KERNELS[op]
    w = elements_walk(op, dtype, data_shape, index_dtype, index_shape, axis)  # gather_elements' walk
    shp, ax, axis_stride, n, dims, sy = w.shape, w.axis, w.axis_stride, w.n, w.dims, w.strides
    t = tuned_values(source, tuned)
    macros = {
        "PL_SCATTER_ELEMENTS": 1,
        "PL_BYTES": w.itemsize,
        "PL_INDEX_T": w.index_t,
        "PL_BLOCK": t["block"],
        "PL_NDIM": len(dims),
        "PL_INDEX64": w.index64,
    }
    specs = [pointer("indices"), pointer("updates"), pointer("y")]
    specs += [ArgSpec(a, "i64") for a in ("n", "axis_n", "axis_stride")] + strided_specs(("sy",))
    scalars = {"n": n, "axis_n": shp[ax], "axis_stride": axis_stride, **strided_scalars(dims, {"sy": sy})}
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(
        source, "pl_scatter_elements", macros, grid, t["block"], specs, scalars, dict(t, ndim=len(dims))
    )


def plan_one_hot(
    dtype: Any,
    index_dtype: Any,
    index_shape: Any,
    depth: int,
    axis: int = -1,
    *,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ONNX OneHot into y of ``dtype`` (values' dtype): ``pl_one_hot(indices, values, y, n, depth,
    inner)``, y seen as ``[outer, depth, inner]`` with ``inner`` the indices' dims from ``axis`` on.

    Raises
    ------
    InvalidArgumentError
        An index dtype that is not an integer type, depth below 1, an axis out of range, a bad
        tunable.
    """
    op = "one_hot"
    source = KERNELS[op]
    dt, it = get_dtype(dtype), get_dtype(index_dtype)
    if it.name not in ONE_HOT_INDEX_TYPES:
        raise InvalidArgumentError(
            f"{op}: indices must be one of {sorted(ONE_HOT_INDEX_TYPES)} (got {it.name})",
            op=op,
            dtype=it.name,
        )
    ishp = shape_of(index_shape, op)
    if int(depth) < 1:
        raise InvalidArgumentError(f"{op}: depth must be >= 1 (got {depth})", op=op)
    ax = normalize_axis(int(axis), len(ishp) + 1, op=op)
    inner = prod(ishp[ax:])
    n = prod(ishp) * int(depth)
    t = tuned_values(source, tuned)
    macros = {
        "PL_ONE_HOT": 1,
        "PL_BYTES": dt.itemsize,
        "PL_INDEX_T": ONE_HOT_INDEX_TYPES[it.name],
        "PL_BLOCK": t["block"],
        "PL_INDEX64": int(n >= I32_LIMIT),
    }
    specs = [pointer("indices"), pointer("values"), pointer("y")]
    specs += [ArgSpec(a, "i64") for a in ("n", "depth", "inner")]
    scalars = {"n": n, "depth": int(depth), "inner": max(inner, 1)}
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(source, "pl_one_hot", macros, grid, t["block"], specs, scalars, dict(t))


def plan_eye_like(
    dtype: Any,
    shape: Any,
    k: int = 0,
    *,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ONNX EyeLike: ``pl_eye_like(y, n, cols, k, one)`` over a contiguous ``[rows, cols]`` y of
    ``dtype``, ``one`` the bits of 1 in it, k clamped as trilu's (beyond the matrix: no diagonal).

    Raises
    ------
    InvalidArgumentError
        A shape that is not 2-d, a bad tunable.
    """
    op = "eye_like"
    source = KERNELS[op]
    dt = get_dtype(dtype)
    shp = shape_of(shape, op)
    if len(shp) != 2:
        raise InvalidArgumentError(f"{op}: y must be 2-d (got shape {list(shp)})", op=op)
    rows, cols = shp
    n = rows * cols
    one = np.ones(1, dt.numpy).view(np.dtype(f"u{dt.itemsize}"))[0]
    t = tuned_values(source, tuned)
    macros = {
        "PL_EYE_LIKE": 1,
        "PL_BYTES": dt.itemsize,
        "PL_BLOCK": t["block"],
        "PL_INDEX64": int(n >= I32_LIMIT),
    }
    specs = [pointer("y"), *(ArgSpec(a, "i64") for a in ("n", "cols", "k", "one"))]
    scalars = {"n": n, "cols": max(cols, 1), "k": trilu_diagonal(rows, cols, k), "one": int(one)}
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(source, "pl_eye_like", macros, grid, t["block"], specs, scalars, dict(t))


# -- binds ------------------------------------------------------------------------------------------
def gather_nd_bind(ctx: KernelContext):
    """gather_nd on CUDA; an index tuple longer than 8 declines (the reference runs on staged copies)."""
    dtype, itype = ctx.in_dtypes[0], ctx.in_dtypes[1]
    shape, ishape = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    b = int(ctx.attrs["batch_dims"])
    if ishape[-1] > MAX_NDIM:
        raise VariantDeclined(f"index tuples of {ishape[-1]} indices (the kernel takes up to {MAX_NDIM})")
    tuned, sms = tuned_of(ctx, KERNELS["gather_nd"]), sm_count_of(ctx)
    launch = PlanLaunch(
        ctx.backend,
        lambda a: plan_gather_nd(dtype, shape, itype, ishape, b, tuned=tuned, sm_count=sms),
        {"data": ("in", 0), "indices": ("in", 1), "y": ("out", 0)},
        ctx.stage,
    )
    return CheckedGatherND(ctx, launch) if ctx.attrs["check_indices"] else launch


class CheckedGatherND(CheckedGather):
    """gather_nd with ``check_indices``: the shape family's :class:`CheckedGather` round trip (the kernel
    records the first out-of-range position in the flattened indices); the error names the dim that
    position's index addresses (its place in its tuple, after the batch dims), as the CPU variant does."""

    def __init__(self, ctx: KernelContext, launch: PlanLaunch):
        self.batch_dims, self.k = int(ctx.attrs["batch_dims"]), int(ctx.in_shapes[1][-1])
        self.data_shape = tuple(ctx.in_shapes[0])
        super().__init__(replace(ctx, attrs={**ctx.attrs, "axis": self.batch_dims}), launch, op="gather_nd")

    def __call__(self, ins: list, outs: list, stream: Any) -> None:
        try:
            super().__call__(ins, outs, stream)
        except InvalidArgumentError:
            axis = self.batch_dims + int(self.host[1]) % self.k  # host[1]: the position read back
            raise index_out_of_range(
                self.stage, int(self.index[0]), axis, self.data_shape[axis], op=self.op
            ) from None


def scatter_elements_bind(ctx: KernelContext):
    """scatter_elements on CUDA: data copied into y, then the updates scattered (reduction none). The
    combining reductions decline, as scatter_nd's do (:func:`decline_combining`)."""
    decline_combining(ctx)
    dtype, itype = ctx.in_dtypes[0], ctx.in_dtypes[1]
    shape, ishape = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    axis = int(ctx.attrs["axis"])
    copy = _strided(ctx, [(0, _whole(shape))])  # a prebuilt launch: the native core replays both
    if not prod(ishape):
        return copy
    tuned, sms = tuned_of(ctx, KERNELS["scatter_elements"]), sm_count_of(ctx)
    scatter = PlanLaunch(
        ctx.backend,
        lambda a: plan_scatter_elements(dtype, shape, itype, ishape, axis, tuned=tuned, sm_count=sms),
        {"indices": ("in", 1), "updates": ("in", 2), "y": ("out", 0)},
        ctx.stage,
    )
    return _Launches([copy, scatter])


def one_hot_bind(ctx: KernelContext):
    dtype, itype, ishape = ctx.in_dtypes[1], ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
    depth, axis = int(ctx.attrs["depth"]), int(ctx.attrs["axis"])
    tuned, sms = tuned_of(ctx, KERNELS["one_hot"]), sm_count_of(ctx)
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_one_hot(dtype, itype, ishape, depth, axis, tuned=tuned, sm_count=sms),
        {"indices": ("in", 0), "values": ("in", 1), "y": ("out", 0)},
        ctx.stage,
    )


def eye_like_bind(ctx: KernelContext):
    """eye_like on CUDA: y written from its shape alone (x is not read)."""
    dtype, shape, k = ctx.out_dtypes[0], tuple(ctx.out_shapes[0]), int(ctx.attrs["k"])
    tuned, sms = tuned_of(ctx, KERNELS["eye_like"]), sm_count_of(ctx)
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_eye_like(dtype, shape, k, tuned=tuned, sm_count=sms),
        {"y": ("out", 0)},
        ctx.stage,
    )
