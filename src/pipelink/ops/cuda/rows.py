"""Plans of the row kernels (layer_norm, rms_norm, softmax over the last axis) and of transpose."""

from __future__ import annotations

from typing import Any

from ...dtypes import DType, get_dtype
from ...errors import InvalidArgumentError
from .flat import _collapse, _contiguous_strides
from .launch import (
    _DEFAULT_SM_COUNT,
    _GRID_YZ_MAX,
    _I32_LIMIT,
    _MAX_NDIM,
    ArgSpec,
    LaunchPlan,
    _acc_kind,
    _flat_grid,
    _float_dtype,
    _pick_vec,
    _plan,
    _prod,
    _ptr,
    _shape,
    _tuned,
)

__all__ = ["plan_layer_norm", "plan_rms_norm", "plan_softmax", "plan_transpose"]


def _row_plan(
    op: str, dt: DType, shape: Any, tuned: dict[str, int] | None, alignment: int, sm_count: int
) -> tuple[dict[str, Any], str, tuple[int, int, int], int, int, int, dict[str, int]]:
    shp = _shape(shape, op)
    if not shp:
        raise InvalidArgumentError(f"{op}: x needs at least one dimension", op=op)
    c, rows = shp[-1], _prod(shp[:-1])
    if c >= _I32_LIMIT:
        raise InvalidArgumentError(f"{op}: the last dimension must be below 2^31 (got {c})", op=op)
    if c == 0:  # nothing to read or write: launch one block that finds no row
        rows = 0
    t = _tuned(op, tuned)
    vec = _pick_vec(t["vec"], dt.itemsize, alignment, op, c)
    nv = c // vec
    cap = t["max_vec_per_thread"]
    block = t["block"]
    group = t["group"]
    if group == 0:
        # a warp per row while the row fits a warp's registers; then the fewest threads per row (128 or
        # 256) that keep <= 4 vectors per thread (best on an H200 for bf16 and fp32 C = 4096, several
        # rows per block); else the whole block
        if nv <= 32 * min(cap, 8):
            group = 32
        elif nv <= 128 * min(cap, 4) and block >= 128:
            group = 128
        elif nv <= 256 * min(cap, 4) and block >= 256:
            group = 256
        else:
            group = block
    if group > block:
        block = group
    if group == block and -(-nv // group) > cap and "block" not in (tuned or {}):
        while block < 1024 and -(-nv // block) > cap:
            block *= 2
        group = block
    per_thread = -(-nv // group)
    is_big = per_thread > cap
    if is_big:
        group = block
    rpb = 1 if is_big else block // group
    grid = (max(1, min(-(-rows // rpb), sm_count * t["max_blocks_per_sm"])), 1, 1)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_BLOCK": block,
        "PL_GROUP": group,
        "PL_VEC": vec,
        "PL_MAX_VEC_PER_THREAD": max(1, min(per_thread, cap)),
    }
    params = dict(t, block=block, group=group, vec=vec, big=int(is_big))
    suffix = "_big" if is_big else ""
    return macros, suffix, grid, block, rows, c, params


def plan_layer_norm(
    dtype: Any,
    shape: Any,
    *,
    eps: float = 1e-5,
    has_gamma: bool = True,
    has_beta: bool = True,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan layer norm over the last dim of a contiguous x; gamma, beta have x's dtype and shape [C].

    Kernel ``pl_layer_norm[_big](const T* x, const T* gamma, const T* beta, T* y, ACC* mean, ACC* rstd,
    long long rows, int C, ACC eps)``; ACC (also the dtype of mean/rstd [rows]) is float32, or float64
    for float64 x. gamma/beta/mean/rstd may be null (0).
    """
    op = "layer_norm"
    dt = _float_dtype(dtype, op)
    macros, suffix, grid, block, rows, c, params = _row_plan(op, dt, shape, tuned, alignment, sm_count)
    macros.update(PL_HAS_GAMMA=int(has_gamma), PL_HAS_BETA=int(has_beta))
    a, acc = int(macros["PL_VEC"]) * dt.itemsize, _acc_kind(dt)
    specs = [
        _ptr("x", a),
        _ptr("gamma", a, optional=not has_gamma),
        _ptr("beta", a, optional=not has_beta),
        _ptr("y", a),
        _ptr("mean", optional=True),
        _ptr("rstd", optional=True),
        ArgSpec("rows", "i64"),
        ArgSpec("C", "i32"),
        ArgSpec("eps", acc),
    ]
    return _plan(
        op, "pl_layer_norm" + suffix, macros, grid, block, specs, {"rows": rows, "C": c, "eps": eps}, params
    )


def plan_rms_norm(
    dtype: Any,
    shape: Any,
    *,
    eps: float = 1e-6,
    has_gamma: bool = True,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan RMS norm over the last dim: ``y = x * rsqrt(mean(x^2) + eps) * gamma``.

    Kernel ``pl_rms_norm[_big](const T* x, const T* gamma, T* y, long long rows, int C, ACC eps)``.
    """
    op = "rms_norm"
    dt = _float_dtype(dtype, op)
    macros, suffix, grid, block, rows, c, params = _row_plan(op, dt, shape, tuned, alignment, sm_count)
    macros.update(PL_HAS_GAMMA=int(has_gamma), PL_HAS_BETA=0)
    a = int(macros["PL_VEC"]) * dt.itemsize
    specs = [
        _ptr("x", a),
        _ptr("gamma", a, optional=not has_gamma),
        _ptr("y", a),
        ArgSpec("rows", "i64"),
        ArgSpec("C", "i32"),
        ArgSpec("eps", _acc_kind(dt)),
    ]
    return _plan(
        op, "pl_rms_norm" + suffix, macros, grid, block, specs, {"rows": rows, "C": c, "eps": eps}, params
    )


def plan_softmax(
    dtype: Any,
    shape: Any,
    *,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan softmax over the last dim.

    Kernel ``pl_softmax[_big](const T* x, T* y, long long rows, int C)``.
    """
    op = "softmax"
    dt = _float_dtype(dtype, op)
    macros, suffix, grid, block, rows, c, params = _row_plan(op, dt, shape, tuned, alignment, sm_count)
    a = int(macros["PL_VEC"]) * dt.itemsize
    specs = [_ptr("x", a), _ptr("y", a), ArgSpec("rows", "i64"), ArgSpec("C", "i32")]
    return _plan(op, "pl_softmax" + suffix, macros, grid, block, specs, {"rows": rows, "C": c}, params)


# --------------------------------------------------------------------------------------------
# layout and batch norm
# --------------------------------------------------------------------------------------------
def plan_transpose(
    dtype: Any,
    shape: Any,
    perm: Any = None,
    *,
    in_strides: Any = None,
    tuned: dict[str, int] | None = None,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = x.transpose(perm)`` into a contiguous y (perm default: swap the last two dims).

    After dropping size-1 dims and merging dims that stay adjacent, a swap of the last two dims
    (with at most one batch dim in front) uses ``pl_transpose(const T* x, T* y, long long batch,
    long long R, long long C)``; anything else ``pl_permute(x, y, long long n, d0..d7, s0..s7)``
    with d the output shape and s the input strides (elements) of each output dim.
    ``in_strides`` (elements, >= 0) describes a non-contiguous x (then the permute kernel is used).
    """
    op = "transpose"
    dt = get_dtype(dtype)
    shp = _shape(shape, op)
    nd = len(shp)
    p = tuple(range(nd - 2)) + (nd - 1, nd - 2) if perm is None and nd >= 2 else tuple(perm or range(nd))
    p = tuple(int(i) % nd if nd else 0 for i in p)
    if sorted(p) != list(range(nd)):
        raise InvalidArgumentError(f"transpose: perm {tuple(perm)} is not a permutation of {nd} dims", op=op)
    t = _tuned(op, tuned)
    n = _prod(shp)
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
        in_dims = [_prod([shp[kept[j]] for j in runs[g]]) for g in order]
        new_perm = [order.index(g) for g in range(len(runs))]
        in_st = _contiguous_strides(tuple(in_dims))
        out_dims = [in_dims[i] for i in new_perm]
        out_st = [in_st[i] for i in new_perm]
        if new_perm in ([1, 0], [0, 2, 1]):
            batch = 1 if len(in_dims) == 2 else in_dims[0]
            r, c = in_dims[-2], in_dims[-1]
            tile, rows = t["tile"], t["tile_rows"]
            grid = (min(-(-c // tile), 2**31 - 1), min(-(-r // tile), _GRID_YZ_MAX), min(batch, _GRID_YZ_MAX))
            macros = {
                "PL_T": dt.cuda_type,
                "PL_TILE": tile,
                "PL_TILE_ROWS": rows,
                "PL_TILE_PAD": 1,
                "PL_BLOCK": t["block"],
            }
            specs = [_ptr("x"), _ptr("y"), ArgSpec("batch", "i64"), ArgSpec("R", "i64"), ArgSpec("C", "i64")]
            return _plan(
                op,
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
        dims, (strides,) = _collapse(dims, [strides])
    if len(dims) > _MAX_NDIM:
        raise InvalidArgumentError(f"transpose: {len(dims)} dims after merging (max {_MAX_NDIM})", op=op)
    span = 1 + sum((d - 1) * s for d, s in zip(dims, strides, strict=True))
    index64 = int(n >= _I32_LIMIT or span >= _I32_LIMIT)
    scalars: dict[str, Any] = {"n": n}
    for k in range(_MAX_NDIM):
        scalars[f"d{k}"] = dims[k] if k < len(dims) else 1
        scalars[f"s{k}"] = strides[k] if k < len(dims) else 0
    macros = {"PL_T": dt.cuda_type, "PL_BLOCK": t["block"], "PL_NDIM": len(dims), "PL_INDEX64": index64}
    specs = [_ptr("x"), _ptr("y"), ArgSpec("n", "i64")]
    specs += [ArgSpec(f"{q}{k}", "i64") for q in ("d", "s") for k in range(_MAX_NDIM)]
    grid = _flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return _plan(
        op, "pl_permute", macros, grid, t["block"], specs, scalars, dict(t, ndim=len(dims), index64=index64)
    )
