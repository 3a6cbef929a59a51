"""The shape family on CUDA: operators that move elements and compute nothing, for every dtype.

reshape, flatten, squeeze and unsqueeze copy the bytes (one device memcpy); slice, expand and split copy
strided views of their inputs, one prebuilt ``as_strided`` launch per part (the transpose family's word
copies: zero strides for broadcast dims; the native core replays them), or, for a slice's negative step,
through the backend's strided copy (negative strides), which the core does not run; concat copies every
part in one launch of ``pl_concat`` (16-byte words when the parts' rows allow); gather, gather_elements
and where run the kernels of ``shape.cu``. Inputs are contiguous (the runtime relayouts any that is not),
so every view is computed once, at bind. Pure Python + NumPy: nothing here imports a CUDA package.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...descriptor import KernelContext, VariantDeclined
from ...dtypes import DTYPES, get_dtype
from ...errors import InvalidArgumentError
from ...tensor import Tensor
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
    broadcast_strides,
    broadcast_walk,
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
from ..transpose.cuda import plan_as_strided
from .rules import MAX_PARTS, index_out_of_range, slice_plan, split_sizes, trilu_diagonal

__all__ = [
    "KERNELS",
    "TUNED_AS",
    "INDEX_TYPES",
    "plan_gather",
    "plan_gather_elements",
    "ElementsWalk",
    "elements_walk",
    "plan_where",
    "plan_trilu",
    "plan_scatter_nd",
    "decline_combining",
    "plan_concat",
    "reshaped_bind",
    "slice_bind",
    "expand_bind",
    "concat_bind",
    "split_bind",
    "gather_bind",
    "gather_elements_bind",
    "CheckedGather",
    "where_bind",
    "trilu_bind",
    "scatter_nd_bind",
    "slice_view",
]

_SOURCE = Path(__file__).resolve().parent / "shape.cu"
_ALL = tuple(sorted(DTYPES))
_TUNABLES = {"block": (256, BLOCKS), "max_blocks_per_sm": (8, (1, 2, 4, 8, 16, 32))}
_CONCAT_TUNABLES = {**_TUNABLES, "unroll": (4, (1, 2, 4, 8))}  # words in flight per thread (as the copies)
_WORDS = (16, 8, 4, 2, 1)  # concat's word sizes in bytes, widest first
INDEX_TYPES = {"int32": "int", "int64": "long long"}
"""gather's (and gather_elements') index dtypes -> their C type in shape.cu."""

KERNELS: dict[str, KernelSource] = {
    "gather": KernelSource("gather", _SOURCE, "pl_gather", {"PL_GATHER": "1"}, dict(_TUNABLES), dtypes=_ALL),
    "gather_elements": KernelSource(
        "gather_elements",
        _SOURCE,
        "pl_gather_elements",
        {"PL_GATHER_ELEMENTS": "1"},
        dict(_TUNABLES),
        dtypes=_ALL,
    ),
    "where": KernelSource("where", _SOURCE, "pl_where", {"PL_WHERE": "1"}, dict(_TUNABLES), dtypes=_ALL),
    "scatter_nd": KernelSource(
        "scatter_nd", _SOURCE, "pl_scatter_nd", {"PL_SCATTER_ND": "1"}, dict(_TUNABLES), dtypes=_ALL
    ),
    "trilu": KernelSource("trilu", _SOURCE, "pl_trilu", {"PL_TRILU": "1"}, dict(_TUNABLES), dtypes=_ALL),
    "concat": KernelSource(
        "concat", _SOURCE, "pl_concat", {"PL_CONCAT": "1"}, dict(_CONCAT_TUNABLES), dtypes=_ALL
    ),
}
"""The kernels of this family (the strided copies are the backend's, with nothing to tune)."""

TUNED_AS: dict[str, str] = {}


# -- plans ------------------------------------------------------------------------------------------
def _index_type(index_dtype: Any, op: str) -> str:
    """The C type of an index dtype in shape.cu.

    Raises
    ------
    InvalidArgumentError
        An index dtype other than int32/int64.
    """
    it = get_dtype(index_dtype)
    if it.name not in INDEX_TYPES:
        raise InvalidArgumentError(
            f"{op}: indices must be int32 or int64 (got {it.name})", op=op, dtype=it.name
        )
    return INDEX_TYPES[it.name]


def plan_gather(
    dtype: Any,
    data_shape: Any,
    index_dtype: Any,
    index_shape: Any,
    axis: int,
    *,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = take(data, indices, axis)``: ``pl_gather(data, indices, y, n, nidx, axis_n, inner, bad)``.

    An index outside ``[-axis_n, axis_n)`` yields zeros in its output rows (the kernel never reads out of
    bounds); the scalar ``bad`` (0 in the plan) is the address of a device word the kernel lowers to the
    first such index position (:class:`CheckedGather` passes one).

    Raises
    ------
    InvalidArgumentError
        An index dtype other than int32/int64, an axis out of range, a bad tunable.
    """
    source = KERNELS["gather"]
    dt, index_t = get_dtype(dtype), _index_type(index_dtype, "gather")
    shp, ishp = shape_of(data_shape, "gather"), shape_of(index_shape, "gather")
    ax = normalize_axis(int(axis), len(shp), op="gather")
    outer, axis_n, inner, nidx = prod(shp[:ax]), shp[ax], prod(shp[ax + 1 :]), prod(ishp)
    n = outer * nidx * inner
    t = tuned_values(source, tuned)
    index64 = int(n >= I32_LIMIT or prod(shp) >= I32_LIMIT)
    macros = {
        "PL_GATHER": 1,
        "PL_BYTES": dt.itemsize,
        "PL_INDEX_T": index_t,
        "PL_BLOCK": t["block"],
        "PL_INDEX64": index64,
    }
    specs = [
        pointer("data"),
        pointer("indices"),
        pointer("y"),
        ArgSpec("n", "i64"),
        ArgSpec("nidx", "i64"),
        ArgSpec("axis_n", "i64"),
        ArgSpec("inner", "i64"),
        ArgSpec("bad", "i64"),
    ]
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(
        source,
        "pl_gather",
        macros,
        grid,
        t["block"],
        specs,
        {"n": n, "nidx": max(nidx, 1), "axis_n": axis_n, "inner": max(inner, 1), "bad": 0},
        dict(t, index64=index64),
    )


@dataclass(frozen=True)
class ElementsWalk:
    """The walk of gather_elements and scatter_elements: one thread per entry of indices, over its
    collapsed dims ``dims``; ``strides`` are data's contiguous strides there (0 on the axis, whose
    coordinate comes from indices times ``axis_stride``)."""

    itemsize: int
    index_t: str
    shape: tuple[int, ...]
    axis: int
    axis_stride: int
    n: int
    dims: list[int]
    strides: list[int]
    index64: int


def elements_walk(
    op: str, dtype: Any, data_shape: Any, index_dtype: Any, index_shape: Any, axis: int
) -> ElementsWalk:
    """Check and collapse the geometry of ``op`` (gather_elements, scatter_elements) for its kernel.

    Raises
    ------
    InvalidArgumentError
        An index dtype other than int32/int64, an axis out of range, indices of another rank than data or
        larger off the axis, more than 8 dims after collapsing.
    """
    shp, ishp = shape_of(data_shape, op), shape_of(index_shape, op)
    index_t = _index_type(index_dtype, op)
    ax = normalize_axis(int(axis), len(shp), op=op)
    if len(ishp) != len(shp) or any(i > d for k, (d, i) in enumerate(zip(shp, ishp, strict=True)) if k != ax):
        raise InvalidArgumentError(
            f"{op}: indices {ishp} must have the rank of data {shp} and no dim off axis {ax} larger", op=op
        )
    strides = list(contiguous_strides(shp))
    axis_stride, strides[ax] = strides[ax], 0  # the axis coordinate comes from indices
    n = prod(ishp)
    dims, (walked,) = collapse(list(ishp), [strides])
    if len(dims) > MAX_NDIM:
        raise InvalidArgumentError(
            f"{op}: indices need {len(dims)} dims after collapsing (max {MAX_NDIM})", op=op
        )
    index64 = int(n >= I32_LIMIT or prod(shp) >= I32_LIMIT)
    return ElementsWalk(get_dtype(dtype).itemsize, index_t, shp, ax, axis_stride, n, dims, walked, index64)


def plan_gather_elements(
    dtype: Any,
    data_shape: Any,
    index_dtype: Any,
    index_shape: Any,
    axis: int,
    *,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = take_along_axis(data, indices, axis)`` (ONNX GatherElements), one thread per output
    element: ``pl_gather_elements(data, indices, y, n, axis_n, axis_stride, bad, d0..d7, sd0..sd7)``.

    y and indices are contiguous of one shape, walked over its collapsed dims ``d``; element i of y reads
    data at its position's offset under data's contiguous strides ``sd`` (0 on the axis: indices may be
    smaller than data on every dim) plus ``indices[i] * axis_stride``. An index outside
    ``[-axis_n, axis_n)`` yields a zero at its position (the kernel never reads out of bounds); the
    scalar ``bad`` is plan_gather's: when not 0, the device word it addresses is lowered to the first such
    position i in indices (:class:`CheckedGather` passes one).

    Raises
    ------
    InvalidArgumentError
        An index dtype other than int32/int64, an axis out of range, indices of another rank than data or
        larger off the axis, more than 8 dims after collapsing, a bad tunable.
    """
    op = "gather_elements"
    source = KERNELS[op]
    w = elements_walk(op, dtype, data_shape, index_dtype, index_shape, axis)
    shp, ax, axis_stride, n, dims, sd, index64 = (
        w.shape,
        w.axis,
        w.axis_stride,
        w.n,
        w.dims,
        w.strides,
        w.index64,
    )
    t = tuned_values(source, tuned)
    macros = {
        "PL_GATHER_ELEMENTS": 1,
        "PL_BYTES": w.itemsize,
        "PL_INDEX_T": w.index_t,
        "PL_BLOCK": t["block"],
        "PL_NDIM": len(dims),
        "PL_INDEX64": index64,
    }
    specs = [
        pointer("data"),
        pointer("indices"),
        pointer("y"),
        ArgSpec("n", "i64"),
        ArgSpec("axis_n", "i64"),
        ArgSpec("axis_stride", "i64"),
        ArgSpec("bad", "i64"),
        *strided_specs(("sd",)),
    ]
    scalars = {
        "n": n,
        "axis_n": shp[ax],
        "axis_stride": axis_stride,
        "bad": 0,
        **strided_scalars(dims, {"sd": sd}),
    }
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(
        source,
        "pl_gather_elements",
        macros,
        grid,
        t["block"],
        specs,
        scalars,
        dict(t, ndim=len(dims), index64=index64),
    )


def plan_where(
    dtype: Any,
    cond_shape: Any,
    x_shape: Any,
    y_shape: Any,
    *,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``z = condition ? x : y`` with NumPy broadcasting into a contiguous z:
    ``pl_where(c, x, y, z, n, d0..d7, sc0..sc7, sx0..sx7, sy0..sy7)`` over the collapsed output shape.

    Raises
    ------
    InvalidArgumentError
        Shapes that do not broadcast, more than 8 dims after collapsing, a bad tunable.
    """
    source = KERNELS["where"]
    dt = get_dtype(dtype)
    shapes = [shape_of(s, "where") for s in (cond_shape, x_shape, y_shape)]
    walk = broadcast_walk("where", shapes)
    n, dims, strides, index64 = walk.n, walk.dims, walk.strides, walk.index64
    t = tuned_values(source, tuned)
    macros = {
        "PL_WHERE": 1,
        "PL_BYTES": dt.itemsize,
        "PL_BLOCK": t["block"],
        "PL_NDIM": len(dims),
        "PL_INDEX64": index64,
    }
    specs = [
        pointer("c"),
        pointer("x"),
        pointer("y"),
        pointer("z"),
        ArgSpec("n", "i64"),
        *strided_specs(("sc", "sx", "sy")),
    ]
    scalars = {"n": n, **strided_scalars(dims, dict(zip(("sc", "sx", "sy"), strides, strict=True)))}
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(
        source, "pl_where", macros, grid, t["block"], specs, scalars, dict(t, ndim=len(dims), index64=index64)
    )


def plan_scatter_nd(
    dtype: Any,
    data_shape: Any,
    index_dtype: Any,
    index_shape: Any,
    *,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan the scatter of ``scatter_nd`` (reduction none) into a y that already holds data:
    ``pl_scatter_nd(indices, updates, y, n, slice, d0..d7, s0..s7)``, a thread per update element.

    Raises
    ------
    InvalidArgumentError
        An index dtype other than int32/int64, an index depth k above 8 or above data's rank, a bad
        tunable.
    """
    source = KERNELS["scatter_nd"]
    dt, index_t = get_dtype(dtype), _index_type(index_dtype, "scatter_nd")
    data, ishape = shape_of(data_shape, "scatter_nd"), shape_of(index_shape, "scatter_nd")
    k = ishape[-1] if ishape else -1
    if not 0 <= k <= min(len(data), MAX_NDIM):
        raise InvalidArgumentError(
            f"scatter_nd: the index depth (last dim of indices, {k}) must be 0..{min(len(data), MAX_NDIM)} "
            f"for data of shape {list(data)}",
            op="scatter_nd",
        )
    strides = contiguous_strides(data)
    slice_size = prod(data[k:])
    n = prod(ishape[:-1]) * slice_size
    t = tuned_values(source, tuned)
    macros = {
        "PL_SCATTER_ND": 1,
        "PL_BYTES": dt.itemsize,
        "PL_INDEX_T": index_t,
        "PL_K": k,
        "PL_BLOCK": t["block"],
        "PL_INDEX64": int(max(n, prod(data)) >= I32_LIMIT),
    }
    specs = [
        pointer("indices"),
        pointer("updates"),
        pointer("y"),
        ArgSpec("n", "i64"),
        ArgSpec("slice", "i64"),
    ]
    specs += [ArgSpec(f"{p}{j}", "i64") for p in ("d", "s") for j in range(MAX_NDIM)]
    scalars = {"n": n, "slice": max(slice_size, 1)}
    scalars.update({f"d{j}": data[j] if j < k else 1 for j in range(MAX_NDIM)})
    scalars.update({f"s{j}": strides[j] if j < k else 0 for j in range(MAX_NDIM)})
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(source, "pl_scatter_nd", macros, grid, t["block"], specs, scalars, dict(t, k=k))


def plan_trilu(
    dtype: Any,
    shape: Any,
    k: int,
    upper: bool,
    *,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = triu(x, k)`` (``upper``) or ``tril(x, k)`` over the last two dims of a contiguous x:
    ``pl_trilu(x, y, n, rows, cols, k)``, k clamped to ``[-rows, cols]`` (beyond it, every element is kept
    or none is).

    Raises
    ------
    InvalidArgumentError
        Fewer than 2 dims, a bad tunable.
    """
    source = KERNELS["trilu"]
    dt = get_dtype(dtype)
    shp = shape_of(shape, "trilu")
    if len(shp) < 2:
        raise InvalidArgumentError(f"trilu: x needs at least 2 dims (got shape {list(shp)})", op="trilu")
    rows, cols = shp[-2], shp[-1]
    n = prod(shp)
    t = tuned_values(source, tuned)
    macros = {
        "PL_TRILU": 1,
        "PL_BYTES": dt.itemsize,
        "PL_UPPER": int(bool(upper)),
        "PL_BLOCK": t["block"],
        "PL_INDEX64": int(n >= I32_LIMIT),
    }
    specs = [pointer("x"), pointer("y"), *(ArgSpec(a, "i64") for a in ("n", "rows", "cols", "k"))]
    scalars = {"n": n, "rows": max(rows, 1), "cols": max(cols, 1), "k": trilu_diagonal(rows, cols, k)}
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(source, "pl_trilu", macros, grid, t["block"], specs, scalars, dict(t))


def plan_concat(
    dtype: Any,
    part_shapes: Any,
    axis: int,
    *,
    alignment: int = 16,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan concat of the parts that have elements (``part_shapes``, in output order, 1 to ``MAX_PARTS``)
    along ``axis``: one launch of ``pl_concat(y, rows, row, src0, len0, blocks0, ..., src63, ...)``.

    The output is seen as ``[rows, row]`` words (rows: the product of the dims before the axis); part i
    as ``[rows, len_i]``. A word is the widest of 16, 8, 4, 2, 1 bytes that divides every part's row
    bytes and that the pointers' ``alignment`` allows (never below the element size). Each part gets
    grid blocks in proportion to its words (at least one), the grid capped at
    ``max_blocks_per_sm`` per SM.

    Raises
    ------
    InvalidArgumentError
        No part, more than ``MAX_PARTS``, an empty part, parts that do not match off the axis, a bad
        axis or tunable.
    """
    source = KERNELS["concat"]
    dt = get_dtype(dtype)
    shapes = [shape_of(s, "concat") for s in part_shapes]
    if not 1 <= len(shapes) <= MAX_PARTS:
        raise InvalidArgumentError(
            f"concat: a launch copies 1 to {MAX_PARTS} parts (got {len(shapes)})", op="concat"
        )
    ax = normalize_axis(int(axis), len(shapes[0]), op="concat")
    for s in shapes:
        if (
            len(s) != len(shapes[0])
            or s[:ax] + s[ax + 1 :] != shapes[0][:ax] + shapes[0][ax + 1 :]
            or not prod(s)
        ):
            raise InvalidArgumentError(
                f"concat: parts {shapes} must be non-empty and match off axis {ax}", op="concat"
            )
    rows = prod(shapes[0][:ax])
    row_bytes = [prod(s[ax:]) * dt.itemsize for s in shapes]
    limit = max(dt.itemsize, min(16, int(alignment)))
    word = next(w for w in _WORDS if w <= limit and all(b % w == 0 for b in row_bytes))
    lens = [b // word for b in row_bytes]
    row = sum(lens)
    t = tuned_values(source, tuned)
    per_block = t["block"] * t["unroll"]
    want = [-(-rows * n // per_block) for n in lens]
    cap = sm_count * t["max_blocks_per_sm"]
    total = sum(want)
    blocks = want if total <= cap else [max(1, w * cap // total) for w in want]
    index64 = int(rows * row >= I32_LIMIT)
    macros = {
        "PL_CONCAT": 1,
        "PL_BYTES": word,
        "PL_PARTS": len(shapes),
        "PL_BLOCK": t["block"],
        "PL_UNROLL": t["unroll"],
        "PL_INDEX64": index64,
    }
    specs = [pointer("y", word), ArgSpec("rows", "i64"), ArgSpec("row", "i64")]
    scalars: dict[str, int] = {"rows": rows, "row": row}
    for i in range(MAX_PARTS):
        specs += [
            pointer(f"src{i}", word, optional=True),
            ArgSpec(f"len{i}", "i64"),
            ArgSpec(f"blocks{i}", "i64"),
        ]
        scalars[f"len{i}"] = lens[i] if i < len(lens) else 0
        scalars[f"blocks{i}"] = blocks[i] if i < len(blocks) else 0
    return make_plan(
        source,
        "pl_concat",
        macros,
        (sum(blocks), 1, 1),
        t["block"],
        specs,
        scalars,
        dict(t, word=word, parts=len(shapes), index64=index64),
    )


# -- strided views ----------------------------------------------------------------------------------
View = tuple[int, tuple[int, ...], tuple[int, ...]]  # (offset in elements, shape, strides in elements)


def slice_view(shape: tuple[int, ...], attrs: Any) -> View:
    """The view of a contiguous tensor of ``shape`` that ``slice`` selects: its first element, shape and
    strides (a negative step gives a negative stride)."""
    index, out = slice_plan(shape, attrs)
    strides = contiguous_strides(shape)
    offset, view_strides = 0, []
    for dim, st, part in zip(shape, strides, index, strict=True):
        start, _, step = part.indices(dim)
        if dim:
            offset += start * st
        view_strides.append(step * st)
    return offset, tuple(out), tuple(view_strides)


def _view(t: Tensor, view: View) -> Tensor:
    offset, shape, strides = view
    return Tensor(t.ptr + offset * t.dtype.itemsize, shape, t.dtype, t.device, strides, owner=t)


def _copies(ctx: KernelContext, moves: list[tuple[str, int, View, str, int, View]]):
    """A kernel running ``backend.copy(view of out, view of in)`` for each ``(in|out, position, view)``
    pair; empty parts are dropped at bind."""
    backend = ctx.backend
    moves = [m for m in moves if prod(m[2][1])]

    def kernel(ins, outs, stream):
        sides = {"in": ins, "out": outs}
        for skind, spos, sview, dkind, dpos, dview in moves:
            backend.copy(_view(sides[dkind][dpos], dview), _view(sides[skind][spos], sview), stream=stream)

    return kernel


def _strided(ctx: KernelContext, moves: list[tuple[int, View]]):
    """Each ``(output position, view of input 0)`` copied out by one prebuilt ``as_strided`` launch (word
    copies; the native core replays them), empty parts dropped. A view with a negative stride (a slice's
    negative step), or one ``plan_as_strided`` cannot plan, makes the stage the backend's strided copies
    (:func:`_copies`), which the core does not run."""
    moves = [m for m in moves if prod(m[1][1])]
    if not moves:
        return _NOTHING
    copies = [("in", 0, view, "out", i, _whole(view[1])) for i, view in moves]
    if any(s < 0 for _, view in moves for s in view[2]):
        return _copies(ctx, copies)
    dtype, in_shape, sms = ctx.in_dtypes[0], tuple(ctx.in_shapes[0]), sm_count_of(ctx)
    try:
        for _, (offset, shape, strides) in moves:  # every part plannable, or none launched this way
            plan_as_strided(dtype, in_shape, shape, strides, offset, sm_count=sms)
    except InvalidArgumentError:
        return _copies(ctx, copies)
    launches = [
        PlanLaunch(
            ctx.backend,
            lambda a, v=view: plan_as_strided(dtype, in_shape, v[1], v[2], v[0], alignment=a, sm_count=sms),
            {"x": ("in", 0), "y": ("out", i)},
            ctx.stage,
        )
        for i, view in moves
    ]
    return launches[0] if len(launches) == 1 else _Launches(launches)


class _Launches:
    """A stage's prebuilt launches run in order (a split's parts), replayed as they are by the native core."""

    def __init__(self, launches: list[PlanLaunch]):
        self.launches = launches

    def __call__(self, ins: list, outs: list, stream: Any) -> None:
        for launch in self.launches:
            launch(ins, outs, stream)

    def native_launches(self) -> list:
        return [native for launch in self.launches for native in launch.native_launches()]


def _whole(shape) -> View:
    shape = tuple(int(d) for d in shape)
    return 0, shape, contiguous_strides(shape)


# -- binds ------------------------------------------------------------------------------------------
def reshaped_bind(ctx: KernelContext):
    """reshape, flatten, squeeze, unsqueeze: the input's bytes, in order, under the output's shape."""
    return _copies(ctx, [("in", 0, _whole(ctx.out_shapes[0]), "out", 0, _whole(ctx.out_shapes[0]))])


def slice_bind(ctx: KernelContext):
    """slice: its view of x copied out (a negative step: the backend's strided copy)."""
    return _strided(ctx, [(0, slice_view(tuple(ctx.in_shapes[0]), ctx.attrs))])


def expand_bind(ctx: KernelContext):
    """expand: x read with stride 0 along the dims it is broadcast over."""
    out, shape = tuple(ctx.out_shapes[0]), tuple(ctx.in_shapes[0])
    return _strided(ctx, [(0, (0, out, tuple(broadcast_strides(out, shape))))])


def _parts(shape: tuple[int, ...], axis: int, sizes) -> list[View]:
    """The views of consecutive parts of ``sizes`` along ``axis`` of a contiguous tensor of ``shape``."""
    strides = contiguous_strides(shape)
    views, start = [], 0
    for size in sizes:
        views.append((start * strides[axis], shape[:axis] + (size,) + shape[axis + 1 :], strides))
        start += size
    return views


def concat_bind(ctx: KernelContext):
    """concat: every input that has elements copied into its part of the output by one launch."""
    out = tuple(ctx.out_shapes[0])
    axis = normalize_axis(int(ctx.attrs["axis"]), len(out), op="concat")
    parts = [i for i, s in enumerate(ctx.in_shapes) if s is not None and prod(s)]
    if not parts:
        return _NOTHING
    dtype, shapes = ctx.in_dtypes[parts[0]], [tuple(ctx.in_shapes[i]) for i in parts]
    tuned, sms = tuned_of(ctx, KERNELS["concat"]), sm_count_of(ctx)
    slots = {f"src{j}": ("in", i) for j, i in enumerate(parts)}
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_concat(dtype, shapes, axis, alignment=a, tuned=tuned, sm_count=sms),
        {"y": ("out", 0), **slots},
        ctx.stage,
    )


class _Nothing:
    """The kernel of a stage with nothing to move (every part empty); no launch, for the native core too."""

    def __call__(self, ins: list, outs: list, stream: Any) -> None:
        return None

    def native_launches(self) -> list:
        return []


_NOTHING = _Nothing()


def split_bind(ctx: KernelContext):
    """split: each part of the input copied into its output (ports past the part count stay empty)."""
    shape = tuple(ctx.in_shapes[0])
    axis = normalize_axis(int(ctx.attrs["axis"]), len(shape), op="split")
    sizes = split_sizes(shape[axis], tuple(ctx.attrs["split"]), int(ctx.attrs["num_outputs"]))
    views = _parts(shape, axis, sizes)[:MAX_PARTS]
    return _strided(ctx, list(enumerate(views)))


def gather_bind(ctx: KernelContext):
    dtype, itype = ctx.in_dtypes[0], ctx.in_dtypes[1]
    shape, ishape = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    axis, tuned, sms = int(ctx.attrs["axis"]), tuned_of(ctx, KERNELS["gather"]), sm_count_of(ctx)
    launch = PlanLaunch(
        ctx.backend,
        lambda a: plan_gather(dtype, shape, itype, ishape, axis, tuned=tuned, sm_count=sms),
        {"data": ("in", 0), "indices": ("in", 1), "y": ("out", 0)},
        ctx.stage,
    )
    return CheckedGather(ctx, launch) if ctx.attrs["check_indices"] else launch


def gather_elements_bind(ctx: KernelContext):
    dtype, itype = ctx.in_dtypes[0], ctx.in_dtypes[1]
    shape, ishape = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    axis, tuned, sms = int(ctx.attrs["axis"]), tuned_of(ctx, KERNELS["gather_elements"]), sm_count_of(ctx)
    launch = PlanLaunch(
        ctx.backend,
        lambda a: plan_gather_elements(dtype, shape, itype, ishape, axis, tuned=tuned, sm_count=sms),
        {"data": ("in", 0), "indices": ("in", 1), "y": ("out", 0)},
        ctx.stage,
    )
    return CheckedGather(ctx, launch, op="gather_elements") if ctx.attrs["check_indices"] else launch


class CheckedGather:
    """gather (or gather_elements) with ``check_indices`` on CUDA: the kernel records the first out-of-range
    index position in the flattened indices in a device word (reset before each launch); the stage then
    waits for its stream, reads it back and raises as the CPU variant does. The wait makes the stage
    uncapturable (``graph_safe``)."""

    graph_safe = False
    _NONE = -1  # all bits set: the unsigned "no position" the kernel's atomicMin starts from

    def __init__(self, ctx: KernelContext, launch: PlanLaunch, *, op: str = "gather"):
        self.backend, self.launch, self.stage, self.op = ctx.backend, launch, ctx.stage, op
        self.axis = normalize_axis(int(ctx.attrs["axis"]), len(ctx.in_shapes[0]), op=op)
        self.axis_n = int(ctx.in_shapes[0][self.axis])
        self.word = self.backend.allocate(8, tag="gather check")
        self.host = self.backend.pinned_empty((2,), "int64")  # [0] the reset value, [1] read back
        self.index = self.backend.pinned_empty((1,), ctx.in_dtypes[1])  # the offending index, read back

    def __call__(self, ins: list, outs: list, stream: Any) -> None:
        be, host = self.backend, self.host
        host[0] = self._NONE
        be.memcpy(self.word.ptr, host.ctypes.data, 8, stream=stream)
        self.launch(ins, outs, stream, bad=self.word.ptr)
        be.memcpy(host.ctypes.data + 8, self.word.ptr, 8, stream=stream)
        be.synchronize(stream)
        position = int(host[1])
        if position == self._NONE:
            return
        be.memcpy(
            self.index.ctypes.data,
            ins[1].ptr + position * self.index.itemsize,
            self.index.nbytes,
            stream=stream,
        )
        be.synchronize(stream)
        raise index_out_of_range(self.stage, int(self.index[0]), self.axis, self.axis_n, op=self.op)


def where_bind(ctx: KernelContext):
    dtype = ctx.in_dtypes[1]
    shapes = [tuple(s) for s in ctx.in_shapes]
    tuned, sms = tuned_of(ctx, KERNELS["where"]), sm_count_of(ctx)
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_where(dtype, *shapes, tuned=tuned, sm_count=sms),
        {"c": ("in", 0), "x": ("in", 1), "y": ("in", 2), "z": ("out", 0)},
        ctx.stage,
    )


def trilu_bind(ctx: KernelContext):
    dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
    k, upper = int(ctx.attrs["k"]), bool(ctx.attrs["upper"])
    tuned, sms = tuned_of(ctx, KERNELS["trilu"]), sm_count_of(ctx)
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_trilu(dtype, shape, k, upper, tuned=tuned, sm_count=sms),
        {"x": ("in", 0), "y": ("out", 0)},
        ctx.stage,
    )


def decline_combining(ctx: KernelContext) -> None:
    """A scatter's combining reductions (add, mul, max, min) have no CUDA kernel: they decline, and the
    runtime runs the NumPy reference on staged copies (combining in order, deterministically; atomics
    would not be, for floats, and there is no atomic multiply). Reduction none passes."""
    reduction = str(ctx.attrs["reduction"])
    if reduction != "none":
        raise VariantDeclined(
            f"reduction {reduction!r} combines updates on the host (no CUDA kernel); reduction 'none' runs "
            "on the GPU"
        )


def scatter_nd_bind(ctx: KernelContext):
    """scatter_nd on CUDA: data copied into y, then the updates scattered (reduction none). The
    combining reductions decline: the runtime runs the NumPy reference on staged copies."""
    decline_combining(ctx)
    dtype, itype = ctx.in_dtypes[0], ctx.in_dtypes[1]
    shape, ishape = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    copy = _strided(ctx, [(0, _whole(shape))])  # a prebuilt launch: the native core replays both
    if not prod(ishape[:-1]) * prod(shape[ishape[-1] :]):
        return copy
    tuned, sms = tuned_of(ctx, KERNELS["scatter_nd"]), sm_count_of(ctx)
    scatter = PlanLaunch(
        ctx.backend,
        lambda a: plan_scatter_nd(dtype, shape, itype, ishape, tuned=tuned, sm_count=sms),
        {"indices": ("in", 1), "updates": ("in", 2), "y": ("out", 0)},
        ctx.stage,
    )
    return _Launches([copy, scatter])
