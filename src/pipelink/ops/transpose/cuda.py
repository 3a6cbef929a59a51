"""The transpose family on CUDA: a tiled transpose of the last two dims and a general permute of up to 8
dims (``transpose.cu``), and as_strided's copies of a strided view (``as_strided.cu``: a walk in words of
up to 16 bytes, or a tiled transpose when the view's innermost dim is not the input's contiguous one);
their tunables, launch plans and binds. Pure Python + NumPy."""

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
from .reference import check_as_strided, resolve_perm

__all__ = ["KERNELS", "TUNED_AS", "plan_transpose", "transpose_bind", "plan_as_strided", "as_strided_bind"]

# every dtype but the float8s: pure data movement, only the element size matters
_ALL = (
    *("float32", "float16", "bfloat16", "float64", "bool"),
    *("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"),
)
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
    "as_strided": KernelSource(
        "as_strided",
        Path(__file__).resolve().parent / "as_strided.cu",
        "pl_as_strided",
        {},
        {
            "block": (256, BLOCKS),
            "unroll": (4, (1, 2, 4, 8)),  # words in flight per thread, as the backend's strided copy
            "max_blocks_per_sm": (8, (1, 2, 4, 8, 16, 32)),
            "tile": (32, (16, 32, 64)),  # the transposing walk's tile (pl_as_strided_tiled)
            "tile_rows": (8, (4, 8, 16)),
        },
        dtypes=_ALL,
    ),
}
TUNED_AS: dict[str, str] = {}
_WORDS = (16, 8, 4, 2)  # as_strided's word sizes in bytes above one element, widest first
_TILE_MIN = 8  # both sides of a transposing view at least this long: tiled (shorter ones waste the tile)


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


