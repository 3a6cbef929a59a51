"""Plans of the flat kernels: unary and binary elementwise (with broadcasting), bias_add, cast, batch_norm."""

from __future__ import annotations

from typing import Any

from ...errors import InvalidArgumentError
from .launch import (
    _BINARY,
    _DEFAULT_SM_COUNT,
    _I32_LIMIT,
    _MAX_NDIM,
    _UNARY,
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
    _unroll,
)

__all__ = ["plan_unary", "plan_binary", "plan_bias_add", "plan_cast", "plan_batch_norm"]


def plan_unary(
    op: str,
    dtype: Any,
    shape: Any,
    *,
    factor: float = 1.0,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = op(x)`` over a contiguous tensor; ``op`` in identity, relu, silu, gelu, gelu_tanh, scale.

    Kernel ``pl_unary(const T* x, T* y, long long n, ACC alpha)``; alpha is ``factor`` for ``scale``.
    """
    if op not in _UNARY:
        raise InvalidArgumentError(f"unknown unary op {op!r}; known: {', '.join(_UNARY)}", op=op)
    dt = _float_dtype(dtype, op)
    n = _prod(_shape(shape, op))
    t = _tuned(op, tuned)
    t["unroll"] = _unroll(t, op, dt.itemsize)
    vec = _pick_vec(t["vec"], dt.itemsize, alignment, op)
    params = dict(t, vec=vec)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_UNARY_OP": _UNARY[op],
        "PL_VEC": vec,
        "PL_BLOCK": t["block"],
        "PL_UNROLL": t["unroll"],
        "PL_FAST_ACT": int(dt.itemsize == 2),
    }
    grid = _flat_grid(n // vec, t["block"], t["unroll"], t["max_blocks_per_sm"], sm_count)
    a = vec * dt.itemsize
    specs = [_ptr("x", a), _ptr("y", a), ArgSpec("n", "i64"), ArgSpec("alpha", _acc_kind(dt))]
    return _plan(op, "pl_unary", macros, grid, t["block"], specs, {"n": n, "alpha": factor}, params)


def _broadcast(a: tuple[int, ...], b: tuple[int, ...], op: str) -> tuple[int, ...]:
    nd = max(len(a), len(b))
    a1, b1 = (1,) * (nd - len(a)) + a, (1,) * (nd - len(b)) + b
    out = []
    for i, (x, y) in enumerate(zip(a1, b1, strict=True)):
        if x != y and 1 not in (x, y):
            raise InvalidArgumentError(
                f"{op}: shapes {a} and {b} do not broadcast (dim {i}: {x} vs {y})", op=op
            )
        out.append(y if x == 1 else x)
    return tuple(out)


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def _collapse(dims: list[int], strides: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge neighbours that every operand walks contiguously."""
    keep = [i for i, d in enumerate(dims) if d != 1]
    if not keep:  # a single element (or an empty tensor): one dim
        return [_prod(dims)], [[0] for _ in strides]
    d = [dims[i] for i in keep]
    s = [[st[i] for i in keep] for st in strides]
    i = len(d) - 2
    while i >= 0:
        if all(st[i] == st[i + 1] * d[i + 1] for st in s):
            d[i] *= d[i + 1]
            del d[i + 1]
            for st in s:
                del st[i]
        i -= 1
    return d, s


def plan_binary(
    op: str,
    dtype: Any,
    shape_a: Any,
    shape_b: Any,
    *,
    a_strides: Any = None,
    b_strides: Any = None,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = a op b`` (op in add, sub, mul, div) with NumPy broadcasting; y is contiguous.

    Same contiguous shapes: ``pl_binary(const T* a, const T* b, T* y, long long n)`` (vectorised).
    Otherwise ``pl_binary_bcast(a, b, y, long long n, d0..d7, sa0..sa7, sb0..sb7)`` over the output
    shape collapsed to PL_NDIM dims; strides in elements (0 on broadcast dims; ``a_strides`` /
    ``b_strides`` give non-contiguous inputs, in elements, >= 0).
    """
    if op not in _BINARY:
        raise InvalidArgumentError(f"unknown binary op {op!r}; known: {', '.join(_BINARY)}", op=op)
    dt = _float_dtype(dtype, op)
    sa, sb = _shape(shape_a, op), _shape(shape_b, op)
    out = _broadcast(sa, sb, op)
    n = _prod(out)
    t = _tuned(op, tuned)
    t["unroll"] = _unroll(t, op, dt.itemsize)
    if sa == sb and a_strides is None and b_strides is None:
        vec = _pick_vec(t["vec"], dt.itemsize, alignment, op)
        macros = {
            "PL_T": dt.cuda_type,
            "PL_BINARY_OP": _BINARY[op],
            "PL_VEC": vec,
            "PL_BLOCK": t["block"],
            "PL_UNROLL": t["unroll"],
        }
        grid = _flat_grid(n // vec, t["block"], t["unroll"], t["max_blocks_per_sm"], sm_count)
        a = vec * dt.itemsize
        specs = [_ptr("a", a), _ptr("b", a), _ptr("y", a), ArgSpec("n", "i64")]
        return _plan(op, "pl_binary", macros, grid, t["block"], specs, {"n": n}, dict(t, vec=vec))
    nd = len(out)
    strides = []
    for shp, given in ((sa, a_strides), (sb, b_strides)):
        full = (1,) * (nd - len(shp)) + shp
        st = tuple(int(s) for s in given) if given is not None else _contiguous_strides(shp)
        st = (0,) * (nd - len(st)) + st
        strides.append([0 if full[k] == 1 and out[k] != 1 else st[k] for k in range(nd)])
    dims, (st_a, st_b) = _collapse(list(out), strides)
    if len(dims) > _MAX_NDIM:
        raise InvalidArgumentError(
            f"{op}: broadcast needs {len(dims)} dims after collapsing (max {_MAX_NDIM})", op=op
        )
    span = max(1 + sum((d - 1) * s for d, s in zip(dims, st, strict=True)) for st in (st_a, st_b))
    index64 = int(n >= _I32_LIMIT or span >= _I32_LIMIT)
    scalars = {"n": n}
    for k in range(_MAX_NDIM):
        scalars[f"d{k}"] = dims[k] if k < len(dims) else 1
        scalars[f"sa{k}"] = st_a[k] if k < len(dims) else 0
        scalars[f"sb{k}"] = st_b[k] if k < len(dims) else 0
    macros = {
        "PL_T": dt.cuda_type,
        "PL_BINARY_OP": _BINARY[op],
        "PL_VEC": 1,
        "PL_BLOCK": t["block"],
        "PL_NDIM": len(dims),
        "PL_INDEX64": index64,
    }
    grid = _flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    specs = [_ptr("a"), _ptr("b"), _ptr("y"), ArgSpec("n", "i64")]
    specs += [ArgSpec(f"{p}{k}", "i64") for p in ("d", "sa", "sb") for k in range(_MAX_NDIM)]
    return _plan(
        op,
        "pl_binary_bcast",
        macros,
        grid,
        t["block"],
        specs,
        scalars,
        dict(t, vec=1, ndim=len(dims), index64=index64),
    )


def plan_bias_add(
    dtype: Any,
    shape: Any,
    *,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y[..., c] = x[..., c] + bias[c]`` for contiguous x of ``shape`` and bias of ``shape[-1]``.

    Kernel ``pl_bias_add(const T* x, const T* bias, T* y, long long n, long long N)``.
    """
    op = "bias_add"
    dt = _float_dtype(dtype, op)
    shp = _shape(shape, op)
    if not shp:
        raise InvalidArgumentError("bias_add: x needs at least one dimension", op=op)
    n, big_n = _prod(shp), shp[-1]
    t = _tuned(op, tuned)
    t["unroll"] = _unroll(t, op, dt.itemsize)
    vec = _pick_vec(t["vec"], dt.itemsize, alignment, op, max(big_n, 1))
    index64 = int(n >= 2**32)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_BIAS_ADD": 1,
        "PL_VEC": vec,
        "PL_BLOCK": t["block"],
        "PL_UNROLL": t["unroll"],
        "PL_INDEX64": index64,
    }
    grid = _flat_grid(n // vec, t["block"], t["unroll"], t["max_blocks_per_sm"], sm_count)
    a = vec * dt.itemsize
    specs = [_ptr("x", a), _ptr("bias", a), _ptr("y", a), ArgSpec("n", "i64"), ArgSpec("N", "i64")]
    return _plan(
        op,
        "pl_bias_add",
        macros,
        grid,
        t["block"],
        specs,
        {"n": n, "N": max(big_n, 1)},
        dict(t, vec=vec, index64=index64),
    )


def plan_cast(
    dtype_in: Any,
    dtype_out: Any,
    shape: Any,
    *,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = x.astype(dtype_out)`` (round to nearest even). Kernel ``pl_cast(const TIN* x, TOUT* y,
    long long n)``."""
    op = "cast"
    di, do = _float_dtype(dtype_in, op), _float_dtype(dtype_out, op)
    n = _prod(_shape(shape, op))
    t = _tuned(op, tuned)
    t["unroll"] = _unroll(t, op, max(di.itemsize, do.itemsize))
    vec = _pick_vec(t["vec"], max(di.itemsize, do.itemsize), alignment, op)
    macros = {
        "PL_TIN": di.cuda_type,
        "PL_TOUT": do.cuda_type,
        "PL_VEC": vec,
        "PL_BLOCK": t["block"],
        "PL_UNROLL": t["unroll"],
    }
    grid = _flat_grid(n // vec, t["block"], t["unroll"], t["max_blocks_per_sm"], sm_count)
    specs = [_ptr("x", vec * di.itemsize), _ptr("y", vec * do.itemsize), ArgSpec("n", "i64")]
    return _plan(op, "pl_cast", macros, grid, t["block"], specs, {"n": n}, dict(t, vec=vec))


# --------------------------------------------------------------------------------------------
# row-wise: layer_norm, rms_norm, softmax
# --------------------------------------------------------------------------------------------
def plan_batch_norm(
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
    """Plan inference batch norm of contiguous x [N, C, *spatial]; mean, var, gamma, beta: [C], x's dtype.

    Kernel ``pl_batch_norm(const T* x, const T* mean, const T* var, const T* gamma, const T* beta, T* y,
    long long n, long long C, long long S, ACC eps)`` with S = prod(spatial).
    """
    op = "batch_norm"
    dt = _float_dtype(dtype, op)
    shp = _shape(shape, op)
    if len(shp) < 2:
        raise InvalidArgumentError(f"batch_norm: x must be [N, C, *spatial] (got {shp})", op=op)
    n, c, s = _prod(shp), max(shp[1], 1), max(_prod(shp[2:]), 1)
    t = _tuned(op, tuned)
    t["unroll"] = _unroll(t, op, dt.itemsize)
    channel_last = int(s == 1)
    vec = _pick_vec(t["vec"], dt.itemsize, alignment, op, c if channel_last else s)
    index64 = int(n >= 2**32)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_VEC": vec,
        "PL_BLOCK": t["block"],
        "PL_UNROLL": t["unroll"],
        "PL_HAS_GAMMA": int(has_gamma),
        "PL_HAS_BETA": int(has_beta),
        "PL_CHANNEL_LAST": channel_last,
        "PL_INDEX64": index64,
    }
    grid = _flat_grid(n // vec, t["block"], t["unroll"], t["max_blocks_per_sm"], sm_count)
    a = vec * dt.itemsize
    specs = [
        _ptr("x", a),
        _ptr("mean"),
        _ptr("var"),
        _ptr("gamma", optional=not has_gamma),
        _ptr("beta", optional=not has_beta),
        _ptr("y", a),
        ArgSpec("n", "i64"),
        ArgSpec("C", "i64"),
        ArgSpec("S", "i64"),
        ArgSpec("eps", _acc_kind(dt)),
    ]
    return _plan(
        op,
        "pl_batch_norm",
        macros,
        grid,
        t["block"],
        specs,
        {"n": n, "C": c, "S": s, "eps": eps},
        dict(t, vec=vec, index64=index64),
    )


# --------------------------------------------------------------------------------------------
# the catalogue
# --------------------------------------------------------------------------------------------
