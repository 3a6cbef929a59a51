"""The elementwise family on CUDA: kernel sources and tunables, launch plans and binds.

Unary activations and binary arithmetic (with broadcasting), bias_add and float casts run the kernels of
``elementwise.cu``; integer and bool casts run ``cast.cu``. Pure Python + NumPy: nothing here imports a
CUDA package (a bind's :class:`PlanLaunch` compiles and launches through the backend).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...descriptor import KernelContext
from ...dtypes import get_dtype
from ...errors import InvalidArgumentError
from ..kernel import (
    DEFAULT_SM_COUNT,
    DEFAULT_UNROLL,
    FLAT_TUNABLES,
    FLOATS,
    STORAGE_KINDS,
    ArgSpec,
    KernelSource,
    LaunchPlan,
    PlanLaunch,
    acc_kind,
    broadcast_walk,
    flat_grid,
    flat_launch,
    float_dtype,
    kernel_dtype,
    make_plan,
    pick_vec,
    pointer,
    prod,
    shape_of,
    sm_count_of,
    spread_small,
    strided_scalars,
    strided_specs,
    tuned_of,
    tuned_values,
)

__all__ = [
    "KERNELS",
    "UNARY",
    "BINARY",
    "BINARY_DTYPES",
    "plan_unary",
    "plan_binary",
    "plan_bias_add",
    "plan_cast",
    "plan_cast_any",
    "unary_bind",
    "binary_bind",
    "bias_add_bind",
    "copy_bind",
    "bitcast_bind",
    "cast_bind",
]

_DIR = Path(__file__).resolve().parent
_SOURCE = _DIR / "elementwise.cu"

# operator (or kernel op) -> the PL_OP_* code of elementwise.cu
UNARY = {
    "identity": "PL_OP_IDENTITY",
    "relu": "PL_OP_RELU",
    "silu": "PL_OP_SILU",
    "gelu": "PL_OP_GELU",
    "gelu_tanh": "PL_OP_GELU_TANH",
    "scale": "PL_OP_SCALE",
    "sigmoid": "PL_OP_SIGMOID",
    "tanh": "PL_OP_TANH",
    "hardswish": "PL_OP_HARDSWISH",
    "erf": "PL_OP_ERF",
    "exp": "PL_OP_EXP",
    "sqrt": "PL_OP_SQRT",
    "neg": "PL_OP_NEG",
    "abs": "PL_OP_ABS",
    "log": "PL_OP_LOG",
    "reciprocal": "PL_OP_RECIPROCAL",
    "leaky_relu": "PL_OP_LEAKY_RELU",
    "sin": "PL_OP_SIN",
    "cos": "PL_OP_COS",
    "floor": "PL_OP_FLOOR",
    "ceil": "PL_OP_CEIL",
    "round": "PL_OP_ROUND",
    "sign": "PL_OP_SIGN",
    "softplus": "PL_OP_SOFTPLUS",
    "softsign": "PL_OP_SOFTSIGN",
    "mish": "PL_OP_MISH",
    "elu": "PL_OP_ELU",
    "celu": "PL_OP_CELU",
    "thresholded_relu": "PL_OP_THRESHOLDED_RELU",
    "tan": "PL_OP_TAN",
    "asin": "PL_OP_ASIN",
    "acos": "PL_OP_ACOS",
    "atan": "PL_OP_ATAN",
    "sinh": "PL_OP_SINH",
    "cosh": "PL_OP_COSH",
    "asinh": "PL_OP_ASINH",
    "acosh": "PL_OP_ACOSH",
    "atanh": "PL_OP_ATANH",
    "shrink": "PL_OP_SHRINK",
    "bitwise_not": "PL_OP_BITWISE_NOT",
}
BINARY = {
    "add": "PL_OP_ADD",
    "sub": "PL_OP_SUB",
    "mul": "PL_OP_MUL",
    "div": "PL_OP_DIV",
    "pow": "PL_OP_POW",
    "max": "PL_OP_MAX",
    "min": "PL_OP_MIN",
    "prelu": "PL_OP_PRELU",
    "mod": "PL_OP_MOD",
    "fmod": "PL_OP_FMOD",
    "bitwise_and": "PL_OP_BITWISE_AND",
    "bitwise_or": "PL_OP_BITWISE_OR",
    "bitwise_xor": "PL_OP_BITWISE_XOR",
    "bit_shift_left": "PL_OP_SHIFT_LEFT",
    "bit_shift_right": "PL_OP_SHIFT_RIGHT",
}
# integer dtypes of the binary kernel: two's-complement arithmetic that wraps around, like NumPy
_WRAPPING = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
_SIGNED_UNARY = ("neg", "abs", "sign")  # the unary kernels that also take the integers (wrapping neg/abs)
_BITWISE = ("bitwise_and", "bitwise_or", "bitwise_xor", "bit_shift_left", "bit_shift_right", "bitwise_not")
# shrink of the integers computes in float64 as the ONNX reference does: exact for these, not for the
# 64-bit ones
SHRINK_INTS = ("int8", "uint8", "int16", "uint16", "int32", "uint32")
UNARY_DTYPES: dict[str, tuple[str, ...]] = {
    op: (
        _WRAPPING
        if op in _BITWISE
        else FLOATS + (_WRAPPING if op in _SIGNED_UNARY else SHRINK_INTS if op == "shrink" else ())
    )
    for op in UNARY
}
"""The dtypes each unary kernel accepts (the CUDA variant's dtypes)."""
BINARY_DTYPES: dict[str, tuple[str, ...]] = {
    op: _WRAPPING
    if op in _BITWISE
    else FLOATS
    + (_WRAPPING if op in ("add", "sub", "mul", "div", "pow", "max", "min", "mod", "fmod") else ())
    for op in BINARY
}
"""The dtypes each binary kernel accepts (the CUDA variant's dtypes)."""
# Ops whose per-element cost is a transcendental function: on 16-bit types unroll 0 resolves to 1 for
# them (fewer registers, more warps resident; measured on an H200 for silu and gelu), else to
# DEFAULT_UNROLL.
_TRANSCENDENTAL = frozenset(
    {
        "silu",
        "gelu",
        "gelu_tanh",
        "sigmoid",
        "tanh",
        "erf",
        "exp",
        "sin",
        "cos",
        "softplus",
        "mish",
        "elu",
        "celu",
        "tan",
        "asin",
        "acos",
        "atan",
        "sinh",
        "cosh",
        "asinh",
        "acosh",
        "atanh",
    }
)
# unary op -> the attribute its alpha is (silu_activation, silu's kernel without attributes: alpha 1)
_ALPHA_ATTR = {
    "silu": "alpha",
    "shrink": "lambd",
    "scale": "factor",
    "leaky_relu": "alpha",
    "elu": "alpha",
    "celu": "alpha",
    "thresholded_relu": "alpha",
}
_BETA_ATTR = {"shrink": "bias"}  # unary op -> the attribute its beta is
_CAST_ANY_BLOCK, _CAST_ANY_BLOCKS_PER_SM = 256, 8  # integer casts are rare: fixed, untuned geometry
_ALL = (*FLOATS, *_WRAPPING, "bool")

KERNELS: dict[str, KernelSource] = {
    **{
        op: KernelSource(
            op, _SOURCE, "pl_unary", {"PL_UNARY_OP": m}, dict(FLAT_TUNABLES), dtypes=UNARY_DTYPES[op]
        )
        for op, m in UNARY.items()
    },
    **{
        op: KernelSource(
            op, _SOURCE, "pl_binary", {"PL_BINARY_OP": m}, dict(FLAT_TUNABLES), dtypes=BINARY_DTYPES[op]
        )
        for op, m in BINARY.items()
    },
    "bias_add": KernelSource("bias_add", _SOURCE, "pl_bias_add", {"PL_BIAS_ADD": "1"}, dict(FLAT_TUNABLES)),
    "cast": KernelSource("cast", _SOURCE, "pl_cast", {}, dict(FLAT_TUNABLES)),
    "cast_any": KernelSource("cast_any", _DIR / "cast.cu", "pl_cast_any", {}, {}, dtypes=_ALL),
}
"""Every kernel of this family, by the op name its plans use."""

TUNED_AS = {"silu_activation": "silu", "bit_shift": "bit_shift_left"}  # right shifts cost the same
"""Operators that run (and are tuned as) another operator's kernel."""


def _unroll(t: dict[str, int], op: str, itemsize: int) -> int:
    """The ``unroll`` tunable, with 0 resolved (see ``_TRANSCENDENTAL``)."""
    if t["unroll"]:
        return t["unroll"]
    return 1 if op in _TRANSCENDENTAL and itemsize <= 2 else DEFAULT_UNROLL


def plan_unary(
    op: str,
    dtype: Any,
    shape: Any,
    *,
    factor: float = 1.0,
    beta: float = 0.0,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = op(x)`` over a contiguous tensor; ``op`` one of :data:`UNARY`.

    Kernel ``pl_unary(const T* x, T* y, long long n, P alpha, P beta)``; alpha is ``factor`` (the
    factor of ``scale``, the alpha of ``silu`` and the ELUs, the lambd of ``shrink``), beta the bias of
    ``shrink``; P is the accumulation type of a float dtype, double for the integers. neg, abs and sign
    also take the integers, bitwise_not takes only them, shrink those of up to 32 bits
    (:data:`UNARY_DTYPES`; neg and abs wrap around at the dtype's minimum, as NumPy; abs of an unsigned
    value is itself, neg of one wraps to ``2**N - x``).

    Raises
    ------
    InvalidArgumentError
        An unknown op, a dtype outside :data:`UNARY_DTYPES`, a negative dimension or a bad tunable.
    """
    if op not in UNARY:
        raise InvalidArgumentError(f"unknown unary op {op!r}; known: {', '.join(UNARY)}", op=op)
    dt = kernel_dtype(dtype, op, UNARY_DTYPES[op])
    n = prod(shape_of(shape, op))
    t = tuned_values(KERNELS[op], tuned)
    t["unroll"] = _unroll(t, op, dt.itemsize)
    vec = pick_vec(t["vec"], dt.itemsize, alignment, op)
    t = spread_small(t, tuned, n // vec, sm_count)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_UNARY_OP": UNARY[op],
        "PL_VEC": vec,
        "PL_FAST_ACT": int(dt.itemsize == 2) + int(dt.name == "bfloat16"),  # elementwise.cu says why
    }
    launch, grid = flat_launch(t, n, vec, sm_count)
    macros.update(launch)
    a = vec * dt.itemsize
    # the floats' accumulation type; double for the integers (shrink's lambd and bias are fractions)
    kind = acc_kind(dt) if dt.is_floating else "f64"
    specs = [
        pointer("x", a),
        pointer("y", a),
        ArgSpec("n", "i64"),
        ArgSpec("alpha", kind),
        ArgSpec("beta", kind),
    ]
    scalars = {"n": n, "alpha": factor, "beta": beta}
    return make_plan(KERNELS[op], "pl_unary", macros, grid, t["block"], specs, scalars, dict(t, vec=vec))


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
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = a op b`` (op in :data:`BINARY`) with NumPy broadcasting; y is contiguous. Floats compute
    in float (double for float64); the integers (add, sub, mul, div, pow, max, min, the remainders) in
    int (long long for int64, their own type for uint32 and uint64), sums, differences, products and
    powers wrapping around as in NumPy, quotients truncated toward zero (0 where b is 0).

    Same contiguous shapes: ``pl_binary(const T* a, const T* b, T* y, long long n)`` (vectorised).
    Otherwise ``pl_binary_bcast(a, b, y, long long n, d0..d7, sa0..sa7, sb0..sb7)`` over the output
    shape collapsed to PL_NDIM dims; strides in elements (0 on broadcast dims; ``a_strides`` /
    ``b_strides`` give non-contiguous inputs, in elements, >= 0).

    Raises
    ------
    InvalidArgumentError
        An unknown op, a dtype outside :data:`BINARY_DTYPES`, shapes that do not broadcast, more than 8
        dims after collapsing, a bad tunable.
    """
    if op not in BINARY:
        raise InvalidArgumentError(f"unknown binary op {op!r}; known: {', '.join(BINARY)}", op=op)
    dt = kernel_dtype(dtype, op, BINARY_DTYPES[op])
    sa, sb = shape_of(shape_a, op), shape_of(shape_b, op)
    walk = broadcast_walk(op, [sa, sb], [a_strides, b_strides])
    n = walk.n
    source = KERNELS[op]
    t = tuned_values(source, tuned)
    t["unroll"] = _unroll(t, op, dt.itemsize)
    if sa == sb and a_strides is None and b_strides is None:
        vec = pick_vec(t["vec"], dt.itemsize, alignment, op)
        t = spread_small(t, tuned, n // vec, sm_count)
        macros = {
            "PL_T": dt.cuda_type,
            "PL_BINARY_OP": BINARY[op],
            "PL_VEC": vec,
        }
        launch, grid = flat_launch(t, n, vec, sm_count)
        macros.update(launch)
        a = vec * dt.itemsize
        specs = [pointer("a", a), pointer("b", a), pointer("y", a), ArgSpec("n", "i64")]
        return make_plan(source, "pl_binary", macros, grid, t["block"], specs, {"n": n}, dict(t, vec=vec))
    dims, (st_a, st_b), index64 = walk.dims, walk.strides, walk.index64
    macros = {
        "PL_T": dt.cuda_type,
        "PL_BINARY_OP": BINARY[op],
        "PL_VEC": 1,
        "PL_BLOCK": t["block"],
        "PL_NDIM": len(dims),
        "PL_INDEX64": index64,
    }
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    specs = [pointer("a"), pointer("b"), pointer("y"), ArgSpec("n", "i64"), *strided_specs(("sa", "sb"))]
    scalars = {"n": n, **strided_scalars(dims, {"sa": st_a, "sb": st_b})}
    return make_plan(
        source,
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
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y[..., c] = x[..., c] + bias[c]`` for contiguous x of ``shape`` and bias of ``shape[-1]``.

    Kernel ``pl_bias_add(const T* x, const T* bias, T* y, long long n, long long N)``.
    """
    op = "bias_add"
    dt = float_dtype(dtype, op)
    shp = shape_of(shape, op)
    if not shp:
        raise InvalidArgumentError("bias_add: x needs at least one dimension", op=op)
    n, big_n = prod(shp), shp[-1]
    t = tuned_values(KERNELS[op], tuned)
    t["unroll"] = _unroll(t, op, dt.itemsize)
    vec = pick_vec(t["vec"], dt.itemsize, alignment, op, max(big_n, 1))
    t = spread_small(t, tuned, n // vec, sm_count)
    index64 = int(n >= 2**32)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_BIAS_ADD": 1,
        "PL_VEC": vec,
        "PL_INDEX64": index64,
    }
    launch, grid = flat_launch(t, n, vec, sm_count)
    macros.update(launch)
    a = vec * dt.itemsize
    specs = [pointer("x", a), pointer("bias", a), pointer("y", a), ArgSpec("n", "i64"), ArgSpec("N", "i64")]
    return make_plan(
        KERNELS[op],
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
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = x.astype(dtype_out)`` between floats (round to nearest even).

    Kernel ``pl_cast(const TIN* x, TOUT* y, long long n)``.
    """
    op = "cast"
    di, do = float_dtype(dtype_in, op), float_dtype(dtype_out, op)
    n = prod(shape_of(shape, op))
    size = max(di.itemsize, do.itemsize)
    t = tuned_values(KERNELS[op], tuned)
    t["unroll"] = _unroll(t, op, size)
    vec = pick_vec(t["vec"], size, alignment, op)
    t = spread_small(t, tuned, n // vec, sm_count)
    macros = {
        "PL_TIN": di.cuda_type,
        "PL_TOUT": do.cuda_type,
        "PL_VEC": vec,
    }
    launch, grid = flat_launch(t, n, vec, sm_count)
    macros.update(launch)
    specs = [pointer("x", vec * di.itemsize), pointer("y", vec * do.itemsize), ArgSpec("n", "i64")]
    return make_plan(KERNELS[op], "pl_cast", macros, grid, t["block"], specs, {"n": n}, dict(t, vec=vec))


def plan_cast_any(
    dtype_in: Any, dtype_out: Any, shape: Any, *, sm_count: int = DEFAULT_SM_COUNT
) -> LaunchPlan:
    """Plan a cast between any two dtypes with C semantics (ints, bool): ``pl_cast_any(const TIN* x,
    TOUT* y, long long n)`` of ``cast.cu``. A 16-bit float, a float8, float4_e2m1fn or a sub-byte integer
    on either side goes through double (each a byte converted by fp8.cuh); into a sub-byte integer an
    integer keeps its low bits and a float is truncated (0 outside the range), as ml_dtypes casts."""
    source = KERNELS["cast_any"]
    ti, to = get_dtype(dtype_in), get_dtype(dtype_out)
    n = prod(shape_of(shape, "cast"))
    direct = int(
        all(t.name not in STORAGE_KINDS and (t.itemsize in (4, 8) or not t.is_floating) for t in (ti, to))
    )
    block = _CAST_ANY_BLOCK
    macros = {"PL_DIRECT": direct, "PL_BLOCK": block, "PL_TIN_FLOAT": int(ti.is_floating)}
    for side, t in (("PL_TIN", ti), ("PL_TOUT", to)):  # a storage type is its byte, converted by fp8.cuh
        kind = STORAGE_KINDS.get(t.name)
        macros[side] = "unsigned char" if kind else t.cuda_type
        macros[f"{side}_KIND"] = kind or 0
    specs = [pointer("x"), pointer("y"), ArgSpec("n", "i64")]
    grid = flat_grid(n, block, 1, _CAST_ANY_BLOCKS_PER_SM, sm_count)
    return make_plan(
        source, "pl_cast_any", macros, grid, block, specs, {"n": n}, {"block": block, "direct": direct}
    )


# -- binds ----------------------------------------------------------------------------------------
def unary_bind(op: str):
    """The CUDA bind of a unary operator (``gelu`` picks the tanh form from ``approximate``)."""

    def bind(ctx: KernelContext):
        dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
        name = "gelu_tanh" if op == "gelu" and ctx.attrs["approximate"] == "tanh" else op
        # alpha: the factor of scale, the negative slope of leaky_relu...; beta: shrink's bias; unread by
        # the other ops (silu_activation runs silu's kernel and has no alpha: 1)
        factor = float(ctx.attrs.get(_ALPHA_ATTR.get(op), 1.0))
        beta = float(ctx.attrs[_BETA_ATTR[op]]) if op in _BETA_ATTR else 0.0
        tuned, sms = tuned_of(ctx, KERNELS[name]), sm_count_of(ctx)
        return PlanLaunch(
            ctx.backend,
            lambda a: plan_unary(
                name, dtype, shape, factor=factor, beta=beta, alignment=a, tuned=tuned, sm_count=sms
            ),
            {"x": ("in", 0), "y": ("out", 0)},
            ctx.stage,
        )

    return bind


def binary_bind(op: str):
    """The CUDA bind of a binary operator with broadcasting (``bit_shift`` picks its kernel from
    ``direction``)."""

    def bind(ctx: KernelContext):
        dtype = ctx.in_dtypes[0]
        sa, sb = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
        name = f"bit_shift_{ctx.attrs['direction'].lower()}" if op == "bit_shift" else op
        tuned, sms = tuned_of(ctx, KERNELS[name]), sm_count_of(ctx)
        return PlanLaunch(
            ctx.backend,
            lambda a: plan_binary(name, dtype, sa, sb, alignment=a, tuned=tuned, sm_count=sms),
            {"a": ("in", 0), "b": ("in", 1), "y": ("out", 0)},
            ctx.stage,
        )

    return bind


def bias_add_bind(ctx: KernelContext):
    dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
    tuned, sms = tuned_of(ctx, KERNELS["bias_add"]), sm_count_of(ctx)
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_bias_add(dtype, shape, alignment=a, tuned=tuned, sm_count=sms),
        {"x": ("in", 0), "bias": ("in", 1), "y": ("out", 0)},
        ctx.stage,
    )


def copy_bind(ctx: KernelContext):
    """identity, and a cast to the same dtype: the backend's copy (bit-exact for every dtype)."""
    backend = ctx.backend

    def kernel(ins, outs, stream):
        backend.copy(outs[0], ins[0], stream=stream)

    return kernel


def bitcast_bind(ctx: KernelContext):
    """bitcast: the bytes copied as they are (one stream-ordered memcpy; both ports are contiguous)."""
    backend = ctx.backend

    def kernel(ins, outs, stream):
        backend.memcpy(outs[0].ptr, ins[0].ptr, ins[0].nbytes, stream=stream)

    return kernel


def cast_bind(ctx: KernelContext):
    """cast / precision_cast: a copy, the vectorised float kernel, or the any-dtype kernel."""
    din, dout, shape = ctx.in_dtypes[0], ctx.out_dtypes[0], tuple(ctx.in_shapes[0])
    if din == dout:
        return copy_bind(ctx)
    io, sms = {"x": ("in", 0), "y": ("out", 0)}, sm_count_of(ctx)
    if din in FLOATS and dout in FLOATS:
        tuned = tuned_of(ctx, KERNELS["cast"])
        return PlanLaunch(
            ctx.backend,
            lambda a: plan_cast(din, dout, shape, alignment=a, tuned=tuned, sm_count=sms),
            io,
            ctx.stage,
        )
    return PlanLaunch(ctx.backend, lambda a: plan_cast_any(din, dout, shape, sm_count=sms), io, ctx.stage)