def plan_as_strided(
    dtype: Any,
    in_shape: Any,
    shape: Any,
    strides: Any,
    offset: int,
    *,
    alignment: int = 16,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = as_strided(x, shape, strides, offset)`` (strides and offset in elements of x's contiguous
    storage) into a contiguous y of ``shape``, after merging the dims the view walks contiguously.

    When the view's innermost dim is not x's contiguous one but another dim is (a transpose: GPT-2's
    keys, [B, H, dh, T] out of [B, T, 3d]) and both are at least 8 long: ``pl_as_strided_tiled`` (x read
    along that dim, y written along its innermost, through a shared tile). Otherwise ``pl_as_strided``,
    in words of 16, 8, 4 or 2 bytes where the innermost dim is contiguous and its length, the offset and
    every other stride divide evenly and ``alignment`` (the pointers') allows: [B, H, T, dh] slices of a
    split are rows of 64 floats, 16 words of 16 bytes.

    Raises
    ------
    InvalidArgumentError
        An empty view (nothing to launch), a view that reads outside x (:func:`check_as_strided`), more
        than 8 dims after merging, or a bad tunable.
    """
    source = KERNELS["as_strided"]
    op = source.op
    dt = get_dtype(dtype)
    in_shp, shp = shape_of(in_shape, op), shape_of(shape, op)
    st, off = tuple(int(v) for v in strides), int(offset)
    check_as_strided(in_shp, shp, st, off)
    n = prod(shp)
    if n == 0:
        raise InvalidArgumentError("as_strided: an empty view has nothing to launch", op=op)
    dims, (sts,) = collapse(list(shp) or [1], [list(st) or [0]])
    if len(dims) > MAX_NDIM:
        raise InvalidArgumentError(f"as_strided: {len(dims)} dims after merging (max {MAX_NDIM})", op=op)
    t = tuned_values(source, tuned)
    unit_dims = [k for k in range(len(dims) - 1) if sts[k] == 1]
    if sts[-1] != 1 and unit_dims and min(dims[-1], dims[unit_dims[-1]]) >= _TILE_MIN:
        return _plan_as_strided_tiled(source, dt, dims, sts, off, unit_dims[-1], t)
    item = dt.itemsize
    unit = item
    if sts[-1] == 1:
        unit = next(
            (
                w
                for w in _WORDS
                if item < w <= max(item, int(alignment))
                and dims[-1] % (w // item) == 0
                and off % (w // item) == 0
                and all(v % (w // item) == 0 for v in sts[:-1])
            ),
            item,
        )
    k = unit // item
    dims = dims[:-1] + [dims[-1] // k]
    sts = [v // k for v in sts[:-1]] + [sts[-1] if k == 1 else 1]
    off //= k
    words = n // k
    span = off + sum((d - 1) * v for d, v in zip(dims, sts, strict=True)) + 1
    index64 = int(words >= I32_LIMIT or span >= I32_LIMIT)
    macros = {
        "PL_BYTES": unit,
        "PL_BLOCK": t["block"],
        "PL_UNROLL": t["unroll"],
        "PL_NDIM": len(dims),
        "PL_INDEX64": index64,
    }
    specs = [pointer("x", unit), pointer("y", unit), ArgSpec("n", "i64"), ArgSpec("offset", "i64")]
    specs += strided_specs(("s",))
    grid = flat_grid(words, t["block"], t["unroll"], t["max_blocks_per_sm"], sm_count)
    return make_plan(
        source,
        "pl_as_strided",
        macros,
        grid,
        t["block"],
        specs,
        {"n": words, "offset": off, **strided_scalars(dims, {"s": sts})},
        {
            "block": t["block"],
            "unroll": t["unroll"],
            "max_blocks_per_sm": t["max_blocks_per_sm"],
            "word": unit,
            "ndim": len(dims),
            "index64": index64,
        },
    )


def _plan_as_strided_tiled(
    source: KernelSource, dt, dims: list[int], sts: list[int], off: int, b: int, t: dict[str, int]
) -> LaunchPlan:
    """pl_as_strided_tiled over merged ``dims`` / ``sts``: tile rows are the innermost dim, tile columns
    dim ``b`` (x stride 1); the other dims are batches."""
    last = len(dims) - 1
    out_st = contiguous_strides(tuple(dims))
    batch = [k for k in range(len(dims)) if k not in (b, last)]
    bd = [dims[k] for k in batch] or [1]
    bs = [sts[k] for k in batch] or [0]
    bt = [out_st[k] for k in batch] or [0]
    nbatch, rows, cols = prod(bd), dims[last], dims[b]
    tile, tile_rows = t["tile"], t["tile_rows"]
    span = off + sum((d - 1) * v for d, v in zip(dims, sts, strict=True)) + 1
    index64 = int(max(nbatch, span, prod(dims)) >= I32_LIMIT)
    macros = {
        "PL_BYTES": dt.itemsize,
        "PL_TILE": tile,
        "PL_TILE_ROWS": tile_rows,
        "PL_BLOCK": tile * tile_rows,
        "PL_NDIM": len(bd),
        "PL_INDEX64": index64,
    }
    specs = [pointer("x", dt.itemsize), pointer("y", dt.itemsize)]
    specs += [ArgSpec(name, "i64") for name in ("offset", "cols", "rows", "xr", "yc", "nbatch")]
    specs += strided_specs(("s", "t"))
    grid = (
        min(-(-cols // tile), 2**31 - 1),
        min(-(-rows // tile), GRID_YZ_MAX),
        min(nbatch, GRID_YZ_MAX),
    )
    scalars = {
        "offset": off,
        "cols": cols,
        "rows": rows,
        "xr": sts[last],
        "yc": out_st[b],
        "nbatch": nbatch,
        **strided_scalars(bd, {"s": bs, "t": bt}),
    }
    params = {"tile": tile, "tile_rows": tile_rows, "ndim": len(bd), "index64": index64, "tiled": 1}
    return make_plan(
        source, "pl_as_strided_tiled", macros, grid, (tile, tile_rows, 1), specs, scalars, params
    )


class _NoLaunch:
    """The kernel of an empty view: nothing to move, no launch (for the native core either)."""

    def __call__(self, ins: list, outs: list, stream: Any) -> None:
        return None

    def native_launches(self) -> list:
        return []


def as_strided_bind(ctx: KernelContext):
    dtype, in_shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
    shape, strides = tuple(ctx.attrs["shape"]), tuple(ctx.attrs["strides"])
    offset = int(ctx.attrs["offset"])
    check_as_strided(in_shape, shape, strides, offset)
    if prod(shape) == 0:
        return _NoLaunch()
    tuned, sms = tuned_of(ctx, KERNELS["as_strided"]), sm_count_of(ctx)
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_as_strided(
            dtype, in_shape, shape, strides, offset, alignment=a, tuned=tuned, sm_count=sms
        ),
        {"x": ("in", 0), "y": ("out", 0)},
        ctx.stage,
    )
